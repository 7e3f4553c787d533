#include "supervisor/directory_keeper.h"

#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <mutex>
#include <set>
#include <string_view>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/dir_history.h"
#include "checkpoint/dir_identity.h"
#include "checkpoint/lease.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "checkpoint/retention.h"
#include "checkpoint/retention_tracker.h"
#include "core/units.h"
#include "supervisor/resume_plan.h"

namespace shardguard::supervisor {

struct DirectoryKeeper::Impl : std::enable_shared_from_this<Impl> {
  io::Deps d;
  JobConfig cfg;
  storage::Store& store;
  std::mutex lease_mu;  // lease operations run on the worker's threads
  std::optional<checkpoint::DirectoryLease> lease;
  std::unique_ptr<Timer> renew_timer;
  std::function<void(const std::string&)> on_lost;
  std::function<void(const std::string&)> on_never_fits;
  bool lost = false;
  std::set<uint64_t> space_answered;  // steps whose failure for lack of space was answered
  bool warned_never_fits = false;     // said once that the next save cannot fit
  checkpoint::DirHistory history;
  bool history_ok = false;
  std::unique_ptr<checkpoint::RetentionTracker> tracker;
  std::optional<uint64_t> protected_step;
  std::optional<uint64_t> newest_bytes;  // size of the newest committed checkpoint
  std::vector<uint64_t> rolled_back;     // steps quarantined by --resume-from, newest first

  Impl(const io::Deps& deps, const JobConfig& c, storage::Store& s) : d(deps), cfg(c), store(s) {}

  // Free bytes where checkpoints go: a directory's disk; a bucket has no such limit here.
  std::optional<Result<uint64_t>> free_space() const {
    if (store.as_directory() == nullptr) return std::nullopt;
    return d.fs.free_space(cfg.checkpoint_dir);
  }

  std::weak_ptr<Impl> weak() { return weak_from_this(); }

  // Quarantined steps older than [checkpoint] quarantine_keep are removed (each logged); a
  // failure is only a warning: the evidence stays, the run goes on.
  void expire_quarantined(WallTime now) {
    auto quarantined = checkpoint::list_quarantined(store);
    if (!quarantined.ok()) return spdlog::warn("quarantine: {}", quarantined.error().message());
    for (const auto& r : checkpoint::plan_quarantine_gc(*quarantined, now, cfg.quarantine_keep)) {
      if (auto st = checkpoint::apply_removal(store, r); !st.ok()) {
        spdlog::warn("quarantine: {}", st.error().message());
        continue;
      }
      spdlog::info("removed quarantined step {} ({}), older than quarantine_keep {}",
                   r.step, r.dir, format_duration(cfg.quarantine_keep));
    }
  }

  // What retention may free towards `needed` bytes now (plan_space_recovery's rules: never
  // the newest complete step, the newest keep_last, a step being written, or, unless
  // `after_attempt`, the step this attempt resumed from: it is kept until the attempt ends).
  checkpoint::SpaceRecoveryPlan room_plan(uint64_t needed, std::string_view purpose,
                                          bool after_attempt = false) {
    auto quarantined = checkpoint::list_quarantined(store);
    std::set<uint64_t> keep(tracker->in_flight().begin(), tracker->in_flight().end());
    if (protected_step && !after_attempt) keep.insert(*protected_step);
    return checkpoint::plan_space_recovery(
        tracker->steps(),
        quarantined.ok() ? *quarantined : std::vector<checkpoint::QuarantineEntry>{}, needed, keep,
        cfg.keep_last, purpose);
  }

  std::string never_fits_text(uint64_t free, uint64_t reclaimable) const {
    const std::string kept = cfg.keep_last == 0
                                 ? std::string("keep_last 0 keeps every complete checkpoint")
                                 : "the newest complete one and the newest keep_last = " +
                                       std::to_string(cfg.keep_last) + " stay";
    return "the disk of '" + cfg.checkpoint_dir +
           "' can never hold one more checkpoint: " + format_size(free) + " free and " +
           format_size(reclaimable) + " that retention may remove (" + kept +
           "), a checkpoint takes " + format_size(newest_bytes.value_or(0)) +
           " (free space there, lower [checkpoint] keep_last, or move the job to a larger volume)";
  }

