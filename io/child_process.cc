// The ChildProcess behind PosixProcessLauncher: reaping (guarded, so several waiters are
// safe), exit notification on the loop through a pidfd (or a polling timer on kernels
// without pidfd_open), and kill-and-reap on destruction so no zombie is left behind. A
// child in its own PID namespace is reaped through its init, which reports the program's
// own wait status, so ExitStatus reads the same with or without the namespace.
#include "io/detail/child_process.h"

#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <boost/asio/posix/stream_descriptor.hpp>
#include <boost/asio/post.hpp>
#include <boost/asio/steady_timer.hpp>
#include <cerrno>
#include <mutex>
#include <thread>

#include "io/detail/asio.h"
#include "io/detail/launch_registry.h"
#include "io/process.h"
#include "io/process_tree.h"

namespace shardguard::io {

namespace asio = boost::asio;

std::string ExitStatus::describe() const {
  if (!signaled) return "exited with code " + std::to_string(code);
  std::string out = "killed by signal " + std::to_string(signal);
  if (const char* abbrev = sigabbrev_np(signal)) out += std::string(" (SIG") + abbrev + ")";
  if (core_dumped) out += " (core dumped)";
  return out;
}

ExitStatus ExitStatus::from_wait_status(int status) {
  if (WIFSIGNALED(status)) {
    ExitStatus out = killed(WTERMSIG(status));
    out.core_dumped = WCOREDUMP(status);
    return out;
  }
  return exited(WEXITSTATUS(status));
}

namespace {

// Shared by the ChildProcess and its pending handlers, so a handler queued when the
// ChildProcess is destroyed finds `dropped` set and does nothing.
struct ChildState {
  explicit ChildState(asio::io_context& ctx) : ctx(ctx), poll_timer(ctx) {}
  ~ChildState() {
    for (int fd : {status_fd, program_pidfd})
      if (fd >= 0) ::close(fd);
  }
  asio::io_context& ctx;
  pid_t pid = -1;          // the program (what pid() says)
  pid_t reap_pid = -1;     // our child: the program itself, or its namespace's init
  int status_fd = -1;      // namespace: the init writes the program's wait status here
  int program_pidfd = -1;  // namespace: signals reach the program, never a reuser of its pid
  Isolation isolation = Isolation::kNone;
  std::shared_ptr<ProcessTree> tree;
  std::string program;
  std::mutex mu;
  std::optional<ExitStatus> status;                     // guarded by mu
  std::optional<asio::posix::stream_descriptor> pidfd;  // readable once reap_pid exits
  asio::steady_timer poll_timer;                        // fallback without pidfd
  ChildProcess::WaitCallback waiter;
  bool dropped = false;

  Result<std::optional<ExitStatus>> reap() {
    std::lock_guard lock(mu);
    return reap_locked(WNOHANG);
  }

  Result<std::optional<ExitStatus>> reap_locked(int options) {
    if (status) return status;
    int raw = 0;
    pid_t r;
    do {
      r = ::waitpid(reap_pid, &raw, options);
    } while (r < 0 && errno == EINTR);
    if (r < 0)
      return Error::from_errno("waitpid " + std::to_string(reap_pid) + " ('" + program + "')",
                               errno);
    if (r == 0) return std::optional<ExitStatus>();
    detail::unregister_launched(reap_pid);
    status = ExitStatus::from_wait_status(raw);
    if (status_fd >= 0) {
      // The init wrote the program's status before it exited; without it (the init was
      // killed) the init's own end stands for the program's.
      int program_raw = 0;
      if (::read(status_fd, &program_raw, sizeof program_raw) == sizeof program_raw)
        status = ExitStatus::from_wait_status(program_raw);
    }
    return status;
  }
};

void arm_wait(const std::shared_ptr<ChildState>& state);

void on_wait_ready(const std::shared_ptr<ChildState>& state) {
  if (state->dropped || !state->waiter) return;
  auto reaped = state->reap();
  if (reaped.ok() && !reaped.value()) return arm_wait(state);  // not yet: wait again
  auto done = std::move(state->waiter);
  state->waiter = nullptr;
  if (!reaped.ok()) return done(std::move(reaped).error());
  done(*reaped.value());
}

void arm_wait(const std::shared_ptr<ChildState>& state) {
  if (state->pidfd) {
    state->pidfd->async_wait(asio::posix::descriptor_base::wait_read,
                             [state](const boost::system::error_code& ec) {
                               if (ec == asio::error::operation_aborted) return;
                               on_wait_ready(state);
                             });
    return;
  }
  state->poll_timer.expires_after(std::chrono::milliseconds(10));
  state->poll_timer.async_wait([state](const boost::system::error_code& ec) {
    if (ec == asio::error::operation_aborted) return;
    on_wait_ready(state);
  });
}

class PosixChildProcess final : public ChildProcess {
 public:
  explicit PosixChildProcess(std::shared_ptr<ChildState> state) : state_(std::move(state)) {}

