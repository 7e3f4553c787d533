#include "examples/trainer_cuda/nccl_rendezvous.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <optional>
#include <random>
#include <thread>
#include <vector>

#include "examples/trainer_cuda/cuda_check.h"

namespace shardguard::example {
namespace {

constexpr size_t kNonceChars = 16;  // 64-bit nonce as hex
using namespace std::chrono_literals;

std::string file_name(const RendezvousOptions& o, const char* kind, uint32_t rank) {
  return o.dir + "/.nccl-" + kind + "-" + std::to_string(o.attempt) + "-" + std::to_string(rank);
}

std::string make_nonce() {
  std::random_device rd;
  uint64_t n = (uint64_t(rd()) << 32) ^ uint64_t(rd());
  n ^= uint64_t(::getpid()) << 17;
  n ^= uint64_t(std::chrono::steady_clock::now().time_since_epoch().count());
  char buf[kNonceChars + 1];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(n));
  return std::string(buf, kNonceChars);
}

[[noreturn]] void die(const std::string& what) {
  spdlog::error("nccl rendezvous: {}", what);
  std::exit(kExitGpuError);
}

// Writes `bytes` to `path` atomically: a temporary name in the same directory, then rename.
void write_atomically(const std::string& path, const std::string& bytes) {
  const std::string tmp = path + ".tmp." + std::to_string(::getpid());
  const int fd = ::open(tmp.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
  if (fd < 0) die("cannot create " + tmp + ": " + std::strerror(errno));
  size_t done = 0;
  while (done < bytes.size()) {
    const ssize_t n = ::write(fd, bytes.data() + done, bytes.size() - done);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      const int err = errno;
      ::close(fd);
      ::unlink(tmp.c_str());
      die("cannot write " + tmp + ": " + std::strerror(err));
    }
    done += size_t(n);
  }
  if (::close(fd) != 0) die("cannot close " + tmp + ": " + std::strerror(errno));
  if (::rename(tmp.c_str(), path.c_str()) != 0) {
    const int err = errno;
    ::unlink(tmp.c_str());
    die("cannot rename " + tmp + " to " + path + ": " + std::strerror(err));
  }
}

// The whole file, or nullopt when it does not exist (yet).
std::optional<std::string> read_file(const std::string& path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) {
    if (errno == ENOENT) return std::nullopt;
    die("cannot open " + path + ": " + std::strerror(errno));
  }
  std::string out;
  char buf[512];
  for (;;) {
    const ssize_t n = ::read(fd, buf, sizeof buf);
    if (n < 0 && errno == EINTR) continue;
    if (n < 0) {
      const int err = errno;
      ::close(fd);
      die("cannot read " + path + ": " + std::strerror(err));
    }
    if (n == 0) break;
    out.append(buf, size_t(n));
  }
  ::close(fd);
  return out;
}

std::string id_bytes(const ncclUniqueId& id) {
  return std::string(reinterpret_cast<const char*>(&id), sizeof id);
}

ncclComm_t init_rank(const RendezvousOptions& o, const ncclUniqueId& id) {
  ncclComm_t comm = nullptr;
  SG_NCCL_CHECK(ncclCommInitRank(&comm, int(o.world_size), id, int(o.rank)));
  return comm;
}

ncclComm_t connect_root(const RendezvousOptions& o) {
  ncclUniqueId id;
  SG_NCCL_CHECK(ncclGetUniqueId(&id));
  if (o.world_size == 1) return init_rank(o, id);

  std::atomic<bool> joined{false};
  std::thread responder([&] {
    std::vector<std::string> answered(o.world_size);
    while (!joined.load()) {
      for (uint32_t r = 1; r < o.world_size; ++r) {
        auto req = read_file(file_name(o, "req", r));
        if (!req || req->size() != kNonceChars || *req == answered[r]) continue;
        write_atomically(file_name(o, "id", r), *req + id_bytes(id));
        answered[r] = *req;
      }
      std::this_thread::sleep_for(5ms);
    }
  });
  spdlog::info("nccl rendezvous: rank 0 waiting for {} rank(s) in {}", o.world_size - 1, o.dir);
  ncclComm_t comm = init_rank(o, id);
  joined = true;
  responder.join();
  // Every rank has joined, so each has read its answer: this attempt's files can go.
  for (uint32_t r = 1; r < o.world_size; ++r) {
    ::unlink(file_name(o, "req", r).c_str());
    ::unlink(file_name(o, "id", r).c_str());
  }
  return comm;
}

ncclComm_t connect_other(const RendezvousOptions& o) {
  const std::string nonce = make_nonce();
  const std::string answer_path = file_name(o, "id", o.rank);
  write_atomically(file_name(o, "req", o.rank), nonce);
  const auto deadline = std::chrono::steady_clock::now() + o.timeout;
  for (;;) {
    auto answer = read_file(answer_path);
    if (answer && answer->size() == kNonceChars + sizeof(ncclUniqueId) &&
        answer->compare(0, kNonceChars, nonce) == 0) {
      ncclUniqueId id;
      std::memcpy(&id, answer->data() + kNonceChars, sizeof id);
      return init_rank(o, id);
    }
    if (std::chrono::steady_clock::now() > deadline)
      die("rank " + std::to_string(o.rank) + " got no NCCL id from rank 0 in " + o.dir +
          " within " + std::to_string(o.timeout.count()) + " s");
    std::this_thread::sleep_for(5ms);
  }
}

}  // namespace

ncclComm_t nccl_connect(const RendezvousOptions& o) {
  if (o.world_size == 0 || o.rank >= o.world_size) die("bad rank or world size");
  return o.rank == 0 ? connect_root(o) : connect_other(o);
}

}  // namespace shardguard::example
