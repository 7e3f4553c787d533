// Running a Slurm command (scontrol) to its end and reading what it printed: the seam the
// Slurm adapter (agent/slurm_scontrol.h) is built on, so that tests feed it recorded answers.
// The production runner starts the program with SIGTERM ignored and every other signal at its
// default, stdin from /dev/null, and kills it at the deadline: inside a Slurm job every process
// of the job gets Slurm's SIGTERM, the scontrol that reads the job's state after that very
// signal included (a time limit sends the steps two SIGTERMs 10-20 ms apart).
//
// Thread-safety: run_command_blocking() may be called from any thread; it blocks.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::agent {

struct CommandOutput {
  int exit_code = -1;  // 128 + signal when it died of one
  std::string out;
  std::string err;
};

// Runs `argv` (argv[0] looked up in PATH) to its end; kTimeout (the process killed) when it
// runs past `timeout`, kNotFound or kIo when it cannot start. A non-zero exit is an output.
using CommandRunner =
    std::function<Result<CommandOutput>(const std::vector<std::string>& argv, Duration timeout)>;

// The production CommandRunner: fork and exec, output through pipes.
Result<CommandOutput> run_command_blocking(const std::vector<std::string>& argv, Duration timeout);

}  // namespace shardguard::agent
