#include "supervisor/node_claims.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "core/overload.h"

namespace shardguard::supervisor {
namespace {

std::string foreign(NodeId node, std::string_view what, uint32_t rank, Epoch epoch) {
  return "node " + std::to_string(node) + " spoke for rank " + std::to_string(rank) +
         " of attempt " + std::to_string(epoch) + ", which it does not hold (" + std::string(what) +
         ")";
}

}  // namespace

Result<event::Committed> read_back_commit(storage::Store& store, Epoch epoch, uint64_t step,
                                          const std::string& job_id) {
  auto entry = checkpoint::inspect_checkpoint(store, step, checkpoint::Verify::kSize);
  if (entry.state != checkpoint::CheckpointState::kComplete || !entry.manifest)
    return Error(ErrorCode::kCorrupt, "not complete: " + entry.reason);
  const auto& m = *entry.manifest;
  if (m.attempt != epoch)
    return Error(ErrorCode::kFenced, "written by attempt " + std::to_string(m.attempt) + ", not " +
                                         std::to_string(epoch));
  if (m.job_id != job_id) return Error(ErrorCode::kCorrupt, "written by job '" + m.job_id + "'");
  return event::Committed{epoch, step, store.describe(checkpoint::manifest_key(step)),
                          m.total_bytes()};
}

std::optional<std::string> check_node_claim(const AttemptMachine& machine, NodeId node,
                                            Event& event) {
  // A rank-level event: only for a rank of the node's own slot in the running attempt.
  auto own = [&](std::string_view what, Epoch epoch, uint32_t rank) -> std::optional<std::string> {
    const auto span = machine.ranks_of(node, epoch);
    if (!span || span->contains(rank)) return std::nullopt;
    return foreign(node, what, rank, epoch);
  };
  return std::visit(
      Overload{[&](event::RankHello& e) { return own("hello", e.epoch, e.rank); },
               [&](event::SaveBegan& e) { return own("save began", e.epoch, e.rank); },
               [&](event::ShardWritten& e) { return own("shard written", e.epoch, e.rank); },
               [&](event::SaveFailed& e) { return own("save failed", e.epoch, e.rank); },
               [&](event::Passed& e) { return own("passed", e.epoch, e.rank); },
               [&](event::ResumeFailed& e) { return own("resume failed", e.epoch, e.rank); },
               [&](event::RankExited& e) { return own("exited", e.epoch, e.rank); },
               [&](event::Committed& e) -> std::optional<std::string> {
                 // Rank 0 commits: only its node can have seen the commit first-hand.
                 if (auto why = own("commit", e.epoch, 0)) return why;
                 return std::nullopt;
               },
               [&](event::Heartbeats& e) -> std::optional<std::string> {
                 const auto span = machine.ranks_of(node, e.epoch);
                 if (!span) return std::nullopt;
                 const size_t before = e.ranks.size();
                 std::erase_if(e.ranks,
                               [&](const event::RankStep& r) { return !span->contains(r.rank); });
                 // "Every rank is at this step" is a node's to say only when it holds every rank.
                 if (e.all_ranks_at && !(span->first == 0 && span->count >= machine.world_size()))
                   e.all_ranks_at.reset();
                 if (e.ranks.size() == before) return std::nullopt;
                 if (e.ranks.empty() && !e.all_ranks_at)
                   return "node " + std::to_string(node) +
                          " reported steps only of ranks it does " + "not hold (attempt " +
                          std::to_string(e.epoch) + ")";
                 return std::nullopt;  // the node's own ranks still count
               },
               [&](auto&) -> std::optional<std::string> { return std::nullopt; }},
      event);
}

RemoteNodeEvents::RemoteNodeEvents(Worker& worker, storage::Store& store, const std::string& job_id,
                                   const AttemptMachine& machine, Clock& clock,
                                   TimerFactory& timers, Feed feed, Record record)
    : worker_(worker),
      store_(store),
      job_id_(job_id),
      machine_(machine),
      feed_(std::move(feed)),
      record_(std::move(record)),
      log_(clock, {}, nullptr, &timers) {}

RemoteNodeEvents::~RemoteNodeEvents() { *alive_ = false; }

void RemoteNodeEvents::on_event(NodeId node, Event event) {
  // A notice never waits behind a read-back (a bucket's GET can take seconds): it orders
  // nothing a commit must come before.
  const bool urgent = std::holds_alternative<event::Notice>(event) ||
                      std::holds_alternative<event::NodeUnhealthy>(event);
  if (reading_back_ && !urgent) {
    waiting_.emplace_back(node, std::move(event));
    return;
  }
  handle(node, std::move(event));
}

void RemoteNodeEvents::handle(NodeId node, Event event) {
  if (auto why = check_node_claim(machine_, node, event)) {
    log_.warn("node claim refused", "coordinator: refused: " + *why);
    record_("node_claim_refused", {{"node", uint64_t{node}}, {"why", *why}});
    return;
  }
  if (auto* c = std::get_if<event::Committed>(&event)) return read_back(node, *c);
  feed_(std::move(event));
}

void RemoteNodeEvents::read_back(NodeId node, const event::Committed& claimed) {
  reading_back_ = true;
  storage::Store& s = store_;
  const std::string job = job_id_;
  std::weak_ptr<bool> weak = alive_;
  run_off_loop<Result<event::Committed>>(
      worker_,
      [&s, claimed, job]() { return read_back_commit(s, claimed.epoch, claimed.step, job); },
      [this, weak, node, claimed](Result<event::Committed> r) {
        if (weak.expired()) return;
        reading_back_ = false;
        if (r.ok()) {
          feed_(std::move(*r));
        } else {
          spdlog::error("coordinator: node {} claimed the commit of step {}, but {}", node,
                        claimed.step, r.error().message());
          record_("commit_claim_rejected",
                  {{"node", uint64_t{node}}, {"step", claimed.step}, {"why", r.error().message()}});
        }
        drain();
      });
}

void RemoteNodeEvents::drain() {
  while (!reading_back_ && !waiting_.empty()) {
    auto [node, event] = std::move(waiting_.front());
    waiting_.pop_front();
    handle(node, std::move(event));
  }
}

}  // namespace shardguard::supervisor
