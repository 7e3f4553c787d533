// Small file and text helpers shared by the fixtures that start system daemons (the Slurm
// cluster, the Ceph RGW): where their directories go, config files written with an error when
// they cannot be, and the tail of a daemon's log for a failure message. Reading a whole file is
// temp_dir.h's slurp().
#pragma once

#include <cstdlib>
#include <fstream>
#include <string>

#include "core/result.h"

namespace shardguard::testing {

// Writes `text` to `path`, replacing it; kIo naming the path when that fails.
inline Status write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  out.close();
  if (!out) return Error(ErrorCode::kIo, "write '" + path + "' failed");
  return ok_status();
}

// $TMPDIR, else /tmp.
inline std::string tmp_base() {
  const char* t = std::getenv("TMPDIR");
  return t && *t ? t : "/tmp";
}

// The last `bytes` of `text`.
inline std::string tail(const std::string& text, size_t bytes) {
  return text.size() <= bytes ? text : text.substr(text.size() - bytes);
}

}  // namespace shardguard::testing
