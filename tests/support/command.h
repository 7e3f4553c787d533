// Runs a command line through /bin/sh and captures its standard output, standard error
// and exit code: for tests that drive the real `shardguard` binary.
#pragma once

#include <sys/wait.h>

#include <cstdio>
#include <cstdlib>
#include <string>

#include "tests/support/temp_dir.h"

namespace shardguard::testing {

struct CommandResult {
  int exit_code = -1;
  std::string out;
  std::string err;
};

inline CommandResult run_command(const std::string& command_line) {
  TempDir tmp;
  const std::string out = tmp / "out", err = tmp / "err";
  const std::string full = command_line + " >" + out + " 2>" + err;
  int status = std::system(full.c_str());
  CommandResult r;
  r.exit_code = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  r.out = slurp(out);
  r.err = slurp(err);
  return r;
}

// The `shardguard` binary under test (CTest sets SHARDGUARD_BIN).
inline std::string shardguard_bin() {
  const char* bin = std::getenv("SHARDGUARD_BIN");
  return bin != nullptr ? bin : "shardguard";
}

}  // namespace shardguard::testing
