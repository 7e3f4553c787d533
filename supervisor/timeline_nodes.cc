// The timeline's view of a multi-node job's nodes (supervisor/timeline.h, NodeView): who joined,
// where each was placed in the latest attempt, which were lost, unhealthy or notified, and why.
#include <charconv>

#include "supervisor/timeline_state.h"

namespace shardguard::supervisor {
namespace {

// "0,2,3" (a launch record's node ids, in node-rank order).
std::vector<uint64_t> node_list(const std::string& text) {
  std::vector<uint64_t> out;
  size_t at = 0;
  while (at < text.size()) {
    size_t end = text.find(',', at);
    if (end == std::string::npos) end = text.size();
    uint64_t id = 0;
    auto [p, ec] = std::from_chars(text.data() + at, text.data() + end, id);
    if (ec == std::errc() && p == text.data() + end) out.push_back(id);
    at = end + 1;
  }
  return out;
}

}  // namespace

void Timeline::State::on_node_record(const TimelineRecord& r) {
  const std::string& t = r.type;
  auto set = [&](uint64_t id, const std::string& state, const std::string& why) {
    NodeView& n = nodes[id];
    n.node = id;
    if (n.state != state) n.since_unix_ms = r.time_unix_ms;
    n.state = state;
    n.why = why;
  };
  if (t == "node_joined") {
    if (auto id = r.count("node")) {
      set(*id, "waiting", "");
      nodes[*id].address = r.text("address");
    }
  } else if (t == "node_lost") {
    // A released node's connection closes as it exits: it left, it was not lost.
    if (auto id = r.count("node"); id && nodes[*id].state != "left") set(*id, "lost", r.text("why"));
  } else if (t == "node_released") {
    if (auto id = r.count("node")) set(*id, "left", r.text("why"));
  } else if (t == "node_unhealthy") {
    if (auto id = r.count("node")) set(*id, "unhealthy", r.text("evidence"));
  } else if (t == "notice" && r.text("action") != "checkpoint") {
    // A single-node run's records name node 0 too: only nodes already known are changed.
    if (auto id = r.count("node"); id && nodes.contains(*id))
      set(*id, "notified", r.text("source") + " " + r.text("kind"));
  } else if (t == "launch") {
    const auto placed = node_list(r.text("nodes"));
    for (auto& [id, n] : nodes)
      if (n.state == "running") set(id, "waiting", "");
    // (A node that left stays "left": it is never placed again.)
    for (size_t i = 0; i < placed.size(); ++i) {
      // A node placed without a node_joined of its own (a single-node run) is listed too.
      set(placed[i], "running", "");
      nodes[placed[i]].attempt = r.count("attempt");
      nodes[placed[i]].node_rank = static_cast<uint32_t>(i);
    }
  } else if (t == "attempt_end") {
    // Between attempts nobody runs: the nodes that did wait to be placed again.
    for (auto& [id, n] : nodes)
      if (n.state == "running") set(id, "waiting", "");
  } else if (t == "finish") {
    for (auto& [id, n] : nodes)
      if (n.state == "running" || n.state == "waiting" || n.state == "notified")
        set(id, "stopped", n.state == "notified" ? n.why : "");
  }
}

}  // namespace shardguard::supervisor
