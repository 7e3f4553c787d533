// A deterministic checkpoint for crash tests: step S holds a [rows, cols] F32 tensor "w"
// split by rows across `world` ranks, element (i, j) = S + i * cols + j, and a whole I64
// tensor "count" = {S} on rank 0. write_step() saves and commits it; check_step() reads a
// committed one back and compares every byte.
#pragma once

#include <cstring>
#include <string>
#include <vector>

#include "checkpoint/commit.h"
#include "checkpoint/reader.h"
#include "checkpoint/writer.h"

namespace shardguard::testing {

struct StepShape {
  uint64_t rows = 64;
  uint64_t cols = 1024;
};

inline Status write_rank_of_step(Filesystem& fs, const std::string& dir, uint64_t step,
                                 uint32_t rank, uint32_t world, StepShape shape = {},
                                 uint64_t attempt = 0) {
  using namespace checkpoint;
  WriterOptions o;
  o.checkpoint_dir = dir;
  o.job_id = "crash-job";
  o.step = step;
  o.attempt = attempt;
  o.rank = rank;
  o.world_size = world;
  o.io_threads = 2;
  o.block_size = 256 << 10;
  ShardWriter w(fs, o);
  const uint64_t r0 = rank * shape.rows / world, r1 = (rank + 1) * shape.rows / world;
  std::vector<float> rows((r1 - r0) * shape.cols);
  for (uint64_t i = r0; i < r1; ++i)
    for (uint64_t j = 0; j < shape.cols; ++j)
      rows[(i - r0) * shape.cols + j] = float(step + i * shape.cols + j);
  SG_RETURN_IF_ERROR(w.add_chunk("w", DType::kF32, {shape.rows, shape.cols},
                                 Box{{r0, 0}, {r1 - r0, shape.cols}},
                                 std::as_bytes(std::span(rows))));
  int64_t count = static_cast<int64_t>(step);
  if (rank == 0) {
    SG_RETURN_IF_ERROR(w.add_tensor("count", DType::kI64, {1},
                                    std::as_bytes(std::span(&count, 1))));
    w.set_global_state({step, "null", "null"});
  }
  w.set_rank_state({"rng" + std::to_string(rank), std::to_string(step), "null"});
  auto s = w.finish();
  if (!s.ok()) return std::move(s).error();
  return {};
}

inline Status write_step(Filesystem& fs, Clock& clock, const std::string& dir, uint64_t step,
                         uint32_t world, StepShape shape = {}, uint64_t attempt = 0) {
  for (uint32_t r = 0; r < world; ++r)
    SG_RETURN_IF_ERROR(write_rank_of_step(fs, dir, step, r, world, shape, attempt));
  checkpoint::CommitOptions c;
  c.checkpoint_dir = dir;
  c.job_id = "crash-job";
  c.step = step;
  c.attempt = attempt;
  c.world_size = world;
  c.timeout = std::chrono::seconds(0);
  auto m = checkpoint::commit_checkpoint(fs, clock, c);
  if (!m.ok()) return std::move(m).error();
  return {};
}

// Reads every tensor of a committed step and compares it with what write_step() wrote.
inline Status check_step(Filesystem& fs, const std::string& step_dir, uint64_t step,
                         StepShape shape = {}) {
  using namespace checkpoint;
  SG_ASSIGN_OR_RETURN(auto reader, CheckpointReader::open(fs, step_dir));
  SG_ASSIGN_OR_RETURN(auto w, reader.read_whole("w"));
  if (w.size() != shape.rows * shape.cols * 4)
    return Error(ErrorCode::kCorrupt, step_dir + ": tensor w has the wrong size");
  for (uint64_t k = 0; k < shape.rows * shape.cols; ++k) {
    float v;
    std::memcpy(&v, w.data() + k * 4, 4);
    if (v != float(step + k))
      return Error(ErrorCode::kCorrupt, step_dir + ": w[" + std::to_string(k) + "] is " +
                                            std::to_string(v));
  }
  SG_ASSIGN_OR_RETURN(auto count, reader.read_whole("count"));
  int64_t c;
  std::memcpy(&c, count.data(), 8);
  if (c != static_cast<int64_t>(step))
    return Error(ErrorCode::kCorrupt, step_dir + ": count is " + std::to_string(c));
  if (reader.global().step != step)
    return Error(ErrorCode::kCorrupt, step_dir + ": global step differs");
  return {};
}

}  // namespace shardguard::testing
