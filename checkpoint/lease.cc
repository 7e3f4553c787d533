#include "checkpoint/lease.h"
#include "core/host_name.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cstdio>
#include <random>

#include "checkpoint/json_fields.h"
#include "checkpoint/paths.h"
#include "checkpoint/strict_json.h"
#include "storage/dir_store.h"
#include "core/units.h"

namespace shardguard::checkpoint {
namespace {

namespace json = boost::json;

constexpr std::string_view kLeaseFormat = "shardguard-lease";
constexpr int kLeaseVersion = 1;

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string random_token() {
  std::random_device rd;
  std::uniform_int_distribution<uint64_t> dist;
  char buf[40];
  std::snprintf(buf, sizeof buf, "%016llx%016llx", static_cast<unsigned long long>(dist(rd)),
                static_cast<unsigned long long>(dist(rd)));
  return buf;
}

std::string record_json(const LeaseRecord& r) {
  json::object o;
  o["format"] = kLeaseFormat;
  o["version"] = kLeaseVersion;
  o["job_id"] = r.owner.job_id;
  o["host"] = r.owner.host;
  o["pid"] = r.owner.pid;
  o["epoch"] = r.owner.epoch;
  o["acquired_unix_ms"] = r.acquired_unix_ms;
  o["renewed_unix_ms"] = r.renewed_unix_ms;
  o["token"] = r.token;
  o["holds_flock"] = r.holds_flock;
  return json::serialize(o) + "\n";
}

Result<LeaseRecord> parse_record(std::string_view text) {
  SG_ASSIGN_OR_RETURN(json::value root, parse_json_strict(text));
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
  SG_ASSIGN_OR_RETURN(std::string format, f.string("format"));
  SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
  if (format != kLeaseFormat || version != kLeaseVersion)
    return Error(ErrorCode::kCorrupt,
                 "format '" + format + "' version " + std::to_string(version) + " is not ours");
  LeaseRecord r;
  SG_ASSIGN_OR_RETURN(r.owner.job_id, f.string("job_id"));
  SG_ASSIGN_OR_RETURN(r.owner.host, f.string("host"));
  SG_ASSIGN_OR_RETURN(r.owner.pid, f.i64("pid"));
  SG_ASSIGN_OR_RETURN(r.owner.epoch, f.u64("epoch"));
  SG_ASSIGN_OR_RETURN(r.acquired_unix_ms, f.i64("acquired_unix_ms"));
  SG_ASSIGN_OR_RETURN(r.renewed_unix_ms, f.i64("renewed_unix_ms"));
  SG_ASSIGN_OR_RETURN(r.token, f.string("token"));
  SG_ASSIGN_OR_RETURN(auto flock, f.any("holds_flock"));
  if (!flock->is_bool()) return Error(ErrorCode::kCorrupt, "holds_flock: expected a boolean");
  r.holds_flock = flock->get_bool();
  SG_RETURN_IF_ERROR(f.finish());
  return r;
}

Duration age(const LeaseRecord& r, WallTime now) {
  return std::max<Duration>(Duration::zero(), now - from_unix_ms(r.renewed_unix_ms));
}

bool stale(const LeaseRecord& r, WallTime now, const LeaseOptions& o) {
  return age(r, now) >= o.stale_after;
}

Error refuse(const std::string& dir, const LeaseRecord& holder, WallTime now,
             const std::string& why) {
  const bool bucket = storage::is_bucket_url(dir);
  return Error(ErrorCode::kFenced,
               std::string(bucket ? "checkpoint location " : "checkpoint directory ") + q(dir) +
                   " is in use by " + describe_holder(holder, now) + "; " + why + ". One job per " +
                   (bucket ? "checkpoint location" : "checkpoint directory") +
                   ": stop that run, or use another " + (bucket ? "prefix" : "directory"));
}

}  // namespace

LeaseOwner this_process_owner(std::string job_id, uint64_t epoch) {
  return {std::move(job_id), host_name(), ::getpid(), epoch};
}

std::string describe_holder(const LeaseRecord& r, WallTime now) {
  return "job '" + r.owner.job_id + "' (host " + r.owner.host + ", pid " +
         std::to_string(r.owner.pid) + ", epoch " + std::to_string(r.owner.epoch) +
         "), last renewed " + format_duration(age(r, now)) + " ago";
}

Result<std::optional<LeaseRecord>> read_lease(Filesystem& fs, const std::string& checkpoint_dir) {
  const std::string path = meta_path(checkpoint_dir, kLeaseRecordName);
  auto text = fs.read_file(path);
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<LeaseRecord>();
    return std::move(text).error();
  }
  auto r = parse_record(*text);
  if (!r.ok()) return std::move(r).error().context(path);
  return std::optional<LeaseRecord>(std::move(r).value());
}

