#include "policies/exit_class.h"

#include <catch2/catch.hpp>

using namespace shardguard::policies;

namespace {
RankExit code(uint32_t rank, int c) { return {rank, false, c, 0}; }
RankExit killed(uint32_t rank, int s) { return {rank, true, 0, s}; }

struct Flags {
  bool notice = false, hang = false, unhealthy = false, torn_down = false;
};
ExitContext ctx(std::vector<RankExit> exits, Flags f = {}, std::vector<int> codes = {75}) {
  ExitContext c;
  c.exits = std::move(exits);
  c.notice_active = f.notice;
  c.hang_detected = f.hang;
  c.node_unhealthy = f.unhealthy;
  c.torn_down_by_us = f.torn_down;
  c.preemption_exit_codes = std::move(codes);
  return c;
}
constexpr Flags kNotice{true, false, false, false};
constexpr Flags kHangTorn{false, true, false, true};
}  // namespace

TEST_CASE("exit classes have stable names") {
  CHECK(exit_class_name(ExitClass::kSuccess) == "success");
  CHECK(exit_class_name(ExitClass::kPreempted) == "preempted");
  CHECK(exit_class_name(ExitClass::kInfrastructure) == "infrastructure");
  CHECK(exit_class_name(ExitClass::kHang) == "hang");
  CHECK(exit_class_name(ExitClass::kCrash) == "crash");
  CHECK(exit_class_name(ExitClass::kNoProgress) == "no_progress");
}

TEST_CASE("classify_exit applies the rules in order") {
  struct Row {
    const char* name;
    ExitContext context;
    ExitClass expected;
  };
  auto row = GENERATE(values<Row>({
      {"all zero", ctx({code(0, 0), code(1, 0)}), ExitClass::kSuccess},
      {"one non-zero", ctx({code(1, 3), code(0, 0)}), ExitClass::kCrash},
      {"signal", ctx({killed(1, 9)}), ExitClass::kCrash},
      {"preemption code", ctx({code(0, 75)}), ExitClass::kPreempted},
      {"preemption code after a crash", ctx({code(1, 1), code(0, 75)}), ExitClass::kPreempted},
      {"signal number equal to a code", ctx({killed(0, 75)}), ExitClass::kCrash},
      {"no exits", ctx({}, {false, false, false, true}), ExitClass::kCrash},
      {"notice beats crash", ctx({killed(0, 15)}, kNotice), ExitClass::kPreempted},
      {"hang", ctx({}, kHangTorn), ExitClass::kHang},
      {"notice beats hang", ctx({}, {true, true, false, true}), ExitClass::kPreempted},
      {"unhealthy beats all", ctx({code(0, 0)}, {true, true, true, false}),
       ExitClass::kInfrastructure},
      {"no codes configured", ctx({code(0, 75)}, {}, {}), ExitClass::kCrash},
  }));
  INFO(row.name);
  CHECK(classify_exit(row.context) == row.expected);
}

TEST_CASE("describe_exit names the first failing rank") {
  const auto [context, expected] = GENERATE(table<ExitContext, std::string>({
      {ctx({killed(1, 9)}), "rank 1 killed by signal 9 (SIGKILL)"},
      {ctx({code(0, 3)}), "rank 0 exited with code 3"},
      {ctx({killed(2, 40)}), "rank 2 killed by signal 40"},
      {ctx({code(0, 0), code(3, 1)}), "rank 3 exited with code 1 (1 other rank ended too)"},
      {ctx({code(0, 0), code(1, 0), code(2, 0)}), "all 3 ranks exited with code 0"},
      {ctx({}, kHangTorn),
       "no rank ended on its own; heartbeat stale (hang); remaining ranks torn down by "
       "shardguard"},
      {ctx({killed(0, 15)}, kNotice),
       "rank 0 killed by signal 15 (SIGTERM); preemption notice active"},
      {ctx({code(0, 1)}, {false, false, true, false}), "rank 0 exited with code 1; node unhealthy"},
  }));
  CHECK(describe_exit(context) == expected);
}

TEST_CASE("the causes that have their own budgets outrank a crash, and a notice outranks them") {
  ExitContext c = ctx({code(0, 1)});
  CHECK(classify_exit(c) == ExitClass::kCrash);
  c.node_lost = true;
  CHECK(classify_exit(c) == ExitClass::kInfrastructure);
  c.save_out_of_space = true;
  CHECK(classify_exit(c) == ExitClass::kNoSpace);
  CHECK_THAT(describe_exit(c), Catch::Contains("disk full"));
  c.resume_failed = true;
  CHECK(classify_exit(c) == ExitClass::kResumeFailed);
  c.resize = true;
  CHECK(classify_exit(c) == ExitClass::kResize);
  c.notice_active = true;
  CHECK(classify_exit(c) == ExitClass::kPreempted);
  CHECK(exit_class_name(ExitClass::kNoSpace) == "no_space");
  CHECK(exit_class_name(ExitClass::kResumeFailed) == "resume_failed");
  CHECK(exit_class_name(ExitClass::kResize) == "resize");
}
