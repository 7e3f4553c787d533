#include "checkpoint/reader.h"

#include <xxhash.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <map>
#include <mutex>
#include <system_error>
#include <thread>
#include <unordered_map>

#include "checkpoint/hf_index.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"

namespace shardguard::checkpoint {
namespace {

// One mapped shard whose header has been checked against the manifest. Immutable.
struct Shard {
  std::unique_ptr<MappedFile> file;
  std::unique_ptr<RandomAccessFile> reader;         // pread through the page cache
  std::unique_ptr<RandomAccessFile> direct_reader;  // O_DIRECT pread; null when not used
  SafetensorsHeader header;
  std::unordered_map<std::string, const TensorEntry*> by_key;  // into header.tensors

  const std::byte* data_of(const TensorEntry& e) const {
    return file->bytes().data() + header.file_offset(e);
  }
};

// A chunk of tensor `name`, as listed under its file.
struct ChunkRef {
  const std::string* name;
  const TensorRecord* tensor;
  const ChunkRecord* chunk;
};

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string dims(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The chunk's key must hold exactly the chunk: the manifest's dtype, the box's sizes.
Status check_chunk(const Shard& shard, const std::string& path, const ChunkRef& ref) {
  auto it = shard.by_key.find(ref.chunk->key);
  const std::string what = path + ": tensor " + quoted(*ref.name);
  if (it == shard.by_key.end())
    return Error(ErrorCode::kCorrupt, what + ": key " + quoted(ref.chunk->key) + " not in file");
  const TensorEntry& e = *it->second;
  if (e.dtype != ref.tensor->dtype)
    return Error(ErrorCode::kCorrupt, what + ": dtype " + std::string(dtype_name(e.dtype)) +
                                          " in file, manifest says " +
                                          std::string(dtype_name(ref.tensor->dtype)));
  if (e.shape != ref.chunk->box.sizes)
    return Error(ErrorCode::kCorrupt,
                 what + ": shape " + dims(e.shape) + " in file, manifest's chunk " +
                     ref.chunk->box.to_string() + " needs " + dims(ref.chunk->box.sizes));
  return {};
}

// Boxes of `shape` in row-major order, each at most `block_bytes` (but at least one row of
// the innermost dimension that fits), calling `fn(box)` until it fails.
template <typename Fn>
Status for_each_block(const std::vector<uint64_t>& shape, uint64_t element_bytes,
                      uint64_t block_bytes, Fn&& fn) {
  const size_t n = shape.size();
  if (n == 0) return fn(Box{});
  // Find the outermost dimension d whose trailing slab (shape[d+1..]) fits in a block.
  size_t d = n - 1;
  uint64_t inner = element_bytes;
  while (d > 0 && inner * shape[d] <= block_bytes) {
    inner *= shape[d];
    --d;
  }
  const uint64_t rows = std::max<uint64_t>(1, block_bytes / inner);
  std::vector<uint64_t> idx(d, 0);
  uint64_t start = 0;
  for (;;) {
    Box box = Box::whole(shape);
    for (size_t k = 0; k < d; ++k) {
      box.offsets[k] = idx[k];
      box.sizes[k] = 1;
    }
    box.offsets[d] = start;
    box.sizes[d] = std::min(rows, shape[d] - start);
    SG_RETURN_IF_ERROR(fn(box));
    start += box.sizes[d];
    if (start < shape[d]) continue;
    start = 0;
    size_t k = d;
    while (k > 0) {
      --k;
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
      if (k == 0) return {};
    }
    if (d == 0) return {};
  }
}

// The kernel copies from the page cache at about half speed when the destination and the
// file offset disagree modulo a cache line; such reads copy from the mapping instead.
constexpr uint64_t kCacheLine = 64;

// A run of `len` bytes at `file_offset` of `shard` that goes to `dst`.
struct ReadRequest {
  const Shard* shard;
  uint64_t file_offset;
  std::byte* dst;
  size_t len;
};

// read() uses one more thread for every this many bytes, up to io_threads.
constexpr uint64_t kBytesPerThread = 1ull << 20;

// Runs fn(i, worker) for i in [0, n) on up to `threads` threads (the caller is worker 0);
// stops handing out work after the first error, which it returns.
template <typename Fn>
Status parallel_for(size_t n, int threads, Fn&& fn) {
  const size_t workers = std::min<size_t>(n, static_cast<size_t>(std::max(1, threads)));
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  std::vector<Status> results(workers);
  auto work = [&](size_t w) {
    for (size_t i; !failed.load(std::memory_order_relaxed) && (i = next++) < n;) {
      Status st = fn(i, w);
      if (!st.ok()) {
        results[w] = std::move(st);
        failed = true;
      }
    }
  };
  std::vector<std::thread> pool;
  pool.reserve(workers > 0 ? workers - 1 : 0);
  try {
    for (size_t w = 1; w < workers; ++w) pool.emplace_back(work, w);
  } catch (const std::system_error&) {
    // No more threads to be had: the ones started (and this one) do all the work.
  }
  if (workers > 0) work(0);
  for (auto& t : pool) t.join();
  for (auto& st : results)
    if (!st.ok()) return st;
  return {};
}

}  // namespace

struct CheckpointReader::Impl {
  Filesystem* fs;
  std::string dir;
  Manifest manifest;
  ReaderOptions options;
  std::map<std::string, std::vector<ChunkRef>, std::less<>> chunks_by_file;

