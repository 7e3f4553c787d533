#include "supervisor/node_protocol.h"

#include <boost/json.hpp>

#include "checkpoint/json_fields.h"
#include "checkpoint/strict_json.h"
#include "hooks/scalars_json.h"

namespace shardguard::supervisor::wire {
namespace json = boost::json;
using checkpoint::JsonFields;

namespace {

template <typename... Ts>
struct Overload : Ts... {
  using Ts::operator()...;
};
template <typename... Ts>
Overload(Ts...) -> Overload<Ts...>;

json::object base(std::string_view type) {
  return json::object{{"v", kNodeProtocolVersion}, {"type", type}};
}

Error invalid(const Error& e) { return Error(ErrorCode::kInvalid, e.message()); }

// Fields: read strictly, errors turned into kInvalid (bytes from the network, not storage).
struct Reader {
  JsonFields f;
  Result<std::string> str(std::string_view k) { return wrap(f.string(k)); }
  Result<uint64_t> u64(std::string_view k) { return wrap(f.u64(k)); }
  Result<int64_t> i64(std::string_view k) { return wrap(f.i64(k)); }
  Result<uint32_t> u32(std::string_view k) {
    SG_ASSIGN_OR_RETURN(uint64_t v, u64(k));
    if (v > UINT32_MAX) return Error(ErrorCode::kInvalid, f.path(k) + " out of range");
    return static_cast<uint32_t>(v);
  }
  Result<bool> boolean(std::string_view k) {
    SG_ASSIGN_OR_RETURN(const json::value* v, wrap(f.any(k)));
    if (!v->is_bool()) return Error(ErrorCode::kInvalid, f.path(k) + " must be true or false");
    return v->get_bool();
  }
  Result<int> integer(std::string_view k) {
    SG_ASSIGN_OR_RETURN(int64_t v, i64(k));
    if (v < INT32_MIN || v > INT32_MAX) return Error(ErrorCode::kInvalid, f.path(k) + " out of range");
    return static_cast<int>(v);
  }
  Result<std::optional<uint64_t>> opt_u64(std::string_view k) {
    const json::value* v = f.optional(k);
    if (v == nullptr || v->is_null()) return std::optional<uint64_t>{};
    if (v->is_uint64()) return std::optional<uint64_t>(v->get_uint64());
    if (v->is_int64() && v->get_int64() >= 0) return std::optional<uint64_t>(v->get_int64());
    return Error(ErrorCode::kInvalid, f.path(k) + " must be a non-negative integer or null");
  }
  Status finish() { return wrap_status(f.finish()); }

