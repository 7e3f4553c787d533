// The directory lease: one job per checkpoint directory at a time. Two supervisors writing
// into one directory mix their ranks' shards into "complete" checkpoints, or resume from each
// other's, so the second one must be refused with a message that names the first.
//
// The lease is two things in `<checkpoint_dir>/.shardguard/` (names in checkpoint/paths.h):
//   - `lease.lock`, held with flock(LOCK_EX | LOCK_NB) for as long as the holder lives. The
//     kernel drops it when the holder dies, even by SIGKILL; it is never renamed, so the
//     lock stays on one inode.
//   - `lease`, the holder's record {job_id, host, pid, epoch, acquired and renewed times, a
//     random token, whether it holds the flock}, rewritten atomically on every renewal.
// A lease is taken over only when its holder is gone or stale:
//   - a holder whose flock is live is never stale (single node; `live_flock_never_stale`),
//     unless the caller opts out (a multi-node coordinator, whose dead host's lock may
//     linger on a network filesystem: it renews every second and is stale after 3 s);
//   - a record not renewed for `stale_after` is stale;
//   - where the filesystem has no flock (ENOLCK, EOPNOTSUPP: some NFS mounts), the record's
//     timestamp alone decides, and a warning says so.
// Without a lock, two processes that take over a stale lease in the same instant can both
// believe they won; the loser learns it at its next renew() (kFenced). Epoch fencing of
// commits stays the real guard where a lease cannot be proven.
//
// In a bucket the record is the object `.shardguard/lease`, and compare-and-swap replaces the
// lock: it is created with If-None-Match: * (two starters: exactly one wins), renewed and taken
// over with If-Match on the ETag the holder last saw (a renewal after someone else's take-over
// fails with kFenced), so no instant exists where two holders both believe they won. There is
// no flock: a holder is stale when the server's clock says its record was last written
// `stale_after` ago (Date minus Last-Modified), whatever the hosts' clocks say.
//
// Time is an argument (now); the filesystem is injected. Thread-safety: a DirectoryLease is
// used by one thread at a time; free functions are safe from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

struct LeaseOwner {
  std::string job_id;
  std::string host;
  int64_t pid = 0;
  uint64_t epoch = 0;  // the holder's attempt / epoch number
};

// This process as an owner: host from gethostname(), pid from getpid().
LeaseOwner this_process_owner(std::string job_id, uint64_t epoch);

struct LeaseRecord {
  LeaseOwner owner;
  int64_t acquired_unix_ms = 0;
  int64_t renewed_unix_ms = 0;
  std::string token;  // random per acquisition: tells two holders of one job apart
  bool holds_flock = false;
};

struct LeaseOptions {
  // A record not renewed for this long is stale. Holders renew every kLeaseRenewInterval.
  Duration stale_after = std::chrono::seconds(3);
  // True: a holder whose flock is live is never stale, however old its renewal (one node).
  // False: staleness alone decides (multi-node coordinators on shared storage).
  bool live_flock_never_stale = true;
};

inline constexpr Duration kLeaseRenewInterval = std::chrono::seconds(1);

class DirectoryLease {
 public:
  // Takes the lease of `checkpoint_dir` (creating it and .shardguard/) for `owner`. Refused
  // with kFenced, naming the holder (job, host, pid, epoch, age of its last renewal), while
  // another live holder has it; other errors are I/O failures naming the file.
  static Result<DirectoryLease> acquire(Filesystem& fs, const std::string& checkpoint_dir,
                                        LeaseOwner owner, WallTime now, LeaseOptions options = {});
  // The same for a Store: a directory as above, a bucket by conditional writes. `store` must
  // outlive the lease.
  static Result<DirectoryLease> acquire(storage::Store& store, LeaseOwner owner, WallTime now,
                                        LeaseOptions options = {});

  DirectoryLease(DirectoryLease&&) noexcept;
  DirectoryLease& operator=(DirectoryLease&&) noexcept;
  ~DirectoryLease();  // release(), errors ignored, unless released already

  // Rewrites the record with renewed time `now` (and retries the flock if another holder
  // had it at take-over). kFenced, naming the new holder, when the record is no longer ours:
  // the caller must stop using the directory.
  Status renew(WallTime now);
  // Records a new epoch (a relaunch) and renews.
  Status set_epoch(uint64_t epoch, WallTime now);
  // Removes the record (so the next job need not wait for it to go stale) and unlocks.
  // Idempotent.
  Status release();

  const LeaseRecord& record() const;
  const std::string& checkpoint_dir() const;
  // How often to renew: every second, or a third of stale_after when that is longer.
  Duration renew_interval() const;
  bool holds_flock() const;
  // The holder this lease replaced (stale, dead or released uncleanly), for the log.
  const std::optional<LeaseRecord>& took_over_from() const;
  // Why the lease rests on timestamps alone (no flock); empty when it holds the flock.
  const std::string& timestamp_only_reason() const;

 private:
  struct State;
  explicit DirectoryLease(std::unique_ptr<State> state);
  std::unique_ptr<State> s_;
};

// The current holder's record; nullopt when there is none. kCorrupt names the file.
Result<std::optional<LeaseRecord>> read_lease(Filesystem& fs, const std::string& checkpoint_dir);
Result<std::optional<LeaseRecord>> read_lease(storage::Store& store);

// "job 'a' (host h, pid 12, epoch 3), last renewed 400ms ago" for messages and status.
std::string describe_holder(const LeaseRecord& record, WallTime now);

}  // namespace shardguard::checkpoint
