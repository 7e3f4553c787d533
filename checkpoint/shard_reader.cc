#include "checkpoint/shard_reader.h"

#include <algorithm>
#include <atomic>
#include <cstring>
#include <string_view>
#include <system_error>
#include <thread>
#include <unordered_set>

#include "checkpoint/paths.h"
#include "checkpoint/verify.h"

namespace shardguard::checkpoint {
namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string dims(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

uint64_t round_up(uint64_t n, uint64_t to) { return (n + to - 1) / to * to; }

// The kernel copies from the page cache at about half speed when the destination and the
// file offset disagree modulo a cache line; such reads copy from the mapping instead.
constexpr uint64_t kCacheLine = 64;
bool pread_copies_fast(const ReadRequest& r) {
  return (reinterpret_cast<uintptr_t>(r.dst) - r.file_offset) % kCacheLine == 0;
}

// execute_all() uses one more thread for every this many bytes, up to io_threads.
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

// The chunk's key must hold exactly the chunk: the manifest's dtype, the box's sizes.
Status check_chunk(const Shard& shard, const std::string& path, const std::string& name,
                   const TensorRecord& tensor, const ChunkRecord& chunk) {
  auto it = shard.by_key.find(chunk.key);
  const std::string what = path + ": tensor " + quoted(name);
  if (it == shard.by_key.end())
    return Error(ErrorCode::kCorrupt, what + ": key " + quoted(chunk.key) + " not in file");
  const TensorEntry& e = *it->second;
  if (e.dtype != tensor.dtype)
    return Error(ErrorCode::kCorrupt, what + ": dtype " + std::string(dtype_name(e.dtype)) +
                                          " in file, manifest says " +
                                          std::string(dtype_name(tensor.dtype)));
  if (e.shape != chunk.box.sizes)
    return Error(ErrorCode::kCorrupt, what + ": shape " + dims(e.shape) +
                                          " in file, manifest's chunk " + chunk.box.to_string() +
                                          " needs " + dims(chunk.box.sizes));
  return {};
}

}  // namespace

// A file's place in the cache: found under the set's mutex, opened under its own, so that
// opening one file (possibly hashing it whole) does not hold up reads of the others.
struct ShardSet::Slot {
  std::mutex mu;
  std::shared_ptr<const Shard> shard;  // by mu
};

ShardSet::ShardSet(storage::Store& store, std::string prefix, std::string label,
                   const Manifest& manifest, const ReaderOptions& options)
    : store_(&store),
      prefix_(std::move(prefix)),
      dir_label_(std::move(label)),
      manifest_(&manifest),
      options_(options) {
  for (const auto& [name, t] : manifest.tensors)
    for (const auto& c : t.chunks) chunks_by_file_[c.file].push_back({&name, &t, &c});
  // A direct buffer holds a whole piece (see piece_bytes()), in whole huge pages.
  uint64_t piece = options_.request_bytes;
  for (const FileRecord& f : manifest.files)
    if (valid_checksum_block_bytes(f.block_bytes))
      piece = std::max(piece, round_up(options_.request_bytes, f.block_bytes));
  direct_buffer_bytes_ = round_up(piece, DirectIoBuffer::kHugePage);
}

ShardSet::~ShardSet() = default;

Result<std::shared_ptr<const Shard>> ShardSet::get(const std::string& file) const {
  std::shared_ptr<Slot> slot;
  {
    std::lock_guard lock(mu_);
    auto& s = slots_[file];
    if (!s) s = std::make_shared<Slot>();
    slot = s;
  }
  std::lock_guard lock(slot->mu);
  if (slot->shard) return slot->shard;
  SG_ASSIGN_OR_RETURN(auto opened, open(file));
  slot->shard = opened;
  return opened;
}

Result<std::shared_ptr<const Shard>> ShardSet::open(const std::string& file) const {
  const std::string path = this->path(file);
  const FileRecord* rec = manifest_->find_file(file);
  if (rec == nullptr) return Error(ErrorCode::kCorrupt, path + ": not among the manifest's files");
  auto shard = std::make_shared<Shard>();
  shard->file = file;
  shard->key = key(file);
  shard->label = dir_label_.empty() ? file : dir_label_ + "/" + file;
  const bool bucket = store_->location().is_bucket();
  // The header is read with pread: through the mapping, its first page fault would read
  // a whole readahead window (often MiBs) of the file around it. A bucket's size is checked
  // by the first read past it (no lookup): the manifest's is taken as given.
  SG_ASSIGN_OR_RETURN(shard->reader, store_->open_read(shard->key, {}, rec->size));
  const uint64_t size = shard->reader->size();
  if (size != rec->size)
    return Error(ErrorCode::kCorrupt, path + ": file is " + std::to_string(size) +
                                          " bytes, manifest lists " + std::to_string(rec->size));
  if (!bucket) {
    SG_ASSIGN_OR_RETURN(shard->map, store_->map(shard->key));
    if (shard->map->bytes().size() != size)
      return Error(ErrorCode::kCorrupt, path + ": file changed size while being opened");
  }
  if (rec->has_block_sums()) {
    if (!valid_checksum_block_bytes(rec->block_bytes) ||
        rec->block_xxh3.size() != checksum_block_count(rec->size, rec->block_bytes))
      return Error(ErrorCode::kCorrupt, path + ": the manifest's block sums do not fit the file");
    shard->blocks = std::make_unique<BlockVerdicts>(*rec);
  }
  if (!rec->xxh3_128.empty() && (!shard->blocks || options_.verify_whole_files))
    SG_RETURN_IF_ERROR(check_whole_file(*shard, *rec));

  std::vector<std::byte> head(std::min<uint64_t>(size, kSafetensorsLengthPrefix));
  if (shard->blocks)
    SG_RETURN_IF_ERROR(check_header_blocks(*shard, head));
  else
    SG_RETURN_IF_ERROR(shard->reader->read_exact(0, head));
  SG_ASSIGN_OR_RETURN(uint64_t header_size, read_safetensors_header_size(head, size, path));
  if (head.size() < kSafetensorsLengthPrefix + header_size) {
    head.resize(kSafetensorsLengthPrefix + header_size);
    SG_RETURN_IF_ERROR(shard->reader->read_exact(0, head));
  }
  SG_ASSIGN_OR_RETURN(shard->header, parse_safetensors_header(head, size, path));
  if (bucket) {
    // Every read of a bucket is a ranged GET into a buffer, checked there, then copied.
    SG_ASSIGN_OR_RETURN(shard->direct_reader, store_->open_read(shard->key, {}, rec->size));
  } else if (options_.direct_io) {
    SG_ASSIGN_OR_RETURN(shard->direct_reader, store_->open_read(shard->key, {.direct = true}));
    if (!shard->direct_reader->direct()) shard->direct_reader.reset();  // e.g. tmpfs
  }
  // Only the keys the manifest names in this file are ever looked up: a header may hold
  // millions of other entries (legal, if careless or hostile), and a map of them all cost
  // seconds of CPU and a node allocation each.
  if (auto it = chunks_by_file_.find(file); it != chunks_by_file_.end()) {
    std::unordered_set<std::string_view> wanted;
    for (const ChunkRef& ref : it->second) wanted.insert(ref.chunk->key);
    for (const TensorEntry& e : shard->header.tensors)
      if (wanted.contains(e.name)) shard->by_key.emplace(e.name, &e);
    for (const ChunkRef& ref : it->second)
      SG_RETURN_IF_ERROR(check_chunk(*shard, path, *ref.name, *ref.tensor, *ref.chunk));
  }
  return std::shared_ptr<const Shard>(std::move(shard));
}

// Reads the blocks that hold the header into `head` and checks them before the header is
// parsed: a flipped header byte is then reported as the bad block it is.
Status ShardSet::check_header_blocks(Shard& s, std::vector<std::byte>& head) const {
  const BlockVerdicts& b = *s.blocks;
  const uint64_t size = s.size();
  if (size == 0) return {};
  head.resize(b.block_end(0));
  SG_RETURN_IF_ERROR(s.reader->read_exact(0, head));
  SG_RETURN_IF_ERROR(check_block(s, 0, head.data()));
  // A header longer than the first block (huge tensor tables): its other blocks too.
  auto header_size = read_safetensors_header_size(head, size, path(s.file));
  if (!header_size.ok()) return {};  // parsing reports it
  const uint64_t end = std::min(size, kSafetensorsLengthPrefix + *header_size);
  if (end <= head.size()) return {};
  const uint64_t last = b.block_of(end - 1);
  head.resize(b.block_end(last));
  SG_RETURN_IF_ERROR(s.reader->read_exact(0, head));
  for (uint64_t k = 1; k <= last; ++k)
    SG_RETURN_IF_ERROR(check_block(s, k, head.data() + b.block_begin(k)));
  return {};
}

// The whole-file XXH3-128, before the file's first use. For a file with block sums too
// (verify_whole_files), a match vouches for every block and a mismatch is looked up by block.
Status ShardSet::check_whole_file(Shard& s, const FileRecord& rec) const {
  SG_ASSIGN_OR_RETURN(std::string sum, file_xxh3_128(*store_, s.key));
  if (sum == rec.xxh3_128) {
    if (s.blocks) s.blocks->mark_all_good();
    return {};
  }
  if (s.blocks) SG_RETURN_IF_ERROR(check_mapped(s, 0, rec.size));
  note_failure({path(kManifestName), s.file, std::nullopt, 0});
  return Error(ErrorCode::kCorrupt,
               s.label + ": checksum " + sum + " differs from manifest " + rec.xxh3_128);
}

Error ShardSet::block_error(const Shard& s, uint64_t k) const {
  const uint64_t offset = s.blocks->block_begin(k);
  note_failure({path(kManifestName), s.file, offset, s.blocks->block_bytes()});
  return Error(ErrorCode::kCorrupt,
               block_failure_message(s.label, offset, s.blocks->block_bytes()));
}

Status ShardSet::check_block(const Shard& s, uint64_t k, const std::byte* bytes) const {
  if (s.blocks->check(k, bytes)) return {};
  return block_error(s, k);
}

// Block k of `s`, whose bytes `source` holds (indexed by file offset), is hashed while
// the part `r` wants is copied out of it.
Status ShardSet::copy_block_checked(const Shard& s, uint64_t k, const std::byte* source,
                                    const ReadRequest& r) const {
  const BlockVerdicts& b = *s.blocks;
  const uint64_t begin = b.block_begin(k), end = b.block_end(k);
  const uint64_t from = std::max<uint64_t>(r.file_offset, begin);
  const uint64_t to = std::min<uint64_t>(r.file_offset + r.len, end);
  const uint64_t sum = block_xxh3_64_copying({source + begin, end - begin}, from - begin,
                                             to - begin, r.dst + (from - r.file_offset));
  if (s.blocks->settle(k, sum)) return {};
  return block_error(s, k);
}

Result<const std::byte*> ShardSet::mapped(const Shard& s) const {
  if (s.map) return s.map->bytes().data();
  std::lock_guard lock(s.map_mu);
  if (!s.lazy_map) {
    SG_ASSIGN_OR_RETURN(s.lazy_map, store_->map(s.key));
    if (s.lazy_map->bytes().size() != s.size()) {
      const uint64_t got = s.lazy_map->bytes().size();
      s.lazy_map.reset();
      return Error(ErrorCode::kCorrupt, path(s.file) + ": object is " + std::to_string(got) +
                                            " bytes, manifest lists " + std::to_string(s.size()));
    }
  }
  return s.lazy_map->bytes().data();
}

Status ShardSet::check_mapped(const Shard& s, uint64_t offset, uint64_t length) const {
  if (!s.blocks || length == 0) return {};
  SG_ASSIGN_OR_RETURN(const std::byte* file, mapped(s));
  for (uint64_t k = s.blocks->block_of(offset), last = s.blocks->block_of(offset + length - 1);
       k <= last; ++k)
    if (!s.blocks->known_good(k))
      SG_RETURN_IF_ERROR(check_block(s, k, file + s.blocks->block_begin(k)));
  return {};
}

Status ShardSet::copy_region_checked(const Shard& s, uint64_t base, const Box& src_box,
                                     std::byte* dst, const Box& dst_box, const Box& region,
                                     size_t element_bytes) const {
  SG_ASSIGN_OR_RETURN(const std::byte* file, mapped(s));
  if (!s.blocks) {
    copy_region(file + base, src_box, dst, dst_box, region, element_bytes);
    return {};
  }
  if (region.volume() == 0) return {};
  size_t inner = 0;
  const uint64_t run = run_bytes_of(src_box, dst_box, region, element_bytes, &inner);
  const BlockVerdicts& b = *s.blocks;
  Status st;
  uint64_t good_begin = 0, good_end = 0;  // blocks just checked: no lookups while inside
  for_each_run(src_box, dst_box, region, inner, element_bytes, [&](uint64_t from, uint64_t to) {
    if (!st.ok()) return;
    const uint64_t at = base + from;
    if (at < good_begin || at + run > good_end) {
      st = check_mapped(s, at, run);
      if (!st.ok()) return;
      good_begin = b.block_begin(b.block_of(at));
      good_end = b.block_end(b.block_of(at + run - 1));
    }
    std::memcpy(dst + to, file + at, run);
  });
  return st;
}

std::optional<ChecksumFailure> ShardSet::failure() const {
  std::lock_guard lock(mu_);
  return failure_;
}

void ShardSet::note_failure(ChecksumFailure f) const {
  std::lock_guard lock(mu_);
  if (!failure_) failure_ = std::move(f);
}

Result<std::unique_ptr<DirectIoBuffer>> ShardSet::take_direct_buffer() const {
  {
    std::lock_guard lock(mu_);
    if (!direct_buffers_.empty()) {
      auto b = std::move(direct_buffers_.back());
      direct_buffers_.pop_back();
      return b;
    }
  }
  return DirectIoBuffer::allocate(direct_buffer_bytes_);
}

void ShardSet::give_direct_buffer(std::unique_ptr<DirectIoBuffer> b) const {
  std::lock_guard lock(mu_);
  if (direct_buffers_.size() < static_cast<size_t>(options_.io_threads))
    direct_buffers_.push_back(std::move(b));
}

// Pieces are cut at multiples of this: request_bytes, rounded up to whole checksum blocks,
// so that the blocks a piece touches lie whole in its window and fit a direct buffer.
uint64_t ShardSet::piece_bytes(const Shard& s) const {
  const uint64_t step = options_.request_bytes;
  return s.blocks ? round_up(step, s.blocks->block_bytes()) : step;
}

// Bytes mostly in the page cache: by pread when `dst` and the file offset agree modulo a
// cache line (the kernel's copy is slow otherwise), else by memcpy from the mapping. Bytes
// not cached (direct reads off) go by pread.
Status ShardSet::copy_cached(const ReadRequest& r, bool warm) const {
  const Shard& s = *r.shard;
  if (warm && !pread_copies_fast(r)) {
    std::memcpy(r.dst, s.map->bytes().data() + r.file_offset, r.len);  // warm: a mapped file
    return {};
  }
  return s.reader->read_exact(r.file_offset, {r.dst, r.len});
}

// One piece. Uncached bytes with direct reads on go through a direct buffer; the rest are
// copied through the cache. Blocks not yet known good are hashed beside the copy, piece by
// piece while each is in the CPU cache: cached ones from the mapping as their part is
// copied out of it.
Status ShardSet::execute(const ReadRequest& r, std::unique_ptr<DirectIoBuffer>& buffer) const {
  const Shard& s = *r.shard;
  // A bucket's object has no page cache here: it is read by ranged GETs (direct_reader).
  const auto cached = s.map ? s.map->resident_bytes(r.file_offset, r.len) : std::nullopt;
  const bool warm = cached && *cached * 2 >= r.len;
  const bool checked = !s.blocks || s.blocks->all_known_good(r.file_offset, r.len);
  if (!warm && s.direct_reader)
    return s.direct_reader->direct() ? read_direct(r, checked, buffer) : read_in_place(r, checked);
  if (checked) return copy_cached(r, warm);
  const BlockVerdicts& b = *s.blocks;
  SG_ASSIGN_OR_RETURN(const std::byte* file, mapped(s));
  const uint64_t end = r.file_offset + r.len;
  for (uint64_t k = b.block_of(r.file_offset), last = b.block_of(end - 1); k <= last; ++k) {
    const uint64_t from = std::max(r.file_offset, b.block_begin(k));
    const uint64_t to = std::min(end, b.block_end(k));
    const ReadRequest part{&s, from, r.dst + (from - r.file_offset), to - from};
    const bool whole = from == b.block_begin(k) && to == b.block_end(k);
    if (b.known_good(k)) {
      SG_RETURN_IF_ERROR(copy_cached(part, warm));
    } else if (warm && whole && pread_copies_fast(part)) {
      // pread copies without faulting the mapping in; the copy is hashed as it lands.
      SG_ASSIGN_OR_RETURN(uint64_t sum,
                          block_xxh3_64_filling({part.dst, part.len}, [&](size_t at, auto piece) {
                            return s.reader->read_exact(from + at, piece);
                          }));
      if (!s.blocks->settle(k, sum)) return block_error(s, k);
    } else if (warm) {
      SG_RETURN_IF_ERROR(copy_block_checked(s, k, file, part));
    } else {
      // Not cached and no O_DIRECT: pread brings the part; the rest of the block, if any,
      // comes in through the mapping.
      SG_RETURN_IF_ERROR(copy_cached(part, false));
      SG_RETURN_IF_ERROR(check_block(s, k, whole ? part.dst : file + b.block_begin(k)));
    }
  }
  return {};
}

// A reader that needs no aligned buffer (a bucket's ranged GETs): the piece is fetched
// straight into `dst` and the whole blocks in it are checked there; only a block the piece
// holds in part, and that is not known good yet, is fetched whole into a block-sized buffer
// to be checked. No copy and no buffer of request size: a load holds what its requests are
// receiving, not io_threads buffers besides.
Status ShardSet::read_in_place(const ReadRequest& r, bool checked) const {
  const Shard& s = *r.shard;
  const RandomAccessFile& f = *s.direct_reader;
  const uint64_t end = r.file_offset + r.len;
  auto fetch = [&](uint64_t at, std::span<std::byte> into) -> Status {
    SG_ASSIGN_OR_RETURN(size_t got, f.read_at(at, into));
    if (got < into.size())
      return Error(ErrorCode::kIo, "read '" + f.path() + "': " + std::to_string(into.size()) +
                                       " bytes at offset " + std::to_string(at) +
                                       " run past the end of the file");
    return {};
  };
  if (checked) return fetch(r.file_offset, {r.dst, r.len});
  const BlockVerdicts& b = *s.blocks;
  const uint64_t first = b.block_of(r.file_offset), last = b.block_of(end - 1);
  // Blocks at the ends that the piece holds only in part and that still need their check.
  auto needs_whole = [&](uint64_t k) {
    return !b.known_good(k) && (b.block_begin(k) < r.file_offset || b.block_end(k) > end);
  };
  const bool head = needs_whole(first), tail = last != first && needs_whole(last);
  const uint64_t from = head ? std::min(end, b.block_end(first)) : r.file_offset;
  const uint64_t to = tail ? b.block_begin(last) : end;
  if (from < to) {
    std::byte* dst = r.dst + (from - r.file_offset);
    SG_RETURN_IF_ERROR(fetch(from, {dst, to - from}));
    for (uint64_t k = b.block_of(from), stop = b.block_of(to - 1); k <= stop; ++k)
      if (!b.known_good(k)) SG_RETURN_IF_ERROR(check_block(s, k, dst + (b.block_begin(k) - from)));
  }
  auto fetch_whole = [&](uint64_t k) -> Status {
    const uint64_t begin = b.block_begin(k), bytes = b.block_end(k) - begin;
    std::unique_ptr<std::byte[]> whole(new std::byte[bytes]);
    SG_RETURN_IF_ERROR(fetch(begin, {whole.get(), bytes}));
    return copy_block_checked(s, k, whole.get() - begin, r);
  };
  if (head) SG_RETURN_IF_ERROR(fetch_whole(first));
  if (tail) SG_RETURN_IF_ERROR(fetch_whole(last));
  return {};
}

// The aligned cover of the piece, widened to whole blocks where they are not known good, is
// read with O_DIRECT into a direct buffer; each such block is hashed there, then its part is
// copied to `dst`.
Status ShardSet::read_direct(const ReadRequest& r, bool checked,
                             std::unique_ptr<DirectIoBuffer>& buffer) const {
  const Shard& s = *r.shard;
  const uint64_t end = r.file_offset + r.len;
  uint64_t begin = r.file_offset, cover_end = end;
  uint64_t first = 0, last = 0;
  if (!checked) {
    const BlockVerdicts& b = *s.blocks;
    first = b.block_of(r.file_offset);
    last = b.block_of(end - 1);
    if (!b.known_good(first)) begin = b.block_begin(first);
    if (!b.known_good(last)) cover_end = b.block_end(last);
  }
  constexpr uint64_t A = kDirectReadAlignment;
  const uint64_t aligned_begin = begin / A * A;
  const uint64_t aligned_end = round_up(cover_end, A);
  if (!buffer) {
    SG_ASSIGN_OR_RETURN(buffer, take_direct_buffer());
  }
  if (aligned_end - aligned_begin > buffer->size())
    return Error(ErrorCode::kInternal, s.label + ": read of " +
                                           std::to_string(aligned_end - aligned_begin) +
                                           " bytes does not fit a direct buffer");
  const RandomAccessFile& f = *s.direct_reader;
  SG_ASSIGN_OR_RETURN(size_t got,
                      f.read_at(aligned_begin, {buffer->data(), aligned_end - aligned_begin}));
  if (got < cover_end - aligned_begin)
    return Error(ErrorCode::kIo, "read '" + f.path() + "': " + std::to_string(r.len) +
                                     " bytes at offset " + std::to_string(r.file_offset) +
                                     " run past the end of the file");
  const std::byte* data = buffer->data() - aligned_begin;  // indexed by file offset
  if (checked) {
    std::memcpy(r.dst, data + r.file_offset, r.len);
    return {};
  }
  const BlockVerdicts& b = *s.blocks;
  for (uint64_t k = first; k <= last; ++k) {
    const uint64_t from = std::max(r.file_offset, b.block_begin(k));
    const uint64_t to = std::min(end, b.block_end(k));
    const ReadRequest part{&s, from, r.dst + (from - r.file_offset), to - from};
    if (b.known_good(k))
      std::memcpy(part.dst, data + from, part.len);
    else
      SG_RETURN_IF_ERROR(copy_block_checked(s, k, data, part));
  }
  return {};
}

Status ShardSet::execute_all(const std::vector<ReadRequest>& requests,
                             const std::function<std::string(size_t tag)>& what_of,
                             const std::function<void(size_t tag)>& done) const {
  std::vector<ReadRequest> pieces;
  uint64_t total = 0;
  for (const ReadRequest& r : requests) {
    total += r.len;
    const uint64_t step = piece_bytes(*r.shard);
    for (uint64_t at = r.file_offset, end = r.file_offset + r.len; at < end;) {
      const uint64_t next = std::min(end, (at / step + 1) * step);
      pieces.push_back({r.shard, at, r.dst + (at - r.file_offset), next - at, r.tag});
      at = next;
    }
  }
  const auto max_threads = static_cast<uint64_t>(options_.io_threads);
  const int threads =
      static_cast<int>(std::clamp<uint64_t>(total / kBytesPerThread, 1, max_threads));
  std::vector<std::unique_ptr<DirectIoBuffer>> buffers(static_cast<size_t>(threads));
  // Pieces left of each tag, for done().
  size_t tags = 0;
  for (const ReadRequest& p : pieces) tags = std::max(tags, p.tag + 1);
  std::vector<std::atomic<size_t>> left(done ? tags : 0);
  if (done)
    for (const ReadRequest& p : pieces) left[p.tag].fetch_add(1, std::memory_order_relaxed);
  Status st = parallel_for(pieces.size(), threads, [&](size_t i, size_t worker) -> Status {
    Status one = execute(pieces[i], buffers[worker]);
    if (!one.ok()) return std::move(one).error().context(what_of(pieces[i].tag));
    if (done && left[pieces[i].tag].fetch_sub(1, std::memory_order_acq_rel) == 1)
      done(pieces[i].tag);
    return one;
  });
  for (auto& b : buffers)
    if (b) give_direct_buffer(std::move(b));
  return st;
}

}  // namespace shardguard::checkpoint