  template <typename T>
  static Result<T> wrap(Result<T> r) {
    if (!r.ok()) return invalid(r.error());
    return r;
  }
  static Status wrap_status(Status s) {
    if (!s.ok()) return invalid(s.error());
    return s;
  }
};

json::value opt(const std::optional<uint64_t>& v) { return v ? json::value(*v) : json::value(nullptr); }

std::string_view kind_text(CheckpointKind k) { return checkpoint_kind_name(k); }
Result<CheckpointKind> parse_kind(std::string_view s) {
  if (s == "emergency") return CheckpointKind::kEmergency;
  if (s == "periodic") return CheckpointKind::kPeriodic;
  if (s == "advisory") return CheckpointKind::kAdvisory;
  return Error(ErrorCode::kInvalid, "unknown checkpoint kind '" + std::string(s) + "'");
}

// ---- events ---------------------------------------------------------------------------

Result<json::object> encode_event(const Event& e) {
  json::object o = base("event");
  o["event"] = event_name(e);
  Status unsupported;
  std::visit(
      Overload{
          [&](const event::NodeLaunched& x) { o["epoch"] = x.epoch; o["node"] = x.node; },
          [&](const event::LaunchFailed& x) {
            o["epoch"] = x.epoch; o["node"] = x.node; o["error"] = x.error; o["transient"] = x.transient;
          },
          [&](const event::RankHello& x) { o["epoch"] = x.epoch; o["rank"] = x.rank; o["pid"] = x.pid; },
          [&](const event::Heartbeats& x) {
            o["epoch"] = x.epoch;
            json::array ranks;
            for (const auto& r : x.ranks) {
              json::array item{r.rank, r.step};
              if (!r.scalars.empty()) item.push_back(hooks::encode_scalars(r.scalars));
              ranks.push_back(std::move(item));
            }
            o["ranks"] = std::move(ranks);
            o["all_ranks_at"] = opt(x.all_ranks_at);
          },
          [&](const event::SaveBegan& x) { o["epoch"] = x.epoch; o["rank"] = x.rank; o["step"] = x.step; },
          [&](const event::Committed& x) {
            o["epoch"] = x.epoch; o["step"] = x.step; o["manifest"] = x.manifest; o["bytes"] = x.bytes;
          },
          [&](const event::SaveFailed& x) {
            o["epoch"] = x.epoch; o["rank"] = x.rank; o["step"] = x.step; o["error"] = x.error;
            o["no_space"] = x.no_space;
          },
          [&](const event::Passed& x) { o["epoch"] = x.epoch; o["rank"] = x.rank; o["step"] = x.step; },
          [&](const event::ResumeFailed& x) {
            o["epoch"] = x.epoch; o["rank"] = x.rank; o["manifest"] = x.manifest; o["file"] = x.file;
            o["offset"] = x.offset; o["error"] = x.error;
          },
          [&](const event::RankExited& x) {
            o["epoch"] = x.epoch; o["rank"] = x.rank; o["signaled"] = x.signaled; o["code"] = x.code;
            o["signal"] = x.signal; o["during_teardown"] = x.during_teardown;
            o["description"] = x.description;
          },
          [&](const event::NodeStopped& x) { o["epoch"] = x.epoch; o["node"] = x.node; },
          [&](const event::Notice& x) {
            o["node"] = x.node; o["stop"] = x.action == NoticeAction::kStop; o["source"] = x.source;
            o["kind"] = x.kind; o["detail"] = x.detail; o["deadline_unix_ms"] = to_unix_ms(x.deadline);
            o["id"] = x.id; o["preemption"] = x.preemption;
          },
          [&](const event::NodeUnhealthy& x) {
            o["node"] = x.node; o["evidence"] = x.evidence; o["deadline_unix_ms"] = to_unix_ms(x.deadline);
          },
          [&](const auto&) {
            unsupported = Error(ErrorCode::kInvalid,
                                "event '" + std::string(event_name(e)) + "' does not travel between nodes");
          },
      },
      e);
  if (!unsupported.ok()) return unsupported.error();
  return o;
}

Result<Event> decode_event(Reader& r, const std::string& name) {
  if (name == "node_launched") {
    event::NodeLaunched x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    return Event(x);
  }
  if (name == "launch_failed") {
    event::LaunchFailed x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    SG_ASSIGN_OR_RETURN(x.error, r.str("error"));
    SG_ASSIGN_OR_RETURN(x.transient, r.boolean("transient"));
    return Event(x);
  }
  if (name == "rank_hello") {
    event::RankHello x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(x.pid, r.i64("pid"));
    return Event(x);
  }
  if (name == "heartbeats") {
    event::Heartbeats x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(const json::array* ranks, Reader::wrap(r.f.array("ranks")));
    if (ranks->size() > 1'000'000) return Error(ErrorCode::kInvalid, "heartbeats: too many ranks");
    for (const auto& item : *ranks) {
      const json::array* pair = item.if_array();
      if (pair == nullptr || pair->size() < 2 || pair->size() > 3 || !(*pair)[0].is_number() ||
          !(*pair)[1].is_number())
        return Error(ErrorCode::kInvalid, "heartbeats: ranks must be [rank, step] or [rank, step, scalars]");
      SG_ASSIGN_OR_RETURN(uint64_t rank, Reader::wrap(checkpoint::json_u64((*pair)[0], "rank")));
      SG_ASSIGN_OR_RETURN(uint64_t step, Reader::wrap(checkpoint::json_u64((*pair)[1], "step")));
      if (rank > UINT32_MAX) return Error(ErrorCode::kInvalid, "heartbeats: rank out of range");
      StepScalars scalars;
      if (pair->size() == 3) {
        SG_ASSIGN_OR_RETURN(scalars, hooks::decode_scalars((*pair)[2], "heartbeats"));
      }
      x.ranks.push_back({static_cast<uint32_t>(rank), step, std::move(scalars)});
    }
    SG_ASSIGN_OR_RETURN(x.all_ranks_at, r.opt_u64("all_ranks_at"));
    return Event(x);
  }
  if (name == "save_began" || name == "passed") {
    uint64_t epoch = 0, step = 0;
    uint32_t rank = 0;
    SG_ASSIGN_OR_RETURN(epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(step, r.u64("step"));
    if (name == "passed") return Event(event::Passed{epoch, rank, step});
    return Event(event::SaveBegan{epoch, rank, step});
  }
  if (name == "committed") {
    event::Committed x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.step, r.u64("step"));
    SG_ASSIGN_OR_RETURN(x.manifest, r.str("manifest"));
    SG_ASSIGN_OR_RETURN(x.bytes, r.u64("bytes"));
    return Event(x);
  }
  if (name == "save_failed") {
    event::SaveFailed x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(x.step, r.u64("step"));
    SG_ASSIGN_OR_RETURN(x.error, r.str("error"));
    SG_ASSIGN_OR_RETURN(x.no_space, r.boolean("no_space"));
    return Event(x);
  }
  if (name == "resume_failed") {
    event::ResumeFailed x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(x.manifest, r.str("manifest"));
    SG_ASSIGN_OR_RETURN(x.file, r.str("file"));
    SG_ASSIGN_OR_RETURN(x.offset, r.u64("offset"));
    SG_ASSIGN_OR_RETURN(x.error, r.str("error"));
    return Event(x);
  }
  if (name == "rank_exited") {
    event::RankExited x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(x.signaled, r.boolean("signaled"));
    SG_ASSIGN_OR_RETURN(x.code, r.integer("code"));
    SG_ASSIGN_OR_RETURN(x.signal, r.integer("signal"));
    SG_ASSIGN_OR_RETURN(x.during_teardown, r.boolean("during_teardown"));
    SG_ASSIGN_OR_RETURN(x.description, r.str("description"));
    return Event(x);
  }
  if (name == "node_stopped") {
    event::NodeStopped x;
    SG_ASSIGN_OR_RETURN(x.epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    return Event(x);
  }
  if (name == "notice") {
    event::Notice x;
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    SG_ASSIGN_OR_RETURN(bool stop, r.boolean("stop"));
    x.action = stop ? NoticeAction::kStop : NoticeAction::kCheckpoint;
    SG_ASSIGN_OR_RETURN(x.source, r.str("source"));
    SG_ASSIGN_OR_RETURN(x.kind, r.str("kind"));
    SG_ASSIGN_OR_RETURN(x.detail, r.str("detail"));
    SG_ASSIGN_OR_RETURN(int64_t ms, r.i64("deadline_unix_ms"));
    x.deadline = from_unix_ms(ms);
    SG_ASSIGN_OR_RETURN(x.id, r.u64("id"));
    SG_ASSIGN_OR_RETURN(x.preemption, r.boolean("preemption"));
    return Event(x);
  }
  if (name == "node_unhealthy") {
    event::NodeUnhealthy x;
    SG_ASSIGN_OR_RETURN(x.node, r.u32("node"));
    SG_ASSIGN_OR_RETURN(x.evidence, r.str("evidence"));
    SG_ASSIGN_OR_RETURN(int64_t ms, r.i64("deadline_unix_ms"));
    x.deadline = from_unix_ms(ms);
    return Event(x);
  }
  return Error(ErrorCode::kInvalid, "event '" + name + "' does not travel between nodes");
}

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
          [&](const command::TearDown& x) { o["epoch"] = x.epoch; o["why"] = x.why; },
          [&](const command::CheckpointNow& x) {
            o["epoch"] = x.epoch; o["at_step"] = x.at_step; o["deadline_unix_ms"] = to_unix_ms(x.deadline);
            o["reason"] = x.reason; o["kind"] = kind_text(x.kind);
          },
          [&](const command::AbortSave& x) { o["epoch"] = x.epoch; o["step"] = x.step; o["why"] = x.why; },
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
    if (j.name.size() > 255 || j.address.size() > 255 || j.job_id.size() > 128)
      return Error(ErrorCode::kInvalid, "join: name, address or job id too long");
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
