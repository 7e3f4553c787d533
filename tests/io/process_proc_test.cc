// Parsing /proc/PID/stat and the cgroup v2 location from /proc texts (unit), and reading a
// real process whose name is built to confuse a parser.
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <catch2/catch.hpp>

#include "io/process_isolation.h"
#include "io/process_tree.h"

using namespace shardguard::io;

TEST_CASE("proc: /proc/PID/stat fields, whatever the command name holds", "[io]") {
  const std::string tail =
      " S 1200 1300 1400 34817 1300 4194560 100 0 0 0 5 3 0 0 20 0 1 0 98765 0 0";
  auto info = parse_proc_stat(42, "42 (a) (b c) d)" + tail);
  REQUIRE(info);
  CHECK(info->pid == 42);
  CHECK(info->state == 'S');
  CHECK(info->ppid == 1200);
  CHECK(info->pgid == 1300);
  CHECK(info->sid == 1400);
  CHECK(info->start_time == 98765);
  CHECK(parse_proc_stat(1, "1 (init) Z 0 1 1 -1 -1 0 0 0 0 0 0 0 0 0 20 0 1 0 7 0")->start_time ==
        7);
  for (const char* bad : {"", "42 (x", "42 (x) S", "42 (x) S 1 2 3 4", "42 (x) S a b c"}) {
    CAPTURE(bad);
    CHECK_FALSE(parse_proc_stat(42, bad));
  }
}

TEST_CASE("proc: a live process read back", "[io]") {
  const pid_t child = ::fork();
  REQUIRE(child >= 0);
  if (child == 0) {
    ::prctl(PR_SET_NAME, "x) (y z", 0, 0, 0);
    ::pause();
    ::_exit(0);
  }
  auto info = read_proc_info(child);
  REQUIRE(info.ok());
  CHECK(info->ppid == ::getpid());
  CHECK(info->pgid == ::getpgrp());
  CHECK(info->start_time >= read_proc_info(::getpid())->start_time);
  CHECK(process_start_time(child) == info->start_time);
  CHECK(is_descendant_of(child, ::getpid()));
  CHECK(pids_of_tree(::getpid()).size() >= 2);
  ::kill(child, SIGKILL);
  ::waitpid(child, nullptr, 0);
  CHECK(read_proc_info(child).error().code() == shardguard::ErrorCode::kNotFound);
  CHECK_FALSE(process_start_time(child));
  CHECK_FALSE(is_descendant_of(child, ::getpid()));
  CHECK(pids_of_tree(child).empty());
}

TEST_CASE("cgroup v2 location from the mount table and /proc/self/cgroup", "[io]") {
  struct Row {
    const char* what;
    const char* mountinfo;
    const char* cgroup;
    const char* own;  // "" when not found
  };
  const std::string v1 = "32 31 0:29 / /sys/fs/cgroup/cpu rw,relatime - cgroup cgroup rw,cpu\n";
  const auto row = GENERATE(values<Row>({
      {"hybrid: v2 at unified",
       "41 31 0:38 / /sys/fs/cgroup/unified rw,relatime - cgroup2 cgroup2 rw\n",
       "4:memory:/x\n0::/\n", "/sys/fs/cgroup/unified/"},
      {"unified, a systemd user slice", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
       "0::/user.slice/user-1000.slice/session-3.scope\n",
       "/sys/fs/cgroup/user.slice/user-1000.slice/session-3.scope/"},
      {"a cgroup namespace's root",
       "30 23 0:26 /kubepods/pod1 /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
       "0::/kubepods/pod1/c1\n", "/sys/fs/cgroup/c1/"},
      {"a mount point with a space", "30 23 0:26 / /mnt/cg\\040v2 rw - cgroup2 none rw\n",
       "0::/a\n", "/mnt/cg v2/a/"},
      {"no cgroup2 mount", "", "0::/\n", ""},
      {"no v2 line", "30 23 0:26 / /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n", "1:cpu:/\n", ""},
      {"outside the mount's root", "30 23 0:26 /kubepods /sys/fs/cgroup rw - cgroup2 cgroup2 rw\n",
       "0::/other\n", ""},
  }));
  CAPTURE(row.what);
  const auto got = parse_cgroup_v2(v1 + row.mountinfo, row.cgroup);
  CHECK(got.own == row.own);
  CHECK(got.why.empty() == !std::string(row.own).empty());
  CHECK_FALSE(got.writable);  // parsing alone never claims access
}
