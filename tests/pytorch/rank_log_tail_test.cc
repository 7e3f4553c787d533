// supervisor/rank_log_tail.h: the last lines of a rank's log, read within a bound whatever
// the file holds, and the console block that names the file.
#include "supervisor/rank_log_tail.h"

#include <catch2/catch.hpp>

#include <fstream>

#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::supervisor;

namespace {

std::string write(const testing::TempDir& dir, const std::string& text) {
  const std::string path = dir / "rank-1.log";
  std::ofstream(path, std::ios::binary) << text;
  return path;
}

}  // namespace

TEST_CASE("The last lines of a log, a final line without newline included", "[unit]") {
  testing::TempDir dir;
  auto& fs = PosixFilesystem::instance();
  struct Case {
    std::string text;
    std::vector<std::string> lines;
    bool earlier;
  };
  auto c = GENERATE(
      Case{"", {}, false}, Case{"one\n", {"one"}, false}, Case{"a\nb", {"a", "b"}, false},
      Case{"a\r\nb\r\n", {"a", "b"}, false}, Case{"1\n2\n3\n4\n", {"2", "3", "4"}, true},
      Case{"x\n\n\n", {"x", "", ""}, false}, Case{"bell\a\x1b[0m\tok\n", {"bell??[0m\tok"}, false});
  LogTailOptions o;
  o.max_lines = 3;
  auto tail = rank_log_tail(fs, write(dir, c.text), o);
  REQUIRE(tail.ok());
  CHECK(tail->lines == c.lines);
  CHECK(tail->earlier_lines == c.earlier);
  CHECK(tail->file_size == c.text.size());
}

TEST_CASE("A huge log is read only within max_bytes, long lines cut", "[unit]") {
  testing::TempDir dir;
  std::string text(5 << 20, 'x');  // one 5 MiB line, then a traceback's end
  text += "\nTraceback (most recent call last):\nModuleNotFoundError: No module named 'torch'\n";
  LogTailOptions o;
  o.max_bytes = 4096;
  o.max_line_bytes = 100;
  auto tail = rank_log_tail(PosixFilesystem::instance(), write(dir, text), o);
  REQUIRE(tail.ok());
  CHECK(tail->earlier_lines);
  CHECK(tail->lines == std::vector<std::string>{"Traceback (most recent call last):",
                                                "ModuleNotFoundError: No module named 'torch'"});
  // The window is all one line: nothing complete is in it, so nothing is shown.
  auto only = rank_log_tail(PosixFilesystem::instance(), write(dir, std::string(10000, 'y')), o);
  REQUIRE(only.ok());
  CHECK(only->lines.empty());
  o.max_bytes = 1 << 20;
  auto cut = rank_log_tail(PosixFilesystem::instance(), write(dir, std::string(300, 'z')), o);
  REQUIRE(cut.ok());
  CHECK(cut->lines == std::vector<std::string>{std::string(100, 'z') + "..."});
}

TEST_CASE("A missing log is an error naming it; paths and the console block", "[unit]") {
  testing::TempDir dir;
  auto missing = rank_log_tail(PosixFilesystem::instance(), dir / "nope.log");
  REQUIRE_FALSE(missing.ok());
  CHECK(missing.error().code() == ErrorCode::kNotFound);
  CHECK_THAT(missing.error().message(), Catch::Contains("nope.log"));

  CHECK(rank_log_path("runs/job", 3, 1) == "runs/job/attempt-003/rank-1.log");
  CHECK(rank_log_path("/r/", 1234, 0) == "/r/attempt-1234/rank-0.log");

  LogTail t;
  t.lines = {"Traceback (most recent call last):", "ImportError: x"};
  t.earlier_lines = true;
  CHECK(format_rank_log_tail(1, "exit code 1", "runs/job/attempt-000/rank-1.log", t) ==
        "rank 1 (exit code 1) failed before its first heartbeat; the last 2 lines of "
        "runs/job/attempt-000/rank-1.log:\n  | Traceback (most recent call last):\n  | "
        "ImportError: x");
  CHECK(format_rank_log_tail(0, "killed by SIGKILL", "l.log", LogTail{}) ==
        "rank 0 (killed by SIGKILL) failed before its first heartbeat; l.log is empty");
}
