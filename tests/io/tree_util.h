// Helpers shared by the process-tree tests and sg_tree_helper: finding test processes by a
// token in their command line, waiting for files, isolation names.
#pragma once

#include <fcntl.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>
#include <thread>
#include <vector>

#include "io/process.h"
#include "io/process_tree.h"

namespace shardguard::testing {

// Live (not zombie) processes whose command line contains `token`, this one excepted.
inline std::vector<pid_t> processes_with(const std::string& token) {
  std::vector<pid_t> out;
  const auto table = io::ProcessTable::scan();
  for (const auto& [pid, info] : table.all()) {
    if (info.state == 'Z' || pid == ::getpid()) continue;
    // Plain read(): a process may exit mid-read, and a stream would throw then.
    const int fd = ::open(("/proc/" + std::to_string(pid) + "/cmdline").c_str(), O_RDONLY);
    if (fd < 0) continue;
    std::string cmdline;
    char buf[4096];
    for (ssize_t n; (n = ::read(fd, buf, sizeof buf)) > 0;) cmdline.append(buf, n);
    ::close(fd);
    if (cmdline.find(token) != std::string::npos) out.push_back(pid);
  }
  return out;
}

// The `sleep <token>` processes (not a shell or helper whose command line mentions it).
inline std::vector<pid_t> sleepers(const std::string& token) {
  return processes_with(std::string("sleep") + '\0' + token + '\0');
}

inline bool wait_for_file(const std::string& path, std::chrono::milliseconds timeout) {
  for (auto until = std::chrono::steady_clock::now() + timeout;
       std::chrono::steady_clock::now() < until;
       std::this_thread::sleep_for(std::chrono::milliseconds(2))) {
    std::ifstream in(path);
    std::string s;
    if (std::getline(in, s) && !s.empty()) return true;
  }
  return false;
}

inline io::Isolation parse_isolation(const std::string& name) {
  if (name == "pidns") return io::Isolation::kPidNamespace;
  if (name == "auto") return io::Isolation::kAuto;
  return io::Isolation::kNone;
}

inline const char* isolation_name(io::Isolation i) {
  switch (i) {
    case io::Isolation::kPidNamespace:
      return "pidns";
    case io::Isolation::kAuto:
      return "auto";
    case io::Isolation::kNone:
      return "none";
  }
  return "?";
}

// A number unique to this test run, for `sleep <n>` commands that the tests find again.
// (Fixed width, so that no token is a substring of another.)
inline std::string unique_token() {
  static int counter = 0;
  char buf[32];
  std::snprintf(buf, sizeof buf, "%d.%04d7", 900000 + ::getpid() % 90000, ++counter);
  return buf;
}

// A rank that leaves its process group twice over: a double fork into a new session, and a
// plain background sleeper; then it sleeps itself. All three sleeps carry `token`.
inline std::string escaping_rank(const std::string& token, const std::string& ready) {
  return "setsid sh -c 'sleep " + token + " & sleep " + token + " & exit 0'; sleep " + token +
         " & echo ready > " + ready + "; exec sleep " + token;
}

}  // namespace shardguard::testing
