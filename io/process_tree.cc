// Tearing down a whole process tree: first signal, grace, freeze and SIGKILL, and wait until
// nothing of it is left. Each step finds the tree again through /proc (io/process_tree.h),
// because processes fork and are re-parented while they are being killed. One stepper
// drives both the blocking and the event-loop versions.
#include "io/process_tree.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <thread>

#include "core/units.h"
#include "io/detail/asio.h"
#include "io/detail/fd.h"
#include "io/detail/launch_registry.h"
#include "io/process.h"

namespace shardguard::io {

namespace {

using SteadyClock = std::chrono::steady_clock;
using Identity = std::pair<pid_t, uint64_t>;  // pid and start time

constexpr Duration kMaxPollInterval = std::chrono::milliseconds(100);
constexpr int kFreezeRounds = 16;  // SIGSTOP passes before the SIGKILL, until none is new

class KillTreeStepper {
 public:
  KillTreeStepper(pid_t pgid, std::shared_ptr<ProcessTree> tree, const KillTreeOptions& options,
                  ChildProcess* leader)
      : pgid_(pgid),
        tree_(std::move(tree)),
        options_(options),
        leader_(leader),
        start_(SteadyClock::now()),
        interval_(options.poll_interval) {}

  // Advances the teardown; a value means it is over (nothing is left, or an error).
  std::optional<Result<KillTreeReport>> step() {
    if ((pgid_ <= 1 && !tree_) || pgid_ == ::getpgrp()) {  // never our own group
      return Result<KillTreeReport>(
          Error(ErrorCode::kInvalid, "kill process group " + std::to_string(pgid_) + ": refusing"));
    }
    const auto now = SteadyClock::now();
    auto table = ProcessTable::scan();
    std::vector<pid_t> members = gather(table);
    // With a tree, members hold the whole group while it can be believed (its leader lives);
    // after that a process left in the group without the tree's marker is not ours to wait
    // for (its id may be another launch's by now).
    if (members.empty() && (tree_ || group_gone())) return report(now);
    if (!started_) {
      started_ = true;
      signal_all(table, members, options_.first_signal);
      signal_all(table, members, SIGCONT);  // a stopped process acts on SIGTERM once continued
      phase_deadline_ = now + options_.grace;
      return std::nullopt;
    }
    if (!sent_kill_ && now < phase_deadline_) {
      // Newcomers (forked during the grace) get the first signal too.
      std::vector<pid_t> fresh;
      for (pid_t p : members)
        if (!signalled_.count({p, table.find(p)->start_time})) fresh.push_back(p);
      signal_all(table, fresh, options_.first_signal);
      signal_all(table, fresh, SIGCONT);
      grow_interval();
      return std::nullopt;
    }
    if (!sent_kill_) {
      sent_kill_ = true;
      phase_deadline_ = now + options_.kill_timeout;
      interval_ = options_.poll_interval;
    } else if (now >= phase_deadline_) {
      return Result<KillTreeReport>(
          Error(ErrorCode::kTimeout, what() + " still has " + std::to_string(members.size()) +
                                         " process(es) " + format_duration(options_.kill_timeout) +
                                         " after SIGKILL"));
    }
    freeze_and_kill(table, members);
    grow_interval();
    return std::nullopt;
  }

  Duration interval() const { return interval_; }

 private:
  std::string what() const {
    if (pgid_ > 1) return "process group " + std::to_string(pgid_);
    return "process tree of " + std::to_string(tree_->identity().leader);
  }

  // Polls fast at first (most trees are gone within milliseconds of the signal), then
  // slower, so a tree that ignores SIGTERM for its whole grace does not cost a core.
  void grow_interval() { interval_ = std::min<Duration>(interval_ * 3 / 2, kMaxPollInterval); }

  // Whether the group may still be addressed as a group: with a tree, only while its
  // leader lives (a dead group's id may be reused by a later launch's group).
  bool group_usable(const ProcessTable& table) const {
    if (pgid_ <= 1) return false;
    if (!tree_) return true;
    const auto& id = tree_->identity();
    return id.leader == pgid_ && table.find_same(id.leader, id.leader_start) != nullptr;
  }

  bool group_gone() const { return pgid_ <= 1 || (::kill(-pgid_, 0) != 0 && errno == ESRCH); }

