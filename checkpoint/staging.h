// Staging memory for asynchronous saves: one rank's whole shard file image, kept and re-used
// across saves, so that the training loop stalls only for a memory copy into it.
//
// Why it is populated ahead: a fresh anonymous mapping costs a page fault and a zeroed page
// per 4 KiB on its first write (measured here: 0.45 GB/s for 4 GiB, a 9 s first-save stall).
// So the mapping is 2 MiB-aligned with MADV_HUGEPAGE (one fault and one zeroing per 2 MiB
// where transparent huge pages are enabled in "always" or "madvise" mode), and prepare()
// populates it (MADV_POPULATE_WRITE, or a write per page on kernels before 5.14) on
// background threads from the moment its size is known - typically client start-up - so the
// first snapshot copies into memory that is already there.
//
// Thread-safety: one thread at a time uses a StagingBuffer (the owner: the training thread,
// or the save thread it hands off to). The population threads are internal, and stopped by
// reserve() and the destructor.
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <memory>

#include "checkpoint/manifest.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// The alignment and huge-page size of staging mappings.
inline constexpr size_t kStagingHugePage = 2ull << 20;

struct StagingOptions {
  // Threads that populate a mapping in the background (>= 1). Zeroing pages is bound by
  // memory bandwidth and one core's fault path; two threads reach it where one does not
  // (measured here: 2-5 GB/s with one, 5-11 GB/s with two).
  int populate_threads = 2;
  bool huge_pages = true;  // MADV_HUGEPAGE on the mapping
};

// What the background population did so far.
struct StagingStats {
  uint64_t capacity = 0;            // bytes mapped
  uint64_t populated_bytes = 0;     // populated in the background (not by the caller's copy)
  double populate_seconds = 0;      // from prepare() to the last populated piece
  bool populating = false;          // threads still running
  bool huge_pages_advised = false;  // MADV_HUGEPAGE was accepted for the current mapping
};

// Staging bytes a rank is likely to need on its first save, from the checkpoint it resumes
// from: its own file when the world size is unchanged, else the largest file scaled by
// old / new world size (resharding moves the same bytes onto fewer or more ranks). 0 when
// the manifest lists no file of that rank.
uint64_t staging_bytes_for(const Manifest& resume, uint32_t rank, uint32_t world_size);

class StagingBuffer {
 public:
  StagingBuffer();
  explicit StagingBuffer(StagingOptions options);
  ~StagingBuffer();  // stops the population, runs the release hook, unmaps
  StagingBuffer(const StagingBuffer&) = delete;
  StagingBuffer& operator=(const StagingBuffer&) = delete;

  // Maps at least `size` bytes now (unless the current mapping is that large already) and
  // starts populating them in the background; returns at once. An error names the size.
  Status prepare(size_t size);
  // At least `size` bytes ready for the caller to write: the current mapping when large
  // enough (a population still running is stopped, and the caller's writes fault in what is
  // left - as fast as the population would have), else a new mapping of which the caller's
  // first writes pay the population.
  Result<std::byte*> reserve(size_t size);

  std::byte* data() const { return data_; }
  size_t capacity() const { return capacity_; }
  StagingStats stats() const;

  // Called with the mapping's address and size before it is unmapped (replaced by a larger
  // one, or at destruction), e.g. to unregister it from a GPU runtime that pinned it.
  void set_release_hook(std::function<void(std::byte*, size_t)> hook);

 private:
  struct Population;
  Status map(size_t size);
  void unmap();
  void stop_population();

  StagingOptions options_;
  std::byte* data_ = nullptr;
  size_t capacity_ = 0;
  bool huge_advised_ = false;
  std::function<void(std::byte*, size_t)> release_hook_;
  std::unique_ptr<Population> population_;
};

}  // namespace shardguard::checkpoint
