// The shard files behind a CheckpointReader (internal to checkpoint/reader.cc): each opened
// on first use and checked once (size, header against the manifest, and its checksums), and
// the execution of the reader's byte requests from them with every returned byte covered
// by a checked block.
//
// Checks: a file with block sums (format 2) has the blocks holding its header checked when
// it is opened, and every other block when a read first touches it, hashed while it is in
// the cache beside the copy (from the O_DIRECT buffer, from `out` when the request covers
// the whole block, else from the mapping); verdicts are kept per block for the ShardSet's
// lifetime. A file with only a whole-file XXH3-128 (format 1) is hashed whole when opened,
// as is every file when ReaderOptions::verify_whole_files is set. Files listed without any
// checksum (Hugging Face directories) are not checked. A mismatch is kCorrupt naming the
// file and the bad block's offset, and the first one is kept as a ChecksumFailure.
//
// Thread-safety: every const method may be called from any number of threads at once.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <vector>

#include "checkpoint/block_sums.h"
#include "checkpoint/box.h"
#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"
#include "checkpoint/safetensors.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

// One opened shard. Immutable once opened, except the block verdicts and a bucket's lazy
// mapping.
struct Shard {
  std::string file;   // relative to the step directory
  std::string key;    // in the store
  std::string label;  // "<step directory's name>/<file>", for messages
  // A directory's file: mapped at open. A bucket's object: fetched whole on the first read
  // that needs a mapping (short runs of a resharded box, sub-byte tensors), else null.
  std::unique_ptr<MappedFile> map;
  mutable std::mutex map_mu;
  mutable std::unique_ptr<MappedFile> lazy_map;     // by map_mu
  std::unique_ptr<RandomAccessFile> reader;         // pread through the page cache
  // O_DIRECT pread, or a bucket's ranged GETs; null when not used.
  std::unique_ptr<RandomAccessFile> direct_reader;
  SafetensorsHeader header;
  // Into header.tensors: the keys the manifest's chunks name in this file, and no others.
  std::unordered_map<std::string, const TensorEntry*> by_key;
  std::unique_ptr<BlockVerdicts> blocks;  // null: nothing left to check by block

  uint64_t size() const { return reader->size(); }
};

// A run of `len` bytes at `file_offset` of `shard` that goes to `dst`.
struct ReadRequest {
  const Shard* shard;
  uint64_t file_offset;
  std::byte* dst;
  size_t len;
  size_t tag = 0;  // the caller's: which of its reads this request serves
};

class ShardSet {
 public:
  // `manifest` and `store` must outlive the set; files are found under the key `prefix`
  // (a step's key, or "" when the store is rooted at the step directory itself); `label`
  // names that place in messages ("step-000000200").
  ShardSet(storage::Store& store, std::string prefix, std::string label, const Manifest& manifest,
           const ReaderOptions& options);
  ~ShardSet();

  // The shard `file`, opened and checked on first use. A failed open is not remembered:
  // the next call tries again.
  Result<std::shared_ptr<const Shard>> get(const std::string& file) const;

  // The whole file's bytes: its mapping (a bucket's object is fetched once, here).
  Result<const std::byte*> mapped(const Shard& s) const;
  // Checks the blocks of `s` overlapping [offset, offset + length) that are not known good,
  // hashing them from the mapping.
  Status check_mapped(const Shard& s, uint64_t offset, uint64_t length) const;
  // copy_region() from the chunk at file offset `base` of `s` (mapped), checking the blocks
  // of each run before copying it.
  Status copy_region_checked(const Shard& s, uint64_t base, const Box& src_box, std::byte* dst,
                             const Box& dst_box, const Box& region, size_t element_bytes) const;
  // Reads every request (cut into pieces of about request_bytes) on up to io_threads
  // threads, checking the blocks they touch. A failed request's error gets the context
  // what_of(its tag) ("tensor 'w'"); done(tag), when given, is called (from any of the
  // threads) once every request of that tag has been read.
  Status execute_all(const std::vector<ReadRequest>& requests,
                     const std::function<std::string(size_t tag)>& what_of,
                     const std::function<void(size_t tag)>& done = {}) const;

  // The first checksum failure seen, if any.
  std::optional<ChecksumFailure> failure() const;

 private:
  struct Slot;
  Result<std::shared_ptr<const Shard>> open(const std::string& file) const;
  Status check_header_blocks(Shard& s, std::vector<std::byte>& head) const;
  Status check_whole_file(Shard& s, const FileRecord& rec) const;
  Status check_block(const Shard& s, uint64_t k, const std::byte* bytes) const;
  Status copy_block_checked(const Shard& s, uint64_t k, const std::byte* source,
                            const ReadRequest& r) const;
  Error block_error(const Shard& s, uint64_t k) const;
  Status execute(const ReadRequest& r, std::unique_ptr<DirectIoBuffer>& buffer) const;
  Status read_in_place(const ReadRequest& r, bool checked) const;
  Status read_direct(const ReadRequest& r, bool checked,
                     std::unique_ptr<DirectIoBuffer>& buffer) const;
  Status copy_cached(const ReadRequest& r, bool warm) const;
  uint64_t piece_bytes(const Shard& s) const;
  Result<std::unique_ptr<DirectIoBuffer>> take_direct_buffer() const;
  void give_direct_buffer(std::unique_ptr<DirectIoBuffer> b) const;
  void note_failure(ChecksumFailure f) const;

  struct ChunkRef {
    const std::string* name;
    const TensorRecord* tensor;
    const ChunkRecord* chunk;
  };

  std::string key(std::string_view file) const { return storage::join_key(prefix_, file); }
  std::string path(std::string_view file) const { return store_->describe(key(file)); }

  storage::Store* store_;
  std::string prefix_;
  std::string dir_label_;
  const Manifest* manifest_;
  ReaderOptions options_;
  size_t direct_buffer_bytes_;
  std::map<std::string, std::vector<ChunkRef>, std::less<>> chunks_by_file_;

  mutable std::mutex mu_;
  mutable std::map<std::string, std::shared_ptr<Slot>, std::less<>> slots_;  // by mu_
  mutable std::vector<std::unique_ptr<DirectIoBuffer>> direct_buffers_;      // by mu_: free ones
  mutable std::optional<ChecksumFailure> failure_;                           // by mu_
};

}  // namespace shardguard::checkpoint
