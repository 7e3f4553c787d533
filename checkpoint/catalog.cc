#include "checkpoint/catalog.h"

#include <algorithm>
#include <map>
#include <set>
#include <utility>

#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

// Every step under the location, newest first. Set-aside steps and the location's own
// records are never checkpoints, whatever their contents (explicit, not left to the name
// parser). A link named like a step is listed too, so it shows as corrupt with the reason
// (a RootedFilesystem refuses to look through it) instead of silently vanishing. A bucket's
// step whose every file belongs to a quarantined attempt is gone from the catalog.
Result<std::vector<uint64_t>> steps_of(storage::Store& store) {
  SG_ASSIGN_OR_RETURN(storage::Listing listing, store.list(""));
  std::vector<uint64_t> out;
  auto consider = [&](const std::string& name) {
    if (name == kQuarantineDirName || name == kMetaDirName) return;
    if (auto step = parse_step_dir_name(name)) out.push_back(*step);
  };
  for (const auto& p : listing.prefixes) consider(p);
  for (const auto& l : listing.links) consider(l);
  std::sort(out.begin(), out.end(), std::greater<>());
  out.erase(std::unique(out.begin(), out.end()), out.end());
  return out;
}

CatalogEntry not_complete(CatalogEntry entry, CheckpointState state, std::string reason) {
  entry.state = state;
  entry.reason = std::move(reason);
  return entry;
}

// A bucket's quarantine marks, read once per listing: a step is gone from the catalog when
// its manifest's attempt is marked (a crash between writing the mark and deleting the
// manifest), or when it has no manifest and every file it holds is a marked attempt's.
class Marks {
 public:
  explicit Marks(storage::Store& store) : store_(store) {}

  bool set_aside(const CatalogEntry& e) {
    if (!store_.location().is_bucket()) return false;
    if (e.manifest) return marked(e.step).contains(e.manifest->attempt);
    if (e.state != CheckpointState::kIncomplete) return false;
    const auto& attempts = marked(e.step);
    if (attempts.empty()) return false;
    auto listing = store_.list(step_key(e.step));
    if (!listing.ok()) return false;
    for (const auto& o : listing->objects)
      if (!o.key.ends_with(std::string("/") + std::string(kHfIndexName))) return false;
    for (const auto& p : listing->prefixes) {
      auto a = parse_attempt_dir_name(p.substr(p.rfind('/') + 1));
      if (!a || !attempts.contains(*a)) return false;
    }
    return true;
  }

 private:
  const std::set<uint64_t>& marked(uint64_t step) {
    auto it = by_step_.find(step);
    if (it != by_step_.end()) return it->second;
    auto attempts = quarantined_attempts(store_, step);
    return by_step_[step] = attempts.ok() ? *attempts : std::set<uint64_t>{};
  }

  storage::Store& store_;
  std::map<uint64_t, std::set<uint64_t>> by_step_;
};

}  // namespace

std::string_view checkpoint_state_name(CheckpointState state) {
  switch (state) {
    case CheckpointState::kComplete:
      return "complete";
    case CheckpointState::kIncomplete:
      return "incomplete";
    case CheckpointState::kCorrupt:
      return "corrupt";
    case CheckpointState::kNewer:
      return "newer";
  }
  return "corrupt";
}

namespace {

std::string last_component(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path.substr(path.find_last_of('/') + 1);
}

// The step whose files lie under `prefix` of `store`; `dir` is its path or URL.
CatalogEntry inspect_at(storage::Store& store, const std::string& prefix, std::string dir,
                        uint64_t step, Verify verify) {
  const std::string dir_name = last_component(dir);
  CatalogEntry entry{step, std::move(dir), CheckpointState::kComplete, "", std::nullopt};
  const std::string label = dir_name + "/" + std::string(kManifestName);
  auto text = store.read(storage::join_key(prefix, kManifestName));
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound)
      return not_complete(std::move(entry), CheckpointState::kIncomplete,
                          dir_name + ": no " + std::string(kManifestName) + " (never committed)");
    return not_complete(std::move(entry), CheckpointState::kCorrupt, text.error().message());
  }
  auto manifest = parse_manifest(*text, label);
  if (!manifest.ok()) {
    // kUnsupported from the parser means exactly "a newer format", never bad bytes.
    const bool newer = manifest.error().code() == ErrorCode::kUnsupported;
    return not_complete(std::move(entry),
                        newer ? CheckpointState::kNewer : CheckpointState::kCorrupt,
                        manifest.error().message());
  }
  entry.manifest = std::move(manifest).value();
  if (entry.manifest->step != step)
    return not_complete(std::move(entry), CheckpointState::kCorrupt,
                        label + ": step " + std::to_string(entry.manifest->step) +
                            " differs from the directory's " + std::to_string(step));
  if (auto st = verify_checkpoint(store, prefix, *entry.manifest, verify); !st.ok())
    return not_complete(std::move(entry), CheckpointState::kCorrupt, st.error().message());
  return entry;
}

}  // namespace

CatalogEntry inspect_checkpoint(storage::Store& store, uint64_t step, Verify verify) {
  return inspect_at(store, step_key(step), store.describe(step_key(step)), step, verify);
}

Result<std::vector<CatalogEntry>> list_checkpoints(storage::Store& store, Verify verify) {
  SG_ASSIGN_OR_RETURN(auto steps, steps_of(store));
  std::vector<CatalogEntry> out;
  out.reserve(steps.size());
  Marks marks(store);
  for (uint64_t step : steps) {
    CatalogEntry entry = inspect_checkpoint(store, step, verify);
    if (marks.set_aside(entry)) continue;
    out.push_back(std::move(entry));
  }
  return out;
}

Result<CatalogEntry> latest_complete(storage::Store& store, Verify verify,
                                     std::vector<CatalogEntry>* skipped_newer) {
  SG_ASSIGN_OR_RETURN(auto steps, steps_of(store));
  std::string skipped;
  Marks marks(store);
  for (uint64_t step : steps) {
    CatalogEntry entry = inspect_checkpoint(store, step, verify);
    if (marks.set_aside(entry)) continue;
    if (entry.state == CheckpointState::kComplete) return entry;
    if (!skipped.empty()) skipped += "; ";
    skipped += std::string(checkpoint_state_name(entry.state)) + ": " + entry.reason;
    if (skipped_newer != nullptr) skipped_newer->push_back(std::move(entry));
  }
  std::string message = "no complete checkpoint in '" + store.location().str() + "'";
  if (!skipped.empty()) message += " (" + skipped + ")";
  return Error(ErrorCode::kNotFound, std::move(message));
}

CatalogEntry inspect_checkpoint(Filesystem& fs, const std::string& step_dir, uint64_t step,
                                Verify verify) {
  storage::DirectoryStore store(fs, step_dir);
  return inspect_at(store, "", step_dir, step, verify);
}

Result<std::vector<CatalogEntry>> list_checkpoints(Filesystem& fs,
                                                   const std::string& checkpoint_dir,
                                                   Verify verify) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return list_checkpoints(store, verify);
}

Result<CatalogEntry> latest_complete(Filesystem& fs, const std::string& checkpoint_dir,
                                     Verify verify, std::vector<CatalogEntry>* skipped_newer) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return latest_complete(store, verify, skipped_newer);
}

}  // namespace shardguard::checkpoint
