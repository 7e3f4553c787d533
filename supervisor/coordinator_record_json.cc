// The coordinator's record as JSON (supervisor/coordinator_log.h): version 1, parsed strictly
// (unknown keys and wrong types are errors naming the key), since it lives in a checkpoint
// location others may reach. Fuzzed by fuzz/coordinator_record_fuzz.cc.
#include <boost/json.hpp>

#include "checkpoint/json_fields.h"
#include "checkpoint/strict_json.h"
#include "supervisor/coordinator_log.h"  // declares the codec

namespace shardguard::supervisor {
namespace json = boost::json;
using checkpoint::JsonFields;

namespace {

constexpr int kVersion = 1;

Result<std::vector<uint64_t>> u64s(const json::value& v, const std::string& where) {
  if (!v.is_array()) return Error(ErrorCode::kCorrupt, where + " must be an array");
  std::vector<uint64_t> out;
  for (const auto& x : v.get_array()) {
    SG_ASSIGN_OR_RETURN(uint64_t n, checkpoint::json_u64(x, where));
    out.push_back(n);
  }
  return out;
}

}  // namespace

std::string coordinator_state_to_json(const CoordinatorState& s) {
  json::object o;
  o["version"] = kVersion;
  o["job_id"] = s.job_id;
  o["epoch"] = s.epoch;
  o["running"] = s.running;
  json::array layout;
  for (const auto& n : s.layout) layout.push_back(json::array{n.node, n.node_rank, n.first_rank, n.nproc});
  o["layout"] = std::move(layout);
  o["world_size"] = s.world_size;
  o["resume_step"] = s.resume_step ? json::value(*s.resume_step) : json::value(nullptr);
  o["resume_manifest"] = s.resume_manifest;
  o["master_addr"] = s.master_addr;
  o["master_port"] = s.master_port;
  json::array members;
  for (const auto& m : s.members) members.push_back(json::object{{"node", m.node}, {"address", m.address}});
  o["members"] = std::move(members);
  o["coordinator_address"] = s.coordinator_address;
  o["coordinator_node"] = s.coordinator_node ? json::value(*s.coordinator_node) : json::value(nullptr);
  o["last_committed"] = s.last_committed ? json::value(*s.last_committed) : json::value(nullptr);
  json::object restarts;
  for (const auto& [cls, times] : s.restarts) {
    json::array a;
    for (int64_t t : times) a.push_back(t);
    restarts[cls] = std::move(a);
  }
  o["restarts"] = std::move(restarts);
  json::array notices;
  for (const auto& n : s.notices)
    notices.push_back(json::object{{"node", n.node},
                                   {"source", n.source},
                                   {"kind", n.kind},
                                   {"reason", n.detail},
                                   {"deadline_unix_ms", to_unix_ms(n.deadline)},
                                   {"id", n.id},
                                   {"preemption", n.preemption}});
  o["notices"] = std::move(notices);
  o["written_unix_ms"] = s.written_unix_ms;
  return json::serialize(o) + "\n";
}

Result<CoordinatorState> parse_coordinator_state(std::string_view text) {
  SG_ASSIGN_OR_RETURN(json::value v, checkpoint::parse_json_strict(text));
  SG_ASSIGN_OR_RETURN(JsonFields f, JsonFields::of(v, ""));
  CoordinatorState s;
  SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
  if (version != kVersion)
    return Error(ErrorCode::kCorrupt, "coordinator state version " + std::to_string(version) +
                                          " (this build reads " + std::to_string(kVersion) + ")");
  SG_ASSIGN_OR_RETURN(s.job_id, f.string("job_id"));
  SG_ASSIGN_OR_RETURN(s.epoch, f.u64("epoch"));
  SG_ASSIGN_OR_RETURN(const json::value* running, f.any("running"));
  if (!running->is_bool()) return Error(ErrorCode::kCorrupt, "running must be true or false");
  s.running = running->get_bool();
  SG_ASSIGN_OR_RETURN(const json::array* layout, f.array("layout"));
  for (const auto& item : *layout) {
    SG_ASSIGN_OR_RETURN(auto v4, u64s(item, "layout[]"));
    if (v4.size() != 4) return Error(ErrorCode::kCorrupt, "layout entries have 4 numbers");
    s.layout.push_back({static_cast<NodeId>(v4[0]), static_cast<uint32_t>(v4[1]),
                        static_cast<uint32_t>(v4[2]), static_cast<uint32_t>(v4[3])});
  }
  SG_ASSIGN_OR_RETURN(uint64_t world, f.u64("world_size"));
  s.world_size = static_cast<uint32_t>(world);
  if (const json::value* r = f.optional("resume_step"); r && !r->is_null()) {
    SG_ASSIGN_OR_RETURN(uint64_t step, checkpoint::json_u64(*r, "resume_step"));
    s.resume_step = step;
  }
  SG_ASSIGN_OR_RETURN(s.resume_manifest, f.string("resume_manifest"));
  SG_ASSIGN_OR_RETURN(s.master_addr, f.string("master_addr"));
  SG_ASSIGN_OR_RETURN(uint64_t port, f.u64("master_port"));
  s.master_port = static_cast<uint16_t>(port);
  SG_ASSIGN_OR_RETURN(const json::array* members, f.array("members"));
  for (const auto& item : *members) {
    SG_ASSIGN_OR_RETURN(JsonFields m, JsonFields::of(item, "members[]"));
    CoordinatorState::Member member;
    SG_ASSIGN_OR_RETURN(uint64_t node, m.u64("node"));
    member.node = static_cast<NodeId>(node);
    SG_ASSIGN_OR_RETURN(member.address, m.string("address"));
    SG_RETURN_IF_ERROR(m.finish());
    s.members.push_back(std::move(member));
  }
  SG_ASSIGN_OR_RETURN(s.coordinator_address, f.string("coordinator_address"));
  if (const json::value* c = f.optional("coordinator_node"); c && !c->is_null()) {
    SG_ASSIGN_OR_RETURN(uint64_t node, checkpoint::json_u64(*c, "coordinator_node"));
    s.coordinator_node = static_cast<NodeId>(node);
  }
  if (const json::value* c = f.optional("last_committed"); c && !c->is_null()) {
    SG_ASSIGN_OR_RETURN(uint64_t step, checkpoint::json_u64(*c, "last_committed"));
    s.last_committed = step;
  }
  SG_ASSIGN_OR_RETURN(const json::object* restarts, f.object("restarts"));
  for (const auto& kv : *restarts) {
    if (!kv.value().is_array()) return Error(ErrorCode::kCorrupt, "restarts entries are arrays");
    std::vector<int64_t> times;
    for (const auto& t : kv.value().get_array()) {
      if (!t.is_int64()) return Error(ErrorCode::kCorrupt, "restart times are integers");
      times.push_back(t.get_int64());
    }
    s.restarts[std::string(kv.key())] = std::move(times);
  }
  // Absent in records of builds before notices were kept.
  if (const json::value* notices = f.optional("notices")) {
    if (!notices->is_array()) return Error(ErrorCode::kCorrupt, "notices must be an array");
    for (const auto& item : notices->get_array()) {
      SG_ASSIGN_OR_RETURN(JsonFields nf, JsonFields::of(item, "notices[]"));
      event::Notice n;
      SG_ASSIGN_OR_RETURN(uint64_t node, nf.u64("node"));
      n.node = static_cast<NodeId>(node);
      SG_ASSIGN_OR_RETURN(n.source, nf.string("source"));
      SG_ASSIGN_OR_RETURN(n.kind, nf.string("kind"));
      SG_ASSIGN_OR_RETURN(n.detail, nf.string("reason"));
      SG_ASSIGN_OR_RETURN(int64_t deadline, nf.i64("deadline_unix_ms"));
      n.deadline = from_unix_ms(deadline);
      SG_ASSIGN_OR_RETURN(n.id, nf.u64("id"));
      SG_ASSIGN_OR_RETURN(const json::value* preemption, nf.any("preemption"));
      if (!preemption->is_bool())
        return Error(ErrorCode::kCorrupt, "notices[].preemption must be true or false");
      n.preemption = preemption->get_bool();
      SG_RETURN_IF_ERROR(nf.finish());
      s.notices.push_back(std::move(n));
    }
  }
  SG_ASSIGN_OR_RETURN(s.written_unix_ms, f.i64("written_unix_ms"));
  SG_RETURN_IF_ERROR(f.finish());
  return s;
}

}  // namespace shardguard::supervisor
