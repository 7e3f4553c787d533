// The coordinator's write-ahead record, in the shared checkpoint directory
// (<checkpoint_dir>/.shardguard/coordinator.json): every decision that a restarted or successor
// coordinator needs to resume control - the running epoch and its layout, the members and
// their addresses, where the coordinator listens, the restarts granted per class (budgets), the
// last committed step - written (temp, fsync, rename) before the decision is acted on. A
// successor adopts the running epoch instead of relaunching it: the ranks keep training.
// Thread-safety: plain values and independent calls.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

struct CoordinatorState {
  std::string job_id;
  Epoch epoch = 0;               // the epoch that runs (or runs next)
  bool running = false;          // `epoch` was launched and has not ended
  std::vector<NodeSlot> layout;  // of the running epoch
  uint32_t world_size = 0;
  std::optional<uint64_t> resume_step;
  std::string resume_manifest;
  std::string master_addr;
  uint16_t master_port = 0;
  struct Member {
    NodeId node = 0;
    std::string address;

    bool operator==(const Member&) const = default;
  };
  std::vector<Member> members;
  std::string coordinator_address;  // host:port the coordinator listens on
  std::optional<NodeId> coordinator_node;  // the node it is embedded in, if any
  std::optional<uint64_t> last_committed;
  // The stop notices of an emergency under way (detail: the reason), taken again by a
  // successor with their deadlines.
  std::vector<event::Notice> notices;
  // Restarts granted per exit class name, as wall-clock times (ms since the epoch).
  std::map<std::string, std::vector<int64_t>> restarts;
  int64_t written_unix_ms = 0;

  bool operator==(const CoordinatorState&) const = default;
};

std::string coordinator_state_to_json(const CoordinatorState& state);
// Strict; kCorrupt names the problem.
Result<CoordinatorState> parse_coordinator_state(std::string_view json);

// <checkpoint_dir>/.shardguard/coordinator.json (or the bucket's URL of it)
std::string coordinator_state_path(const std::string& checkpoint_dir);
// In a Store (a directory or, for a job that shares nothing but a bucket, the bucket).
Status store_coordinator_state(storage::Store& store, CoordinatorState state, WallTime now);
Result<std::optional<CoordinatorState>> load_coordinator_state(storage::Store& store);
Status store_coordinator_state(Filesystem& fs, const std::string& checkpoint_dir,
                               CoordinatorState state, WallTime now);
// nullopt when there is none.
Result<std::optional<CoordinatorState>> load_coordinator_state(Filesystem& fs,
                                                               const std::string& checkpoint_dir);

}  // namespace shardguard::supervisor