  // The disk can never hold one more checkpoint: its free space plus everything retention
  // may remove (plan_space_recovery's rules, as before an emergency save) is less than the
  // newest checkpoint. A requeue on the same storage would fail the same way, so the run
  // stops with 78 instead of training on without checkpoints, or saving nothing at every
  // notice.
  std::optional<std::string> never_fits(uint64_t free) {
    if (!newest_bytes || *newest_bytes == 0 || !tracker || free >= *newest_bytes)
      return std::nullopt;
    auto plan = room_plan(*newest_bytes - free, "the next checkpoint");
    if (plan.enough) return std::nullopt;
    return never_fits_text(free, plan.bytes_reclaimable);
  }

  // Room for the next checkpoint (the newest one's size), made before it is needed: after
  // each commit once retention's own removals are done, at start, and after a save failed
  // for lack of space (`failed`: its step) once its left-overs are gone. Retention frees
  // what plan_space_recovery() allows; when that cannot be enough, a failed save stops the
  // run (on_never_fits: requeueing will not help), otherwise it is only said (the next
  // save decides: checkpoints may shrink, a neighbour may free space).
  void room_for_next(std::optional<uint64_t> failed) {
    const std::string& dir = cfg.checkpoint_dir;
    const std::string what = failed ? "the save of step " + std::to_string(*failed) +
                                          " found the disk under '" + dir + "' full"
                                    : "the disk under '" + dir + "' is nearly full";
    auto measured = free_space();
    if (!measured) return;  // a bucket
    auto& free = *measured;
    if (!free.ok()) {
      if (failed) spdlog::warn("{}: {}", what, free.error().message());
      return;
    }
    if (!newest_bytes || *newest_bytes == 0) {
      if (failed)
        spdlog::warn("{} ({} free now); no checkpoint committed there tells what the next needs",
                     what, format_size(*free));
      return;
    }
    if (*free >= *newest_bytes) {
      if (failed)
        spdlog::warn("{}; {} free now, enough for the next checkpoint (about {})", what,
                     format_size(*free), format_size(*newest_bytes));
      return;
    }
    if (!tracker) return;
    auto plan = room_plan(*newest_bytes - *free, "the next checkpoint");
    if (plan.enough) {
      spdlog::warn("{}: {} free, a checkpoint takes about {}; retention frees {} for the next one",
                   what, format_size(*free), format_size(*newest_bytes),
                   format_size(plan.bytes_freed));
      return apply(std::move(plan.removals));
    }
    apply(std::move(plan.removals));  // only steps that could never be resumed
    // Only the checkpoint this attempt resumed from stands in the way: the next attempt may
    // remove it, so this is not "never" (a resumed attempt with keep_last K needs room for
    // K + 2 checkpoints until it ends).
    auto later = room_plan(*newest_bytes - *free, "the next checkpoint", true);
    if (later.enough) {
      if (!failed && warned_never_fits) return;
      warned_never_fits = true;
      return spdlog::warn(
          "{}: {} free, a checkpoint takes about {}; retention can free room only when this "
          "attempt ends: it keeps step {}, which it resumed from, until then (with keep_last = "
          "{}, a resumed attempt needs room for {} checkpoints)",
          what, format_size(*free), format_size(*newest_bytes), protected_step.value_or(0),
          cfg.keep_last, cfg.keep_last + 2);
    }
    const std::string why = never_fits_text(*free, later.bytes_reclaimable);
    if (!failed) {
      if (!warned_never_fits) spdlog::warn("the next save will fail: {}", why);
      warned_never_fits = true;
      return;
    }
    spdlog::error("{}: {}", what, why);
    if (on_never_fits) on_never_fits(why);
  }

