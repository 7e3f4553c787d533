#include "checkpoint/verify.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <condition_variable>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <unordered_map>
#include <vector>

#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "storage/dir_store.h"

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

// Calls fn(bytes, n) over the whole file in order, in steps of kHashStep: through a mapping
// when the file is in the page cache; a large file mostly not in it (as after an O_DIRECT
// save) is read with O_DIRECT, several steps ahead of fn; a bucket's object by ranged GETs,
// as many ahead.
Status for_each_step(storage::Store& store, const std::string& key,
                     const std::function<void(const std::byte*, uint64_t)>& fn) {
  if (store.as_directory() == nullptr) {
    SG_ASSIGN_OR_RETURN(auto remote, store.open_read(key));
    return for_each_direct_block(*remote, fn);
  }
  const std::string path = store.as_directory()->path(key);
  Filesystem& fs = store.as_directory()->fs();
  SG_ASSIGN_OR_RETURN(auto mapped, fs.map_readonly(path));
  const auto bytes = mapped->bytes();
  const auto resident = mapped->resident_bytes(0, bytes.size());
  if (bytes.size() >= 2 * kHashStep && resident && *resident * 2 < bytes.size()) {
    SG_ASSIGN_OR_RETURN(auto direct, fs.open_for_read(path, {.direct = true}));
    if (direct->direct() && direct->size() == bytes.size())
      return for_each_direct_block(*direct, fn);
  }
  for (uint64_t at = 0; at < bytes.size(); at += kHashStep)
    fn(bytes.data() + at, std::min<uint64_t>(kHashStep, bytes.size() - at));
  return {};
}

// XXH3-128 of the whole file and, with block_bytes != 0, the sums of its blocks.
Result<FileRecord> hash_file(storage::Store& store, const std::string& key,
                             uint64_t block_bytes, const std::function<void(uint64_t)>& on_bytes) {
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Error(ErrorCode::kInternal, "XXH3_createState failed");
  XXH3_128bits_reset(state.get());
  std::optional<BlockHasher> blocks;
  if (block_bytes != 0) blocks.emplace(block_bytes);
  SG_RETURN_IF_ERROR(for_each_step(store, key, [&](const std::byte* p, uint64_t n) {
    XXH3_128bits_update(state.get(), p, n);
    if (blocks) blocks->update({p, n});
    if (on_bytes) on_bytes(n);
  }));
  FileRecord out;
  const XXH128_hash_t digest = XXH3_128bits_digest(state.get());
  out.xxh3_128 = xxh3_128_hex(digest.high64, digest.low64);
  if (blocks) {
    out.block_bytes = block_bytes;
    out.block_xxh3 = blocks->finish();
  }
  return out;
}

}  // namespace

Result<std::string> file_xxh3_128(storage::Store& store, const std::string& key,
                                  const std::function<void(uint64_t)>& on_bytes) {
  SG_ASSIGN_OR_RETURN(FileRecord sums, hash_file(store, key, 0, on_bytes));
  return std::move(sums.xxh3_128);
}

Result<std::string> file_xxh3_128(Filesystem& fs, const std::string& path,
                                  const std::function<void(uint64_t)>& on_bytes) {
  storage::DirectoryStore store(fs, parent_dir(path));
  return file_xxh3_128(store, path.substr(path.find_last_of('/') + 1), on_bytes);
}

Result<FileRecord> file_checksums(Filesystem& fs, const std::string& path, uint64_t block_bytes,
                                  const std::function<void(uint64_t)>& on_bytes) {
  if (!valid_checksum_block_bytes(block_bytes))
    return Error(ErrorCode::kInvalid, "checksum block size " + std::to_string(block_bytes) +
                                          " is not a power of two from 4 KiB to 64 MiB");
  storage::DirectoryStore store(fs, parent_dir(path));
  return hash_file(store, path.substr(path.find_last_of('/') + 1), block_bytes, on_bytes);
}

