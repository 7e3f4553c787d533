// The node protocol's events (what a node tells the coordinator), to and from JSON.
#include <boost/json.hpp>

#include "core/overload.h"
#include "hooks/scalars_json.h"
#include "supervisor/node_protocol_fields.h"

namespace shardguard::supervisor::wire::detail {

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
          [&](const event::ShardWritten& x) { o["epoch"] = x.epoch; o["rank"] = x.rank; o["step"] = x.step; },
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
  if (name == "save_began" || name == "passed" || name == "shard_written") {
    uint64_t epoch = 0, step = 0;
    uint32_t rank = 0;
    SG_ASSIGN_OR_RETURN(epoch, r.u64("epoch"));
    SG_ASSIGN_OR_RETURN(rank, r.u32("rank"));
    SG_ASSIGN_OR_RETURN(step, r.u64("step"));
    if (name == "passed") return Event(event::Passed{epoch, rank, step});
    if (name == "shard_written") return Event(event::ShardWritten{epoch, rank, step});
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

}  // namespace shardguard::supervisor::wire::detail
