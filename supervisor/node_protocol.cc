#include "supervisor/node_protocol.h"

#include <boost/json.hpp>

#include "checkpoint/strict_json.h"
#include "core/overload.h"
#include "supervisor/node_protocol_fields.h"

namespace shardguard::supervisor::wire {
using namespace detail;

namespace {

// ---- commands -------------------------------------------------------------------------

Result<json::object> encode_command(const Command& c) {
  json::object o = base("command");
  o["command"] = command_name(c);
  Status unsupported;
  std::visit(
      Overload{
          [&](const command::Launch& x) {
            o["epoch"] = x.epoch; o["world_size"] = x.world_size; o["nproc_per_node"] = x.nproc_per_node;
            o["master_addr"] = x.master_addr; o["master_port"] = x.master_port;
            o["resume_step"] = opt(x.resume_step); o["resume_manifest"] = x.resume_manifest;
            o["skip_batches"] = x.skip_batches;
            json::array nodes;
            for (const auto& n : x.nodes) nodes.push_back(json::array{n.node, n.node_rank, n.first_rank, n.nproc});
            o["nodes"] = std::move(nodes);
          },
          [&](const command::TearDown& x) {
            o["epoch"] = x.epoch; o["why"] = x.why;
            o["kill_by_unix_ms"] = opt(x.kill_by ? std::optional<uint64_t>(static_cast<uint64_t>(
                                                       std::max<int64_t>(0, to_unix_ms(*x.kill_by))))
                                                 : std::nullopt);
          },
          [&](const command::CheckpointNow& x) {
            o["epoch"] = x.epoch; o["at_step"] = x.at_step; o["deadline_unix_ms"] = to_unix_ms(x.deadline);
            o["reason"] = x.reason; o["kind"] = kind_text(x.kind);
          },
          [&](const command::AbortSave& x) { o["epoch"] = x.epoch; o["step"] = x.step; o["why"] = x.why; },
          [&](const command::AllWritten& x) { o["epoch"] = x.epoch; o["step"] = x.step; },
          [&](const command::SaveCommitted& x) {
            o["epoch"] = x.epoch; o["step"] = x.step; o["manifest"] = x.manifest;
          },
          [&](const command::CollectHangReport& x) { o["epoch"] = x.epoch; o["rank"] = x.rank; },
          [&](const command::AckNotice& x) { o["notice_id"] = x.notice_id; },
          [&](const command::Release& x) { o["node"] = x.node; o["why"] = x.why; },
          [&](const auto&) {
            unsupported = Error(ErrorCode::kInvalid, "command '" + std::string(command_name(c)) +
                                                         "' does not travel between nodes");
          },
      },
      c);
  if (!unsupported.ok()) return unsupported.error();
  return o;
}

Result<Command> decode_command(Reader& r, const std::string& name) {
  if (name == "launch") {
    command::Launch x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.world_size, r.u32("world_size"));
    SG_ASSIGN_OR_RETURN(x.nproc_per_node, r.u32("nproc_per_node"));
    SG_ASSIGN_OR_RETURN(x.master_addr, r.str("master_addr"));
    SG_ASSIGN_OR_RETURN(uint32_t port, r.u32("master_port"));
    if (port == 0 || port > 65535) return Error(ErrorCode::kInvalid, "launch: bad master_port");
    x.master_port = static_cast<uint16_t>(port);
    SG_ASSIGN_OR_RETURN(x.resume_step, r.opt_u64("resume_step"));
    SG_ASSIGN_OR_RETURN(x.resume_manifest, r.str("resume_manifest"));
    SG_ASSIGN_OR_RETURN(x.skip_batches, r.u64("skip_batches"));
    SG_ASSIGN_OR_RETURN(const json::array* nodes, Reader::wrap(r.f.array("nodes")));
    if (nodes->size() > 100'000) return Error(ErrorCode::kInvalid, "launch: too many nodes");
    for (const auto& item : *nodes) {
      const json::array* a = item.if_array();
      if (a == nullptr || a->size() != 4)
        return Error(ErrorCode::kInvalid, "launch: nodes must be [node, node_rank, first_rank, nproc]");
      uint64_t v[4];
      for (int i = 0; i < 4; ++i) {
        SG_ASSIGN_OR_RETURN(v[i], Reader::wrap(checkpoint::json_u64((*a)[i], "nodes")));
        if (v[i] > UINT32_MAX) return Error(ErrorCode::kInvalid, "launch: node field out of range");
      }
      x.nodes.push_back({static_cast<NodeId>(v[0]), static_cast<uint32_t>(v[1]),
                         static_cast<uint32_t>(v[2]), static_cast<uint32_t>(v[3])});
    }
    return Command(x);
  }
  if (name == "tear_down") {
    command::TearDown x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.why, r.str("why"));
    SG_ASSIGN_OR_RETURN(auto kill_by, r.opt_u64("kill_by_unix_ms"));
    if (kill_by) x.kill_by = from_unix_ms(static_cast<int64_t>(std::min<uint64_t>(*kill_by, INT64_MAX)));
    return Command(x);
  }
  if (name == "checkpoint_now") {
    command::CheckpointNow x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.at_step, r.u64("at_step"));
    SG_ASSIGN_OR_RETURN(int64_t ms, r.i64("deadline_unix_ms"));
    x.deadline = from_unix_ms(ms);
    SG_ASSIGN_OR_RETURN(x.reason, r.str("reason"));
    SG_ASSIGN_OR_RETURN(std::string kind, r.str("kind"));
    SG_ASSIGN_OR_RETURN(x.kind, parse_kind(kind));
    return Command(x);
  }
  if (name == "abort_save") {
    command::AbortSave x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.step, r.u64("step"));
    SG_ASSIGN_OR_RETURN(x.why, r.str("why"));
    return Command(x);
  }
  if (name == "all_written") {
    command::AllWritten x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.step, r.u64("step"));
    return Command(x);
  }
  if (name == "save_committed") {
    command::SaveCommitted x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.step, r.u64("step"));
    SG_ASSIGN_OR_RETURN(x.manifest, r.str("manifest"));
    return Command(x);
  }
  if (name == "collect_hang_report") {
    command::CollectHangReport x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.rank, r.u32("rank"));
    return Command(x);
  }
  if (name == "release") {
    command::Release x;
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    SG_ASSIGN_OR_RETURN(x.why, r.str("why"));
    return Command(x);
  }
  if (name == "ack_notice") {
    command::AckNotice x;
    SG_ASSIGN_OR_RETURN(x.notice_id, r.u64("notice_id"));
    return Command(x);
  }
  return Error(ErrorCode::kInvalid, "command '" + name + "' does not travel between nodes");
}

