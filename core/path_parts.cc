// Pure path string helpers declared in core/filesystem.h. Kept apart from the POSIX
// implementation so that the fuzz targets can compile them without the filesystem code.
#include <string>

#include "core/filesystem.h"

namespace shardguard {

std::string parent_dir(const std::string& path) {
  auto slash = path.find_last_of('/');
  if (slash == std::string::npos) return ".";
  if (slash == 0) return "/";
  return path.substr(0, slash);
}

std::string join_path(const std::string& a, const std::string& b) {
  if (a.empty()) return b;
  if (a.back() == '/') return a + b;
  return a + "/" + b;
}

}  // namespace shardguard
