// Starting a child as pid 2 of its own PID namespace (Isolation::kPidNamespace).
//
//   launcher --clone(NEWPID|NEWNS[|NEWUSER])--> init (pid 1) --fork--> program (pid 2) --exec
//
// The init is a copy of the launcher that never execs: from the clone on it makes only
// async-signal-safe system calls (the launcher has other threads, whose locks it inherits
// held). It maps the user namespace, slaves the mount tree and mounts a fresh /proc, joins
// the cgroup, forks the program, then waits: it forwards every signal it gets to the
// program, reaps every process re-parented to it, and once the program has exited writes
// its wait status to the launcher and exits, which makes the kernel kill whatever is left
// in the namespace. PDEATHSIG on the init makes the same happen when the launcher dies.
//
// The program reports its pid over a SEQPACKET socket with SCM_CREDENTIALS (the kernel
// translates it to the launcher's namespace), waits for the launcher to open a pidfd on
// it, and execs; an error before exec comes over the same socket.
#include <fcntl.h>
#include <poll.h>
#include <sched.h>
#include <signal.h>
#include <sys/mount.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "io/detail/exec_plan.h"
#include "io/detail/fd.h"
#include "io/detail/launch_registry.h"
#include "io/process_tree.h"

namespace shardguard::io::detail {

namespace {

// What the child side sends on the launch channel.
struct ChannelMessage {
  int kind;  // kPid: the program's pid rides along as SCM_CREDENTIALS; kFailed: `failure`
  ChildFailure failure;
};
constexpr int kPid = 1;
constexpr int kFailed = 2;

// Everything the init needs, prepared before clone (nothing is allocated after it).
struct InitPlan {
  const ExecPlan* exec;
  int channel;       // the child's end of the launch channel
  int launcher_end;  // the launcher's end: closed in the init at once
  int status_write;  // the program's wait status goes here
  bool user_namespace;
  char uid_map[64];
  char gid_map[64];
};

void send_failure(int channel, int stage, int err) {
  ChannelMessage m{kFailed, {stage, err}};
  ssize_t ignored = ::send(channel, &m, sizeof m, MSG_NOSIGNAL);
  (void)ignored;
}

bool write_file(const char* path, const char* text) {
  const int fd = ::open(path, O_WRONLY | O_CLOEXEC);
  if (fd < 0) return false;
  const size_t len = std::strlen(text);
  const bool ok = ::write(fd, text, len) == static_cast<ssize_t>(len);
  ::close(fd);
  return ok;
}

// fork() as a system call: glibc's fork runs atfork handlers, which take locks that the
// threads of the launcher may have held when it cloned the init.
pid_t raw_fork() { return static_cast<pid_t>(::syscall(SYS_clone, SIGCHLD, 0, 0, 0, 0)); }

// Closes every descriptor but those in `keep` (unsorted, -1 ignored).
void close_all_but(int* keep, int n) {
  std::sort(keep, keep + n);
  unsigned next = 0;
  for (int i = 0; i < n; ++i) {
    if (keep[i] < 0 || static_cast<unsigned>(keep[i]) < next) continue;
    if (static_cast<unsigned>(keep[i]) > next) ::close_range(next, keep[i] - 1, 0);
    next = keep[i] + 1;
  }
  ::close_range(next, ~0U, 0);
}

[[noreturn]] void run_program(const InitPlan& p) {
  if (const int stage = prepare_child(*p.exec); stage >= 0) {
    send_failure(p.channel, stage, errno);
    ::_exit(127);
  }
  // Our pid, as the launcher will see it: the kernel rewrites it for the receiver.
  ChannelMessage m{kPid, {}};
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  cmsghdr* c = CMSG_FIRSTHDR(&msg);
  c->cmsg_level = SOL_SOCKET;
  c->cmsg_type = SCM_CREDENTIALS;
  c->cmsg_len = CMSG_LEN(sizeof(ucred));
  const ucred self{::getpid(), ::getuid(), ::getgid()};
  std::memcpy(CMSG_DATA(c), &self, sizeof self);
  if (::sendmsg(p.channel, &msg, MSG_NOSIGNAL) != static_cast<ssize_t>(sizeof m)) ::_exit(127);
  // Exec only once the launcher holds a pidfd on us: our exit can then never be mistaken
  // for another process's that reuses the pid.
  char go = 0;
  if (::recv(p.channel, &go, 1, 0) != 1) ::_exit(127);
  ::execve(p.exec->path, p.exec->argv, p.exec->envp);
  send_failure(p.channel, kStageExec, errno);
  ::_exit(127);
}

[[noreturn]] void run_init(const InitPlan& p) {
  ::close(p.launcher_end);
  ::setpgid(0, 0);  // out of the launcher's group: a terminal's ^C is the launcher's business
  if (p.exec->die_with_parent) {
    ::prctl(PR_SET_PDEATHSIG, SIGKILL);
    // getppid() is 0 across the namespace boundary; the launcher still holds its end of
    // the channel unless it has died.
    pollfd alive{p.channel, 0, 0};
    if (::poll(&alive, 1, 0) == 1 && (alive.revents & POLLHUP) != 0) ::_exit(127);
  }
  auto fail = [&p](int stage) {
    send_failure(p.channel, stage, errno);
    ::_exit(127);
  };
  if (p.user_namespace) {
    if (!write_file("/proc/self/uid_map", p.uid_map)) fail(kStageUserNamespace);
    if (!write_file("/proc/self/setgroups", "deny")) fail(kStageUserNamespace);
    if (!write_file("/proc/self/gid_map", p.gid_map)) fail(kStageUserNamespace);
  }
  // A fresh /proc, so /proc/<getpid()> is the program itself. Only once the tree is a
  // slave: a mount on a shared tree would propagate back and cover the host's /proc.
  // Best effort: without it the program still runs, seeing the host's /proc.
  if (::mount(nullptr, "/", nullptr, MS_REC | MS_SLAVE, nullptr) == 0) {
    ::mount("proc", "/proc", "proc", MS_NOSUID | MS_NODEV | MS_NOEXEC, nullptr);
  }
  if (p.exec->cgroup_procs_fd >= 0 && ::write(p.exec->cgroup_procs_fd, "0", 1) != 1) {
    fail(kStageCgroup);
  }
  // The launcher's descriptors (sockets, logs) must not live on in the init for as long as
  // the program runs. Stdio stays for a program that inherits it.
  int keep[] = {0, 1, 2, p.channel, p.status_write, p.exec->in_fd, p.exec->out_fd, p.exec->err_fd};
  close_all_but(keep, 8);

  struct sigaction dfl {};
  dfl.sa_handler = SIG_DFL;
  for (int sig = 1; sig < NSIG; ++sig) ::sigaction(sig, &dfl, nullptr);  // SIGCHLD not ignored
  sigset_t all;
  sigfillset(&all);
  ::sigprocmask(SIG_SETMASK, &all, nullptr);  // before the fork: no SIGCHLD is missed

  const pid_t program = raw_fork();
  if (program < 0) fail(kStageFork);
  if (program == 0) run_program(p);
  ::close(p.channel);  // the program holds it until exec: the launcher sees EOF then
  for (int fd : {p.exec->in_fd, p.exec->out_fd, p.exec->err_fd})
    if (fd > 2) ::close(fd);

  while (true) {
    siginfo_t info{};
    const int sig = ::sigwaitinfo(&all, &info);
    if (sig < 0) continue;
    if (sig != SIGCHLD) {
      ::kill(program, sig);  // the launcher's signals are for the program
      continue;
    }
    int status = 0;
    pid_t reaped;
    while ((reaped = ::waitpid(-1, &status, WNOHANG)) > 0) {
      if (reaped != program) continue;  // an orphan of the program's tree
      ssize_t ignored = ::write(p.status_write, &status, sizeof status);
      (void)ignored;
      ::_exit(0);  // the kernel now kills what is left in the namespace
    }
  }
}

bool namespace_refused(int err) {
  // EPERM: not root and no unprivileged user namespaces; EINVAL: no CONFIG_PID_NS or
  // CLONE_NEWUSER in a chroot; ENOSPC/EUSERS: namespace limits; ENOSYS: no clone.
  return err == EPERM || err == EINVAL || err == ENOSPC || err == EUSERS || err == ENOSYS ||
         err == EACCES;
}

// Receives one message and the sender's credentials; 0 at EOF, -1 on error.
ssize_t receive(int fd, ChannelMessage& m, ucred* cred) {
  iovec iov{&m, sizeof m};
  alignas(cmsghdr) char control[CMSG_SPACE(sizeof(ucred))] = {};
  msghdr msg{};
  msg.msg_iov = &iov;
  msg.msg_iovlen = 1;
  msg.msg_control = control;
  msg.msg_controllen = sizeof control;
  ssize_t n;
  do {
    n = ::recvmsg(fd, &msg, MSG_CMSG_CLOEXEC);
  } while (n < 0 && errno == EINTR);
  if (n > 0 && cred != nullptr) {
    for (cmsghdr* c = CMSG_FIRSTHDR(&msg); c != nullptr; c = CMSG_NXTHDR(&msg, c)) {
      if (c->cmsg_level == SOL_SOCKET && c->cmsg_type == SCM_CREDENTIALS)
        std::memcpy(cred, CMSG_DATA(c), sizeof *cred);
    }
  }
  return n;
}

// The init failed or the program did: reap the init and say why.
Error abandon(pid_t init, const std::string& program, const std::string& cwd,
              const ChannelMessage* failure) {
  int raw = 0;
  while (::waitpid(init, &raw, 0) < 0 && errno == EINTR) {
  }
  unregister_launched(init);
  if (failure != nullptr) return launch_failure(program, cwd, failure->failure);
  return Error(ErrorCode::kIo, "launch '" + program + "': namespace init " +
                                   ExitStatus::from_wait_status(raw).describe() +
                                   " before the program started");
}

}  // namespace

Result<NamespaceChild> launch_in_pid_namespace(const ExecPlan& plan, const std::string& program,
                                               const std::string& cwd, bool user_namespace,
                                               bool* refused) {
  *refused = false;
  const std::string what = "launch '" + program + "'";
  int sv[2];
  if (::socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC, 0, sv) != 0)
    return Error::from_errno(what + ": socketpair", errno);
  UniqueFd launcher_end(sv[0]), child_end(sv[1]);
  const int on = 1;
  ::setsockopt(launcher_end.get(), SOL_SOCKET, SO_PASSCRED, &on, sizeof on);
  int st[2];
  if (::pipe2(st, O_CLOEXEC) != 0) return Error::from_errno(what + ": pipe", errno);
  UniqueFd status_read(st[0]), status_write(st[1]);