Result<std::pair<json::value, std::string>> envelope(std::string_view payload) {
  if (payload.size() > (8u << 20)) return Error(ErrorCode::kInvalid, "message over 8 MiB");
  auto v = checkpoint::parse_json_strict(payload);
  if (!v.ok()) return Error(ErrorCode::kInvalid, "not JSON: " + v.error().message());
  if (!v->is_object()) return Error(ErrorCode::kInvalid, "not a JSON object");
  const json::object& o = v->get_object();
  const json::value* ver = o.if_contains("v");
  if (ver == nullptr || !ver->is_int64() || ver->get_int64() != kNodeProtocolVersion)
    return Error(ErrorCode::kInvalid, "missing or unsupported node protocol version (this side "
                                      "speaks " + std::to_string(kNodeProtocolVersion) + ")");
  const json::value* type = o.if_contains("type");
  if (type == nullptr || !type->is_string()) return Error(ErrorCode::kInvalid, "missing 'type'");
  std::string t(type->get_string());
  return std::pair{std::move(*v), std::move(t)};
}

Result<Reader> reader_of(const json::value& v) {
  SG_ASSIGN_OR_RETURN(JsonFields f, Reader::wrap(JsonFields::of(v, "")));
  Reader r{std::move(f)};
  (void)r.f.any("v");
  (void)r.f.any("type");
  return r;
}

}  // namespace

std::string encode(const NodeToCoordinator& m) {
  json::object o;
  std::visit(Overload{[&](const Join& j) {
                        o = base("join");
                        o["node"] = j.node ? json::value(*j.node) : json::value(nullptr);
                        o["name"] = j.name;
                        o["address"] = j.address;
                        o["nproc"] = j.nproc;
                        o["job_id"] = j.job_id;
                        o["epoch"] = opt(j.epoch);
                        o["rejoin"] = j.rejoin;
                        o["token"] = j.token;
                      },
                      [&](const Beat&) { o = base("beat"); },
                      [&](const Event& e) {
                        auto enc = encode_event(e);
                        o = enc.ok() ? std::move(*enc) : base("invalid");
                      }},
             m);
  return json::serialize(o);
}

