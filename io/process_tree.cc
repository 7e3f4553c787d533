// Tearing down a whole process group: SIGTERM, grace, SIGKILL, and wait until it is empty.
// One stepper drives both the blocking and the event-loop versions.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>

#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <thread>

#include "core/units.h"
#include "io/detail/asio.h"
#include "io/process.h"

namespace shardguard::io {

namespace {

using SteadyClock = std::chrono::steady_clock;

class KillTreeStepper {
 public:
  KillTreeStepper(pid_t pgid, const KillTreeOptions& options, ChildProcess* leader)
      : pgid_(pgid), options_(options), leader_(leader), start_(SteadyClock::now()) {}

  // Advances the teardown; a value means it is over (the group is empty, or an error).
  std::optional<Result<KillTreeReport>> step() {
    if (pgid_ <= 1) {
      return Result<KillTreeReport>(
          Error(ErrorCode::kInvalid, "kill process group " + std::to_string(pgid_) + ": refusing"));
    }
    const auto now = SteadyClock::now();
    if (!started_) {
      started_ = true;
      if (group_empty()) return report(now);
      if (auto s = send(options_.first_signal); !s.ok()) return Result<KillTreeReport>(s.error());
      (void)send(SIGCONT);  // a stopped process acts on SIGTERM only once continued
      phase_deadline_ = now + options_.grace;
      return std::nullopt;
    }
    if (group_empty()) return report(now);
    if (now < phase_deadline_) return std::nullopt;
    if (!sent_kill_) {
      sent_kill_ = true;
      if (auto s = send(SIGKILL); !s.ok()) return Result<KillTreeReport>(s.error());
      phase_deadline_ = now + options_.kill_timeout;
      return std::nullopt;
    }
    return Result<KillTreeReport>(Error(
        ErrorCode::kTimeout, "process group " + std::to_string(pgid_) + " still has processes " +
                                 format_duration(options_.kill_timeout) + " after SIGKILL"));
  }

 private:
  Status send(int sig) {
    if (::kill(-pgid_, sig) != 0 && errno != ESRCH) {
      return Error::from_errno(
          "signal " + std::to_string(sig) + " to process group " + std::to_string(pgid_), errno);
    }
    return ok_status();
  }

  // Reaps what this process may reap in the group, then asks the kernel whether anyone is
  // left. The leader is reaped through its ChildProcess first so its status is kept.
  bool group_empty() {
    bool leader_gone = true;
    if (leader_ != nullptr) {
      auto status = leader_->try_wait();
      leader_gone = !status.ok() || status.value().has_value();
    }
    if (leader_gone) {
      int raw = 0;
      while (::waitpid(-pgid_, &raw, WNOHANG) > 0) {
      }
    }
    return ::kill(-pgid_, 0) != 0 && errno == ESRCH;
  }

  std::optional<Result<KillTreeReport>> report(SteadyClock::time_point now) {
    KillTreeReport out;
    out.sent_sigkill = sent_kill_;
    out.took = now - start_;
    return Result<KillTreeReport>(out);
  }

  pid_t pgid_;
  KillTreeOptions options_;
  ChildProcess* leader_;
  SteadyClock::time_point start_;
  SteadyClock::time_point phase_deadline_{};
  bool started_ = false;
  bool sent_kill_ = false;
};

struct AsyncKill {
  AsyncKill(boost::asio::io_context& ctx, pid_t pgid, const KillTreeOptions& options,
            ChildProcess* leader, std::function<void(Result<KillTreeReport>)> done)
      : timer(ctx),
        stepper(pgid, options, leader),
        interval(options.poll_interval),
        done(std::move(done)) {}
  boost::asio::steady_timer timer;
  KillTreeStepper stepper;
  Duration interval;
  std::function<void(Result<KillTreeReport>)> done;
};

void async_step(const std::shared_ptr<AsyncKill>& op) {
  if (auto result = op->stepper.step()) return op->done(std::move(*result));
  op->timer.expires_after(op->interval);
  op->timer.async_wait([op](const boost::system::error_code& ec) {
    if (ec) return;  // the loop is going away
    async_step(op);
  });
}

}  // namespace

Result<KillTreeReport> kill_tree_and_wait(pid_t pgid, const KillTreeOptions& options,
                                          ChildProcess* leader) {
  KillTreeStepper stepper(pgid, options, leader);
  while (true) {
    if (auto result = stepper.step()) return std::move(*result);
    std::this_thread::sleep_for(options.poll_interval);  // real processes: real time
  }
}

void async_kill_tree(EventLoop& loop, pid_t pgid, const KillTreeOptions& options,
                     ChildProcess* leader, std::function<void(Result<KillTreeReport>)> done) {
  auto op = std::make_shared<AsyncKill>(detail::asio_context(loop), pgid, options, leader,
                                        std::move(done));
  boost::asio::post(op->timer.get_executor(), [op] { async_step(op); });
}

Status become_child_subreaper() {
  if (::prctl(PR_SET_CHILD_SUBREAPER, 1, 0, 0, 0) != 0) {
    return Error::from_errno("prctl(PR_SET_CHILD_SUBREAPER)", errno);
  }
  return ok_status();
}

}  // namespace shardguard::io