  InitPlan p{};
  p.exec = &plan;
  p.channel = child_end.get();
  p.launcher_end = launcher_end.get();
  p.status_write = status_write.get();
  p.user_namespace = user_namespace;
  std::snprintf(p.uid_map, sizeof p.uid_map, "%u %u 1\n", ::geteuid(), ::geteuid());
  std::snprintf(p.gid_map, sizeof p.gid_map, "%u %u 1\n", ::getegid(), ::getegid());

  const unsigned long flags =
      CLONE_NEWPID | CLONE_NEWNS | (user_namespace ? CLONE_NEWUSER : 0) | SIGCHLD;
  pid_t init;
  {
    auto registered = lock_launches();
    init = static_cast<pid_t>(::syscall(SYS_clone, flags, 0, 0, 0, 0));
    if (init == 0) run_init(p);
    if (init > 0) register_launched_locked(init);
  }
  if (init < 0) {
    const int err = errno;
    *refused = namespace_refused(err);
    return Error::from_errno(what + ": new PID namespace", err);
  }
  child_end.reset();
  status_write.reset();

  ChannelMessage m{};
  ucred cred{};
  ssize_t n = receive(launcher_end.get(), m, &cred);
  if (n <= 0) return abandon(init, program, cwd, nullptr);
  if (m.kind != kPid || cred.pid <= 0) return abandon(init, program, cwd, &m);

  NamespaceChild out;
  out.init = init;
  out.init_start = process_start_time(init).value_or(0);
  out.pid = cred.pid;
#ifdef SYS_pidfd_open
  out.pidfd = static_cast<int>(::syscall(SYS_pidfd_open, cred.pid, 0));
  if (out.pidfd >= 0) ::fcntl(out.pidfd, F_SETFD, FD_CLOEXEC);
#endif
  UniqueFd pidfd(out.pidfd);
  out.start = process_start_time(cred.pid).value_or(0);
  const char go = 1;
  if (::send(launcher_end.get(), &go, 1, MSG_NOSIGNAL) != 1)
    return abandon(init, program, cwd, nullptr);
  n = receive(launcher_end.get(), m, nullptr);
  if (n > 0) return abandon(init, program, cwd, &m);  // exec failed: the init reports and exits
  out.pidfd = pidfd.release();
  out.status_fd = status_read.release();
  return out;
}

}  // namespace shardguard::io::detail
