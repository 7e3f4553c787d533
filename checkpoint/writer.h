// Writes one rank's part of a checkpoint: its shard (a safetensors file) and its sidecar.
//
// Usage: add tensors or chunks, set the rank (and, on rank 0, the global) state, then
// finish(): the shard is written by several threads in large blocks, its XXH3-128 and block
// checksums (format 2) computed in the same pass; in a directory to a temporary name
// (O_DIRECT where the filesystem allows), fsynced and renamed into place, then the sidecar
// the same way; in a bucket as a multipart upload (one part a block) under this attempt's own
// keys, then the sidecar in one PUT (checkpoint/paths.h draws both). The checkpoint is not
// complete until a committer writes the manifest (checkpoint/commit.h).
//
// snapshot() copies every added tensor into a reusable staging buffer (checkpoint/staging.h),
// after which the caller may change its tensors while finish() runs on another thread
// (AsyncShardWriter). Tensors whose bytes are not in host memory (GPU memory) are added as
// placeholders: place() lays the file image out in staging and says where each goes, the
// caller copies them there (e.g. cudaMemcpyAsync), and finish() writes the image.
// Thread-safety: one ShardWriter is used by one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/dtype.h"
#include "checkpoint/manifest.h"
#include "checkpoint/staging.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

struct WriterOptions {
  // The parent of the step directories, for the Filesystem constructor; a Store knows its own.
  std::string checkpoint_dir;
  std::string job_id = "job";
  uint64_t step = 0;
  uint64_t attempt = 0;
  // Whether `attempt` numbers this rank's launches (a supervisor or a launcher's restart count
  // set it): then an attempt's keys are written once, and in a bucket a second writer of one
  // attempt's sidecar is refused (kExists). A job started by hand keeps attempt 0 across its
  // own restarts: its rank replaces the sidecar an earlier run of it left, as in a directory.
  bool attempts_numbered = true;
  uint32_t rank = 0;
  uint32_t world_size = 1;
  int io_threads = 4;                 // parallel writers of one shard
  size_t block_size = 8ull << 20;     // bytes per write
  bool direct_io = true;              // O_DIRECT when the filesystem supports it
  // Bytes per checksum block (a power of two from 4 KiB to 64 MiB): the unit the reader
  // checks. Smaller blocks make reads of small boxes check fewer bytes; more sums make
  // a larger manifest (19 bytes of JSON per block).
  uint64_t checksum_block_bytes = kDefaultChecksumBlockBytes;
  // Asked before each block (and, for a bucket, while it is sent): a reason stops finish()
  // with kCancelled and nothing of this rank's part is left (the save was abandoned, or its
  // deadline passed).
  storage::Interrupt interrupt{};
  // Told each block's bytes once they are written (a long save's progress). Any thread.
  std::function<void(uint64_t bytes)> on_written{};
};

class ShardWriter {
 public:
  // Into the directory options.checkpoint_dir.
  ShardWriter(Filesystem& fs, WriterOptions options);
  // Into `store` (a directory or a bucket), which must outlive the writer.
  ShardWriter(storage::Store& store, WriterOptions options);
  ~ShardWriter();
  ShardWriter(ShardWriter&&) noexcept;
  ShardWriter& operator=(ShardWriter&&) noexcept;

  // A tensor this rank holds whole. `data` is packed row-major little-endian and must stay
  // valid until finish() (or snapshot()) returns.
  Status add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                    std::span<const std::byte> data);
  // The part `box` of a tensor of `global_shape` split across ranks; `data` holds exactly
  // the box, packed row-major. Sub-byte dtypes (F4, F6_*) can only be stored whole.
  Status add_chunk(std::string name, DType dtype, std::vector<uint64_t> global_shape, Box box,
                   std::span<const std::byte> data);
  // A tensor or chunk whose bytes the caller copies into staging itself, after place().
  Status add_placeholder(std::string name, DType dtype, std::vector<uint64_t> global_shape,
                         Box box);
  // RNG bytes, data loader position and user JSON of this rank. JSON text is checked in
  // finish().
  void set_rank_state(RankState state);
  // The job's state; required on rank 0, refused elsewhere.
  void set_global_state(GlobalState state);

  // Copies every added tensor into `staging`; afterwards the caller's buffers are no longer
  // read. Returns the bytes copied: 0 when the writer was already placed in `staging`.
  // kInvalid when placeholders were added but the writer was not placed.
  Result<uint64_t> snapshot(StagingBuffer& staging);
  // Lays the file image out in `staging`: the header and every tensor added with data are
  // copied there; returns where each placeholder's bytes go, in the order they were added.
  // The caller fills those before finish().
  Result<std::vector<std::span<std::byte>>> place(StagingBuffer& staging);

  // Writes shard and sidecar durably and returns the sidecar. Fails with kFenced when the
  // step is already committed or a newer attempt owns this rank's files; on any failure
  // the temporary files are removed and earlier checkpoints are untouched.
  Result<Sidecar> finish();

  // Bytes the shard file will have (header included), once tensors are added.
  Result<uint64_t> planned_file_size();
  const WriterOptions& options() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Runs finish() of one writer at a time on a background thread. The training loop stalls
// only for snapshot(), a memory copy into re-used staging memory.
class AsyncShardWriter {
 public:
  AsyncShardWriter();
  ~AsyncShardWriter();  // waits for a save in flight

  // Waits for the previous save, snapshots `writer` and starts finish() in the background.
  // Returns the snapshot's duration in seconds (the training stall).
  Result<double> start(ShardWriter writer);
  // True while a save is running.
  bool busy() const;
  // Waits for the save in flight and returns its sidecar (kInvalid when none was started).
  Result<Sidecar> wait();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::checkpoint