  ~PosixChildProcess() override {
    auto reaped = state_->reap();
    if (reaped.ok() && !reaped.value()) {
      ::kill(-state_->pid, SIGKILL);
      ::kill(state_->reap_pid, SIGKILL);  // an init takes its whole namespace with it
      std::lock_guard lock(state_->mu);
      (void)state_->reap_locked(0);
    }
    state_->dropped = true;
    state_->waiter = nullptr;
    boost::system::error_code ignored;
    if (state_->pidfd) state_->pidfd->close(ignored);
    state_->poll_timer.cancel();
  }

  pid_t pid() const override { return state_->pid; }
  pid_t pgid() const override { return state_->pid; }

  Status signal(int sig) override {
    std::lock_guard lock(state_->mu);  // a reaped pid may be reused: never signal it
    if (state_->status) return ok_status();
#ifdef SYS_pidfd_send_signal
    if (state_->program_pidfd >= 0) {
      if (::syscall(SYS_pidfd_send_signal, state_->program_pidfd, sig, nullptr, 0) != 0 &&
          errno != ESRCH)
        return error("signal", sig, errno);
      return ok_status();
    }
#endif
    if (::kill(state_->pid, sig) != 0 && errno != ESRCH) return error("signal", sig, errno);
    return ok_status();
  }

  Status signal_group(int sig) override {
    if (::kill(-state_->pid, sig) != 0 && errno != ESRCH) return error("signal group", sig, errno);
    return ok_status();
  }

  Result<std::optional<ExitStatus>> try_wait() override { return state_->reap(); }
  Isolation isolation() const override { return state_->isolation; }
  std::shared_ptr<ProcessTree> tree() const override { return state_->tree; }

  void async_wait(WaitCallback done) override {
    state_->waiter = std::move(done);
    asio::post(state_->ctx, [state = state_] { on_wait_ready(state); });
  }

  Result<ExitStatus> wait_blocking(Duration timeout) override {
    const auto deadline = std::chrono::steady_clock::now() + timeout;
    while (true) {
      SG_ASSIGN_OR_RETURN(auto status, state_->reap());
      if (status) return *status;
      const auto now = std::chrono::steady_clock::now();
      if (now >= deadline) {
        return Error(ErrorCode::kTimeout, "wait for '" + state_->program + "' (pid " +
                                              std::to_string(state_->pid) + "): still running");
      }
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - now);
      if (state_->pidfd) {
        pollfd p{state_->pidfd->native_handle(), POLLIN, 0};
        ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left.count() + 1, 1000)));
      } else {
        std::this_thread::sleep_for(std::min<Duration>(left, std::chrono::milliseconds(5)));
      }
    }
  }

 private:
  Error error(const char* what, int sig, int err) const {
    return Error::from_errno(std::string(what) + " " + std::to_string(sig) + " to '" +
                                 state_->program + "' (pid " + std::to_string(state_->pid) + ")",
                             err);
  }

  std::shared_ptr<ChildState> state_;
};

}  // namespace

namespace {

std::unique_ptr<ChildProcess> make_child(std::shared_ptr<ChildState> state) {
#ifdef SYS_pidfd_open
  const int pidfd = static_cast<int>(::syscall(SYS_pidfd_open, state->reap_pid, 0));
  if (pidfd >= 0) {
    ::fcntl(pidfd, F_SETFD, FD_CLOEXEC);
    state->pidfd.emplace(state->ctx, pidfd);
  }
#endif
  return std::make_unique<PosixChildProcess>(std::move(state));
}

}  // namespace

std::unique_ptr<ChildProcess> detail::make_posix_child(EventLoop& loop, pid_t pid,
                                                       std::string program,
                                                       std::shared_ptr<ProcessTree> tree) {
  auto state = std::make_shared<ChildState>(detail::asio_context(loop));
  state->pid = state->reap_pid = pid;
  state->program = std::move(program);
  state->tree = std::move(tree);
  return make_child(std::move(state));
}

std::unique_ptr<ChildProcess> detail::make_namespace_child(EventLoop& loop,
                                                           const NamespaceChild& child,
                                                           std::string program,
                                                           std::shared_ptr<ProcessTree> tree) {
  auto state = std::make_shared<ChildState>(detail::asio_context(loop));
  state->pid = child.pid;
  state->reap_pid = child.init;
  state->status_fd = child.status_fd;
  state->program_pidfd = child.pidfd;
  state->isolation = Isolation::kPidNamespace;
  state->program = std::move(program);
  state->tree = std::move(tree);
  return make_child(std::move(state));
}

}  // namespace shardguard::io
