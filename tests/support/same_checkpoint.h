// Catch assertions that two committed checkpoints hold the same state: every tensor (dtype,
// shape, bytes), each rank's state and the global state; only the creation time may differ.
// For tests that compare an interrupted run with a clean one, wherever each was written.
#pragma once

#include <catch2/catch.hpp>

#include "checkpoint/manifest.h"
#include "checkpoint/reader.h"

namespace shardguard::testing {

inline void require_same_checkpoint(const checkpoint::CheckpointReader& expected,
                                    const checkpoint::CheckpointReader& actual) {
  const auto& a = expected;
  const auto& b = actual;
  REQUIRE(a.tensor_names() == b.tensor_names());
  REQUIRE_FALSE(a.tensor_names().empty());
  for (const auto& t : a.tensor_names()) {
    INFO("tensor " << t);
    REQUIRE(a.tensor(t)->dtype == b.tensor(t)->dtype);
    REQUIRE(a.tensor(t)->shape == b.tensor(t)->shape);
    auto x = a.read_whole(t);
    auto y = b.read_whole(t);
    REQUIRE(x.ok());
    REQUIRE(y.ok());
    CHECK(*x == *y);
  }
  const auto& m = a.manifest();
  REQUIRE(m.world_size == b.manifest().world_size);
  CHECK(b.manifest().reason == checkpoint::SaveReason::kFinal);
  for (uint32_t r = 0; r < m.world_size; ++r) {
    CHECK(a.rank_state(r).rng == b.rank_state(r).rng);
    CHECK(a.rank_state(r).data_position == b.rank_state(r).data_position);
    CHECK(a.rank_state(r).user == b.rank_state(r).user);
  }
  CHECK(a.global().step == b.global().step);
  CHECK(a.global().lr_schedule == b.global().lr_schedule);
  CHECK(a.global().user == b.global().user);
}

}  // namespace shardguard::testing
