// Internal to io/: the address of a Unix socket at a path of any length. sun_path holds 107
// bytes; a run directory deep in a file system needs more. Such a path is reached through
// its directory's descriptor (/proc/self/fd/N/<name>), which keeps the address short and the
// socket where it belongs - never in a shared /tmp under a name another user can guess and
// take first. Used by the server (bind) and the client (connect).
#pragma once

#include <fcntl.h>
#include <sys/socket.h>
#include <sys/un.h>

#include <cerrno>
#include <cstddef>
#include <cstring>
#include <string>

#include "core/result.h"
#include "io/detail/fd.h"

namespace shardguard::io::detail {

struct UnixAddress {
  sockaddr_un addr{};
  socklen_t length = 0;
  std::string in_use;  // what sun_path holds: the path, or /proc/self/fd/N/<name>
  UniqueFd dir;        // the directory of a long path, open while the address is in use
};

inline Result<UnixAddress> unix_address(const std::string& path) {
  UnixAddress a;
  a.addr.sun_family = AF_UNIX;
  if (path.empty()) return Error(ErrorCode::kInvalid, "unix socket: empty path");
  a.in_use = path;
  if (path.size() >= sizeof a.addr.sun_path) {
    const size_t slash = path.find_last_of('/');
    const std::string dir = slash == 0 ? "/" : path.substr(0, slash);
    const std::string name = path.substr(slash + 1);
    if (slash == std::string::npos || name.empty())
      return Error(ErrorCode::kInvalid, "unix socket '" + path + "': no directory to bind in");
    a.dir.reset(::open(dir.c_str(), O_PATH | O_DIRECTORY | O_CLOEXEC));
    if (!a.dir) return Error::from_errno("unix socket '" + path + "': open directory", errno);
    a.in_use = "/proc/self/fd/" + std::to_string(a.dir.get()) + "/" + name;
    if (a.in_use.size() >= sizeof a.addr.sun_path)
      return Error(ErrorCode::kInvalid,
                   "unix socket '" + path + "': name '" + name + "' too long for a socket address");
  }
  std::memcpy(a.addr.sun_path, a.in_use.c_str(), a.in_use.size() + 1);
  a.length = static_cast<socklen_t>(offsetof(sockaddr_un, sun_path) + a.in_use.size() + 1);
  return a;
}

}  // namespace shardguard::io::detail
