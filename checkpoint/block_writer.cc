#include "checkpoint/block_writer.h"

#include <algorithm>
#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <optional>
#include <thread>

#include "checkpoint/block_sums.h"
#include "checkpoint/block_sums_xxh3.h"
#include "checkpoint/manifest.h"

namespace shardguard::checkpoint {
namespace {

struct AlignedFree {
  void operator()(std::byte* p) const { std::free(p); }
};
using AlignedBuffer = std::unique_ptr<std::byte, AlignedFree>;

AlignedBuffer aligned_buffer(size_t size) {
  void* p = nullptr;
  if (::posix_memalign(&p, kDirectIoAlignment, size) != 0) return nullptr;
  return AlignedBuffer(static_cast<std::byte*>(p));
}

// Gathers the bytes [begin, end) of the image into `out`.
void gather(std::span<const Segment> segments, uint64_t begin, uint64_t end, std::byte* out) {
  auto it = std::upper_bound(segments.begin(), segments.end(), begin,
                             [](uint64_t off, const Segment& s) { return off < s.offset; });
  if (it != segments.begin()) --it;
  for (; it != segments.end() && it->offset < end; ++it) {
    uint64_t s_begin = std::max(begin, it->offset);
    uint64_t s_end = std::min(end, it->offset + it->data.size());
    if (s_end <= s_begin) continue;
    std::memcpy(out + (s_begin - begin), it->data.data() + (s_begin - it->offset),
                s_end - s_begin);
  }
}

// The block lies whole in one segment at an aligned address: write it without a copy.
const std::byte* direct_source(std::span<const Segment> segments, uint64_t begin,
                               uint64_t end) {
  for (const auto& s : segments) {
    if (s.offset <= begin && end <= s.offset + s.data.size()) {
      const std::byte* p = s.data.data() + (begin - s.offset);
      if (reinterpret_cast<uintptr_t>(p) % kDirectIoAlignment == 0) return p;
      return nullptr;
    }
  }
  return nullptr;
}

}  // namespace

size_t image_part_bytes(const BlockWriteOptions& options) {
  return std::max(options.block_size, kDirectIoAlignment) / kDirectIoAlignment *
         kDirectIoAlignment;
}

Result<FileChecksums> write_image(storage::Upload& upload, std::span<const Segment> segments,
                                  uint64_t file_size, const BlockWriteOptions& options) {
  auto fail = [&](Error e) -> Error {
    upload.abort();
    return e;
  };
  const size_t block = image_part_bytes(options);
  const uint64_t blocks = (file_size + block - 1) / block;
  // Whole blocks go to the workers; a shorter last one is written after them, so that an
  // O_DIRECT file drops to the page cache only for its tail (core/filesystem.h write_at).
  const uint64_t parallel = file_size % block == 0 ? blocks : blocks - 1;
  std::atomic<uint64_t> next{0};
  std::atomic<bool> abort{false};
  std::mutex error_mu;
  std::optional<Error> first_error;
  auto note_error = [&](Error e) {
    std::lock_guard lock(error_mu);
    if (!first_error) first_error = std::move(e);
    abort = true;
  };

  // Block k from the image: straight from its segment when it lies whole in one at an
  // aligned address, else gathered into `buf`.
  auto write_block = [&](uint64_t k, AlignedBuffer& buf) -> Status {
    const uint64_t begin = k * block;
    const uint64_t end = std::min<uint64_t>(begin + block, file_size);
    const std::byte* src = direct_source(segments, begin, end);
    if (src == nullptr) {
      if (!buf) buf = aligned_buffer(block);
      if (!buf) return Error(ErrorCode::kIo, "out of memory for a write buffer");
      gather(segments, begin, end, buf.get());
      src = buf.get();
    }
    SG_RETURN_IF_ERROR(upload.write_part(begin, std::span(src, end - begin)));
    if (options.on_written) options.on_written(end - begin);
    return ok_status();
  };
  auto worker = [&] {
    AlignedBuffer buf;
    while (!abort.load(std::memory_order_relaxed)) {
      uint64_t k = next.fetch_add(1);
      if (k >= parallel) return;
      if (auto st = write_block(k, buf); !st.ok()) return note_error(std::move(st).error());
    }
  };

  std::vector<std::thread> threads;
  const int n = std::clamp<int>(options.threads, 1, 64);
  for (int i = 0; i < n; ++i) threads.emplace_back(worker);

  // Checksums in one pass, in file order, while the workers write: each piece is hashed
  // into the whole-file XXH3-128 and then, still in the cache, into its block's XXH3-64.
  constexpr size_t kPiece = 256ull << 10;
  XXH3_state_t* state = XXH3_createState();
  XXH3_128bits_reset(state);
  BlockHasher block_sums(options.checksum_block_bytes);
  for (const auto& s : segments)
    for (size_t at = 0; at < s.data.size(); at += kPiece) {
      const auto piece = s.data.subspan(at, std::min(kPiece, s.data.size() - at));
      XXH3_128bits_update(state, piece.data(), piece.size());
      block_sums.update(piece);
    }
  XXH128_hash_t digest = XXH3_128bits_digest(state);
  XXH3_freeState(state);

  for (auto& t : threads) t.join();
  if (first_error) return fail(std::move(*first_error));
  if (parallel < blocks) {
    AlignedBuffer buf;
    if (auto st = write_block(parallel, buf); !st.ok()) return fail(std::move(st).error());
  }
  if (auto st = upload.finish(); !st.ok()) return fail(std::move(st).error());
  return FileChecksums{xxh3_128_hex(digest.high64, digest.low64), options.checksum_block_bytes,
                       block_sums.finish()};
}

void copy_image(std::span<const Segment> segments, std::byte* dst, int threads) {
  constexpr size_t kPiece = 16ull << 20;
  struct Piece {
    const std::byte* src;
    std::byte* dst;
    size_t size;
  };
  std::vector<Piece> pieces;
  for (const auto& s : segments) {
    for (size_t off = 0; off < s.data.size(); off += kPiece)
      pieces.push_back({s.data.data() + off, dst + s.offset + off,
                        std::min(kPiece, s.data.size() - off)});
  }
  std::atomic<size_t> next{0};
  auto work = [&] {
    for (size_t i = next++; i < pieces.size(); i = next++)
      std::memcpy(pieces[i].dst, pieces[i].src, pieces[i].size);
  };
  const int n = std::clamp<int>(threads, 1, 64);
  if (n == 1 || pieces.size() < 2) {
    work();
    return;
  }
  std::vector<std::thread> pool;
  for (int i = 1; i < n; ++i) pool.emplace_back(work);
  work();
  for (auto& t : pool) t.join();
}

}  // namespace shardguard::checkpoint
