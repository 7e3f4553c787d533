// Shared by the sg_bench_ckpt worker's commands (bench/ckpt_bench_*.cc): the benchmark
// state (16 F32 tensors of [rows, 4096], each split by rows across ranks), timing helpers
// and the JSON line each command prints for bench/ckpt_bench.py. Single-threaded use.
#pragma once

#include <chrono>
#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/box.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/result.h"

namespace shardguard::bench {

using BenchClock = std::chrono::steady_clock;

inline constexpr uint64_t kTensors = 16;
inline constexpr uint64_t kCols = 4096;

// CLOCK_MONOTONIC nanoseconds (what Python's time.monotonic_ns() reads).
int64_t mono_ns(BenchClock::time_point t);
int64_t mono_now_ns();
double since(BenchClock::time_point t0);
double gbs(uint64_t bytes, double seconds);
// User + system CPU seconds of this process (all threads) so far.
double cpu_seconds();

// Start barrier: ranks prepare, say "ready", and start together when the driver says "go".
void wait_for_go();
// Prints "sg_bench_ckpt: <message>" to stderr and returns 1.
int die(const Error& e);

uint64_t rows_for(uint64_t total_bytes);
checkpoint::Box rank_box(uint64_t rows, uint32_t rank, uint32_t world);
// This rank's rows of every tensor, filled with random bits (incompressible, as fio's data).
std::vector<std::vector<float>> make_state(uint64_t rows, uint32_t rank, uint32_t world);
// Adds this rank's chunks of `state` (and on rank 0 the global state) to `w`.
Status add_state(checkpoint::ShardWriter& w, uint64_t step, uint64_t rows, uint32_t rank,
                 uint32_t world, const std::vector<std::vector<float>>& state);
// ReaderOptions from SG_BENCH_READ_THREADS, SG_BENCH_READ_DIRECT, SG_BENCH_READ_REQUEST_KIB,
// SG_BENCH_MIN_PREAD_KIB.
checkpoint::ReaderOptions reader_options_from_env();

// Commands (argument checking done by main).
int warm(const std::string& dir, uint64_t step, int repeat);
int stall(uint64_t total, uint64_t gap_ms, const std::string& mode, const std::string& dir);
int resume_job(uint64_t step_work_passes);
// save, load and clear on s3://BUCKET/PREFIX (bench/ckpt_bench_bucket.cc).
int bucket_save(const std::string& url, uint64_t step, uint32_t rank, uint32_t world,
                uint64_t total);
int bucket_load(const std::string& url, uint64_t step, uint32_t rank, uint32_t world);
int bucket_clear(const std::string& url);

}  // namespace shardguard::bench
