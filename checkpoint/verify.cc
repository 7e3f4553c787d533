#include "checkpoint/verify.h"

#include <xxhash.h>

#include <algorithm>
#include <memory>

#include "checkpoint/paths.h"

namespace shardguard::checkpoint {
namespace {

constexpr uint64_t kHashStep = 8ull << 20;

// The last component of a directory path ("a/step-000000200/" -> "step-000000200").
std::string dir_label(std::string dir) {
  while (dir.size() > 1 && dir.back() == '/') dir.pop_back();
  auto slash = dir.rfind('/');
  return slash == std::string::npos ? dir : dir.substr(slash + 1);
}

Error corrupt(const std::string& label, const std::string& what) {
  return Error(ErrorCode::kCorrupt, label + ": " + what);
}

}  // namespace

Result<std::string> file_xxh3_128(Filesystem& fs, const std::string& path,
                                  const std::function<void(uint64_t)>& on_bytes) {
  SG_ASSIGN_OR_RETURN(auto mapped, fs.map_readonly(path));
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Error(ErrorCode::kInternal, "XXH3_createState failed");
  XXH3_128bits_reset(state.get());
  const auto bytes = mapped->bytes();
  for (uint64_t at = 0; at < bytes.size(); at += kHashStep) {
    const uint64_t n = std::min<uint64_t>(kHashStep, bytes.size() - at);
    XXH3_128bits_update(state.get(), bytes.data() + at, n);
    if (on_bytes) on_bytes(n);
  }
  const XXH128_hash_t digest = XXH3_128bits_digest(state.get());
  return xxh3_128_hex(digest.high64, digest.low64);
}

Status verify_checkpoint(Filesystem& fs, const std::string& step_dir, const Manifest& manifest,
                         Verify verify, VerifyProgress progress) {
  const std::string label = dir_label(step_dir);
  if (auto step = parse_step_dir_name(label); step && *step != manifest.step)
    return corrupt(label + "/" + std::string(kManifestName),
                   "step " + std::to_string(manifest.step) + " differs from the directory's " +
                       std::to_string(*step));
  const uint64_t total = manifest.total_bytes();
  uint64_t done = 0;
  for (const FileRecord& f : manifest.files) {
    const std::string name = label + "/" + f.path;
    const std::string path = join_path(step_dir, f.path);
    auto size = fs.file_size(path);
    if (!size.ok()) {
      if (size.error().code() == ErrorCode::kNotFound) return corrupt(name, "missing");
      return std::move(size).error();
    }
    if (*size != f.size)
      return corrupt(name, "size " + std::to_string(*size) + " differs from manifest " +
                               std::to_string(f.size));
    if (verify == Verify::kChecksum && !f.xxh3_128.empty()) {
      SG_ASSIGN_OR_RETURN(std::string sum, file_xxh3_128(fs, path, [&](uint64_t n) {
                            done += n;
                            if (progress) progress(done, total);
                          }));
      if (sum != f.xxh3_128)
        return corrupt(name, "checksum " + sum + " differs from manifest " + f.xxh3_128);
    } else {
      done += f.size;
      if (progress) progress(done, total);
    }
  }
  return {};
}

}  // namespace shardguard::checkpoint
