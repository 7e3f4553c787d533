// Block checksums of checkpoint files (format 2): the XXH3-64 of every fixed-size block of
// a file. The writer computes them in the same pass as the whole-file XXH3-128
// (BlockHasher); the reader checks the blocks a read touches, once per block per reader
// (BlockVerdicts); `ckpt verify --full` recomputes them all. A failure is described as a
// value (ChecksumFailure), so that a rank can report resume_failed{manifest, file, offset}
// without parsing messages.
// Thread-safety: BlockHasher is used by one thread at a time; BlockVerdicts may be used by
// any number of threads at once; the functions are pure.
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// Where a checksum failed. `file` is relative to the step directory; `offset` is the first
// byte of the first bad block, or nullopt when only a whole-file XXH3-128 was there to fail
// (a format-1 file).
struct ChecksumFailure {
  std::string manifest;  // path of the checkpoint's manifest.json
  std::string file;
  std::optional<uint64_t> offset;
  uint64_t block_bytes = 0;  // size of the bad block's kind (0 with no offset)

  bool operator==(const ChecksumFailure&) const = default;
};

// "<label>: block at offset 4194304 (2 MiB) fails its checksum", `label` naming the file
// (e.g. "step-000000200/shard-00001-of-00002.safetensors").
std::string block_failure_message(std::string_view label, uint64_t offset, uint64_t block_bytes);

// XXH3-64 of one block.
uint64_t block_xxh3_64(std::span<const std::byte> block);
// The same, copying the block's bytes [copy_begin, copy_end) to `dst` on the way: each piece
// is hashed, then copied while it is still in the CPU cache (one pass over memory).
uint64_t block_xxh3_64_copying(std::span<const std::byte> block, size_t copy_begin, size_t copy_end,
                               std::byte* dst);

// The sums of consecutive blocks of a byte stream fed in pieces of any size.
class BlockHasher {
 public:
  explicit BlockHasher(uint64_t block_bytes);
  ~BlockHasher();
  BlockHasher(const BlockHasher&) = delete;
  BlockHasher& operator=(const BlockHasher&) = delete;

  void update(std::span<const std::byte> bytes);
  // The sums of every block fed so far, the last (shorter) one included.
  std::vector<uint64_t> finish();

 private:
  struct State;
  std::unique_ptr<State> state_;
};

// XXH3-64 of a block that `fill(offset, piece)` writes into `dst` piece by piece (e.g. by
// pread), each piece hashed right after it is filled, while it is in the CPU cache.
// Stops at the first failed fill and returns its error.
Result<uint64_t> block_xxh3_64_filling(
    std::span<std::byte> dst,
    const std::function<Status(size_t offset, std::span<std::byte> piece)>& fill);

// One reader's verdicts on one file's blocks: unknown until some thread hashes the block,
// then good or bad for the reader's lifetime (a block is hashed once, or a few times when
// threads race for it; either way the same verdict).
class BlockVerdicts {
 public:
  // `record` must have block sums and outlive this object.
  explicit BlockVerdicts(const FileRecord& record);

  uint64_t block_bytes() const { return record_->block_bytes; }
  uint64_t block_count() const { return record_->block_xxh3.size(); }
  // Index of the block holding byte `offset`.
  uint64_t block_of(uint64_t offset) const { return offset / record_->block_bytes; }
  uint64_t block_begin(uint64_t k) const { return k * record_->block_bytes; }
  // One past the block's last byte (the file's end for the last block).
  uint64_t block_end(uint64_t k) const;

  bool known_good(uint64_t k) const { return verdict_[k].load(std::memory_order_acquire) == kGood; }
  bool known_bad(uint64_t k) const { return verdict_[k].load(std::memory_order_acquire) == kBad; }
  // True when every block overlapping [offset, offset + length) is known good.
  bool all_known_good(uint64_t offset, uint64_t length) const;
  // Block k's verdict, hashing `bytes` (the whole block: block_end(k) - block_begin(k)
  // bytes) unless it is known. True when good.
  bool check(uint64_t k, const std::byte* bytes);
  // Records block k's verdict from its XXH3-64 computed elsewhere. True when good.
  bool settle(uint64_t k, uint64_t xxh3_64);
  // Marks every block good (after the whole file matched its XXH3-128).
  void mark_all_good();

 private:
  static constexpr uint8_t kUnknown = 0, kGood = 1, kBad = 2;
  const FileRecord* record_;
  std::unique_ptr<std::atomic<uint8_t>[]> verdict_;
};

}  // namespace shardguard::checkpoint