  // The processes to kill now (dead ones not yet reaped included), after reaping those of
  // them that are ours to reap.
  std::vector<pid_t> gather(ProcessTable& table) {
    std::vector<pid_t> members = collect(table);
    bool reaped = false;
    if (leader_ != nullptr) {  // first, so its exit status is kept
      auto status = leader_->try_wait();
      reaped = status.ok() && status.value().has_value();
    }
    const pid_t self = ::getpid();
    for (pid_t p : members) {
      const ProcInfo* info = table.find(p);
      if (info->ppid == self && info->state == 'Z' && !detail::is_launched(p)) {
        reaped |= ::waitpid(p, nullptr, WNOHANG) == p;
      }
    }
    if (reaped) {
      table = ProcessTable::scan();
      members = collect(table);
    }
    return members;
  }

  std::vector<pid_t> collect(const ProcessTable& table) {
    std::vector<pid_t> roots;
    const bool group = group_usable(table);
    const std::string marker =
        tree_ ? std::string(kTreeMarkerVariable) + "=" + tree_->identity().marker : "";
    if (pgid_ > 1) {
      const pid_t self = ::getpid();
      for (const auto& [pid, info] : table.all()) {
        if (info.pgid != pgid_) continue;
        // A dead leader's group is only believed for processes that carry its marker, and
        // for the dead among our orphans (only reaped: harmless whoever they were).
        const bool dead_orphan =
            info.state == 'Z' && info.ppid == self && !detail::is_launched(pid);
        if (group || dead_orphan || (!marker.empty() && environ_has(pid, marker)))
          roots.push_back(pid);
      }
    }
    for (const auto& [pid, start] : seen_)
      if (table.find_same(pid, start)) roots.push_back(pid);
    if (tree_) {
      for (pid_t p : tree_->members(table)) roots.push_back(p);
    }
    std::vector<pid_t> out = table.closure(roots);
    const pid_t self = ::getpid();
    std::erase_if(out, [self](pid_t p) { return p == self || p <= 1; });
    seen_.clear();
    for (pid_t p : out) seen_.emplace(p, table.find(p)->start_time);
    return out;
  }

  void signal_all(const ProcessTable& table, const std::vector<pid_t>& pids, int sig) {
    if (group_usable(table)) (void)::kill(-pgid_, sig);
    // A namespace's init forwards what it gets to the program, which gets its own: only
    // the signals that stop or end the init itself go to it.
    const pid_t init = tree_ ? tree_->identity().init : 0;
    const bool to_init = sig == SIGKILL || sig == SIGSTOP;
    for (pid_t p : pids) {
      if (p == init && !to_init) continue;
      const ProcInfo* info = table.find(p);
      if (detail::signal_same_process(p, info->start_time, sig) &&
          signalled_.emplace(p, info->start_time).second) {
        if (info->pgid != pgid_) ++outside_group_;
      }
    }
  }

  // Stops every process of the tree (a stopped process cannot fork), looking again until
  // no new one turns up, then kills them all at once.
  void freeze_and_kill(ProcessTable& table, std::vector<pid_t> members) {
    std::set<Identity> stopped;
    for (int round = 0; round < kFreezeRounds; ++round) {
      bool fresh = false;
      for (pid_t p : members) {
        const ProcInfo* info = table.find(p);
        if (stopped.emplace(p, info->start_time).second) {
          fresh = true;
          (void)detail::signal_same_process(p, info->start_time, SIGSTOP);
        }
      }
      if (!fresh) break;
      table = ProcessTable::scan();
      members = collect(table);
    }
    if (tree_ && !tree_->identity().cgroup.empty()) kill_cgroup(tree_->identity().cgroup);
    signal_all(table, members, SIGKILL);
  }

  static void kill_cgroup(const std::string& dir) {
    detail::UniqueFd fd(::open((dir + "/cgroup.kill").c_str(), O_WRONLY | O_CLOEXEC));
    if (fd) (void)!::write(fd.get(), "1", 1);  // without cgroup.kill: members are signalled
  }

