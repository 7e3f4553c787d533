// checkpoint/hf_export.h: which tensors an export takes and under which names, and the BF16
// cast (round to nearest even, as torch's .to(torch.bfloat16); test_export.py checks it
// against torch itself on real checkpoints).
#include "checkpoint/hf_export.h"

#include <catch2/catch.hpp>

#include <bit>
#include <cmath>
#include <cstring>
#include <limits>

using namespace shardguard;
using namespace shardguard::checkpoint;

namespace {

const std::vector<std::string> kNames = {"model.fc1.bias",
                                         "model.fc1.weight",
                                         "model.fc2.weight",
                                         "optim.state.0.exp_avg",
                                         "optim.state.0.step",
                                         "sched.base_lrs.0",
                                         "step"};

std::vector<std::string> targets(const ExportOptions& o) {
  auto plan = plan_export(kNames, o);
  REQUIRE(plan.ok());
  std::vector<std::string> out;
  for (const auto& n : *plan) out.push_back(n.source + "->" + n.target);
  return out;
}

uint16_t bf16(float f) {
  uint16_t out;
  auto in = std::bit_cast<std::array<std::byte, 4>>(f);
  std::array<std::byte, 2> o{};
  REQUIRE(cast_to_bf16(DType::kF32, in, o).ok());
  std::memcpy(&out, o.data(), 2);
  return out;
}

}  // namespace

TEST_CASE("Export selection: include, exclude, rename, in exported-name order", "[unit]") {
  ExportOptions o;
  CHECK(targets(o).size() == kNames.size());
  o.include = {"model.*"};
  o.rename_prefixes = {{"model.", ""}};
  CHECK(targets(o) == std::vector<std::string>{"model.fc1.bias->fc1.bias",
                                               "model.fc1.weight->fc1.weight",
                                               "model.fc2.weight->fc2.weight"});
  o.exclude = {"*.bias"};
  o.rename_prefixes = {{"model.fc2.", "head."}, {"model.", "body."}};
  CHECK(targets(o) == std::vector<std::string>{"model.fc1.weight->body.fc1.weight",
                                               "model.fc2.weight->head.weight"});
  o = {};
  o.include = {"optim.*", "step"};
  CHECK(targets(o) == std::vector<std::string>{"optim.state.0.exp_avg->optim.state.0.exp_avg",
                                               "optim.state.0.step->optim.state.0.step",
                                               "step->step"});
}

TEST_CASE("Export selection errors name what went wrong", "[unit]") {
  ExportOptions o;
  o.include = {"decoder.*"};
  auto none = plan_export(kNames, o);
  REQUIRE_FALSE(none.ok());
  CHECK_THAT(none.error().message(),
             Catch::Contains("no tensor is selected") && Catch::Contains("'decoder.*'"));
  o = {};
  o.include = {"model.fc*"};
  o.rename_prefixes = {{"model.fc1.", "x."}, {"model.fc2.", "x."}};
  auto clash = plan_export(kNames, o);
  REQUIRE_FALSE(clash.ok());
  CHECK_THAT(clash.error().message(), Catch::Contains("both be exported as 'x.weight'"));
  o.rename_prefixes = {{"step", ""}};
  o.include = {"step"};
  CHECK_FALSE(plan_export(kNames, o).ok());

  auto rule = parse_rename_prefix("model.=");
  REQUIRE(rule.ok());
  CHECK(*rule == std::pair<std::string, std::string>{"model.", ""});
  CHECK(parse_rename_prefix("a=b=c")->second == "b=c");
  CHECK_FALSE(parse_rename_prefix("model.").ok());
  CHECK_FALSE(parse_rename_prefix("=x").ok());
}

TEST_CASE("BF16 rounds to nearest even as torch does", "[unit]") {
  struct Case {
    uint32_t f32;
    uint16_t want;
  };
  auto c = GENERATE(Case{0x3F800000, 0x3F80},  // 1.0
                    Case{0x3F808000, 0x3F80},  // halfway, even below: down
                    Case{0x3F818000, 0x3F82},  // halfway, odd below: up
                    Case{0x3F808001, 0x3F81},  // above halfway: up
                    Case{0x3F807FFF, 0x3F80},  // below halfway: down
                    Case{0x7F7FFFFF, 0x7F80},  // the largest float rounds to inf
                    Case{0xFF800000, 0xFF80},  // -inf
                    Case{0x80000000, 0x8000},  // -0
                    Case{0x00000001, 0x0000},  // the smallest subnormal rounds to 0
                    Case{0xFFC12345, 0x7FC0},  // any NaN: the canonical one
                    Case{0x7F800001, 0x7FC0});
  CHECK(bf16(std::bit_cast<float>(c.f32)) == c.want);
}

TEST_CASE("F16 and F64 go to BF16 through F32", "[unit]") {
  const std::array<uint16_t, 5> halves = {0x3C00, 0x0001, 0x8400, 0x7C00, 0x7E00};
  std::array<std::byte, 10> out{};
  REQUIRE(cast_to_bf16(DType::kF16, std::as_bytes(std::span(halves)), out).ok());
  std::array<uint16_t, 5> got{};
  std::memcpy(got.data(), out.data(), out.size());
  // 1.0, 2^-24 (subnormal half, exact in F32), -2^-14, inf, nan.
  CHECK(got == std::array<uint16_t, 5>{0x3F80, 0x3380, 0xB880, 0x7F80, 0x7FC0});

  // 1 + 2^-8 + 2^-30 is just above a BF16 halfway point in F64, but F32 rounds it to the
  // halfway point itself, which then rounds to even: torch's double rounding.
  const double d = 1.0 + std::ldexp(1.0, -8) + std::ldexp(1.0, -30);
  std::array<std::byte, 2> one{};
  REQUIRE(cast_to_bf16(DType::kF64, std::as_bytes(std::span(&d, 1)), one).ok());
  uint16_t w;
  std::memcpy(&w, one.data(), 2);
  CHECK(w == 0x3F80);

  CHECK_FALSE(cast_to_bf16(DType::kI32, {}, {}).ok());
  std::array<std::byte, 3> odd{};
  CHECK_FALSE(cast_to_bf16(DType::kF32, odd, out).ok());
}
