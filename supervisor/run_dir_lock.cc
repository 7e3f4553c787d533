#include "supervisor/run_dir_lock.h"
#include "core/host_name.h"

#include <unistd.h>

#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <span>

#include <spdlog/spdlog.h>

#include "supervisor/timeline_text.h"

namespace shardguard::supervisor {
namespace {

// What the holder wrote, as a message may show it: another user's bytes are at most one
// line of printable ASCII, bounded.
std::string holder_text(std::string_view raw) {
  std::string out;
  for (char c : raw) {
    if (c == '\n' || out.size() >= 160) break;
    out += std::isprint(static_cast<unsigned char>(c)) != 0 ? c : '?';
  }
  return out;
}

// "pid 4242 host node-3 since_unix_ms 1764650000000" -> "pid 4242 on host node-3 since
// <UTC time>"; anything else shown as it is.
std::string describe_holder(const std::string& text) {
  char host[161] = {};
  long long pid = 0, since = 0;
  if (std::sscanf(text.c_str(), "pid %lld host %160s since_unix_ms %lld", &pid, host, &since) == 3)
    return "pid " + std::to_string(pid) + " on host " + host + " since " +
           utc_time(since) + " UTC";
  return text.empty() ? "a process that has not said which yet" : "'" + text + "'";
}

}  // namespace

std::string run_dir_lock_path(const std::string& run_dir) { return join_path(run_dir, "lock"); }

Result<std::unique_ptr<FileLock>> claim_run_dir(Filesystem& fs, const Clock& clock,
                                                const std::string& run_dir) {
  SG_RETURN_IF_ERROR(fs.create_dirs(run_dir));
  const std::string path = run_dir_lock_path(run_dir);
  SG_ASSIGN_OR_RETURN(LockAttempt attempt, fs.try_lock_file(path));
  switch (attempt.status) {
    case LockStatus::kAcquired:
      break;
    case LockStatus::kHeld: {
      const std::string who = holder_text(fs.read_file(path).value_or(""));
      return Error(ErrorCode::kFenced,
                   "run directory '" + run_dir + "' is in use by another shardguard (" +
                       describe_holder(who) +
                       "); stop that one, or give this run its own --run-dir");
    }
    case LockStatus::kUnsupported:
      spdlog::warn("run directory '{}': the filesystem offers no locks ({}); a second "
                   "shardguard on it would not be refused",
                   run_dir, std::strerror(attempt.sys_errno));
      return std::unique_ptr<FileLock>();
  }
  // Who holds it, for the message a second one prints. The file is rewritten in place (the
  // lock is on this inode).
  const std::string line = "pid " + std::to_string(::getpid()) + " host " + host_name() +
                           " since_unix_ms " + std::to_string(to_unix_ms(clock.wall_now())) +
                           "\n";
  auto file = fs.open_for_write(path);
  if (file.ok()) {
    (void)(*file)->append(std::as_bytes(std::span(line.data(), line.size())));
  }
  return std::move(attempt.lock);
}

}  // namespace shardguard::supervisor