namespace {

// Compares what was read with the record: the first bad block, else the whole-file sum.
Status compare_sums(const std::string& name, const FileRecord& want, const FileRecord& got,
                    ChecksumFailure* where) {
  const size_t blocks = std::min(want.block_xxh3.size(), got.block_xxh3.size());
  for (size_t k = 0; k < blocks; ++k) {
    if (want.block_xxh3[k] == got.block_xxh3[k]) continue;
    const uint64_t offset = k * want.block_bytes;
    if (where != nullptr) *where = {"", want.path, offset, want.block_bytes};
    return Error(ErrorCode::kCorrupt, block_failure_message(name, offset, want.block_bytes));
  }
  if (got.xxh3_128 != want.xxh3_128) {
    if (where != nullptr) *where = {"", want.path, std::nullopt, 0};
    return corrupt(name, "checksum " + got.xxh3_128 + " differs from manifest " + want.xxh3_128);
  }
  return {};
}

// A manifest chunk stored in one file.
struct ChunkRef {
  const std::string* tensor_name;
  const TensorRecord* tensor;
  const ChunkRecord* chunk;
};

// Full verification reads every byte; the header among them must also parse as safetensors
// and hold every chunk the manifest places in the file, with its dtype and shape. Checksums
// alone pass a header no reader can use (the manifest's sums may have been computed over it).
Status check_shard_header(storage::Store& store, const std::string& key, const std::string& name,
                          const std::vector<ChunkRef>& chunks) {
  SG_ASSIGN_OR_RETURN(auto file, store.open_read(key));
  std::vector<std::byte> head(std::min<uint64_t>(file->size(), kSafetensorsLengthPrefix));
  SG_RETURN_IF_ERROR(file->read_exact(0, head));
  SG_ASSIGN_OR_RETURN(uint64_t n, read_safetensors_header_size(head, file->size(), name));
  head.resize(kSafetensorsLengthPrefix + n);
  SG_RETURN_IF_ERROR(file->read_exact(0, head));
  SG_ASSIGN_OR_RETURN(SafetensorsHeader header, parse_safetensors_header(head, file->size(), name));
  std::unordered_map<std::string_view, const TensorEntry*> wanted;
  for (const ChunkRef& c : chunks) wanted.emplace(c.chunk->key, nullptr);
  for (const TensorEntry& e : header.tensors)
    if (auto it = wanted.find(e.name); it != wanted.end()) it->second = &e;
  for (const ChunkRef& c : chunks) {
    const TensorEntry* e = wanted.at(c.chunk->key);
    const std::string what = "tensor '" + *c.tensor_name + "': key '" + c.chunk->key + "'";
    if (e == nullptr) return corrupt(name, what + " is not in the file's header");
    if (e->dtype != c.tensor->dtype)
      return corrupt(name, what + " is " + std::string(dtype_name(e->dtype)) +
                               " in the file, the manifest says " +
                               std::string(dtype_name(c.tensor->dtype)));
    if (e->shape != c.chunk->box.sizes)
      return corrupt(name, what + " has another shape in the file than the manifest's chunk " +
                               c.chunk->box.to_string());
  }
  return {};
}

}  // namespace

Status verify_checkpoint(storage::Store& store, std::string_view prefix, const Manifest& manifest,
                         Verify verify, VerifyProgress progress, ChecksumFailure* failure) {
  const std::string label = dir_label(store.describe(prefix));
  if (auto step = parse_step_dir_name(label); step && *step != manifest.step)
    return corrupt(label + "/" + std::string(kManifestName),
                   "step " + std::to_string(manifest.step) + " differs from the directory's " +
                       std::to_string(*step));
  const uint64_t total = manifest.total_bytes();
  uint64_t done = 0;
  std::map<std::string_view, std::vector<ChunkRef>> chunks_by_file;
  if (verify == Verify::kChecksum)
    for (const auto& [tensor_name, t] : manifest.tensors)
      for (const ChunkRecord& c : t.chunks)
        chunks_by_file[c.file].push_back({&tensor_name, &t, &c});
  // A bucket's sizes come from one listing of the step, not a HEAD per file.
  std::optional<std::map<std::string, uint64_t>> listed;
  if (store.as_directory() == nullptr) {
    SG_ASSIGN_OR_RETURN(auto objects, store.list_all(prefix));
    listed.emplace();
    for (auto& o : objects) listed->emplace(std::move(o.key), o.size);
  }
  for (const FileRecord& f : manifest.files) {
    const std::string name = label + "/" + f.path;
    const std::string key = storage::join_key(prefix, f.path);
    uint64_t size = 0;
    if (listed) {
      auto it = listed->find(key);
      if (it == listed->end()) return corrupt(name, "missing");
      size = it->second;
    } else {
      SG_ASSIGN_OR_RETURN(auto info, store.stat(key));
      if (!info) return corrupt(name, "missing");
      size = info->size;
    }
    if (size != f.size)
      return corrupt(name, "size " + std::to_string(size) + " differs from manifest " +
                               std::to_string(f.size));
    if (verify == Verify::kChecksum && (!f.xxh3_128.empty() || f.has_block_sums())) {
      SG_ASSIGN_OR_RETURN(FileRecord sums, hash_file(store, key, f.block_bytes, [&](uint64_t n) {
                            done += n;
                            if (progress) progress(done, total);
                          }));
      // A file listed without a whole-file sum (never written so) is checked by blocks.
      if (f.xxh3_128.empty()) sums.xxh3_128.clear();
      if (auto st = compare_sums(name, f, sums, failure); !st.ok()) {
        if (failure != nullptr)
          failure->manifest = store.describe(storage::join_key(prefix, kManifestName));
        return st;
      }
    } else {
      done += f.size;
      if (progress) progress(done, total);
    }
    if (auto it = chunks_by_file.find(f.path); it != chunks_by_file.end()) {
      SG_RETURN_IF_ERROR(check_shard_header(store, key, name, it->second));
    }
  }
  return {};
}

Status verify_checkpoint(Filesystem& fs, const std::string& step_dir, const Manifest& manifest,
                         Verify verify, VerifyProgress progress, ChecksumFailure* failure) {
  storage::DirectoryStore store(fs, step_dir);
  return verify_checkpoint(store, "", manifest, verify, std::move(progress), failure);
}

}  // namespace shardguard::checkpoint
