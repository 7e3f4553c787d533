#include "checkpoint/staging.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <chrono>
#include <system_error>
#include <thread>
#include <vector>

namespace shardguard::checkpoint {
namespace {

#ifndef MADV_POPULATE_WRITE
constexpr int MADV_POPULATE_WRITE = 23;  // Linux 5.14; older headers lack the name
#endif

// Population works in pieces of this size, so that a stop takes effect within one piece
// (a few ms) and the threads share the work evenly.
constexpr size_t kPiece = 32ull << 20;

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

using SteadyClock = std::chrono::steady_clock;

// Faults in [p, p + n) for writing. MADV_POPULATE_WRITE does it in one call; before Linux
// 5.14 (EINVAL) a write to each base page does the same, one fault at a time.
bool populate(std::byte* p, size_t n) {
  if (::madvise(p, n, MADV_POPULATE_WRITE) == 0) return true;
  if (errno != EINVAL) return false;  // e.g. ENOMEM: leave the rest to the caller's copy
  const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
  for (size_t at = 0; at < n; at += page)
    reinterpret_cast<volatile std::byte*>(p)[at] = std::byte{0};
  return true;
}

}  // namespace

uint64_t staging_bytes_for(const Manifest& resume, uint32_t rank, uint32_t world_size) {
  if (world_size == 0 || resume.world_size == 0) return 0;
  uint64_t largest = 0;
  for (const FileRecord& f : resume.files) {
    if (resume.world_size == world_size && f.rank == rank) return f.size;
    largest = std::max(largest, f.size);
  }
  if (resume.world_size == world_size) return 0;
  // Rounded up, so that a rank that gets the remainder rows still fits.
  return (largest * resume.world_size + world_size - 1) / world_size;
}

struct StagingBuffer::Population {
  std::byte* base = nullptr;
  size_t size = 0;
  SteadyClock::time_point start;
  std::atomic<size_t> next{0};
  std::atomic<bool> stop{false};
  std::atomic<uint64_t> populated{0};
  std::atomic<int64_t> last_end_ns{0};  // since `start`
  std::atomic<int> running{0};
  std::vector<std::thread> threads;

  void work() {
    while (!stop.load(std::memory_order_relaxed)) {
      const size_t at = next.fetch_add(kPiece);
      if (at >= size) break;
      const size_t n = std::min(kPiece, size - at);
      if (!populate(base + at, n)) break;
      populated.fetch_add(n);
      const int64_t ns =
          std::chrono::duration_cast<std::chrono::nanoseconds>(SteadyClock::now() - start).count();
      int64_t seen = last_end_ns.load();
      while (ns > seen && !last_end_ns.compare_exchange_weak(seen, ns)) {
      }
    }
    running.fetch_sub(1);
  }

  void join() {
    stop = true;
    for (auto& t : threads)
      if (t.joinable()) t.join();
    threads.clear();
  }
};

StagingBuffer::StagingBuffer() : StagingBuffer(StagingOptions{}) {}
StagingBuffer::StagingBuffer(StagingOptions options) : options_(options) {}

StagingBuffer::~StagingBuffer() { unmap(); }

void StagingBuffer::set_release_hook(std::function<void(std::byte*, size_t)> hook) {
  release_hook_ = std::move(hook);
}

void StagingBuffer::stop_population() {
  if (population_) population_->join();
}

void StagingBuffer::unmap() {
  stop_population();
  if (data_ == nullptr) return;
  if (release_hook_) release_hook_(data_, capacity_);
  ::munmap(data_, capacity_);
  data_ = nullptr;
  capacity_ = 0;
  huge_advised_ = false;
}

// A 2 MiB-aligned mapping of `size` rounded up to 2 MiB: over-map by one huge page, then
// give back the unaligned head and the tail.
Status StagingBuffer::map(size_t size) {
  const size_t rounded = round_up(std::max<size_t>(size, 1), kStagingHugePage);
  const size_t over = rounded + kStagingHugePage;
  void* raw = ::mmap(nullptr, over, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED)
    return Error::from_errno("staging buffer of " + std::to_string(size) + " bytes", errno);
  auto* start = static_cast<std::byte*>(raw);
  auto* aligned =
      reinterpret_cast<std::byte*>(round_up(reinterpret_cast<uintptr_t>(start), kStagingHugePage));
  if (aligned > start) ::munmap(start, static_cast<size_t>(aligned - start));
  std::byte* end = start + over;
  if (end > aligned + rounded)
    ::munmap(aligned + rounded, static_cast<size_t>(end - (aligned + rounded)));
  data_ = aligned;
  capacity_ = rounded;
  // THP "never" (or no THP at all) refuses: base pages then, which still work.
  huge_advised_ = options_.huge_pages && ::madvise(data_, capacity_, MADV_HUGEPAGE) == 0;
  return {};
}

Status StagingBuffer::prepare(size_t size) {
  if (data_ != nullptr && size <= capacity_) return {};
  unmap();
  SG_RETURN_IF_ERROR(map(size));
  auto pop = std::make_unique<Population>();
  pop->base = data_;
  pop->size = capacity_;
  pop->start = SteadyClock::now();
  const int threads = std::clamp(options_.populate_threads, 1, 16);
  try {
    for (int i = 0; i < threads; ++i) {
      pop->running.fetch_add(1);
      pop->threads.emplace_back([p = pop.get()] { p->work(); });
    }
  } catch (const std::system_error&) {
    pop->running.fetch_sub(1);  // the one that did not start; the others do the work
  }
  population_ = std::move(pop);
  return {};
}

Result<std::byte*> StagingBuffer::reserve(size_t size) {
  if (data_ != nullptr && size <= capacity_) {
    stop_population();
    return data_;
  }
  unmap();
  population_.reset();
  SG_RETURN_IF_ERROR(map(size));
  return data_;
}

StagingStats StagingBuffer::stats() const {
  StagingStats s;
  s.capacity = capacity_;
  s.huge_pages_advised = huge_advised_;
  if (population_) {
    s.populated_bytes = population_->populated.load();
    s.populate_seconds = static_cast<double>(population_->last_end_ns.load()) / 1e9;
    s.populating = population_->running.load() > 0;
  }
  return s;
}

}  // namespace shardguard::checkpoint