struct DirectoryLease::State {
  Filesystem* fs = nullptr;      // a directory's lease
  storage::Store* store = nullptr;  // a bucket's lease
  std::string etag;                 // bucket: the record as we last wrote it
  std::string dir;
  LeaseOptions options;
  LeaseRecord record;
  std::unique_ptr<FileLock> lock;
  bool lock_was_held = false;  // another holder had the flock when we took over
  std::optional<LeaseRecord> previous;
  std::string timestamp_only;
  bool released = false;

  std::string record_path() const { return meta_path(dir, kLeaseRecordName); }

  Status write() {
    if (store != nullptr) {
      auto etag_now = store->put(meta_key(kLeaseRecordName), record_json(record),
                                 storage::PutCondition::if_match(etag));
      if (!etag_now.ok()) {
        if (etag_now.error().code() != ErrorCode::kFenced) return std::move(etag_now).error();
        auto current = read_lease(*store);
        const std::string held = current.ok() && *current
                                     ? "now held by " + describe_holder(**current, record_now())
                                     : std::string("its record changed");
        return Error(ErrorCode::kFenced, "lease of checkpoint location " + q(dir) + " lost: " +
                                             held + "; stop using the location");
      }
      etag = std::move(*etag_now);
      return {};
    }
    return atomic_write_file(*fs, record_path(), record_json(record));
  }

  WallTime record_now() const { return from_unix_ms(record.renewed_unix_ms); }

  // kFenced unless the record on storage is still ours.
  Status check_ours(WallTime now) {
    SG_ASSIGN_OR_RETURN(auto current, read_lease(*fs, dir));
    if (current && current->token == record.token) return {};
    std::string now_held = current ? "now held by " + describe_holder(*current, now)
                                   : std::string("its record is gone");
    return Error(ErrorCode::kFenced, "lease of checkpoint directory " + q(dir) +
                                         " lost: " + now_held + "; stop using the directory");
  }
};

DirectoryLease::DirectoryLease(std::unique_ptr<State> state) : s_(std::move(state)) {}
DirectoryLease::DirectoryLease(DirectoryLease&&) noexcept = default;
DirectoryLease& DirectoryLease::operator=(DirectoryLease&& other) noexcept {
  if (this != &other) {
    if (s_) (void)release();
    s_ = std::move(other.s_);
  }
  return *this;
}
DirectoryLease::~DirectoryLease() {
  if (s_) (void)release();
}

