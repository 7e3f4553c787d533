// XID parsing and classification, the kernel-log readers, and XidCheck on a log file.
#include "agent/health/xid_check.h"

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>

#include "agent/health/health_monitor.h"
#include "agent/health/kernel_log.h"
#include "agent/health/xid_table.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::TempDir;

namespace {

void append(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::app);
  out << text;
}

std::string xid_line(int xid, const std::string& text = "details") {
  return "[ 1234.567890] NVRM: Xid (PCI:0000:10:1c): " + std::to_string(xid) +
         ", pid=4242, name=python, " + text + "\n";
}

}  // namespace

TEST_CASE("xid: lines in the formats the driver and loggers produce") {
  using Row = std::tuple<std::string, std::string, int, std::string>;
  auto [line, device, xid, details] = GENERATE(table<std::string, std::string, int, std::string>({
      Row{"NVRM: Xid (PCI:0000:10:1c): 63, pid=123, name=python, Row Remapper: New row marked",
          "PCI:0000:10:1c", 63, "pid=123, name=python, Row Remapper: New row marked"},
      Row{"[ 5.1] NVRM: Xid (PCI:0000:3b:00): 79, pid='<unknown>', name=<unknown>, GPU has "
          "fallen off the bus.",
          "PCI:0000:3b:00", 79, "pid='<unknown>', name=<unknown>, GPU has fallen off the bus."},
      Row{"Jan  2 03:04:05 node7 kernel: NVRM: Xid (0000:01:00): 13, Graphics Exception",
          "0000:01:00", 13, "Graphics Exception"},
      Row{"NVRM: Xid (PCI:0000:10:1c):  48, DBE\r", "PCI:0000:10:1c", 48, "DBE"},
  }));
  auto ev = parse_xid_line(line);
  REQUIRE(ev);
  CHECK(ev->device == device);
  CHECK(ev->xid == xid);
  CHECK(ev->details == details);
}

TEST_CASE("xid: other lines are not XIDs") {
  auto line = GENERATE(as<std::string>{}, "", "NVRM: loading NVIDIA UNIX x86_64 Kernel Module",
                       "NVRM: Xid (PCI:0000:10:1c): abc, nope", "NVRM: Xid (PCI:0000:10:1c 79",
                       "NVRM: Xid (PCI:0000:10:1c): -5, x", "usb 1-1: new device");
  CHECK_FALSE(parse_xid_line(line));
}

TEST_CASE("xid: classification follows the reference table") {
  auto [xid, cls] = GENERATE(table<int, XidClass>({
      {79, XidClass::kFatal},
      {48, XidClass::kFatal},
      {64, XidClass::kFatal},
      {74, XidClass::kFatal},
      {95, XidClass::kFatal},
      {46, XidClass::kFatal},
      {119, XidClass::kFatal},
      {144, XidClass::kFatal},
      {150, XidClass::kFatal},
      {13, XidClass::kApplication},
      {31, XidClass::kApplication},
      {43, XidClass::kApplication},
      {45, XidClass::kApplication},
      {94, XidClass::kApplication},
      {63, XidClass::kIgnore},
      {92, XidClass::kIgnore},
      {154, XidClass::kIgnore},
      {999, XidClass::kUnknown},
  }));
  CAPTURE(xid);
  CHECK(classify_xid(xid) == cls);
}

TEST_CASE("xid: the settings' lists override the table") {
  CHECK(classify_xid(13, {13}, {}) == XidClass::kFatal);
  CHECK(classify_xid(79, {}, {79}) == XidClass::kIgnore);
  CHECK(classify_xid(79, {79}, {79}) == XidClass::kIgnore);
  CHECK(xid_meaning(79) == "GPU has fallen off the bus");
  CHECK(xid_meaning(999).empty());
}

TEST_CASE("xid: the file reader returns only complete lines appended since the last read") {
  TempDir dir;
  const std::string log = dir / "kern.log";
  append(log, "old line\n");
  auto reader = make_file_log_reader(log);
  CHECK(reader->read_new()->empty());  // what was there at the first read is skipped
  append(log, "one\ntwo\npart");
  auto lines = reader->read_new();
  REQUIRE(lines.ok());
  CHECK(*lines == std::vector<std::string>{"one", "two"});
  append(log, "ial\n");
  CHECK(*reader->read_new() == std::vector<std::string>{"partial"});
  testing::spit(log, "rotated\n");  // shorter than before: read from the start
  CHECK(*reader->read_new() == std::vector<std::string>{"rotated"});
}

TEST_CASE("xid: the file reader with from_start reads what is already there") {
  TempDir dir;
  const std::string log = dir / "kern.log";
  append(log, "a\nb\n");
  CHECK(*make_file_log_reader(log, true)->read_new() == std::vector<std::string>{"a", "b"});
}

TEST_CASE("xid: a missing log is 'not available', and lines written later are new") {
  TempDir dir;
  const std::string log = dir / "kern.log";
  auto reader = make_file_log_reader(log);
  auto first = reader->read_new();
  REQUIRE_FALSE(first.ok());
  CHECK(first.error().code() == ErrorCode::kUnsupported);
  append(log, "x\n");
  CHECK(*reader->read_new() == std::vector<std::string>{"x"});
}

