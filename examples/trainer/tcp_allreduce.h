// A per-step collective for the example trainer: the sum of one double over all ranks, through
// rank 0 over plain TCP (MASTER_ADDR:MASTER_PORT), summed in rank order. Like NCCL's or gloo's
// all-reduce it blocks until every rank has contributed, so when one rank dies or stops, the
// others are stuck in it - which is what the supervisor's teardown must handle.
// Thread-safety: one thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard::example {

class TcpAllReduce {
 public:
  // Rank 0 listens and accepts the others; every other rank connects (retrying until
  // `timeout`). kTimeout names who is missing.
  static Result<std::unique_ptr<TcpAllReduce>> connect(uint32_t rank, uint32_t world,
                                                       const std::string& master_addr,
                                                       uint16_t master_port,
                                                       std::chrono::milliseconds timeout);
  ~TcpAllReduce();
  // The sum over ranks 0..world-1 of `value`, in rank order, on every rank. Blocks; kIo when a
  // peer is gone.
  Result<double> sum(double value);

 private:
  TcpAllReduce(uint32_t rank, std::vector<int> fds) : rank_(rank), fds_(std::move(fds)) {}
  uint32_t rank_;
  std::vector<int> fds_;  // rank 0: one per other rank, in rank order; others: one to rank 0
};

}  // namespace shardguard::example
