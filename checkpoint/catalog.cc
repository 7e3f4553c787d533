#include "checkpoint/catalog.h"

#include <algorithm>
#include <utility>

#include "checkpoint/paths.h"

namespace shardguard::checkpoint {
namespace {

// (step, path) of every step directory, newest first.
Result<std::vector<std::pair<uint64_t, std::string>>> step_dirs(Filesystem& fs,
                                                                const std::string& dir) {
  std::vector<std::pair<uint64_t, std::string>> out;
  SG_ASSIGN_OR_RETURN(bool present, fs.exists(dir));
  if (!present) return out;
  SG_ASSIGN_OR_RETURN(auto entries, fs.list(dir));
  for (const DirEntry& e : entries) {
    // Set-aside steps and the directory's own records are never checkpoints, whatever
    // their contents (explicit, not left to the name parser).
    if (e.name == kQuarantineDirName || e.name == kMetaDirName) continue;
    auto step = parse_step_dir_name(e.name);
    // A link named like a step is listed too, so it shows as corrupt with the reason (a
    // RootedFilesystem refuses to look through it) instead of silently vanishing.
    if ((e.is_dir || e.is_symlink) && step) out.emplace_back(*step, join_path(dir, e.name));
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.first > b.first; });
  return out;
}

std::string last_component(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path.substr(path.find_last_of('/') + 1);
}

CatalogEntry not_complete(CatalogEntry entry, CheckpointState state, std::string reason) {
  entry.state = state;
  entry.reason = std::move(reason);
  return entry;
}

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

CatalogEntry inspect_checkpoint(Filesystem& fs, const std::string& step_dir, uint64_t step,
                                Verify verify) {
  CatalogEntry entry{step, step_dir, CheckpointState::kComplete, "", std::nullopt};
  const std::string dir_name = last_component(step_dir);
  const std::string label = dir_name + "/" + std::string(kManifestName);
  const std::string manifest_path = join_path(step_dir, std::string(kManifestName));
  auto present = fs.exists(manifest_path);
  if (!present.ok())
    return not_complete(std::move(entry), CheckpointState::kCorrupt, present.error().message());
  if (!*present)
    return not_complete(std::move(entry), CheckpointState::kIncomplete,
                        dir_name + ": no " + std::string(kManifestName) + " (never committed)");
  auto text = fs.read_file(manifest_path);
  if (!text.ok())
    return not_complete(std::move(entry), CheckpointState::kCorrupt, text.error().message());
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
  if (auto st = verify_checkpoint(fs, step_dir, *entry.manifest, verify); !st.ok())
    return not_complete(std::move(entry), CheckpointState::kCorrupt, st.error().message());
  return entry;
}

Result<std::vector<CatalogEntry>> list_checkpoints(Filesystem& fs,
                                                   const std::string& checkpoint_dir,
                                                   Verify verify) {
  SG_ASSIGN_OR_RETURN(auto dirs, step_dirs(fs, checkpoint_dir));
  std::vector<CatalogEntry> out;
  out.reserve(dirs.size());
  for (const auto& [step, path] : dirs) out.push_back(inspect_checkpoint(fs, path, step, verify));
  return out;
}

Result<CatalogEntry> latest_complete(Filesystem& fs, const std::string& checkpoint_dir,
                                     Verify verify, std::vector<CatalogEntry>* skipped_newer) {
  SG_ASSIGN_OR_RETURN(auto dirs, step_dirs(fs, checkpoint_dir));
  std::string skipped;
  for (const auto& [step, path] : dirs) {
    CatalogEntry entry = inspect_checkpoint(fs, path, step, verify);
    if (entry.state == CheckpointState::kComplete) return entry;
    if (!skipped.empty()) skipped += "; ";
    skipped += std::string(checkpoint_state_name(entry.state)) + ": " + entry.reason;
    if (skipped_newer != nullptr) skipped_newer->push_back(std::move(entry));
  }
  std::string message = "no complete checkpoint in '" + checkpoint_dir + "'";
  if (!skipped.empty()) message += " (" + skipped + ")";
  return Error(ErrorCode::kNotFound, std::move(message));
}

}  // namespace shardguard::checkpoint
