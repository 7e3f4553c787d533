// sg_signal_recorder NAME LOG [--child] [--own-pgid] [--exit-on-term CODE DELAY_MS]
//
// A stand-in for a job's process that records what happens to it, for tests of what a
// scheduler sends (tests/support/signal_log.h parses the log). It blocks every catchable
// signal and takes them one by one with sigwaitinfo, so none is lost or merged with another
// (a shell's traps are not that exact), and appends one line per event to LOG:
//   "<unix seconds.micro> NAME start pid=P pgid=G node=.. nodeid=.. procid=.. restart=.. job=.."
//   "<unix seconds.micro> NAME TERM from=<sender pid>:<sender comm> code=<si_code>"
//   "<unix seconds.micro> NAME exit code=C"     (only when it exits by itself)
// SIGKILL cannot be recorded: a process that ends without an "exit" line was killed.
//   --child            first fork a copy of itself named NAME.child (same process group)
//   --own-pgid         first move to a process group of its own (as shardguard's launcher
//                      puts each rank), still a child of its parent
//   --exit-on-term C D after the first SIGTERM, wait D ms (still recording), then exit C
//                      (a trainer that checkpoints and exits 75)
// A batch script records its own shell by ending with `exec sg_signal_recorder batch LOG`.
#include <fcntl.h>
#include <signal.h>
#include <sys/time.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <fstream>
#include <sstream>
#include <string>

namespace {

std::string g_name, g_log;

std::string now_text() {
  timeval tv{};
  ::gettimeofday(&tv, nullptr);
  char buf[64];
  std::snprintf(buf, sizeof buf, "%ld.%06ld", static_cast<long>(tv.tv_sec),
                static_cast<long>(tv.tv_usec));
  return buf;
}

// One write(2) with O_APPEND per line: lines of concurrent recorders never interleave.
void log_line(const std::string& event) {
  const std::string line = now_text() + " " + g_name + " " + event + "\n";
  int fd = ::open(g_log.c_str(), O_WRONLY | O_CREAT | O_APPEND | O_CLOEXEC, 0644);
  if (fd < 0) return;
  (void)!::write(fd, line.data(), line.size());
  ::close(fd);
}

std::string env_or(const char* name, const char* fallback) {
  const char* v = std::getenv(name);
  return v ? v : fallback;
}

std::string sender_of(const siginfo_t& si) {
  if (si.si_pid <= 0) return "0:kernel";
  std::ifstream comm("/proc/" + std::to_string(si.si_pid) + "/comm");
  std::string name;
  std::getline(comm, name);
  return std::to_string(si.si_pid) + ":" + (name.empty() ? "?" : name);
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr,
                 "usage: sg_signal_recorder NAME LOG [--child] [--own-pgid] "
                 "[--exit-on-term CODE DELAY_MS]\n");
    return 2;
  }
  g_name = argv[1];
  g_log = argv[2];
  bool child = false;
  int exit_code = -1;
  long exit_delay_ms = 0;
  for (int i = 3; i < argc; ++i) {
    if (std::strcmp(argv[i], "--child") == 0) {
      child = true;
    } else if (std::strcmp(argv[i], "--own-pgid") == 0) {
      ::setpgid(0, 0);
    } else if (std::strcmp(argv[i], "--exit-on-term") == 0 && i + 2 < argc) {
      exit_code = std::atoi(argv[i + 1]);
      exit_delay_ms = std::atol(argv[i + 2]);
      i += 2;
    }
  }
  sigset_t all;
  sigfillset(&all);
  // Signals ignored by default say nothing about the scheduler (a child exiting, a resize).
  for (int quiet : {SIGCHLD, SIGWINCH, SIGURG}) sigdelset(&all, quiet);
  ::sigprocmask(SIG_BLOCK, &all, nullptr);  // blocked before the fork: the child too
  if (child && ::fork() == 0) {
    g_name += ".child";
    exit_code = -1;
  }
  std::ostringstream start;
  start << "start pid=" << ::getpid() << " pgid=" << ::getpgrp()
        << " node=" << env_or("SLURMD_NODENAME", "") << " nodeid=" << env_or("SLURM_NODEID", "")
        << " procid=" << env_or("SLURM_PROCID", "")
        << " restart=" << env_or("SLURM_RESTART_COUNT", "0")
        << " job=" << env_or("SLURM_JOB_ID", "");
  log_line(start.str());

  timespec exit_at{};
  bool exiting = false;
  while (true) {
    siginfo_t si{};
    int sig;
    if (exiting) {
      timespec now{};
      ::clock_gettime(CLOCK_MONOTONIC, &now);
      long left_ns = (exit_at.tv_sec - now.tv_sec) * 1000000000L + (exit_at.tv_nsec - now.tv_nsec);
      if (left_ns <= 0) break;
      timespec wait{left_ns / 1000000000L, left_ns % 1000000000L};
      sig = ::sigtimedwait(&all, &si, &wait);
      if (sig < 0) continue;  // timed out (or EINTR): the loop re-checks the deadline
    } else {
      sig = ::sigwaitinfo(&all, &si);
      if (sig < 0) continue;
    }
    const char* abbrev = sigabbrev_np(sig);
    log_line(std::string(abbrev ? abbrev : std::to_string(sig).c_str()) + " from=" + sender_of(si) +
             " code=" + std::to_string(si.si_code));
    if (sig == SIGTERM && exit_code >= 0 && !exiting) {
      exiting = true;
      ::clock_gettime(CLOCK_MONOTONIC, &exit_at);
      exit_at.tv_sec += exit_delay_ms / 1000;
      exit_at.tv_nsec += (exit_delay_ms % 1000) * 1000000L;
      if (exit_at.tv_nsec >= 1000000000L) {
        exit_at.tv_sec += 1;
        exit_at.tv_nsec -= 1000000000L;
      }
    }
  }
  log_line("exit code=" + std::to_string(exit_code));
  return exit_code;
}