  mutable std::mutex mu;
  mutable std::map<std::string, std::shared_ptr<const Shard>, std::less<>> shards;  // by mu
  mutable std::vector<std::unique_ptr<DirectIoBuffer>> direct_buffers;  // by mu: free ones

  Impl(Filesystem& f, std::string d, Manifest m, const ReaderOptions& o)
      : fs(&f), dir(std::move(d)), manifest(std::move(m)), options(o) {
    options.io_threads = std::max(1, options.io_threads);
    options.request_bytes = std::max<size_t>(
        kDirectReadAlignment, options.request_bytes / kDirectReadAlignment * kDirectReadAlignment);
    for (const auto& [name, t] : manifest.tensors)
      for (const auto& c : t.chunks) chunks_by_file[c.file].push_back({&name, &t, &c});
  }

  Result<std::shared_ptr<const Shard>> shard(const std::string& file) const {
    std::lock_guard lock(mu);
    if (auto it = shards.find(file); it != shards.end()) return it->second;
    SG_ASSIGN_OR_RETURN(auto loaded, load(file));
    shards.emplace(file, loaded);
    return loaded;
  }

  Result<std::shared_ptr<const Shard>> load(const std::string& file) const {
    const std::string path = join_path(dir, file);
    const FileRecord* rec = manifest.find_file(file);
    if (rec == nullptr)
      return Error(ErrorCode::kCorrupt, path + ": not among the manifest's files");
    auto shard = std::make_shared<Shard>();
    // The header is read with pread: through the mapping, its first page fault would read
    // a whole readahead window (often MiBs) of the file around it.
    SG_ASSIGN_OR_RETURN(shard->reader, fs->open_for_read(path, {}));
    const uint64_t size = shard->reader->size();
    if (size != rec->size)
      return Error(ErrorCode::kCorrupt, path + ": file is " + std::to_string(size) +
                                            " bytes, manifest lists " + std::to_string(rec->size));
    std::vector<std::byte> head(std::min<uint64_t>(size, kSafetensorsLengthPrefix));
    SG_RETURN_IF_ERROR(shard->reader->read_exact(0, head));
    SG_ASSIGN_OR_RETURN(uint64_t header_size, read_safetensors_header_size(head, size, path));
    head.resize(kSafetensorsLengthPrefix + header_size);
    SG_RETURN_IF_ERROR(shard->reader->read_exact(0, head));
    SG_ASSIGN_OR_RETURN(shard->header, parse_safetensors_header(head, size, path));
    SG_ASSIGN_OR_RETURN(shard->file, fs->map_readonly(path));
    if (shard->file->bytes().size() != size)
      return Error(ErrorCode::kCorrupt, path + ": file changed size while being opened");
    if (options.direct_io) {
      SG_ASSIGN_OR_RETURN(shard->direct_reader, fs->open_for_read(path, {.direct = true}));
      if (!shard->direct_reader->direct()) shard->direct_reader.reset();  // e.g. tmpfs
    }
    for (const TensorEntry& e : shard->header.tensors) shard->by_key.emplace(e.name, &e);
    if (auto it = chunks_by_file.find(file); it != chunks_by_file.end())
      for (const ChunkRef& ref : it->second) SG_RETURN_IF_ERROR(check_chunk(*shard, path, ref));
    return std::shared_ptr<const Shard>(std::move(shard));
  }