std::string encode(const CoordinatorToNode& m) {
  json::object o;
  std::visit(Overload{[&](const Welcome& w) {
                        o = base("welcome");
                        o["node"] = w.node;
                        o["job_id"] = w.job_id;
                        o["token"] = w.token;
                      },
                      [&](const Command& c) {
                        auto enc = encode_command(c);
                        o = enc.ok() ? std::move(*enc) : base("invalid");
                      },
                      [&](const Finish& f) {
                        o = base("finish");
                        o["exit_code"] = f.exit_code;
                        o["summary"] = f.summary;
                      },
                      [&](const Refuse& r) {
                        o = base("refuse");
                        o["why"] = r.why;
                      }},
             m);
  return json::serialize(o);
}

Result<NodeToCoordinator> decode_from_node(std::string_view payload) {
  SG_ASSIGN_OR_RETURN(auto env, envelope(payload));
  SG_ASSIGN_OR_RETURN(Reader r, reader_of(env.first));
  const std::string& type = env.second;
  NodeToCoordinator out;
  if (type == "join") {
    Join j;
    SG_ASSIGN_OR_RETURN(auto node, r.opt_u64("node"));
    if (node && *node > UINT32_MAX) return Error(ErrorCode::kInvalid, "join: node out of range");
    if (node) j.node = static_cast<NodeId>(*node);
    SG_ASSIGN_OR_RETURN(j.name, r.str("name"));
    SG_ASSIGN_OR_RETURN(j.address, r.str("address"));
    SG_ASSIGN_OR_RETURN(j.nproc, r.u32("nproc"));
    SG_ASSIGN_OR_RETURN(j.job_id, r.str("job_id"));
    SG_ASSIGN_OR_RETURN(j.epoch, r.opt_u64("epoch"));
    SG_ASSIGN_OR_RETURN(j.rejoin, r.boolean("rejoin"));
    SG_ASSIGN_OR_RETURN(j.token, r.str("token"));
    if (j.name.size() > 255 || j.address.size() > 255 || j.job_id.size() > 128 ||
        j.token.size() > 128)
      return Error(ErrorCode::kInvalid, "join: name, address, job id or token too long");
    out = j;
  } else if (type == "beat") {
    out = Beat{};
  } else if (type == "event") {
    SG_ASSIGN_OR_RETURN(std::string name, r.str("event"));
    SG_ASSIGN_OR_RETURN(Event e, decode_event(r, name));
    out = std::move(e);
  } else {
    return Error(ErrorCode::kInvalid, "unknown message type '" + type + "' from a node");
  }
  SG_RETURN_IF_ERROR(r.finish());
  return out;
}

Result<CoordinatorToNode> decode_from_coordinator(std::string_view payload) {
  SG_ASSIGN_OR_RETURN(auto env, envelope(payload));
  SG_ASSIGN_OR_RETURN(Reader r, reader_of(env.first));
  const std::string& type = env.second;
  CoordinatorToNode out;
  if (type == "welcome") {
    Welcome w;
    SG_ASSIGN_OR_RETURN(w.node, r.u32("node"));
    SG_ASSIGN_OR_RETURN(w.job_id, r.str("job_id"));
    SG_ASSIGN_OR_RETURN(w.token, r.str("token"));
    out = w;
  } else if (type == "command") {
    SG_ASSIGN_OR_RETURN(std::string name, r.str("command"));
    SG_ASSIGN_OR_RETURN(Command c, decode_command(r, name));
    out = std::move(c);
  } else if (type == "finish") {
    Finish f;
    SG_ASSIGN_OR_RETURN(f.exit_code, r.integer("exit_code"));
    SG_ASSIGN_OR_RETURN(f.summary, r.str("summary"));
    out = f;
  } else if (type == "refuse") {
    Refuse x;
    SG_ASSIGN_OR_RETURN(x.why, r.str("why"));
    out = x;
  } else {
    return Error(ErrorCode::kInvalid, "unknown message type '" + type + "' from the coordinator");
  }
  SG_RETURN_IF_ERROR(r.finish());
  return out;
}

}  // namespace shardguard::supervisor::wire