  // A few hundred bytes, written atomically; only between attempts or at the end.
  void store_history() {
    if (auto st = checkpoint::store_dir_history(store, history, d.clock.wall_now());
        !st.ok())
      spdlog::warn("history: {}", st.error().message());
  }

  void arm_renewal() {
    Duration every = checkpoint::kLeaseRenewInterval;
    {
      std::lock_guard l(lease_mu);
      if (lease) every = lease->renew_interval();
    }
    renew_timer->arm(every, [this] {
      auto self = weak();
      run_off_loop<Status>(
          d.worker,
          [self, now = d.clock.wall_now()]() -> Status {
            auto p = self.lock();
            if (!p) return {};
            std::lock_guard l(p->lease_mu);
            return p->lease ? p->lease->renew(now) : Status{};
          },
          [self](Status st) {
            auto p = self.lock();
            if (!p || p->lost) return;
            if (st.ok()) return p->arm_renewal();
            if (st.error().code() == ErrorCode::kFenced) {
              p->lost = true;
              spdlog::error("checkpoint directory lease lost: {}", st.error().message());
              if (p->on_lost) p->on_lost(st.error().message());
              return;
            }
            // An I/O hiccup: the lease goes stale only after 3 s of them.
            spdlog::warn("checkpoint directory lease: {}", st.error().message());
            p->arm_renewal();
          });
    });
  }

  // Removals are applied on the worker; each outcome goes back to the tracker.
  void apply(std::vector<checkpoint::Removal> removals) {
    if (removals.empty()) return;
    auto self = weak();
    storage::Store& s = store;
    for (auto& r : removals) {
      spdlog::info("retention: {}", r.why);
      run_off_loop<Status>(
          d.worker, [&s, r] { return checkpoint::apply_removal(s, r); },
          [self, step = r.step, dir = r.dir](Status st) {
            auto p = self.lock();
            if (!p) return;
            if (!st.ok()) spdlog::warn("retention: {}: {}", dir, st.error().message());
            p->tracker->on_removed(step, st);
          });
    }
  }

