// The AttemptMachine's members: which nodes belong to the job, which of them an epoch can be
// placed on, nodes joining and being lost, and when enough of them are here to launch.
#include <algorithm>

#include "supervisor/attempt_machine.h"
#include "supervisor/attempt_machine_impl.h"

namespace shardguard::supervisor {

// ---- membership ------------------------------------------------------------------------

// Members in node-id order: ids are the node ranks nodes asked for, or handed out in join
// order after them, so survivors keep their relative order at every epoch.
std::vector<NodeId> AttemptMachine::Impl::placeable_nodes() const {
  std::vector<NodeId> ids;
  for (const auto& m : members)
    if (m.alive && !m.leaving) ids.push_back(m.node);
  std::sort(ids.begin(), ids.end());
  if (ids.size() > cfg.max_nodes) ids.resize(cfg.max_nodes);
  return ids;
}

uint32_t AttemptMachine::Impl::alive_members() const {
  return static_cast<uint32_t>(
      std::count_if(members.begin(), members.end(), [](const NodeMember& m) { return m.alive; }));
}

bool AttemptMachine::Impl::in_current_attempt(Epoch e) const {
  return attempt && attempt->epoch == e && attempt->launched;
}

bool AttemptMachine::Impl::all_ranks_exited() const {
  return attempt && std::all_of(attempt->ranks.begin(), attempt->ranks.end(),
                                [](const RankView& r) { return r.exit.has_value(); });
}

void AttemptMachine::Impl::on(Now now, const event::NodeJoined& e) {
  auto it = std::find_if(members.begin(), members.end(),
                         [&](const NodeMember& m) { return m.node == e.node; });
  if (it == members.end()) {
    members.push_back({e.node, e.address, true, false});
  } else {
    it->alive = true;
    it->leaving = false;
    it->address = e.address;
  }
  record("node_joined", {{"node", uint64_t{e.node}}, {"address", e.address},
                         {"nodes", uint64_t{alive_members()}}});
  if (phase == Phase::kPending) maybe_begin(now);
}

void AttemptMachine::Impl::on(Now now, const event::NodeLost& e) {
  auto it = std::find_if(members.begin(), members.end(),
                         [&](const NodeMember& m) { return m.node == e.node; });
  if (it == members.end() || !it->alive) return;
  it->alive = false;
  record("node_lost", {{"node", uint64_t{e.node}}, {"why", e.why},
                       {"nodes", uint64_t{alive_members()}}});
  if (!attempt || !attempt->launched) return;
  const bool placed = std::any_of(attempt->layout.begin(), attempt->layout.end(),
                                  [&](const NodeSlot& s) { return s.node == e.node; });
  if (!placed || attempt->nodes_stopped.contains(e.node)) return;
  // Its ranks are gone or out of reach: waiting for them would only stall the survivors.
  attempt->nodes_stopped.insert(e.node);
  attempt->node_lost = true;
  if (!attempt->tearing_down) return begin_teardown(now, "node " + std::to_string(e.node) + " lost: " + e.why);
  if (attempt->nodes_stopped.size() >= attempt->layout.size()) attempt_ended(now);
}

void AttemptMachine::Impl::lose_placed_node(Now now, NodeId node, const std::string& why) {
  auto it = std::find_if(members.begin(), members.end(),
                         [&](const NodeMember& m) { return m.node == node; });
  if (it == members.end()) {
    members.push_back({node, "", true, false});
  } else {
    it->alive = true;  // so that on(NodeLost) counts it
  }
  on(now, event::NodeLost{node, why});
}

void AttemptMachine::Impl::maybe_begin(Now now) {
  if (finished || phase != Phase::kPending) return;
  const size_t n = placeable_nodes().size();
  if (n >= cfg.max_nodes || (n >= cfg.min_nodes && cfg.join_window.count() <= 0)) {
    return begin_attempt(now);
  }
  if (n >= cfg.min_nodes) {
    if (!armed.contains(TimerId::kJoinWindow)) arm(TimerId::kJoinWindow, now.steady + cfg.join_window);
    return;
  }
  if (!armed.contains(TimerId::kRendezvous))
    arm(TimerId::kRendezvous, now.steady + cfg.rendezvous_timeout);
}

}  // namespace shardguard::supervisor
