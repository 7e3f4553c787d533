#include "agent/health/kernel_log.h"

#include <fcntl.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <string_view>

#include "agent/health/file_range.h"

namespace shardguard::agent {

namespace {

// One kmsg record: "6,1234,5678901,-;message\n" followed by " KEY=value" continuation
// lines; returns the message, or the whole line when it has no prefix.
void append_kmsg_records(std::string_view buf, std::vector<std::string>& out) {
  while (!buf.empty()) {
    auto nl = buf.find('\n');
    std::string_view line = buf.substr(0, nl);
    buf = nl == std::string_view::npos ? std::string_view() : buf.substr(nl + 1);
    if (line.empty() || line.front() == ' ') continue;  // continuation (dictionary) line
    const auto semi = line.find(';');
    if (semi != std::string_view::npos && line.substr(0, semi).find(',') != std::string_view::npos)
      line = line.substr(semi + 1);
    out.emplace_back(line);
  }
}

Error unavailable(const std::string& path, int err) {
  return Error(ErrorCode::kUnsupported, "open '" + path + "': " + std::strerror(err), err);
}

class KmsgReader final : public KernelLogReader {
 public:
  KmsgReader(std::string path, bool from_start) : path_(std::move(path)), from_start_(from_start) {}
  ~KmsgReader() override {
    if (fd_ >= 0) ::close(fd_);
  }

  Result<std::vector<std::string>> read_new() override {
    if (fd_ < 0) {
      fd_ = ::open(path_.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
      if (fd_ < 0) return unavailable(path_, errno);
      if (!from_start_) ::lseek(fd_, 0, SEEK_END);  // kmsg: skip the ring buffer's records
    }
    std::vector<std::string> out;
    char buf[16384];  // kmsg returns one record per read and EINVAL if it does not fit
    for (;;) {
      const ssize_t n = ::read(fd_, buf, sizeof buf);
      if (n > 0) {
        append_kmsg_records(std::string_view(buf, static_cast<size_t>(n)), out);
        continue;
      }
      if (n == 0 || errno == EAGAIN) break;            // EOF only happens on a regular file
      if (errno == EINTR || errno == EPIPE) continue;  // EPIPE: records were overwritten
      const int err = errno;
      ::close(fd_);
      fd_ = -1;
      return Error::from_errno("read '" + path_ + "'", err);
    }
    return out;
  }

 private:
  std::string path_;
  bool from_start_;
  int fd_ = -1;
};

class FileLogReader final : public KernelLogReader {
 public:
  static constexpr size_t kMaxRead = 4 << 20;  // per call, so a huge old log cannot stall us

  FileLogReader(std::string path, bool from_start)
      : path_(std::move(path)), skip_existing_(!from_start) {}

  Result<std::vector<std::string>> read_new() override {
    auto range = read_file_range(path_, offset_, kMaxRead);
    if (range.ok() && range->file_size < offset_) {  // rotated or truncated: start over
      offset_ = 0;
      range = read_file_range(path_, 0, kMaxRead);
    }
    if (!range.ok()) {
      skip_existing_ = false;  // whatever appears later is new
      return Error(ErrorCode::kUnsupported, range.error().message(), range.error().sys_errno());
    }
    std::vector<std::string> out;
    if (skip_existing_) {
      skip_existing_ = false;
      offset_ = range->file_size;
      return out;
    }
    const std::string& data = range->data;
    const auto last_nl = data.rfind('\n');
    if (last_nl == std::string::npos) {
      if (data.size() == kMaxRead) offset_ += data.size();  // an absurd line: skip it
      return out;                                           // no complete line yet
    }
    offset_ += last_nl + 1;
    std::string_view complete(data.data(), last_nl + 1);
    while (!complete.empty()) {
      const auto nl = complete.find('\n');
      if (nl > 0) out.emplace_back(complete.substr(0, nl));
      complete.remove_prefix(nl + 1);
    }
    return out;
  }

 private:
  std::string path_;
  bool skip_existing_;
  uint64_t offset_ = 0;
};

}  // namespace

std::unique_ptr<KernelLogReader> make_kmsg_reader(std::string path, bool from_start) {
  return std::make_unique<KmsgReader>(std::move(path), from_start);
}

std::unique_ptr<KernelLogReader> make_file_log_reader(std::string path, bool from_start) {
  return std::make_unique<FileLogReader>(std::move(path), from_start);
}

}  // namespace shardguard::agent