  // As apply(), one after the other in one job; `then` runs on the loop once every outcome
  // is back with the tracker (so that free space measured then counts them).
  void apply_then(std::vector<checkpoint::Removal> removals, std::function<void(Impl&)> then) {
    for (const auto& r : removals) spdlog::info("retention: {}", r.why);
    auto self = weak();
    storage::Store& s = store;
    using Outcomes = std::vector<std::pair<uint64_t, Status>>;
    run_off_loop<Outcomes>(
        d.worker,
        [&s, removals = std::move(removals)] {
          Outcomes out;
          for (const auto& r : removals) out.emplace_back(r.step, checkpoint::apply_removal(s, r));
          return out;
        },
        [self, then = std::move(then)](Outcomes outcomes) {
          auto p = self.lock();
          if (!p) return;
          for (auto& [step, st] : outcomes) {
            if (!st.ok()) spdlog::warn("retention: step {}: {}", step, st.error().message());
            p->tracker->on_removed(step, st);
          }
          then(*p);
        });
  }
};

DirectoryKeeper::DirectoryKeeper(const io::Deps& deps, const JobConfig& config,
                                 storage::Store& store)
    : impl_(std::make_shared<Impl>(deps, config, store)) {
  impl_->renew_timer = deps.timers.make_timer();
}

DirectoryKeeper::~DirectoryKeeper() {
  impl_->renew_timer->cancel();
  std::lock_guard l(impl_->lease_mu);
  if (impl_->lease) (void)impl_->lease->release();
}

namespace {

std::string mode_and_owner(const struct stat& st) {
  char mode[8];
  std::snprintf(mode, sizeof mode, "%04o", static_cast<unsigned>(st.st_mode & 07777));
  return std::string("mode ") + mode + ", owner uid " + std::to_string(st.st_uid);
}

// A checkpoint directory in a shared root (a 1777 scratch, a group's directory) is another
// user's to plant in: a step the job would resume as its own, a .shardguard with the
// coordinator record and the lease. One that others can write must be the job's own, and
// its .shardguard the job's (or root's). A directory not made yet (or a test's fake
// filesystem) has nothing to check.
Status check_shared_root(const std::string& dir, const std::string& where) {
  struct stat st {};
  if (::stat(dir.c_str(), &st) != 0) return {};
  const uid_t me = ::geteuid();
  if ((st.st_mode & (S_IWGRP | S_IWOTH)) != 0 && st.st_uid != me)
    return Error(ErrorCode::kFenced,
                 where + " (" + mode_and_owner(st) + ") can be written by others and is not " +
                     "this job's (uid " + std::to_string(me) + "): another user could plant a " +
                     "checkpoint there that the job resumes as its own; use a directory of the " +
                     "job's own below it (mkdir -m 0750 '" + dir + "/<name>')");
  const std::string meta = join_path(dir, std::string(checkpoint::kMetaDirName));
  struct stat ms {};
  if (::lstat(meta.c_str(), &ms) == 0 && ms.st_uid != me && ms.st_uid != 0)
    return Error(ErrorCode::kFenced, where + ": '" + meta + "' (" + mode_and_owner(ms) +
                                         ") is not this job's (uid " + std::to_string(me) +
                                         "): whoever made it can rewrite the job's records; " +
                                         "remove it if it is not yours");
  return {};
}

}  // namespace

Result<std::string> DirectoryKeeper::open(const std::optional<std::string>& explicit_job_id,
                                          bool take_over, Epoch first_epoch) {
  Impl& m = *impl_;
  storage::Store& store = m.store;
  const std::string& dir = m.cfg.checkpoint_dir;
  const bool bucket = store.location().is_bucket();
  const std::string where = std::string(bucket ? "checkpoint location '" : "checkpoint directory '") +
                            dir + "'";
  if (!bucket) SG_RETURN_IF_ERROR(check_shared_root(dir, where));
  const WallTime now = m.d.clock.wall_now();
  auto decided = checkpoint::decide_job_id(store, explicit_job_id, take_over, now);
  if (!decided.ok()) {
    // Another job's directory: requeueing will not change that.
    if (decided.error().code() == ErrorCode::kInvalid)
      return Error(ErrorCode::kFenced, decided.error().message());
    return std::move(decided).error();
  }
  checkpoint::LeaseOptions lease_options;
  // A bucket has no flock: a holder is stale once the server saw no renewal for this long
  // (renewed every 5 s: a PUT each, not one a second).
  if (bucket) lease_options.stale_after = m.cfg.lease_timeout;
  auto lease = checkpoint::DirectoryLease::acquire(
      store, checkpoint::this_process_owner(decided->job_id, first_epoch), now, lease_options);
  if (!lease.ok()) {
    if (lease.error().code() == ErrorCode::kFenced)
      return Error(ErrorCode::kFenced, where + " is in use: " + lease.error().message());
    return std::move(lease).error();
  }
  if (auto& prev = lease->took_over_from())
    spdlog::warn("took over the {} from {}", where, checkpoint::describe_holder(*prev, now));
  if (!lease->timestamp_only_reason().empty() && !bucket)
    spdlog::warn("checkpoint directory lease rests on timestamps alone: {}",
                 lease->timestamp_only_reason());
  {
    std::lock_guard l(m.lease_mu);
    m.lease.emplace(std::move(*lease));
  }
  // The id the lease was taken under (a generated one must not be generated anew).
  auto resolved = checkpoint::resolve_job_id(store, decided->job_id, take_over, now);
  if (!resolved.ok()) {
    if (resolved.error().code() == ErrorCode::kInvalid)
      return Error(ErrorCode::kFenced, resolved.error().message());
    return std::move(resolved).error();
  }
  if (resolved->source == checkpoint::JobIdSource::kTakenOver)
    spdlog::warn("the {} now belongs to job '{}' (it was '{}')", where, resolved->job_id,
                 resolved->previous_job_id);
  else
    spdlog::info("job '{}' ({})", resolved->job_id, checkpoint::job_id_source_name(resolved->source));

  auto history = checkpoint::load_dir_history(store);
  if (!history.ok()) {
    spdlog::warn("{}; starting a new history", history.error().message());
    (void)checkpoint::reset_dir_history(store, now);
    m.history = {};
  } else {
    m.history = *history;
  }
  m.history_ok = true;
  if (auto futile = checkpoint::requeue_futile(m.history, m.cfg.futile_requeue_limit))
    return Error(ErrorCode::kFenced,
                 "requeueing will not help: " + *futile + " (remove " +
                     store.describe(checkpoint::meta_key(checkpoint::kDirHistoryName)) +
                     " after fixing the cause)");

  if (m.cfg.resume_from_step || m.cfg.resume_from_none) {
    SG_ASSIGN_OR_RETURN(m.rolled_back, roll_back(store, m.cfg.resume_from_step, m.cfg.fresh, now));
  }
  m.expire_quarantined(now);

  checkpoint::RetentionPolicy p{m.cfg.keep_last, m.cfg.keep_every, {}};
  m.tracker = std::make_unique<checkpoint::RetentionTracker>(dir, p);
  if (auto st = m.tracker->scan(store); !st.ok())
    spdlog::warn("retention scan: {}", st.error().message());
  for (const auto& s : m.tracker->steps()) {
    if (s.state != checkpoint::CheckpointState::kComplete) continue;
    m.newest_bytes = s.bytes;
    break;
  }
  if (auto free = m.free_space(); free && free->ok())
    if (auto full = m.never_fits(**free))
      return Error(ErrorCode::kFenced, "requeueing will not help: " + *full);
  m.room_for_next(std::nullopt);
  m.arm_renewal();
  return resolved->job_id;
}

void DirectoryKeeper::set_on_lost(std::function<void(const std::string&)> on_lost) {
  impl_->on_lost = std::move(on_lost);
}

void DirectoryKeeper::set_on_never_fits(std::function<void(const std::string&)> on_never_fits) {
  impl_->on_never_fits = std::move(on_never_fits);
}

void DirectoryKeeper::on_launch(Epoch epoch, std::optional<uint64_t> resume_step) {
  Impl& m = *impl_;
  if (!m.tracker) return;
  if (m.protected_step && m.protected_step != resume_step)
    m.apply(m.tracker->unprotect(*m.protected_step));
  if (resume_step) m.tracker->protect(*resume_step);
  m.protected_step = resume_step;
  auto self = m.weak();
  m.d.worker.submit(
      [self, epoch, now = m.d.clock.wall_now()] {
        auto p = self.lock();
        if (!p) return;
        std::lock_guard l(p->lease_mu);
        if (p->lease) (void)p->lease->set_epoch(epoch, now);
      },
      [] {});
}

void DirectoryKeeper::on_save_started(uint64_t step) {
  if (impl_->tracker) impl_->tracker->on_save_started(step);
}

void DirectoryKeeper::on_committed(uint64_t step, uint64_t bytes) {
  Impl& m = *impl_;
  m.newest_bytes = bytes;
  m.warned_never_fits = false;
  if (!m.tracker) return;
  m.apply_then(m.tracker->on_committed(step, bytes),
               [](Impl& p) { p.room_for_next(std::nullopt); });
}

void DirectoryKeeper::on_save_failed(uint64_t step, bool no_space) {
  Impl& m = *impl_;
  if (!m.tracker) return;
  auto removals = m.tracker->on_save_failed(step);
  if (!no_space || !m.space_answered.insert(step).second) return m.apply(std::move(removals));
  // The failed step's left-overs go first: the space they held is the next save's too.
  m.apply_then(std::move(removals), [step](Impl& p) { p.room_for_next(step); });
}

void DirectoryKeeper::on_attempt_ended(const EventFields& attempt_end_record) {
  checkpoint::AttemptEnd end;
  end.resume_step = field_value<uint64_t>(attempt_end_record, "resume_step");
  end.committed_step = field_value<uint64_t>(attempt_end_record, "committed_step");
  end.ended_by_notice = !field_value<bool>(attempt_end_record, "blames_checkpoint").value_or(true);
  on_attempt_ended(end);
}

void DirectoryKeeper::on_attempt_ended(const checkpoint::AttemptEnd& end) {
  Impl& m = *impl_;
  if (m.tracker) m.apply(m.tracker->on_attempt_ended());
  if (!m.history_ok) return;
  m.history = checkpoint::on_attempt_end(m.history, end);
  m.store_history();
}

void DirectoryKeeper::on_fallback_tried(uint64_t step) {
  Impl& m = *impl_;
  if (!m.history_ok) return;
  m.history = checkpoint::on_fallback_tried(m.history, step);
  m.store_history();
}

const checkpoint::DirHistory& DirectoryKeeper::history() const { return impl_->history; }

const std::vector<uint64_t>& DirectoryKeeper::rolled_back() const { return impl_->rolled_back; }

void DirectoryKeeper::quarantine(uint64_t step, const std::string& reason,
                                 std::function<void(Result<std::string>)> done) {
  Impl& m = *impl_;
  storage::Store& store = m.store;
  auto self = m.weak();
  run_off_loop<Result<std::string>>(
      m.d.worker,
      [&store, step, reason, now = m.d.clock.wall_now()]() -> Result<std::string> {
        SG_ASSIGN_OR_RETURN(auto entry, checkpoint::quarantine_step(store, step, reason, now,
                                                                    "shardguard run"));
        return entry.dir;
      },
      [self, done = std::move(done)](Result<std::string> r) {
        if (self.expired()) return;
        done(std::move(r));
      });
}

void DirectoryKeeper::quarantine_from(uint64_t from, const std::string& reason,
                                      std::function<void(std::vector<QuarantineOutcome>)> done) {
  Impl& m = *impl_;
  storage::Store& store = m.store;
  auto self = m.weak();
  run_off_loop<std::vector<QuarantineOutcome>>(
      m.d.worker,
      [&store, from, reason, now = m.d.clock.wall_now()] {
        std::vector<QuarantineOutcome> out;
        auto steps = checkpoint::list_checkpoints(store, checkpoint::Verify::kSize);
        if (!steps.ok()) {
          QuarantineOutcome failed;
          failed.step = from;
          failed.error = steps.error().message();
          out.push_back(std::move(failed));
          return out;
        }
        for (const auto& e : *steps) {
          if (e.step < from) continue;
          QuarantineOutcome o;
          o.step = e.step;
          auto q = checkpoint::quarantine_step(store, e.step, reason, now, "shardguard run");
          if (q.ok()) o.path = q->dir;
          else o.error = q.error().message();
          out.push_back(std::move(o));
        }
        return out;
      },
      [self, done = std::move(done)](std::vector<QuarantineOutcome> r) {
        if (self.expired()) return;
        done(std::move(r));
      });
}

void DirectoryKeeper::make_room(std::function<void()> done) {
  Impl& m = *impl_;
  if (!m.tracker || !m.newest_bytes) return done();
  auto measured = m.free_space();
  if (!measured || !measured->ok() || **measured >= *m.newest_bytes) return done();
  const uint64_t free = **measured;
  auto plan = m.room_plan(*m.newest_bytes - free, "an emergency save");
  spdlog::warn("the disk under '{}' has {} free, the checkpoint needs about {}: freeing {}{}",
               m.cfg.checkpoint_dir, format_size(free), format_size(*m.newest_bytes),
               format_size(plan.bytes_freed), plan.enough ? "" : " (not enough)");
  if (plan.removals.empty()) return done();
  m.apply_then(std::move(plan.removals), [done = std::move(done)](Impl&) { done(); });
}

void DirectoryKeeper::close(bool preempted, bool committed) {
  Impl& m = *impl_;
  m.renew_timer->cancel();
  if (m.history_ok) {
    m.history = checkpoint::on_run_end(m.history, preempted, committed);
    m.store_history();
  }
  std::lock_guard l(m.lease_mu);
  if (m.lease) (void)m.lease->release();
}

}  // namespace shardguard::supervisor
