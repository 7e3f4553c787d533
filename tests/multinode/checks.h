// What the multi-node tests assert about a finished (or running) job, read from its records
// and its checkpoint directory: the coordinator's timeline, the checkpoint history (fencing:
// no step committed twice, no epoch publishing outside its own lifetime), the final weights
// against an uninterrupted reference, and every resume checked byte for byte against the
// checkpoint it loaded (sg_trainer --dump-resume).
//
// Thread-safety: free functions for one test thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

#include "supervisor/event_log.h"

namespace shardguard::storage {
class Store;
}

namespace shardguard::testing::multinode {

class Cluster;
using supervisor::EventRecord;

// The value of `key` in an event ("" when absent); numbers as their JSON text.
std::string field(const EventRecord& e, const std::string& key);
std::vector<EventRecord> of_type(const std::vector<EventRecord>& events, const std::string& type);
// Wall-clock now in ms since the epoch, the clock the events are stamped with.
int64_t wall_ms_now();

// Polls the coordinator's events every 50 ms until one satisfies `pred` (and returns it),
// or `timeout` passes.
std::optional<EventRecord> wait_event(const Cluster& cluster,
                                      const std::function<bool(const EventRecord&)>& pred,
                                      std::chrono::milliseconds timeout);
// The first event of `type` after the `nth` (0-based) earlier ones, polled as above.
std::optional<EventRecord> wait_event_type(const Cluster& cluster, const std::string& type,
                                           std::chrono::milliseconds timeout, size_t nth = 0);

// Waits until every started node exited with `code` (true), or `timeout` passed. Returns false
// early, with a warning, when a node's log shows the NodeRunner relaunch race (reported to the
// lead): a node that rejoined with stale ranks and was relaunched at once can have its new
// epoch marked inactive by the old epoch's teardown ("hello refused: no attempt is running"),
// and the job then waits for that rank forever. Tests whose scenario hits that race check the
// end with CHECK_NOFAIL until it is fixed.
bool wait_all_unless_race(Cluster& cluster, int code, std::chrono::milliseconds timeout);

// `shardguard ckpt inspect --hash` of the newest complete checkpoint.
std::string final_hash(const std::string& ckpt);
// The same training run without interruption: the row-parallel trainer as one process
// (bit-identical for any world size), or with --allreduce as one `shardguard run --nproc W`
// (bit-identical only at the same world size). Cached per arguments within the test binary.
std::string row_parallel_reference(const std::vector<std::string>& trainer_args);
std::string allreduce_reference(const std::vector<std::string>& trainer_args, uint32_t world);

struct CommittedCheckpoint {
  uint64_t step = 0;
  uint64_t attempt = 0;
  uint32_t world_size = 0;
  std::string reason;  // periodic, emergency, final
  int64_t created_unix_ms = 0;
};
// Every complete checkpoint, by step (sizes verified), in a directory or any location.
std::vector<CommittedCheckpoint> checkpoints(const std::string& ckpt);
std::vector<CommittedCheckpoint> checkpoints(storage::Store& store);

// Fencing over the whole history (REQUIREs inside): every step committed at most once in the
// timeline and the committed steps only move forward in time; the manifests, by step, come
// from non-decreasing epochs; each manifest's epoch was launched and its creation lies between
// that launch and the epoch's end (a node of an old epoch never published later).
void check_history(const std::vector<EventRecord>& events, const std::string& ckpt);
void check_history(const std::vector<EventRecord>& events, storage::Store& store);

struct ResumeDump {
  uint64_t attempt = 0, rank = 0, step = 0;
  uint32_t world_size = 0;        // of the resumed attempt
  uint32_t saved_world_size = 0;  // of the checkpoint it loaded
  std::string manifest;
};
// Reads every dump in `dump_dir`, opens the manifest it names, and compares (REQUIREs
// inside): the manifest's step, the rank's rows of weight and both Adam moments byte for
// byte, the data loader state (rng and position of the rank, or rank 0's when the saving world
// was smaller), and the all-reduce state carried in the global user JSON. Returns them.
std::vector<ResumeDump> verify_resume_dumps(const std::string& dump_dir);
// The same for checkpoints in `store` (a bucket): each dump's step opened there.
std::vector<ResumeDump> verify_resume_dumps(const std::string& dump_dir, storage::Store& store);

}  // namespace shardguard::testing::multinode
