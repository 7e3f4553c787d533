#include "checkpoint/commit.h"

#include <unistd.h>

#include <set>
#include <thread>

#include "checkpoint/hf_index.h"
#include "checkpoint/paths.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

RankFiles rank_files(storage::Store& store) { return RankFiles{store.location().is_bucket()}; }

// A committed manifest already there: returned as is (same or older attempt: a committed
// step is never rewritten) or refused (newer attempt: we are stale).
Result<std::optional<Manifest>> existing_manifest(storage::Store& store, const CommitOptions& o) {
  const std::string key = manifest_key(o.step);
  auto text = store.read(key);
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<Manifest>();
    return std::move(text).error();
  }
  const std::string path = store.describe(key);
  SG_ASSIGN_OR_RETURN(auto m, parse_manifest(*text, path));
  if (m.attempt > o.attempt)
    return Error(ErrorCode::kFenced, "'" + path + "' was committed by attempt " +
                                         std::to_string(m.attempt) + ", newer than " +
                                         std::to_string(o.attempt));
  return std::optional<Manifest>(std::move(m));
}

struct Gathered {
  std::vector<Sidecar> sidecars;  // index = rank, complete when missing is empty
  std::vector<std::string> missing;
};

Result<Gathered> gather_sidecars(storage::Store& store, const CommitOptions& o) {
  const RankFiles files = rank_files(store);
  Gathered g;
  g.sidecars.resize(o.world_size);
  for (uint32_t r = 0; r < o.world_size; ++r) {
    const std::string key = step_file_key(o.step, files.sidecar(r, o.attempt));
    const std::string path = store.describe(key);
    auto text = store.read(key);
    if (!text.ok()) {
      if (text.error().code() != ErrorCode::kNotFound) return std::move(text).error();
      g.missing.push_back("rank " + std::to_string(r) + " (no sidecar)");
      continue;
    }
    SG_ASSIGN_OR_RETURN(auto s, parse_sidecar(*text, path));
    if (s.attempt > o.attempt)
      return Error(ErrorCode::kFenced, "'" + path + "' is from attempt " +
                                           std::to_string(s.attempt) + ", newer than " +
                                           std::to_string(o.attempt));
    if (s.attempt < o.attempt) {
      // Left by an older attempt; this attempt's rank will replace it.
      g.missing.push_back("rank " + std::to_string(r) + " (sidecar from older attempt " +
                          std::to_string(s.attempt) + ")");
      continue;
    }
    auto fail = [&](const std::string& why) { return Error(ErrorCode::kCorrupt, path + ": " + why); };
    if (s.job_id != o.job_id) return fail("job '" + s.job_id + "', expected '" + o.job_id + "'");
    if (s.step != o.step) return fail("step " + std::to_string(s.step) + ", expected " +
                                      std::to_string(o.step));
    if (s.world_size != o.world_size)
      return fail("world size " + std::to_string(s.world_size) + ", expected " +
                  std::to_string(o.world_size));
    if (s.rank != r) return fail("rank " + std::to_string(s.rank) + " in rank " +
                                 std::to_string(r) + "'s sidecar");
    if (s.file.path != files.shard(r, o.world_size, o.attempt))
      return fail("names shard '" + s.file.path + "'");
    auto size = store.stat(step_file_key(o.step, s.file.path));
    if (!size.ok()) return fail("shard: " + size.error().message());
    if (!*size) return fail("shard '" + s.file.path + "' is missing");
    if ((*size)->size != s.file.size)
      return fail("shard '" + s.file.path + "' has " + std::to_string((*size)->size) +
                  " bytes, sidecar says " + std::to_string(s.file.size));
    g.sidecars[r] = std::move(s);
  }
  return g;
}

Result<Manifest> build_manifest(const CommitOptions& o, Clock& clock,
                                const std::vector<Sidecar>& sidecars) {
  Manifest m;
  m.job_id = o.job_id;
  m.step = o.step;
  m.attempt = o.attempt;
  m.reason = o.reason;
  m.world_size = o.world_size;
  m.created_unix_ms = to_unix_ms(clock.wall_now());
  for (const auto& s : sidecars) {
    m.files.push_back(s.file);
    m.ranks.push_back(s.state);
    for (const auto& [name, t] : s.tensors) {
      auto [it, inserted] = m.tensors.try_emplace(name, TensorRecord{t.dtype, t.shape, {}});
      if (!inserted && (it->second.dtype != t.dtype || it->second.shape != t.shape))
        return Error(ErrorCode::kCorrupt, "tensor '" + name + "': rank " +
                                              std::to_string(s.rank) +
                                              " has another dtype or shape than earlier ranks");
      for (const auto& c : t.chunks) it->second.chunks.push_back(c);
    }
  }
  if (!sidecars[0].global)
    return Error(ErrorCode::kCorrupt, "rank 0's sidecar has no global state");
  m.global = *sidecars[0].global;
  for (const auto& [name, t] : m.tensors) {
    std::vector<Box> boxes;
    for (const auto& c : t.chunks) boxes.push_back(c.box);
    if (auto st = check_tiling(t.shape, boxes); !st.ok())
      return std::move(st).error().context("tensor '" + name + "'");
  }
  return m;
}