TEST_CASE("xid: the kmsg reader strips record prefixes and skips continuation lines") {
  TempDir dir;
  const std::string kmsg = dir / "kmsg";
  testing::spit(kmsg,
                "4,1001,5000000,-;NVRM: Xid (PCI:0000:10:1c): 79, pid=1, GPU has fallen off\n"
                " SUBSYSTEM=pci\n"
                " DEVICE=+pci:0000:10:1c.0\n"
                "6,1002,5000001,-;eth0: link up\n");
  auto reader = make_kmsg_reader(kmsg, /*from_start=*/true);
  auto lines = reader->read_new();
  REQUIRE(lines.ok());
  CHECK(*lines ==
        std::vector<std::string>{"NVRM: Xid (PCI:0000:10:1c): 79, pid=1, GPU has fallen off",
                                 "eth0: link up"});
  CHECK(reader->read_new()->empty());
}

TEST_CASE("xid: kmsg that cannot be opened is 'not available'") {
  FakeClock clock;
  XidCheck check({}, make_kmsg_reader("/nonexistent/kmsg"), clock);
  HealthFinding got;
  check.run([&](HealthFinding f) { got = std::move(f); });
  CHECK(got.not_available);
  CHECK(got.check == "xid");
  CHECK(got.evidence.find("/nonexistent/kmsg") != std::string::npos);
}

TEST_CASE("xid: the real /dev/kmsg reads from its end or is not available") {
  auto reader = make_kmsg_reader();
  auto lines = reader->read_new();
  if (lines.ok()) {
    CHECK(reader->read_new().ok());
  } else {
    CHECK(lines.error().code() == ErrorCode::kUnsupported);
  }
}

namespace {

struct XidFixture {
  TempDir dir;
  std::string log = dir / "kern.log";
  FakeClock clock;
  std::unique_ptr<XidCheck> check;
  XidFixture() {
    testing::spit(log, "");
    check = std::make_unique<XidCheck>(XidCheckConfig{}, make_file_log_reader(log), clock);
  }
  HealthFinding run() {
    HealthFinding got;
    check->run([&](HealthFinding f) { got = std::move(f); });
    return got;
  }
};

}  // namespace

TEST_CASE("xid check: each class of XID gives its severity, and each line is reported once") {
  using Row = std::tuple<int, HealthFinding::Severity, std::string>;
  auto [xid, severity, words] = GENERATE(table<int, HealthFinding::Severity, std::string>({
      Row{79, HealthFinding::kFatal, "GPU has fallen off the bus"},
      Row{48, HealthFinding::kFatal, "double-bit ECC error"},
      Row{999, HealthFinding::kWarning, "unknown XID"},
      Row{13, HealthFinding::kOk, "application error"},
      Row{63, HealthFinding::kOk, "reset to apply"},
  }));
  XidFixture f;
  CHECK(f.run().severity == HealthFinding::kOk);
  append(f.log, "unrelated\n" + xid_line(xid));
  HealthFinding got = f.run();
  CAPTURE(xid, got.evidence);
  CHECK(got.check == "xid");
  CHECK(got.severity == severity);
  CHECK(got.evidence.find("GPU PCI:0000:10:1c: Xid " + std::to_string(xid)) != std::string::npos);
  CHECK(got.evidence.find(words) != std::string::npos);
  CHECK(got.evidence.find("seen at 2023-11-14T22:13:20Z") != std::string::npos);
  HealthFinding again = f.run();
  CHECK(again.severity == HealthFinding::kOk);
  CHECK(again.evidence.empty());
}

TEST_CASE("xid check: the worst XID of a batch decides; its evidence is kept") {
  XidFixture f;
  f.run();
  append(f.log, xid_line(13) + xid_line(79) + xid_line(999));
  HealthFinding got = f.run();
  CHECK(got.severity == HealthFinding::kFatal);
  CHECK(got.evidence.find("Xid 79") != std::string::npos);
  CHECK(got.evidence.find("Xid 13") == std::string::npos);
}

TEST_CASE("xid check: a fatal XID makes the monitor unhealthy at once, even in the grace") {
  XidFixture f;
  HealthMonitor monitor(f.clock, f.clock, [] { return 0.5; });
  CheckPolicy p;
  p.interval = 5s;
  p.start_grace = 60s;
  p.failure_threshold = 3;
  monitor.add(std::move(f.check), p);
  std::vector<HealthFinding> evidence;
  monitor.start([&](std::vector<HealthFinding> e) { evidence = std::move(e); });
  f.clock.advance(0s);
  append(f.log, xid_line(31) + xid_line(92));  // application + informational: nothing
  f.clock.advance(10s);
  CHECK(monitor.healthy());
  append(f.log, xid_line(79, "GPU has fallen off the bus."));
  f.clock.advance(5s);
  CHECK_FALSE(monitor.healthy());
  REQUIRE(evidence.size() == 1);
  CHECK(evidence[0].severity == HealthFinding::kFatal);
  CHECK(evidence[0].evidence.find("Xid 79 (GPU has fallen off the bus") != std::string::npos);
}
