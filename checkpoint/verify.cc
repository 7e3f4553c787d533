#include "checkpoint/verify.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <memory>
#include <mutex>
#include <system_error>
#include <thread>
#include <vector>

#include "checkpoint/paths.h"

namespace shardguard::checkpoint {
namespace {

constexpr uint64_t kHashStep = 8ull << 20;
// Blocks read ahead of the hash (each by its own thread) when reading with O_DIRECT.
constexpr size_t kReadAhead = 4;

// The last component of a directory path ("a/step-000000200/" -> "step-000000200").
std::string dir_label(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

Error corrupt(const std::string& label, const std::string& what) {
  return Error(ErrorCode::kCorrupt, label + ": " + what);
}

// Calls fn(block, n) for the file's blocks of kHashStep bytes in order, reading them with
// O_DIRECT on kReadAhead threads into huge-page buffers, block i into buffer i % kReadAhead
// once block i - kReadAhead has been consumed.
Status for_each_direct_block(const RandomAccessFile& file,
                             const std::function<void(const std::byte*, uint64_t)>& fn) {
  const uint64_t size = file.size();
  const uint64_t blocks = (size + kHashStep - 1) / kHashStep;
  std::vector<std::unique_ptr<DirectIoBuffer>> buffers;
  for (size_t i = 0; i < std::min<uint64_t>(kReadAhead, blocks); ++i) {
    SG_ASSIGN_OR_RETURN(auto b, DirectIoBuffer::allocate(kHashStep));
    buffers.push_back(std::move(b));
  }
  const size_t slots = buffers.size();
  std::mutex mu;
  std::condition_variable cv;
  uint64_t consumed = 0;                      // blocks hashed so far
  std::vector<uint64_t> ready(slots, ~0ull);  // per slot: the block it holds, once read
  Status failed;                              // the first read error
  bool stop = false;
  std::atomic<uint64_t> next{0};
  auto reader = [&] {
    for (uint64_t i; (i = next++) < blocks;) {
      const size_t slot = i % slots;
      {
        std::unique_lock lock(mu);
        cv.wait(lock, [&] { return stop || consumed + slots > i; });
        if (stop) return;
      }
      const uint64_t n = std::min(kHashStep, size - i * kHashStep);
      const uint64_t aligned = (n + kDirectReadAlignment - 1) / kDirectReadAlignment *
                               kDirectReadAlignment;
      auto got = file.read_at(i * kHashStep, {buffers[slot]->data(), aligned});
      std::lock_guard lock(mu);
      if (!got.ok() || *got < n) {
        if (failed.ok())
          failed = got.ok() ? Status(Error(ErrorCode::kIo, "read '" + file.path() +
                                                              "': file shorter than its size"))
                            : Status(std::move(got).error());
        stop = true;
      } else {
        ready[slot] = i;
      }
      cv.notify_all();
    }
  };
  std::vector<std::thread> threads;
  try {
    for (size_t t = 0; t < slots; ++t) threads.emplace_back(reader);
  } catch (const std::system_error&) {
    if (threads.empty()) {
      stop = true;
      return Error(ErrorCode::kInternal, "cannot start a read thread");
    }
  }
  for (uint64_t i = 0; i < blocks; ++i) {
    const size_t slot = i % slots;
    {
      std::unique_lock lock(mu);
      cv.wait(lock, [&] { return stop || ready[slot] == i; });
      if (stop) break;
    }
    fn(buffers[slot]->data(), std::min(kHashStep, size - i * kHashStep));
    std::lock_guard lock(mu);
    ++consumed;
    cv.notify_all();
  }
  {
    std::lock_guard lock(mu);
    stop = true;
    cv.notify_all();
  }
  for (auto& t : threads) t.join();
  return failed;
}

}  // namespace

Result<std::string> file_xxh3_128(Filesystem& fs, const std::string& path,
                                  const std::function<void(uint64_t)>& on_bytes) {
  SG_ASSIGN_OR_RETURN(auto mapped, fs.map_readonly(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Error(ErrorCode::kInternal, "XXH3_createState failed");
  XXH3_128bits_reset(state.get());
  const auto bytes = mapped->bytes();
  auto hash = [&](const std::byte* p, uint64_t n) {
    XXH3_128bits_update(state.get(), p, n);
    if (on_bytes) on_bytes(n);
  };
  // A large file mostly not in the page cache (as after an O_DIRECT save) is read with
  // O_DIRECT, several blocks ahead of the hash; a cached one is hashed from the mapping.
  const auto resident = mapped->resident_bytes(0, bytes.size());
  if (bytes.size() >= 2 * kHashStep && resident && *resident * 2 < bytes.size()) {
    SG_ASSIGN_OR_RETURN(auto direct, fs.open_for_read(path, {.direct = true}));
    if (direct->direct() && direct->size() == bytes.size()) {
      SG_RETURN_IF_ERROR(for_each_direct_block(*direct, hash));
      const XXH128_hash_t digest = XXH3_128bits_digest(state.get());
      return xxh3_128_hex(digest.high64, digest.low64);
    }
  }
  for (uint64_t at = 0; at < bytes.size(); at += kHashStep)
    hash(bytes.data() + at, std::min<uint64_t>(kHashStep, bytes.size() - at));
  const XXH128_hash_t digest = XXH3_128bits_digest(state.get());
  return xxh3_128_hex(digest.high64, digest.low64);
}

Status verify_checkpoint(Filesystem& fs, const std::string& step_dir, const Manifest& manifest,
                         Verify verify, VerifyProgress progress) {
  const std::string label = dir_label(step_dir);
  if (auto step = parse_step_dir_name(label); step && *step != manifest.step)
    return corrupt(label + "/" + std::string(kManifestName),
                   "step " + std::to_string(manifest.step) + " differs from the directory's " +
                       std::to_string(*step));
  const uint64_t total = manifest.total_bytes();
  uint64_t done = 0;
  for (const FileRecord& f : manifest.files) {
    const std::string name = label + "/" + f.path;
    const std::string path = join_path(step_dir, f.path);
    auto size = fs.file_size(path);
    if (!size.ok()) {
      if (size.error().code() == ErrorCode::kNotFound) return corrupt(name, "missing");
      return std::move(size).error();
    }
    if (*size != f.size)
      return corrupt(name, "size " + std::to_string(*size) + " differs from manifest " +
                               std::to_string(f.size));
    if (verify == Verify::kChecksum && !f.xxh3_128.empty()) {
      SG_ASSIGN_OR_RETURN(std::string sum, file_xxh3_128(fs, path, [&](uint64_t n) {
                            done += n;
                            if (progress) progress(done, total);
                          }));
      if (sum != f.xxh3_128)
        return corrupt(name, "checksum " + sum + " differs from manifest " + f.xxh3_128);
    } else {
      done += f.size;
      if (progress) progress(done, total);
    }
  }
  return {};
}

}  // namespace shardguard::checkpoint
