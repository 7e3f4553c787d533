// A real child process for integration tests: started with posix_spawn in its own process
// group, waited for with a timeout, and killed with its whole group if the test ends first.
#pragma once

#include <fcntl.h>
#include <signal.h>
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <optional>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace shardguard::testing {

class Background {
 public:
  // Runs `argv` (argv[0] a path: not looked up in PATH) with stdout and stderr appended to
  // `log_path`. A spawn that failed leaves pid() -1 and wait() 127.
  Background(const std::vector<std::string>& argv, const std::string& log_path) {
    posix_spawn_file_actions_t fa;
    posix_spawn_file_actions_init(&fa);
    posix_spawn_file_actions_addopen(&fa, 1, log_path.c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    posix_spawn_file_actions_adddup2(&fa, 1, 2);
    posix_spawnattr_t attr;
    posix_spawnattr_init(&attr);
    posix_spawnattr_setflags(&attr, POSIX_SPAWN_SETPGROUP);
    posix_spawnattr_setpgroup(&attr, 0);
    std::vector<char*> args;
    for (const auto& a : argv) args.push_back(const_cast<char*>(a.c_str()));
    args.push_back(nullptr);
    if (::posix_spawn(&pid_, args[0], &fa, &attr, args.data(), environ) != 0) pid_ = -1;
    posix_spawn_file_actions_destroy(&fa);
    posix_spawnattr_destroy(&attr);
  }
  ~Background() {
    if (pid_ > 0 && !status_) {
      ::kill(-pid_, SIGKILL);
      int st;
      ::waitpid(pid_, &st, 0);
    }
  }
  pid_t pid() const { return pid_; }
  // Never with pid -1 (a spawn that failed): kill(-1) would signal every process there is.
  void signal(int sig) const {
    if (pid_ > 0) ::kill(pid_, sig);
  }

  // The exit code (128+signal when killed), or nullopt if it is still running at the timeout.
  std::optional<int> wait(std::chrono::milliseconds timeout) {
    if (status_) return status_;
    if (pid_ <= 0) return status_ = 127;  // never started (waitpid(-1) would reap any child)
    const auto until = std::chrono::steady_clock::now() + timeout;
    while (std::chrono::steady_clock::now() < until) {
      int st = 0;
      pid_t r = ::waitpid(pid_, &st, WNOHANG);
      if (r == pid_) {
        status_ = WIFEXITED(st) ? WEXITSTATUS(st) : 128 + WTERMSIG(st);
        return status_;
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(10));
    }
    return std::nullopt;
  }

 private:
  pid_t pid_ = -1;
  std::optional<int> status_;
};

// Polls `pred` every 10 ms until it holds or `timeout` passes.
template <typename Pred>
bool eventually(Pred pred, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < until) {
    if (pred()) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
  }
  return pred();
}

}  // namespace shardguard::testing