  // Direct buffers hold request_bytes rounded up to whole huge pages.
  size_t direct_buffer_bytes() const {
    return (options.request_bytes + DirectIoBuffer::kHugePage - 1) / DirectIoBuffer::kHugePage *
           DirectIoBuffer::kHugePage;
  }

  Result<std::unique_ptr<DirectIoBuffer>> take_direct_buffer() const {
    {
      std::lock_guard lock(mu);
      if (!direct_buffers.empty()) {
        auto b = std::move(direct_buffers.back());
        direct_buffers.pop_back();
        return b;
      }
    }
    return DirectIoBuffer::allocate(direct_buffer_bytes());
  }

  void give_direct_buffer(std::unique_ptr<DirectIoBuffer> b) const {
    std::lock_guard lock(mu);
    if (direct_buffers.size() < static_cast<size_t>(options.io_threads))
      direct_buffers.push_back(std::move(b));
  }

  // One request. Bytes mostly in the page cache are copied from it: by pread when `dst` and
  // the file offset agree modulo a cache line (the kernel's copy is slow otherwise), else by
  // memcpy from the mapping. Bytes mostly not in the cache are read with O_DIRECT (when on)
  // into a direct buffer and copied to `dst`; with direct reads off, by pread.
  Status execute(const ReadRequest& r, std::unique_ptr<DirectIoBuffer>& buffer) const {
    const Shard& s = *r.shard;
    const auto cached = s.file->resident_bytes(r.file_offset, r.len);
    const bool warm = cached && *cached * 2 >= r.len;
    const auto addr = reinterpret_cast<uintptr_t>(r.dst);
    if (warm && (addr - r.file_offset) % kCacheLine != 0) {
      std::memcpy(r.dst, s.file->bytes().data() + r.file_offset, r.len);
      return {};
    }
    if (warm || !s.direct_reader) return s.reader->read_exact(r.file_offset, {r.dst, r.len});
    // The aligned blocks covering the request; execute_all() cuts requests so that they fit
    // in a direct buffer.
    constexpr uint64_t A = kDirectReadAlignment;
    const uint64_t begin = r.file_offset / A * A;
    const uint64_t end = (r.file_offset + r.len + A - 1) / A * A;
    if (!buffer) {
      SG_ASSIGN_OR_RETURN(buffer, take_direct_buffer());
    }
    const RandomAccessFile& f = *s.direct_reader;
    SG_ASSIGN_OR_RETURN(size_t got, f.read_at(begin, {buffer->data(), end - begin}));
    if (got < r.file_offset + r.len - begin)
      return Error(ErrorCode::kIo, "read '" + f.path() + "': " + std::to_string(r.len) +
                                       " bytes at offset " + std::to_string(r.file_offset) +
                                       " run past the end of the file");
    std::memcpy(r.dst, buffer->data() + (r.file_offset - begin), r.len);
    return {};
  }

