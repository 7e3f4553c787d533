#include "core/open_regular.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>

namespace shardguard {

Result<int> open_regular(const std::string& path, int flags, mode_t mode, const std::string& what,
                         LinkPolicy links) {
  const int nofollow = links == LinkPolicy::kRefuse ? O_NOFOLLOW : 0;
  const int fd = ::open(path.c_str(), flags | O_NONBLOCK | nofollow | O_CLOEXEC, mode);
  if (fd < 0) {
    const int err = errno;
    struct stat st {};
    if (err == ENXIO && ::lstat(path.c_str(), &st) == 0 && S_ISFIFO(st.st_mode))
      return Error(ErrorCode::kInvalid, what + " '" + path + "' is a FIFO, not a regular file");
    if (err == ELOOP && nofollow != 0)
      return Error(ErrorCode::kInvalid,
                   what + " '" + path + "' is a symbolic link, which is never followed");
    return Error::from_errno(what + " '" + path + "'", err);
  }
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error::from_errno(what + " '" + path + "': fstat", err);
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    const char* kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "a device";
    return Error(ErrorCode::kInvalid, what + " '" + path + "' is " + kind + ", not a regular file");
  }
  const int fl = ::fcntl(fd, F_GETFL);
  if (fl >= 0) ::fcntl(fd, F_SETFL, fl & ~O_NONBLOCK);
  return fd;
}

Result<std::string> read_regular_file(const std::string& path, size_t max_bytes,
                                      const std::string& what, LinkPolicy links) {
  SG_ASSIGN_OR_RETURN(const int fd, open_regular(path, O_RDONLY, 0, what, links));
  std::string text;
  char buf[1 << 16];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      return Error::from_errno("read " + what + " '" + path + "'", err);
    }
    if (n == 0) break;
    text.append(buf, static_cast<size_t>(n));
    if (text.size() > max_bytes) {
      ::close(fd);
      return Error(ErrorCode::kInvalid, what + " '" + path + "' holds more than " +
                                            std::to_string(max_bytes) + " bytes");
    }
  }
  ::close(fd);
  return text;
}

}  // namespace shardguard
