#include "checkpoint/commit.h"

#include <unistd.h>

#include <set>
#include <thread>

#include "checkpoint/hf_index.h"
#include "checkpoint/paths.h"

namespace shardguard::checkpoint {
namespace {

std::string step_dir_of(const CommitOptions& o) {
  return join_path(o.checkpoint_dir, step_dir_name(o.step));
}

// A committed manifest already in the directory: returned as is (same or older attempt:
// a committed step is never rewritten) or refused (newer attempt: we are stale).
Result<std::optional<Manifest>> existing_manifest(Filesystem& fs, const CommitOptions& o) {
  const std::string path = join_path(step_dir_of(o), std::string(kManifestName));
  SG_ASSIGN_OR_RETURN(bool exists, fs.exists(path));
  if (!exists) return std::optional<Manifest>();
  SG_ASSIGN_OR_RETURN(auto text, fs.read_file(path));
  SG_ASSIGN_OR_RETURN(auto m, parse_manifest(text, path));
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

Result<Gathered> gather_sidecars(Filesystem& fs, const CommitOptions& o) {
  const std::string dir = step_dir_of(o);
  Gathered g;
  g.sidecars.resize(o.world_size);
  for (uint32_t r = 0; r < o.world_size; ++r) {
    const std::string path = join_path(dir, sidecar_name(r));
    SG_ASSIGN_OR_RETURN(bool exists, fs.exists(path));
    if (!exists) {
      g.missing.push_back("rank " + std::to_string(r) + " (no sidecar)");
      continue;
    }
    SG_ASSIGN_OR_RETURN(auto text, fs.read_file(path));
    SG_ASSIGN_OR_RETURN(auto s, parse_sidecar(text, path));
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
    if (s.file.path != shard_file_name(r, o.world_size))
      return fail("names shard '" + s.file.path + "'");
    const std::string shard = join_path(dir, s.file.path);
    auto size = fs.file_size(shard);
    if (!size.ok()) return fail("shard: " + size.error().message());
    if (*size != s.file.size)
      return fail("shard '" + s.file.path + "' has " + std::to_string(*size) +
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

// After the commit: temp files of any attempt, shards and sidecars outside this world.
void remove_stale_files(Filesystem& fs, const std::string& dir, const Manifest& m) {
  auto entries = fs.list(dir);
  if (!entries.ok()) return;
  for (const auto& e : *entries) {
    bool stale = is_temp_name(e.name);
    if (auto shard = parse_shard_file_name(e.name))
      stale = stale || m.find_file(e.name) == nullptr;
    if (auto rank = parse_sidecar_name(e.name)) stale = stale || *rank >= m.world_size;
    if (stale) (void)fs.remove(join_path(dir, e.name));
  }
}

Result<Manifest> commit_now(Filesystem& fs, Clock& clock, const CommitOptions& o,
                            std::vector<Sidecar> sidecars) {
  SG_ASSIGN_OR_RETURN(Manifest m, build_manifest(o, clock, sidecars));
  const std::string dir = step_dir_of(o);
  if (every_tensor_whole(m))
    SG_RETURN_IF_ERROR(atomic_write_file(fs, join_path(dir, std::string(kHfIndexName)),
                                         hf_index_json(m)));
  // Re-check right before sealing: another committer may have won the race.
  SG_ASSIGN_OR_RETURN(auto existing, existing_manifest(fs, o));
  if (existing) return std::move(*existing);
  SG_RETURN_IF_ERROR(
      atomic_write_file(fs, join_path(dir, std::string(kManifestName)), manifest_to_json(m)));
  remove_stale_files(fs, dir, m);
  return m;
}

Status check_options(const CommitOptions& o) {
  if (o.world_size == 0) return Error(ErrorCode::kInvalid, "world size must be at least 1");
  return {};
}

}  // namespace

Result<Manifest> try_commit_checkpoint(Filesystem& fs, Clock& clock, const CommitOptions& o) {
  SG_RETURN_IF_ERROR(check_options(o));
  SG_ASSIGN_OR_RETURN(auto existing, existing_manifest(fs, o));
  if (existing) return std::move(*existing);
  SG_ASSIGN_OR_RETURN(auto g, gather_sidecars(fs, o));
  if (!g.missing.empty()) {
    std::string why = "step " + std::to_string(o.step) + " not ready: waiting for ";
    for (size_t i = 0; i < g.missing.size(); ++i) why += (i ? ", " : "") + g.missing[i];
    return Error(ErrorCode::kNotFound, why);
  }
  return commit_now(fs, clock, o, std::move(g.sidecars));
}

Result<Manifest> commit_checkpoint(Filesystem& fs, Clock& clock, const CommitOptions& o,
                                   const std::function<void(Duration)>& sleep) {
  const SteadyTime deadline = clock.now() + o.timeout;
  SteadyTime next_report = clock.now() + o.report_every;
  for (;;) {
    auto r = try_commit_checkpoint(fs, clock, o);
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

}  // namespace shardguard::checkpoint