  // Reads every request, large ones split, on up to io_threads threads: one for every
  // kBytesPerThread, so that small reads stay on the calling thread.
  Status execute_all(const std::vector<ReadRequest>& requests) const {
    // Cut at file offsets that are multiples of request_bytes: a piece's aligned cover
    // then fits in a direct buffer.
    std::vector<ReadRequest> pieces;
    uint64_t total = 0;
    const uint64_t step = options.request_bytes;
    for (const ReadRequest& r : requests) {
      total += r.len;
      for (uint64_t at = r.file_offset, end = r.file_offset + r.len; at < end;) {
        const uint64_t next = std::min(end, (at / step + 1) * step);
        pieces.push_back({r.shard, at, r.dst + (at - r.file_offset), next - at});
        at = next;
      }
    }
    const auto max_threads = static_cast<uint64_t>(options.io_threads);
    const int threads =
        static_cast<int>(std::clamp<uint64_t>(total / kBytesPerThread, 1, max_threads));
    std::vector<std::unique_ptr<DirectIoBuffer>> buffers(static_cast<size_t>(threads));
    Status st = parallel_for(pieces.size(), threads, [&](size_t i, size_t worker) {
      return execute(pieces[i], buffers[worker]);
    });
    for (auto& b : buffers)
      if (b) give_direct_buffer(std::move(b));
    return st;
  }

  Result<const TensorRecord*> find(std::string_view name) const {
    auto it = manifest.tensors.find(std::string(name));
    if (it == manifest.tensors.end())
      return Error(ErrorCode::kNotFound, dir + ": no tensor " + quoted(name));
    return &it->second;
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

Result<CheckpointReader> CheckpointReader::open(Filesystem& fs, const std::string& path) {
  return open(fs, path, ReaderOptions{});
}

Result<CheckpointReader> CheckpointReader::open(Filesystem& fs, const std::string& path,
                                                const ReaderOptions& options) {
  std::string dir = without_trailing_slash(path);
  const std::string base = base_name(dir);
  if (base == kManifestName || base == kHfIndexName) dir = parent_dir(dir);
  std::string manifest_path = join_path(dir, std::string(kManifestName));
  SG_ASSIGN_OR_RETURN(bool has_manifest, fs.exists(manifest_path));
  if (has_manifest && base != kHfIndexName) {
    SG_ASSIGN_OR_RETURN(std::string text, fs.read_file(manifest_path));
    SG_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(text, manifest_path));
    return from_manifest(fs, std::move(dir), std::move(manifest), options);
  }
  auto hf = manifest_from_hf_dir(fs, dir);
  if (!hf.ok()) {
    if (hf.error().code() != ErrorCode::kNotFound) return std::move(hf).error();
    return Error(ErrorCode::kNotFound, path + ": no " + std::string(kManifestName) +
                                           " (not a committed checkpoint) and no " +
                                           std::string(kHfIndexName) + " or model.safetensors");
  }
  return from_manifest(fs, std::move(dir), std::move(hf).value(), options);
}

CheckpointReader CheckpointReader::from_manifest(Filesystem& fs, std::string dir,
                                                 Manifest manifest, const ReaderOptions& options) {
  return CheckpointReader(
      std::make_unique<Impl>(fs, std::move(dir), std::move(manifest), options));
}

const Manifest& CheckpointReader::manifest() const { return impl_->manifest; }
const std::string& CheckpointReader::dir() const { return impl_->dir; }

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->manifest.tensors.size());
  for (const auto& [name, t] : impl_->manifest.tensors) names.push_back(name);
  return names;
}

const TensorRecord* CheckpointReader::tensor(std::string_view name) const {
  auto found = impl_->find(name);
  return found.ok() ? *found : nullptr;
}

Status CheckpointReader::read(std::string_view name, const Box& box,
                              std::span<std::byte> out) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  const std::string what = "tensor " + quoted(name);
  if (auto st = check_box_in_shape(box, t->shape); !st.ok())
    return std::move(st).error().context(what);
  SG_ASSIGN_OR_RETURN(uint64_t need, checked_byte_size(box.sizes, t->dtype));
  if (out.size() != need)
    return Error(ErrorCode::kInvalid, what + ": box " + box.to_string() + " needs " +
                                          std::to_string(need) + " bytes, buffer has " +
                                          std::to_string(out.size()));
  const uint32_t bits = bit_size(t->dtype);
  const bool sub_byte = bits % 8 != 0;
  if (sub_byte && (box != Box::whole(t->shape) || t->chunks.size() != 1))
    return Error(ErrorCode::kUnsupported, what + ": " + std::string(dtype_name(t->dtype)) +
                                              " tensors can only be read whole from one chunk");
  // Long runs are gathered and read together at the end, so that the reads of all chunks
  // (often in different files) run in parallel; short runs are copied from the mapping now.
  // Shards stay in the cache as long as the reader lives, so plain pointers to them do.
  std::vector<ReadRequest> requests;
  for (const ChunkRecord& c : t->chunks) {
    auto region = intersect(c.box, box);
    if (!region || region->volume() == 0) continue;
    auto shard = impl_->shard(c.file);
    if (!shard.ok()) return std::move(shard).error().context(what);
    const Shard& s = **shard;
    const TensorEntry& e = *s.by_key.at(c.key);
    const uint64_t base = s.header.file_offset(e);
    if (sub_byte) {
      if (e.byte_size() >= impl_->options.min_pread_bytes)
        requests.push_back({&s, base, out.data(), e.byte_size()});
      else
        std::memcpy(out.data(), s.data_of(e), e.byte_size());
    } else {
      size_t inner = 0;
      const uint64_t run = run_bytes_of(c.box, box, *region, bits / 8, &inner);
      if (run >= impl_->options.min_pread_bytes) {
        for_each_run(c.box, box, *region, inner, bits / 8, [&](uint64_t src, uint64_t dst) {
          requests.push_back({&s, base + src, out.data() + dst, run});
        });
      } else {
        copy_region(s.data_of(e), c.box, out.data(), box, *region, bits / 8);
      }
    }
  }
  if (auto st = impl_->execute_all(requests); !st.ok()) return std::move(st).error().context(what);
  return {};
}

