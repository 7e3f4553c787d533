#include "storage/bucket_mount.h"

#include <array>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <vector>

namespace shardguard::storage {
namespace {

// mountinfo escapes space, tab, newline and backslash as \ooo.
std::string unescape(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '\\' && i + 3 < s.size()) {
      const std::string_view o = s.substr(i + 1, 3);
      if (o.size() == 3 && o[0] >= '0' && o[0] <= '3' && o[1] >= '0' && o[1] <= '7' &&
          o[2] >= '0' && o[2] <= '7') {
        out += static_cast<char>((o[0] - '0') * 64 + (o[1] - '0') * 8 + (o[2] - '0'));
        i += 3;
        continue;
      }
    }
    out += s[i];
  }
  return out;
}

bool under(std::string_view path, std::string_view mount) {
  if (mount == "/") return true;
  return path == mount || (path.starts_with(mount) && path.size() > mount.size() &&
                           path[mount.size()] == '/');
}

}  // namespace

std::optional<MountFacts> mount_of(std::string_view absolute_path, std::string_view mountinfo) {
  std::optional<MountFacts> best;
  size_t start = 0;
  while (start < mountinfo.size()) {
    const size_t end = std::min(mountinfo.find('\n', start), mountinfo.size());
    const std::string_view line = mountinfo.substr(start, end - start);
    start = end + 1;
    // id parent major:minor root mount-point options [optional...] - fstype source super
    std::vector<std::string_view> fields;
    size_t at = 0;
    while (at < line.size() && fields.size() < 64) {
      const size_t sp = std::min(line.find(' ', at), line.size());
      fields.push_back(line.substr(at, sp - at));
      at = sp + 1;
    }
    size_t dash = 0;
    for (size_t i = 6; i < fields.size(); ++i)
      if (fields[i] == "-") {
        dash = i;
        break;
      }
    if (fields.size() < 7 || dash == 0 || dash + 2 >= fields.size()) continue;
    const std::string mount_point = unescape(fields[4]);
    if (!under(absolute_path, mount_point)) continue;
    if (best && best->mount_point.size() > mount_point.size()) continue;
    // A later mount at the same point covers an earlier one.
    best = MountFacts{mount_point, std::string(fields[dash + 1]), unescape(fields[dash + 2])};
  }
  return best;
}

bool is_bucket_mount(std::string_view fs_type) {
  static constexpr std::array<std::string_view, 9> kTypes = {
      "fuse.s3fs",    "fuse.goofys",   "fuse.mountpoint-s3", "fuse.rclone",  "fuse.gcsfuse",
      "fuse.blobfuse", "fuse.blobfuse2", "fuse.s3backer",     "fuse.geesefs"};
  for (auto t : kTypes)
    if (fs_type == t) return true;
  return false;
}

Status refuse_bucket_mount(const std::string& dir) {
  std::error_code ec;
  std::filesystem::path p = std::filesystem::absolute(dir, ec);
  if (ec) return {};
  // The directory may not exist yet: its nearest existing parent decides.
  while (!p.empty() && !std::filesystem::exists(p, ec) && p.has_parent_path() &&
         p != p.parent_path())
    p = p.parent_path();
  const auto real = std::filesystem::weakly_canonical(p, ec);
  if (ec) return {};
  std::ifstream in("/proc/self/mountinfo");
  if (!in) return {};
  std::stringstream text;
  text << in.rdbuf();
  auto m = mount_of(real.string(), text.str());
  if (!m || !is_bucket_mount(m->fs_type)) return {};
  return Error(ErrorCode::kInvalid,
               "checkpoint directory '" + dir + "' is on a FUSE mount of a bucket (" + m->fs_type +
                   " at " + m->mount_point + "): renames there are copies and deletes, locks "
                   "are local to one host and file sizes can lag their writes, so a commit could "
                   "be torn. Give the bucket itself instead: --checkpoint-dir "
                   "s3://BUCKET/PREFIX (and [storage] for its endpoint)");
}

}  // namespace shardguard::storage
