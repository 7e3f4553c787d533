// Directory identity: a checkpoint directory remembers the job it belongs to
// (`<checkpoint_dir>/.shardguard/job.json`), so a run with another job id cannot silently
// resume from (or overwrite) a different job's checkpoints.
//
//   no explicit id        -> the stored id is adopted; a directory without a record but
//                            with checkpoints (written before this record existed) adopts
//                            the newest complete manifest's job id; an empty one gets a
//                            generated id ("job-20260102-030405-1a2b3c4d": UTC time and 32
//                            random bits; never derived from a run directory's name)
//   explicit, same        -> ok
//   explicit, different   -> refused naming both, unless take_over (`--resume-from-job`),
//                            which records the change (from, to, time) in the file
//   explicit, fresh dir   -> stored
//
// Order for a caller: decide_job_id() (reads only) to name the lease owner, acquire the
// lease (checkpoint/lease.h), then resolve_job_id() under it, which writes the record; a
// result that differs from the decision means another run got in between.
// Thread-safety: no shared state; the record is written by the lease holder only.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

enum class JobIdSource {
  kAdopted,         // no explicit id; the directory's stored one
  kFromCheckpoint,  // no explicit id, no record: the newest complete manifest's, now stored
  kMatched,         // explicit, equal to the stored one
  kStored,          // explicit, the directory had none: now stored
  kGenerated,       // neither: a new id, now stored
  kTakenOver,       // explicit and different, take_over: the directory now belongs to it
};
std::string_view job_id_source_name(JobIdSource source);  // "adopted", ...

struct ResolvedJobId {
  std::string job_id;
  JobIdSource source = JobIdSource::kAdopted;
  std::string previous_job_id;  // kTakenOver: the id the directory had
};

// kInvalid unless `id` is 1-128 bytes without control characters, spaces or '/'.
Status check_job_id(std::string_view id);

// A fresh job id from the time and a random source (see the header comment).
std::string generate_job_id(WallTime now);

// The stored id; nullopt for a directory that has none. kCorrupt names the file.
Result<std::optional<std::string>> stored_job_id(Filesystem& fs, const std::string& checkpoint_dir);

// The decision of the table above, without writing anything. The refusal is kInvalid and
// names both ids and the way out.
Result<ResolvedJobId> decide_job_id(Filesystem& fs, const std::string& checkpoint_dir,
                                    const std::optional<std::string>& explicit_id, bool take_over,
                                    WallTime now);

// decide_job_id(), then stores the record when it changes (atomically: temp, fsync, rename).
Result<ResolvedJobId> resolve_job_id(Filesystem& fs, const std::string& checkpoint_dir,
                                     const std::optional<std::string>& explicit_id, bool take_over,
                                     WallTime now);

// The same over a Store (a directory or a bucket).
Result<std::optional<std::string>> stored_job_id(storage::Store& store);
Result<ResolvedJobId> decide_job_id(storage::Store& store,
                                    const std::optional<std::string>& explicit_id, bool take_over,
                                    WallTime now);
Result<ResolvedJobId> resolve_job_id(storage::Store& store,
                                     const std::optional<std::string>& explicit_id, bool take_over,
                                     WallTime now);

}  // namespace shardguard::checkpoint
