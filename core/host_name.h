// This machine's host name, as owners, holders and probes name it.
#pragma once

#include <unistd.h>

#include <string>
#include <string_view>

namespace shardguard {

// gethostname(), or `fallback` when it fails or is empty.
inline std::string host_name(std::string_view fallback = "unknown") {
  char buf[256] = {};
  if (::gethostname(buf, sizeof buf - 1) != 0 || buf[0] == '\0') return std::string(fallback);
  return buf;
}

}  // namespace shardguard