// After the commit, in a directory: temp files of any attempt, shards and sidecars outside
// this world. (A bucket's other attempts' keys are gc's: nothing follows a bucket's commit.)
void remove_stale_files(storage::DirectoryStore& dir, uint64_t step, const Manifest& m) {
  auto entries = dir.list(step_key(step));
  if (!entries.ok()) return;
  for (const auto& e : entries->objects) {
    const std::string name = e.key.substr(e.key.rfind('/') + 1);
    bool stale = is_temp_name(name);
    if (auto shard = parse_shard_file_name(name)) stale = stale || m.find_file(name) == nullptr;
    if (auto rank = parse_sidecar_name(name)) stale = stale || *rank >= m.world_size;
    if (stale) (void)dir.remove(e.key);
  }
}

Result<Manifest> commit_now(storage::Store& store, Clock& clock, const CommitOptions& o,
                            std::vector<Sidecar> sidecars) {
  SG_ASSIGN_OR_RETURN(Manifest m, build_manifest(o, clock, sidecars));
  if (every_tensor_whole(m))
    SG_RETURN_IF_ERROR(store.put(step_file_key(o.step, kHfIndexName), hf_index_json(m)));
  // Re-check right before sealing: another committer may have won the race.
  SG_ASSIGN_OR_RETURN(auto existing, existing_manifest(store, o));
  if (existing) return std::move(*existing);
  // The commit point: created only if absent (a bucket's If-None-Match: *, a directory's
  // rename without replacing), so two committers never both win and nothing is overwritten.
  auto sealed = store.put(manifest_key(o.step), manifest_to_json(m),
                          storage::PutCondition::if_absent());
  if (!sealed.ok()) {
    if (sealed.error().code() != ErrorCode::kExists) return std::move(sealed).error();
    SG_ASSIGN_OR_RETURN(auto winner, existing_manifest(store, o));
    if (!winner)
      return Error(ErrorCode::kIo, "step " + std::to_string(o.step) + ": '" +
                                       store.describe(manifest_key(o.step)) +
                                       "' was said to exist and then was not there");
    if (winner->attempt != o.attempt)
      return Error(ErrorCode::kExists,
                   "step " + std::to_string(o.step) + " was committed by another writer (attempt " +
                       std::to_string(winner->attempt) + ") while attempt " +
                       std::to_string(o.attempt) + " was committing it; this save stops");
    return std::move(*winner);
  }
  if (auto* dir = store.as_directory()) remove_stale_files(*dir, o.step, m);
  return m;
}

Status check_options(const CommitOptions& o) {
  if (o.world_size == 0) return Error(ErrorCode::kInvalid, "world size must be at least 1");
  return {};
}

}  // namespace

Result<Manifest> try_commit_checkpoint(storage::Store& store, Clock& clock,
                                       const CommitOptions& o) {
  SG_RETURN_IF_ERROR(check_options(o));
  SG_ASSIGN_OR_RETURN(auto existing, existing_manifest(store, o));
  if (existing) return std::move(*existing);
  SG_ASSIGN_OR_RETURN(auto g, gather_sidecars(store, o));
  if (!g.missing.empty()) {
    std::string why = "step " + std::to_string(o.step) + " not ready: waiting for ";
    for (size_t i = 0; i < g.missing.size(); ++i) why += (i ? ", " : "") + g.missing[i];
    return Error(ErrorCode::kNotFound, why);
  }
  return commit_now(store, clock, o, std::move(g.sidecars));
}

Result<Manifest> commit_checkpoint(storage::Store& store, Clock& clock, const CommitOptions& o,
                                   const std::function<void(Duration)>& sleep) {
  const SteadyTime deadline = clock.now() + o.timeout;
  SteadyTime next_report = clock.now() + o.report_every;
  for (;;) {
    auto r = try_commit_checkpoint(store, clock, o);
    if (r.ok() || r.error().code() != ErrorCode::kNotFound) return r;
    if (o.cancelled) {
      if (auto why = o.cancelled())
        return Error(ErrorCode::kCancelled,
                     "commit of step " + std::to_string(o.step) + " abandoned: " + *why);
    }
    if (o.on_waiting && clock.now() >= next_report) {
      o.on_waiting(r.error().message());
      next_report = clock.now() + o.report_every;
    }
    if (clock.now() >= deadline)
      return Error(ErrorCode::kTimeout, "commit timed out after " +
                                            std::to_string(std::chrono::duration_cast<
                                                std::chrono::milliseconds>(o.timeout).count()) +
                                            "ms: " + r.error().message());
    if (sleep)
      sleep(o.poll_interval);
    else
      std::this_thread::sleep_for(o.poll_interval);
  }
}

Result<Manifest> try_commit_checkpoint(Filesystem& fs, Clock& clock, const CommitOptions& o) {
  storage::DirectoryStore store(fs, o.checkpoint_dir);
  return try_commit_checkpoint(store, clock, o);
}

Result<Manifest> commit_checkpoint(Filesystem& fs, Clock& clock, const CommitOptions& o,
                                   const std::function<void(Duration)>& sleep) {
  storage::DirectoryStore store(fs, o.checkpoint_dir);
  return commit_checkpoint(store, clock, o, sleep);
}

}  // namespace shardguard::checkpoint
