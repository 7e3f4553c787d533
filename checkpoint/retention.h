// Which checkpoints to delete: keep the last K complete ones, every N-th step, and any
// protected step (the one a running attempt resumed from); remove incomplete or corrupt
// directories older than the newest complete one. plan_retention() is a pure decision;
// apply_retention() does the deletions, each one made safe against a crash in the middle
// (the manifest goes first, so a half-deleted step reads as incomplete, never complete).
// Thread-safety: pure function / independent calls.
#pragma once

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "core/filesystem.h"

namespace shardguard::checkpoint {

struct RetentionPolicy {
  uint32_t keep_last = 3;           // newest complete checkpoints kept
  uint64_t keep_every = 0;          // also keep complete steps divisible by this (0: off)
  std::set<uint64_t> protected_steps;
};

struct RetentionDecision {
  CatalogEntry entry;
  bool remove = false;
  std::string why;  // "keep: newest 3", "remove: incomplete, older than step 500", ...
};

// One decision per entry of `newest_first` (list_checkpoints order).
std::vector<RetentionDecision> plan_retention(const std::vector<CatalogEntry>& newest_first,
                                              const RetentionPolicy& policy);

// Deletes the entries marked for removal; returns how many were removed. Stops at the
// first failure, naming the directory.
Result<size_t> apply_retention(Filesystem& fs, const std::vector<RetentionDecision>& plan);

}  // namespace shardguard::checkpoint