  std::optional<Result<KillTreeReport>> report(SteadyClock::time_point now) {
    KillTreeReport out;
    out.sent_sigkill = sent_kill_;
    out.took = now - start_;
    out.processes = signalled_.size();
    out.outside_group = outside_group_;
    return Result<KillTreeReport>(out);
  }

  pid_t pgid_;
  std::shared_ptr<ProcessTree> tree_;
  KillTreeOptions options_;
  ChildProcess* leader_;
  SteadyClock::time_point start_;
  SteadyClock::time_point phase_deadline_{};
  Duration interval_;
  bool started_ = false;
  bool sent_kill_ = false;
  std::set<Identity> seen_;  // every process found, so its orphans stay found
  std::set<Identity> signalled_;
  size_t outside_group_ = 0;
};

std::shared_ptr<ProcessTree> tree_of(pid_t pgid, ChildProcess* leader) {
  if (leader != nullptr) {
    if (auto tree = leader->tree()) return tree;
  }
  return detail::find_tree(pgid);
}

Result<KillTreeReport> run_blocking(KillTreeStepper stepper) {
  while (true) {
    if (auto result = stepper.step()) return std::move(*result);
    std::this_thread::sleep_for(stepper.interval());  // real processes: real time
  }
}

struct AsyncKill {
  AsyncKill(boost::asio::io_context& ctx, KillTreeStepper s,
            std::function<void(Result<KillTreeReport>)> done)
      : timer(ctx), stepper(std::move(s)), done(std::move(done)) {}
  boost::asio::steady_timer timer;
  KillTreeStepper stepper;
  std::function<void(Result<KillTreeReport>)> done;
};

void async_step(const std::shared_ptr<AsyncKill>& op) {
  if (auto result = op->stepper.step()) return op->done(std::move(*result));
  op->timer.expires_after(op->stepper.interval());
  op->timer.async_wait([op](const boost::system::error_code& ec) {
    if (ec) return;  // the loop is going away
    async_step(op);
  });
}

void run_async(EventLoop& loop, KillTreeStepper stepper,
               std::function<void(Result<KillTreeReport>)> done) {
  auto op =
      std::make_shared<AsyncKill>(detail::asio_context(loop), std::move(stepper), std::move(done));
  boost::asio::post(op->timer.get_executor(), [op] { async_step(op); });
}

}  // namespace

Result<KillTreeReport> kill_tree_and_wait(pid_t pgid, const KillTreeOptions& options,
                                          ChildProcess* leader) {
  return run_blocking(KillTreeStepper(pgid, tree_of(pgid, leader), options, leader));
}

void async_kill_tree(EventLoop& loop, pid_t pgid, const KillTreeOptions& options,
                     ChildProcess* leader, std::function<void(Result<KillTreeReport>)> done) {
  run_async(loop, KillTreeStepper(pgid, tree_of(pgid, leader), options, leader), std::move(done));
}

Result<KillTreeReport> kill_tree_and_wait(const std::shared_ptr<ProcessTree>& tree,
                                          const KillTreeOptions& options) {
  if (!tree) return Error(ErrorCode::kInvalid, "kill process tree: no tree");
  return run_blocking(KillTreeStepper(tree->identity().leader, tree, options, nullptr));
}

void async_kill_tree(EventLoop& loop, const std::shared_ptr<ProcessTree>& tree,
                     const KillTreeOptions& options,
                     std::function<void(Result<KillTreeReport>)> done) {
  if (!tree) return done(Error(ErrorCode::kInvalid, "kill process tree: no tree"));
  run_async(loop, KillTreeStepper(tree->identity().leader, tree, options, nullptr),
            std::move(done));
}

Status become_child_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return Error::from_errno("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  }
  return ok_status();
}

size_t reap_orphans() {
  const auto table = ProcessTable::scan();
  const pid_t own_group = ::getpgrp();
  size_t reaped = 0;
  for (pid_t child : table.children_of(::getpid())) {
    const ProcInfo* info = table.find(child);
    // Launched children have their ChildProcess; what this process forks by other means
    // (popen, std::system, a plain fork) stays in its group and is waited for by its owner.
    if (info->state == 'Z' && !detail::is_launched(child) && info->pgid != own_group &&
        ::waitpid(child, nullptr, WNOHANG) == child)
      ++reaped;
  }
  return reaped;
}

}  // namespace shardguard::io
