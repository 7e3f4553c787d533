#include "agent/health/file_range.h"

#include <fcntl.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>

namespace shardguard::agent {

Result<FileRange> read_file_range(const std::string& path, uint64_t offset, size_t max_bytes) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return Error::from_errno("open '" + path + "'", errno);
  FileRange out;
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    return Error::from_errno("stat '" + path + "'", err);
  }
  out.file_size = static_cast<uint64_t>(st.st_size);
  if (offset < out.file_size) {
    out.data.resize(static_cast<size_t>(std::min<uint64_t>(out.file_size - offset, max_bytes)));
    size_t got = 0;
    while (got < out.data.size()) {
      const ssize_t n = ::pread(fd, out.data.data() + got, out.data.size() - got,
                                static_cast<off_t>(offset + got));
      if (n < 0 && errno == EINTR) continue;
      if (n < 0) {
        const int err = errno;
        ::close(fd);
        return Error::from_errno("read '" + path + "'", err);
      }
      if (n == 0) break;  // shrank meanwhile
      got += static_cast<size_t>(n);
    }
    out.data.resize(got);
  }
  ::close(fd);
  return out;
}

}  // namespace shardguard::agent
