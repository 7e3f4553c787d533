// sg_tree_helper: a small supervisor-like program for the process-tree tests, so a test can
// SIGKILL "the supervisor" or run it as another (unprivileged) user.
//
//   sg_tree_helper probe
//       prints probe_isolation().describe()
//   sg_tree_helper hold <none|auto|pidns> <record file|-> <script>
//       becomes a subreaper, launches `sh -c script` (die_with_parent), records it when a
//       file is given, prints "launched <pid> <none|pidns>" and waits to be killed
//   sg_tree_helper teardown <none|auto|pidns> <token> <ready file> <script>
//       launches `sh -c script`, waits for the ready file, tears the tree down and prints
//       "isolation <..> left <sleep <token> processes left> outside <n>"
//   sg_tree_helper status <none|auto|pidns> <script>
//       prints the ExitStatus of `sh -c script`
//   sg_tree_helper sweep <record file>
//       prints "killed <n> reused <n> gone <n>"
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <string>
#include <thread>

#include "io/event_loop.h"
#include "io/process.h"
#include "io/process_isolation.h"
#include "io/process_record.h"
#include "io/process_tree.h"
#include "tests/io/tree_util.h"

using namespace shardguard;
using namespace std::chrono_literals;

namespace {

int usage() {
  std::fprintf(stderr, "usage: sg_tree_helper probe|hold|teardown|status|sweep ...\n");
  return 2;
}

io::ProcessSpec spec_for(const std::string& isolation, const std::string& script) {
  io::ProcessSpec spec;
  spec.argv = {"/bin/sh", "-c", script};
  spec.die_with_parent = true;
  spec.isolate = testing::parse_isolation(isolation);
  return spec;
}

int fail(const Error& e) {
  std::printf("error %s\n", e.message().c_str());
  return 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc < 2) return usage();
  const std::string cmd = argv[1];
  std::setvbuf(stdout, nullptr, _IONBF, 0);
  io::EventLoop loop;
  io::PosixProcessLauncher launcher(loop);
  if (cmd == "probe") {
    std::printf("%s\n", io::probe_isolation().describe().c_str());
    return 0;
  }
  if (cmd == "sweep" && argc == 3) {
    auto r = io::sweep_recorded(argv[2], 10s);
    if (!r.ok()) return fail(r.error());
    std::printf("killed %zu reused %zu gone %zu\n", r->killed, r->reused, r->gone);
    return 0;
  }
  if (auto st = io::become_child_subreaper(); !st.ok()) return fail(st.error());
  if (cmd == "hold" && argc == 5) {
    auto child = launcher.launch(spec_for(argv[2], argv[4]));
    if (!child.ok()) return fail(child.error());
    if (std::strcmp(argv[3], "-") != 0) {
      if (auto st = io::record_launched(argv[3], **child); !st.ok()) return fail(st.error());
    }
    std::printf("launched %d %s\n", (*child)->pid(),
                testing::isolation_name((*child)->isolation()));
    while (true) ::pause();
  }
  if (cmd == "teardown" && argc == 6) {
    auto child = launcher.launch(spec_for(argv[2], argv[5]));
    if (!child.ok()) return fail(child.error());
    if (!testing::wait_for_file(argv[4], 10s)) {
      std::printf("error no ready file\n");
      return 1;
    }
    io::KillTreeOptions options;
    options.grace = 2s;
    auto report = io::kill_tree_and_wait((*child)->pgid(), options, child->get());
    if (!report.ok()) return fail(report.error());
    std::printf("isolation %s left %zu outside %zu\n",
                testing::isolation_name((*child)->isolation()), testing::sleepers(argv[3]).size(),
                report->outside_group);
    return 0;
  }
  if (cmd == "status" && argc == 4) {
    auto child = launcher.launch(spec_for(argv[2], argv[3]));
    if (!child.ok()) return fail(child.error());
    auto status = (*child)->wait_blocking(30s);
    if (!status.ok()) return fail(status.error());
    std::printf("%s %s\n", testing::isolation_name((*child)->isolation()),
                status->describe().c_str());
    return 0;
  }
  return usage();
}
