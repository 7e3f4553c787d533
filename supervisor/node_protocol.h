// The messages between the coordinator and the node supervisors of a multi-node job, carried
// as authenticated frames (io/secure_channel.h). One JSON object per frame, strictly parsed
// (unknown or repeated fields, wrong types: refused, naming the problem); nothing received is
// ever executed - the command a node runs is its own `shardguard run` command line.
//
//   node -> coordinator : join{node, name, address, nproc, job_id, epoch}   once per connection
//                         beat{}                                          every second
//                         event{...}   what the node's runner reports (machine_events.h)
//   coordinator -> node : welcome{node, job_id}                          the node's identity
//                         command{...} Launch, TearDown, CheckpointNow, AbortSave,
//                                      CollectHangReport, AckNotice
//                         finish{exit_code, summary}                     the job is over
//                         refuse{why}                                    not admitted
//
// Thread-safety: pure functions.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <variant>

#include "core/result.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor::wire {

inline constexpr int kNodeProtocolVersion = 1;

struct Join {
  std::optional<NodeId> node;   // the id it had (a rejoin after a coordinator restart), or the
                                // node rank it asks for at first
  std::string name;             // host name, for logs
  std::string address;          // where its ranks reach it (MASTER_ADDR when it hosts rank 0)
  uint32_t nproc = 0;           // ranks per node: must match the coordinator's
  std::string job_id;           // empty: the coordinator's
  std::optional<Epoch> epoch;   // the epoch whose ranks it runs now (rejoin), if any
  bool rejoin = false;          // it had been welcomed before (by this or a previous coordinator)
  std::string token;            // the welcome's token (rejoin), which binds the id to this node
};
struct Beat {};
struct Welcome {
  NodeId node = 0;
  std::string job_id;
  // Random per node: a rejoin that would replace the id's live connection must show it, so
  // another holder of the secret cannot take over a node's id (and speak for its ranks).
  std::string token;
};
struct Finish {
  int exit_code = 0;
  std::string summary;
};
struct Refuse {
  std::string why;
};

using NodeToCoordinator = std::variant<Join, Beat, Event>;
using CoordinatorToNode = std::variant<Welcome, Command, Finish, Refuse>;

std::string encode(const NodeToCoordinator& message);
std::string encode(const CoordinatorToNode& message);
// kInvalid names the problem. Events and commands that never travel between nodes (timers,
// records, resume selection) are refused.
Result<NodeToCoordinator> decode_from_node(std::string_view payload);
Result<CoordinatorToNode> decode_from_coordinator(std::string_view payload);

}  // namespace shardguard::supervisor::wire
