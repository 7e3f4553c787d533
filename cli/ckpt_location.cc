#include "cli/ckpt_location.h"

#include "checkpoint/paths.h"
#include "storage/dir_store.h"
#include "storage/s3/s3_options.h"

namespace shardguard::cli {

Result<CkptLocation> CkptLocation::open(const std::string& dir) {
  CkptLocation out;
  SG_ASSIGN_OR_RETURN(storage::Location loc, storage::Location::parse(dir));
  if (!loc.is_bucket()) {
    RootOptions root;
    root.path = dir;
    out.rooted_ = RootedFilesystem::single(std::move(root));
  }
  SG_ASSIGN_OR_RETURN(storage::s3::S3Options s3,
                      storage::s3::s3_options_from_env([](std::string_view name) {
                        const char* v = ::getenv(std::string(name).c_str());
                        return v ? std::optional<std::string>(v) : std::nullopt;
                      }));
  SG_ASSIGN_OR_RETURN(out.opened_, open_location(dir, s3, out.fs(), /*probe=*/false));
  return out;
}

Result<checkpoint::CatalogEntry> pick_step(storage::Store& store, std::optional<uint64_t> step,
                                           checkpoint::Verify verify) {
  if (!step) return checkpoint::latest_complete(store, verify);
  bool there = false;
  if (auto* dir = store.as_directory()) {
    // A step directory that is a link is there too: inspecting it says what is wrong.
    SG_ASSIGN_OR_RETURN(there, dir->fs().exists(dir->path(checkpoint::step_key(*step))));
  } else {
    SG_ASSIGN_OR_RETURN(storage::Listing listing, store.list(checkpoint::step_key(*step)));
    there = !listing.objects.empty() || !listing.prefixes.empty();
  }
  if (!there)
    return Error(ErrorCode::kNotFound, "no checkpoint for step " + std::to_string(*step) +
                                           " in '" + store.location().str() + "'");
  return checkpoint::inspect_checkpoint(store, *step, verify);
}

Result<checkpoint::CheckpointReader> open_complete(storage::Store& store,
                                                   std::optional<uint64_t> step) {
  SG_ASSIGN_OR_RETURN(auto entry, pick_step(store, step, checkpoint::Verify::kSize));
  if (entry.state != checkpoint::CheckpointState::kComplete)
    return Error(ErrorCode::kCorrupt,
                 "step " + std::to_string(entry.step) + " is " +
                     std::string(checkpoint::checkpoint_state_name(entry.state)) + ": " +
                     entry.reason);
  return checkpoint::CheckpointReader::open(store, entry.step);
}

}  // namespace shardguard::cli
