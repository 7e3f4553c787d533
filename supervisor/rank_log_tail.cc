#include "supervisor/rank_log_tail.h"

#include <algorithm>
#include <cstdio>
#include <span>

namespace shardguard::supervisor {
namespace {

std::string printable(std::string_view line, size_t max_bytes) {
  std::string out;
  const size_t n = std::min(line.size(), max_bytes);
  out.reserve(n + 3);
  for (size_t i = 0; i < n; ++i) {
    const auto c = static_cast<unsigned char>(line[i]);
    out.push_back((c < 0x20 && c != '\t') || c == 0x7F ? '?' : static_cast<char>(c));
  }
  if (line.size() > max_bytes) out += "...";
  return out;
}

}  // namespace

Result<LogTail> rank_log_tail(Filesystem& fs, const std::string& path,
                              const LogTailOptions& options) {
  SG_ASSIGN_OR_RETURN(auto file, fs.open_for_read(path));
  LogTail tail;
  tail.file_size = file->size();
  const uint64_t start =
      tail.file_size > options.max_bytes ? tail.file_size - options.max_bytes : 0;
  std::string window(static_cast<size_t>(tail.file_size - start), '\0');
  auto bytes = std::as_writable_bytes(std::span<char>(window));
  SG_ASSIGN_OR_RETURN(size_t got, file->read_at(start, bytes));
  window.resize(got);
  size_t begin = 0;
  if (start > 0) {  // the window starts mid-line: drop that piece
    const size_t nl = window.find('\n');
    begin = nl == std::string::npos ? window.size() : nl + 1;
    tail.earlier_lines = true;
  }
  std::vector<std::string_view> lines;
  std::string_view rest(window);
  rest.remove_prefix(begin);
  while (!rest.empty()) {
    const size_t nl = rest.find('\n');
    lines.push_back(rest.substr(0, nl));
    rest.remove_prefix(nl == std::string_view::npos ? rest.size() : nl + 1);
  }
  if (lines.size() > options.max_lines) {
    tail.earlier_lines = true;
    lines.erase(lines.begin(), lines.end() - static_cast<std::ptrdiff_t>(options.max_lines));
  }
  for (auto l : lines) {
    if (!l.empty() && l.back() == '\r') l.remove_suffix(1);
    tail.lines.push_back(printable(l, options.max_line_bytes));
  }
  return tail;
}

std::string rank_log_path(const std::string& run_dir, uint64_t attempt, uint32_t rank) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "attempt-%03llu/rank-%u.log",
                static_cast<unsigned long long>(attempt), rank);
  return run_dir.empty() || run_dir.back() == '/' ? run_dir + buf : run_dir + "/" + buf;
}

std::string format_rank_log_tail(uint32_t rank, const std::string& why, const std::string& path,
                                 const LogTail& tail) {
  std::string out =
      "rank " + std::to_string(rank) + " (" + why + ") failed before its first heartbeat; ";
  if (tail.lines.empty()) return out + path + " is empty";
  out += (tail.earlier_lines ? "the last " + std::to_string(tail.lines.size()) + " lines of "
                             : "its log ") +
         path + ":";
  for (const auto& l : tail.lines) out += "\n  | " + l;
  return out;
}

}  // namespace shardguard::supervisor
