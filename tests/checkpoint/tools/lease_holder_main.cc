// A process that takes a checkpoint directory's lease, for the two-process lease tests.
//
//   sg_test_lease_holder DIR JOB [--try] [--no-flock] [--coordinator]
//                        [--renew-ms N] [--stale-ms N] [--hold-ms N] [--pause-on FILE]
//
// Prints "acquired pid=P" (plus "took over from ..." when it replaced a holder) or
// "refused: <message>" (exit 3). With --try it releases at once and exits 0; otherwise it
// renews every --renew-ms (0: never) until --hold-ms passes (0: until killed), printing
// "lost: <message>" and exiting 4 if a renewal finds the lease taken. --no-flock plays a
// filesystem without flock (ENOLCK) through the fault filesystem; --coordinator is the
// multi-node setting (a live flock does not keep a stale holder). --pause-on FILE: once FILE
// exists, the process removes it, prints "pausing" and stops itself (SIGSTOP) right after a
// renewal, so a test knows its renewals stopped at a clean point; SIGCONT resumes it.
#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <string>
#include <thread>

#include "checkpoint/lease.h"
#include "core/fault_fs.h"

using namespace shardguard;
using namespace shardguard::checkpoint;

int main(int argc, char** argv) {
  if (argc < 3) {
    std::fprintf(stderr, "usage: %s DIR JOB [options]\n", argv[0]);
    return 2;
  }
  const std::string dir = argv[1], job = argv[2];
  bool try_only = false, no_flock = false;
  long renew_ms = 0, hold_ms = 0;
  std::string pause_on;
  LeaseOptions options;
  for (int i = 3; i < argc; ++i) {
    const std::string a = argv[i];
    auto number = [&] { return i + 1 < argc ? std::strtol(argv[++i], nullptr, 10) : 0L; };
    if (a == "--try")
      try_only = true;
    else if (a == "--no-flock")
      no_flock = true;
    else if (a == "--coordinator")
      options.live_flock_never_stale = false;
    else if (a == "--renew-ms")
      renew_ms = number();
    else if (a == "--stale-ms")
      options.stale_after = std::chrono::milliseconds(number());
    else if (a == "--hold-ms")
      hold_ms = number();
    else if (a == "--pause-on" && i + 1 < argc)
      pause_on = argv[++i];
    else {
      std::fprintf(stderr, "unknown option %s\n", a.c_str());
      return 2;
    }
  }
  FaultInjectingFilesystem fs(PosixFilesystem::instance());
  if (no_flock) fs.set_lock_errno(ENOLCK);
  auto& clock = RealClock::instance();
  auto lease =
      DirectoryLease::acquire(fs, dir, this_process_owner(job, 1), clock.wall_now(), options);
  if (!lease.ok()) {
    std::printf("refused: %s\n", lease.error().message().c_str());
    return 3;
  }
  std::printf("acquired pid=%d flock=%d\n", static_cast<int>(::getpid()),
              lease->holds_flock() ? 1 : 0);
  if (lease->took_over_from())
    std::printf("took over from %s\n",
                describe_holder(*lease->took_over_from(), clock.wall_now()).c_str());
  std::fflush(stdout);
  if (try_only) return lease->release().ok() ? 0 : 1;

  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(hold_ms);
  while (hold_ms == 0 || std::chrono::steady_clock::now() < until) {
    std::this_thread::sleep_for(std::chrono::milliseconds(renew_ms > 0 ? renew_ms : 50));
    if (renew_ms <= 0) continue;
    if (auto st = lease->renew(clock.wall_now()); !st.ok()) {
      std::printf("lost: %s\n", st.error().message().c_str());
      std::fflush(stdout);
      return 4;
    }
    if (!pause_on.empty() && ::unlink(pause_on.c_str()) == 0) {
      std::printf("pausing\n");
      std::fflush(stdout);
      ::raise(SIGSTOP);
    }
  }
  auto st = lease->release();
  std::printf("released\n");
  return st.ok() ? 0 : 1;
}