Result<DirectoryLease> DirectoryLease::acquire(Filesystem& fs, const std::string& checkpoint_dir,
                                               LeaseOwner owner, WallTime now,
                                               LeaseOptions options) {
  if (owner.job_id.empty())
    return Error(ErrorCode::kInvalid, "lease of " + q(checkpoint_dir) + ": empty job id");
  auto s = std::make_unique<State>();
  s->fs = &fs;
  s->dir = checkpoint_dir;
  s->options = options;
  const std::string meta = meta_dir(checkpoint_dir);
  SG_RETURN_IF_ERROR(fs.create_dirs(meta));
  SG_ASSIGN_OR_RETURN(LockAttempt lock,
                      fs.try_lock_file(meta_path(checkpoint_dir, kLeaseLockName)));
  auto existing = read_lease(fs, checkpoint_dir);
  if (!existing.ok() && existing.error().code() != ErrorCode::kCorrupt)
    return std::move(existing).error();
  // An unreadable record has no holder to name; the flock (if any) still decides.
  std::optional<LeaseRecord> holder = existing.ok() ? *existing : std::nullopt;
  const std::string unreadable = existing.ok() ? "" : existing.error().message();

  switch (lock.status) {
    case LockStatus::kHeld:
      if (!holder)
        return Error(ErrorCode::kFenced,
                     "checkpoint directory " + q(checkpoint_dir) +
                         " is locked by another live process (flock on " +
                         q(meta_path(checkpoint_dir, kLeaseLockName)) + ") whose lease record " +
                         (unreadable.empty() ? "is missing" : "is unreadable: " + unreadable));
      if (options.live_flock_never_stale)
        return refuse(checkpoint_dir, *holder, now,
                      "it holds the directory's flock, so it is alive and is never taken over");
      if (!stale(*holder, now, options))
        return refuse(checkpoint_dir, *holder, now,
                      "its lease is taken over only after " + format_duration(options.stale_after) +
                          " without renewal");
      s->lock_was_held = true;
      s->timestamp_only = "the flock is still held by a holder whose renewals stopped";
      break;
    case LockStatus::kAcquired:
      s->lock = std::move(lock.lock);
      // Our flock proves a flock holder on this host gone; one elsewhere may hold a lock
      // that never reached us (host-local flock on shared storage), and a holder without
      // a flock is only ever judged by its timestamp.
      if (holder && !stale(*holder, now, options) &&
          (!holder->holds_flock || holder->owner.host != this_process_owner("", 0).host))
        return refuse(checkpoint_dir, *holder, now,
                      "its lease is taken over only after " + format_duration(options.stale_after) +
                          " without renewal");
      break;
    case LockStatus::kUnsupported: {
      s->timestamp_only = "flock is not available on " + q(meta) + " (" +
                          Error::from_errno("flock", lock.sys_errno).message() +
                          "); the lease relies on renewed timestamps alone";
      spdlog::warn("lease: {}", s->timestamp_only);
      if (holder && !stale(*holder, now, options))
        return refuse(checkpoint_dir, *holder, now,
                      "its lease is taken over only after " + format_duration(options.stale_after) +
                          " without renewal");
      break;
    }
  }

  s->previous = holder;
  s->record = LeaseRecord{std::move(owner), to_unix_ms(now), to_unix_ms(now), random_token(),
                          s->lock != nullptr};
  SG_RETURN_IF_ERROR(s->write());
  // Without a lock another process may have written in the same instant: read it back.
  if (!s->lock) SG_RETURN_IF_ERROR(s->check_ours(now));
  return DirectoryLease(std::move(s));
}

Status DirectoryLease::renew(WallTime now) {
  if (s_->released) return Error(ErrorCode::kInvalid, "lease of " + q(s_->dir) + " was released");
  if (s_->store != nullptr) {  // the If-Match of the write is the check
    s_->record.renewed_unix_ms = to_unix_ms(now);
    return s_->write();
  }
  SG_RETURN_IF_ERROR(s_->check_ours(now));
  if (!s_->lock && s_->lock_was_held) {
    auto lock = s_->fs->try_lock_file(meta_path(s_->dir, kLeaseLockName));
    if (lock.ok() && lock->status == LockStatus::kAcquired) {
      s_->lock = std::move(lock->lock);
      s_->lock_was_held = false;
      s_->timestamp_only.clear();
      s_->record.holds_flock = true;
    }
  }
  s_->record.renewed_unix_ms = to_unix_ms(now);
  return s_->write();
}

Status DirectoryLease::set_epoch(uint64_t epoch, WallTime now) {
  s_->record.owner.epoch = epoch;
  return renew(now);
}

Status DirectoryLease::release() {
  if (!s_ || s_->released) return {};
  s_->released = true;
  if (s_->store != nullptr) {
    auto current = read_lease(*s_->store);
    if (current.ok() && *current && (*current)->token == s_->record.token)
      return s_->store->remove(meta_key(kLeaseRecordName));
    return {};
  }
  Status st;
  auto current = read_lease(*s_->fs, s_->dir);
  if (current.ok() && *current && (*current)->token == s_->record.token) {
    st = s_->fs->remove(s_->record_path());
    if (st.ok()) st = s_->fs->sync_dir(meta_dir(s_->dir));
  }
  s_->lock.reset();  // unlock after the record is gone, so no one sees a lock without it
  return st;
}

