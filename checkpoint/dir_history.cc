#include "checkpoint/dir_history.h"

#include <boost/json.hpp>

#include "checkpoint/json_fields.h"
#include "checkpoint/paths.h"
#include "checkpoint/strict_json.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

namespace json = boost::json;

constexpr std::string_view kFormat = "shardguard-dir-history";
constexpr int kVersion = 1;
constexpr size_t kMaxSteps = 64;

// Drops the lowest entries: old steps stop mattering once the run has moved past them.
template <typename Container>
void bound(Container& c) {
  while (c.size() > kMaxSteps) c.erase(c.begin());
}

std::string history_json(const DirHistory& h) {
  json::object o;
  o["format"] = kFormat;
  o["version"] = kVersion;
  o["updated_unix_ms"] = h.updated_unix_ms;
  o["preempted_without_commit"] = h.preempted_without_commit;
  json::array failed;
  for (const auto& [step, count] : h.failed_resumes) {
    json::object e;
    if (step)
      e["resume_step"] = *step;
    else
      e["resume_step"] = nullptr;
    e["count"] = count;
    failed.emplace_back(std::move(e));
  }
  o["failed_resumes"] = std::move(failed);
  json::array tried;
  for (uint64_t s : h.fallback_tried) tried.emplace_back(s);
  o["fallback_tried"] = std::move(tried);
  return json::serialize(o) + "\n";
}

Result<uint32_t> u32(JsonFields& f, std::string_view key) {
  SG_ASSIGN_OR_RETURN(uint64_t v, f.u64(key));
  if (v > UINT32_MAX) return Error(ErrorCode::kCorrupt, f.path(key) + ": too large");
  return static_cast<uint32_t>(v);
}

Result<DirHistory> parse_history(std::string_view text) {
  SG_ASSIGN_OR_RETURN(json::value root, parse_json_strict(text));
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
  SG_ASSIGN_OR_RETURN(std::string format, f.string("format"));
  SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
  if (format != kFormat || version != kVersion)
    return Error(ErrorCode::kCorrupt,
                 "format '" + format + "' version " + std::to_string(version) + " is not ours");
  DirHistory h;
  SG_ASSIGN_OR_RETURN(h.updated_unix_ms, f.i64("updated_unix_ms"));
  SG_ASSIGN_OR_RETURN(h.preempted_without_commit, u32(f, "preempted_without_commit"));
  SG_ASSIGN_OR_RETURN(auto failed, f.array("failed_resumes"));
  for (size_t i = 0; i < failed->size(); ++i) {
    SG_ASSIGN_OR_RETURN(auto e,
                        JsonFields::of((*failed)[i], "failed_resumes[" + std::to_string(i) + "]"));
    SG_ASSIGN_OR_RETURN(auto step_value, e.any("resume_step"));
    std::optional<uint64_t> step;
    if (!step_value->is_null()) {
      SG_ASSIGN_OR_RETURN(uint64_t s, json_u64(*step_value, e.path("resume_step")));
      step = s;
    }
    SG_ASSIGN_OR_RETURN(uint32_t count, u32(e, "count"));
    SG_RETURN_IF_ERROR(e.finish());
    if (!h.failed_resumes.emplace(step, count).second)
      return Error(ErrorCode::kCorrupt, e.path("resume_step") + ": listed twice");
  }
  SG_ASSIGN_OR_RETURN(auto tried, f.u64_list("fallback_tried"));
  h.fallback_tried.insert(tried.begin(), tried.end());
  SG_RETURN_IF_ERROR(f.finish());
  return h;
}

}  // namespace

DirHistory on_run_end(DirHistory history, bool preempted, bool committed) {
  if (preempted && !committed)
    ++history.preempted_without_commit;
  else
    history.preempted_without_commit = 0;
  return history;
}

std::optional<std::string> requeue_futile(const DirHistory& history, uint32_t limit) {
  if (limit == 0 || history.preempted_without_commit < limit) return std::nullopt;
  return "the last " + std::to_string(history.preempted_without_commit) +
         " runs were each preempted (exit 75) without committing a checkpoint: requeueing "
         "will not help";
}

DirHistory on_attempt_end(DirHistory history, const AttemptEnd& a) {
  const bool progress = a.committed_step && (!a.resume_step || *a.committed_step > *a.resume_step);
  if (progress) {
    history.failed_resumes.erase(a.resume_step);
    return history;
  }
  if (a.ended_by_notice) return history;
  ++history.failed_resumes[a.resume_step];
  bound(history.failed_resumes);
  return history;
}

uint32_t failed_resumes(const DirHistory& history, std::optional<uint64_t> resume_step) {
  auto it = history.failed_resumes.find(resume_step);
  return it == history.failed_resumes.end() ? 0 : it->second;
}

DirHistory on_fallback_tried(DirHistory history, uint64_t step) {
  history.fallback_tried.insert(step);
  bound(history.fallback_tried);
  return history;
}

Result<DirHistory> load_dir_history(Filesystem& fs, const std::string& checkpoint_dir) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return load_dir_history(store);
}

Status store_dir_history(Filesystem& fs, const std::string& checkpoint_dir, DirHistory history,
                         WallTime now) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return store_dir_history(store, std::move(history), now);
}

Result<std::string> reset_dir_history(Filesystem& fs, const std::string& checkpoint_dir,
                                      WallTime now) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return reset_dir_history(store, now);
}

Result<DirHistory> load_dir_history(storage::Store& store) {
  const std::string path = store.describe(meta_key(kDirHistoryName));
  auto text = store.read(meta_key(kDirHistoryName));
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return DirHistory{};
    return std::move(text).error();
  }
  auto h = parse_history(*text);
  if (!h.ok())
    return std::move(h).error().context(
        path + " (corrupt; reset_dir_history() keeps it aside and starts the counts afresh)");
  return h;
}

Status store_dir_history(storage::Store& store, DirHistory history, WallTime now) {
  history.updated_unix_ms = to_unix_ms(now);
  SG_RETURN_IF_ERROR(store.put(meta_key(kDirHistoryName), history_json(history)));
  return {};
}

Result<std::string> reset_dir_history(storage::Store& store, WallTime now) {
  const std::string kept = store.describe(meta_key(kDirHistoryCorruptName));
  if (auto* dir = store.as_directory()) {
    const std::string path = dir->path(meta_key(kDirHistoryName));
    SG_ASSIGN_OR_RETURN(bool present, dir->fs().exists(path));
    if (present) SG_RETURN_IF_ERROR(dir->fs().rename(path, kept));
  } else {
    // No rename in a bucket: the corrupt bytes are copied aside (a small record).
    auto text = store.read(meta_key(kDirHistoryName));
    if (text.ok()) SG_RETURN_IF_ERROR(store.put(meta_key(kDirHistoryCorruptName), *text));
  }
  SG_RETURN_IF_ERROR(store_dir_history(store, DirHistory{}, now));
  return kept;
}

}  // namespace shardguard::checkpoint