Result<std::vector<std::byte>> CheckpointReader::read_whole(std::string_view name) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  SG_ASSIGN_OR_RETURN(uint64_t size, checked_byte_size(t->shape, t->dtype));
  std::vector<std::byte> out(size);
  SG_RETURN_IF_ERROR(read(name, Box::whole(t->shape), out));
  return out;
}

const RankState& CheckpointReader::rank_state(uint32_t rank) const {
  static const RankState kNone{"", "null", "null"};
  const auto& ranks = impl_->manifest.ranks;
  return rank < ranks.size() ? ranks[rank] : kNone;
}

const GlobalState& CheckpointReader::global() const { return impl_->manifest.global; }

Result<uint64_t> CheckpointReader::tensor_xxh3_64(std::string_view name,
                                                  uint64_t block_bytes) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  // A tensor stored whole is hashed straight from the mapping, without a copy.
  if (t->chunks.size() == 1 && t->chunks.front().box == Box::whole(t->shape)) {
    const ChunkRecord& c = t->chunks.front();
    auto shard = impl_->shard(c.file);
    if (!shard.ok()) return std::move(shard).error().context("tensor " + quoted(name));
    const TensorEntry& e = *(*shard)->by_key.at(c.key);
    return XXH3_64bits((*shard)->data_of(e), e.byte_size());
  }
  const uint32_t bits = bit_size(t->dtype);
  if (bits % 8 != 0)
    return Error(
        ErrorCode::kUnsupported,
        "tensor " + quoted(name) + ": " + std::string(dtype_name(t->dtype)) + " split into chunks");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Error(ErrorCode::kInternal, "XXH3_createState failed");
  XXH3_64bits_reset(state.get());
  if (Box::whole(t->shape).volume() == 0) return XXH3_64bits_digest(state.get());
  std::vector<std::byte> buffer;
  SG_RETURN_IF_ERROR(for_each_block(t->shape, bits / 8, block_bytes, [&](const Box& box) -> Status {
    buffer.resize(box.volume() * (bits / 8));
    SG_RETURN_IF_ERROR(read(name, box, buffer));
    XXH3_64bits_update(state.get(), buffer.data(), buffer.size());
    return ok_status();
  }));
  return XXH3_64bits_digest(state.get());
}

Status CheckpointReader::open_all_shards() const {
  for (const FileRecord& f : impl_->manifest.files) SG_RETURN_IF_ERROR(impl_->shard(f.path));
  return {};
}

}  // namespace shardguard::checkpoint