Result<std::optional<LeaseRecord>> read_lease(storage::Store& store) {
  if (auto* dir = store.as_directory()) return read_lease(dir->fs(), dir->dir());
  auto text = store.read(meta_key(kLeaseRecordName));
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<LeaseRecord>();
    return std::move(text).error();
  }
  auto r = parse_record(*text);
  if (!r.ok()) return std::move(r).error().context(store.describe(meta_key(kLeaseRecordName)));
  return std::optional<LeaseRecord>(std::move(r).value());
}

Result<DirectoryLease> DirectoryLease::acquire(storage::Store& store, LeaseOwner owner,
                                               WallTime now, LeaseOptions options) {
  if (auto* dir = store.as_directory())
    return acquire(dir->fs(), dir->dir(), std::move(owner), now, options);
  const std::string where = store.location().str();
  if (owner.job_id.empty())
    return Error(ErrorCode::kInvalid, "lease of " + q(where) + ": empty job id");
  auto s = std::make_unique<State>();
  s->store = &store;
  s->dir = where;
  s->options = options;
  s->timestamp_only = "a bucket has no locks: the lease is its record's conditional writes";
  const std::string key = meta_key(kLeaseRecordName);
  s->record = LeaseRecord{owner, to_unix_ms(now), to_unix_ms(now), random_token(), false};
  auto existing = store.read_versioned(key);
  if (!existing.ok() && existing.error().code() != ErrorCode::kNotFound)
    return std::move(existing).error().context("lease of " + q(where));
  storage::PutCondition condition = storage::PutCondition::if_absent();
  if (existing.ok()) {
    auto holder = parse_record(existing->data);
    // The server's clock judges the age; without it (never so for S3), the record's own.
    const Duration record_age =
        existing->age ? *existing->age
                      : (holder.ok() ? age(*holder, now) : Duration::zero());
    if (record_age < options.stale_after) {
      if (!holder.ok())
        return Error(ErrorCode::kFenced,
                     "checkpoint location " + q(where) + " has a lease record written " +
                         format_duration(record_age) + " ago that does not parse (" +
                         holder.error().message() + "); it is taken over only after " +
                         format_duration(options.stale_after) + " without renewal");
      return refuse(where, *holder, now,
                    "its lease is taken over only after " + format_duration(options.stale_after) +
                        " without renewal");
    }
    if (holder.ok()) s->previous = *holder;
    condition = storage::PutCondition::if_match(existing->etag);
  }
  auto etag = store.put(key, record_json(s->record), condition);
  if (!etag.ok()) {
    const ErrorCode code = etag.error().code();
    if (code != ErrorCode::kExists && code != ErrorCode::kFenced)
      return std::move(etag).error().context("lease of " + q(where));
    // Another starter won the same instant: name it.
    auto winner = read_lease(store);
    if (winner.ok() && *winner)
      return refuse(where, **winner, now, "it took the lease at the same moment");
    return Error(ErrorCode::kFenced, "checkpoint location " + q(where) +
                                         ": another process took the lease at the same moment");
  }
  s->etag = std::move(*etag);
  return DirectoryLease(std::move(s));
}

Duration DirectoryLease::renew_interval() const {
  return std::max<Duration>(kLeaseRenewInterval, s_->options.stale_after / 3);
}

const LeaseRecord& DirectoryLease::record() const { return s_->record; }
const std::string& DirectoryLease::checkpoint_dir() const { return s_->dir; }
bool DirectoryLease::holds_flock() const { return s_->lock != nullptr; }
const std::optional<LeaseRecord>& DirectoryLease::took_over_from() const { return s_->previous; }
const std::string& DirectoryLease::timestamp_only_reason() const { return s_->timestamp_only; }

}  // namespace shardguard::checkpoint
