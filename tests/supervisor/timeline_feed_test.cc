// The timeline fed three ways - line by line from the file, record by record as the shell
// writes them, and a whole file at once - gives the same figures.
#include <catch2/catch.hpp>
#include <string>

#include "supervisor/timeline.h"
#include "tests/supervisor/timeline_lines.h"

using namespace shardguard;
using namespace shardguard::supervisor;

TEST_CASE("Fed record by record (the shell) equals read from the file", "[timeline][unit]") {
  Timeline from_file = feed(crash_and_relaunch());
  Timeline live;
  for (const auto& l : crash_and_relaunch()) {
    auto r = parse_timeline_line(l);
    REQUIRE(r);
    live.add(r->time_unix_ms, r->type, r->fields);
  }
  for (int64_t now : {int64_t{3000}, int64_t{6000}, int64_t{20000}})
    CHECK(live.goodput(now).allocated_gpu_seconds ==
          Approx(from_file.goodput(now).allocated_gpu_seconds));
  // Keeping no records changes no figure.
  TimelineOptions o;
  o.keep_records = false;
  Timeline lean = feed(crash_and_relaunch(), o);
  CHECK(lean.records().empty());
  CHECK(lean.view(20000).goodput.productive_gpu_seconds ==
        Approx(from_file.view(20000).goodput.productive_gpu_seconds));
}

TEST_CASE("A whole file fed at once equals its lines fed one by one", "[timeline][unit]") {
  Timeline by_line = feed(crash_and_relaunch());
  std::string text;
  for (const auto& l : crash_and_relaunch()) text += l + "\n";
  text += "not json\n\n";  // a malformed line is counted, a blank one ignored
  text += crash_and_relaunch().back();  // a last line without its newline is fed too
  Timeline whole;
  whole.add_lines(text);
  CHECK(whole.records().size() == by_line.records().size() + 1);
  CHECK(whole.skipped_lines() == 1);
  CHECK(whole.view(20000).records == by_line.view(20000).records + 1);
  CHECK(whole.goodput(20000).allocated_gpu_seconds ==
        Approx(by_line.goodput(20000).allocated_gpu_seconds));
  Timeline none;
  none.add_lines("");
  CHECK(none.records().empty());
  CHECK(none.skipped_lines() == 0);
}
