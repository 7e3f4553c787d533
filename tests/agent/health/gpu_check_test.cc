// GpuCheck against a fake libnvidia-ml (tests/agent/health/fake_nvml.c) whose answers come
// from a script file, and against a library that is not there.
#include "agent/health/gpu_check.h"

#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <cstdlib>

#include "agent/health/health_monitor.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::agent;
using shardguard::testing::TempDir;

namespace {

struct FakeNvml {
  TempDir dir;
  std::string script = dir / "nvml.txt";
  explicit FakeNvml(const std::string& text) {
    set(text);
    ::setenv("SG_FAKE_NVML_SCRIPT", script.c_str(), 1);
  }
  ~FakeNvml() { ::unsetenv("SG_FAKE_NVML_SCRIPT"); }
  void set(const std::string& text) { testing::spit(script, text); }
};

GpuCheckConfig fake_config(int expected = -1) {
  GpuCheckConfig c;
  c.library = SG_FAKE_NVML_LIB;
  c.expected_gpus = expected;
  return c;
}

HealthFinding run(GpuCheck& check) {
  HealthFinding got;
  check.run([&](HealthFinding f) { got = std::move(f); });
  return got;
}

bool has(const HealthFinding& f, const std::string& text) {
  return f.evidence.find(text) != std::string::npos;
}

}  // namespace

TEST_CASE("gpu: without NVML the check is 'not available', not unhealthy") {
  GpuCheckConfig c;
  c.library = "/nonexistent/libnvidia-ml.so.1";
  GpuCheck check(c);
  HealthFinding got = run(check);
  CHECK(got.check == "gpu");
  CHECK(got.not_available);
  CHECK(got.severity == HealthFinding::kOk);
  CHECK(has(got, "dlopen '/nonexistent/libnvidia-ml.so.1'"));

  FakeClock clock;
  HealthMonitor monitor(clock, clock, nullptr);
  CheckPolicy p;
  p.start_grace = 0s;
  p.failure_threshold = 1;
  monitor.add(std::make_unique<GpuCheck>(c), p);
  bool unhealthy = false;
  monitor.start([&](auto) { unhealthy = true; });
  clock.advance(100s);
  CHECK_FALSE(unhealthy);
  CHECK_FALSE(monitor.status()[0].available);
}

TEST_CASE("gpu: the real NVML, where there is one: healthy or not available") {
  GpuCheck check(GpuCheckConfig{});
  HealthFinding got = run(check);
  CAPTURE(got.evidence);
  if (!got.not_available) CHECK(got.severity == HealthFinding::kOk);
}

TEST_CASE("gpu: a library without the NVML entry points is 'not available'") {
  GpuCheckConfig c;
  c.library = "libm.so.6";
  GpuCheck check(c);
  HealthFinding got = run(check);
  CHECK(got.not_available);
  CHECK(has(got, "lacks nvml"));
}

TEST_CASE("gpu: healthy GPUs") {
  FakeNvml nvml("count 2\ngpu0.name Fake H100\ngpu1.name Fake H100\n");
  GpuCheck check(fake_config());
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kOk);
  CHECK_FALSE(got.not_available);
  CHECK(got.evidence == "2 GPU(s) healthy");
}

TEST_CASE("gpu: uncorrectable ECC errors are fatal and name the GPU") {
  FakeNvml nvml("count 2\ngpu1.name Fake H100\ngpu1.ecc 4\n");
  GpuCheck check(fake_config());
  HealthFinding got = run(check);
  CHECK(got.severity == HealthFinding::kFatal);
  CHECK(has(got, "GPU 1 (Fake H100): 4 uncorrectable ECC error(s)"));
  CHECK_FALSE(has(got, "GPU 0"));
}

TEST_CASE("gpu: a lost GPU is fatal") {
  SECTION("handle lookup") {
    FakeNvml nvml("count 2\ngpu0.handle_rc 15\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kFatal);
    CHECK(has(got, "GPU 0: lost (fallen off the bus"));
  }
  SECTION("a later call") {
    FakeNvml nvml("count 1\ngpu0.ecc_rc 15\n");
    GpuCheck check(fake_config());
    CHECK(has(run(check), "GPU 0 (Fake GPU): lost"));
  }
  SECTION("device count") {
    FakeNvml nvml("count_rc 15\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kFatal);
    CHECK(has(got, "nvmlDeviceGetCount_v2: GPU is lost"));
  }
}

TEST_CASE("gpu: fewer GPUs than expected is fatal") {
  SECTION("against the first look") {
    FakeNvml nvml("count 8\n");
    GpuCheck check(fake_config());
    CHECK(run(check).severity == HealthFinding::kOk);
    nvml.set("count 7\n");
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kFatal);
    CHECK(has(got, "7 of 8 expected GPUs visible"));
  }
  SECTION("against the first look that found any") {
    FakeNvml nvml("count 0\n");
    GpuCheck check(fake_config());
    CHECK(run(check).not_available);  // driver not up yet: no baseline
    nvml.set("count 2\n");
    CHECK(run(check).severity == HealthFinding::kOk);
    nvml.set("count 1\n");
    CHECK(has(run(check), "1 of 2 expected GPUs visible"));
  }
  SECTION("against the configured count") {
    FakeNvml nvml("count 2\n");
    GpuCheck check(fake_config(4));
    CHECK(has(run(check), "2 of 4 expected GPUs visible"));
  }
  SECTION("no count check") {
    FakeNvml nvml("count 2\n");
    GpuCheck check(fake_config(0));
    CHECK(run(check).severity == HealthFinding::kOk);
  }
}

TEST_CASE("gpu: memory repair state") {
  SECTION("row remap pending is a warning") {
    FakeNvml nvml("count 1\ngpu0.remap_pending 1\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kWarning);
    CHECK(has(got, "row remap pending"));
  }
  SECTION("row remap failure is fatal") {
    FakeNvml nvml("count 1\ngpu0.remap_failure 1\ngpu0.remap_pending 1\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kFatal);
    CHECK(has(got, "row remapping failed"));
  }
  SECTION("before Ampere: page retirement pending is a warning") {
    FakeNvml nvml("count 1\ngpu0.remap_rc 3\ngpu0.retired_pending 1\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kWarning);
    CHECK(has(got, "page retirement pending"));
  }
  SECTION("ECC not supported is no finding") {
    FakeNvml nvml("count 1\ngpu0.ecc_rc 3\ngpu0.ecc 9\ngpu0.remap_rc 3\ngpu0.retired_rc 3\n");
    GpuCheck check(fake_config());
    CHECK(run(check).severity == HealthFinding::kOk);
  }
}

TEST_CASE("gpu: nvmlInit failures") {
  SECTION("driver not loaded: not available") {
    FakeNvml nvml("init 9\n");
    GpuCheck check(fake_config());
    CHECK(run(check).not_available);
  }
  SECTION("anything else: a warning, retried next run") {
    FakeNvml nvml("init 18\ncount 1\n");
    GpuCheck check(fake_config());
    HealthFinding got = run(check);
    CHECK(got.severity == HealthFinding::kWarning);
    CHECK(has(got, "nvmlInit_v2: RM has detected an NVML/RM version mismatch"));
    nvml.set("count 1\n");
    CHECK(run(check).severity == HealthFinding::kOk);
  }
  SECTION("no GPU at all: not available") {
    FakeNvml nvml("count 0\n");
    GpuCheck check(fake_config());
    CHECK(run(check).not_available);
  }
}

TEST_CASE("gpu: NVML is initialized once and shut down with the check") {
  FakeNvml nvml("count 1\n");
  void* lib = ::dlopen(SG_FAKE_NVML_LIB, RTLD_NOW);  // keeps the fake's counters alive
  REQUIRE(lib != nullptr);
  auto* inits = static_cast<int*>(::dlsym(lib, "fake_nvml_init_calls"));
  auto* shutdowns = static_cast<int*>(::dlsym(lib, "fake_nvml_shutdown_calls"));
  REQUIRE(inits != nullptr);
  REQUIRE(shutdowns != nullptr);
  const int inits_before = *inits, shutdowns_before = *shutdowns;
  {
    GpuCheck check(fake_config());
    run(check);
    run(check);
    CHECK(*inits == inits_before + 1);
    CHECK(*shutdowns == shutdowns_before);
  }
  CHECK(*shutdowns == shutdowns_before + 1);
  ::dlclose(lib);
}

TEST_CASE("gpu: ECC errors through the monitor: unhealthy with evidence naming the GPU") {
  FakeNvml nvml("count 4\ngpu2.name Fake A100\n");
  FakeClock clock;
  HealthMonitor monitor(clock, clock, [] { return 0.5; });
  monitor.add(std::make_unique<GpuCheck>(fake_config()), CheckPolicy{});
  std::vector<HealthFinding> evidence;
  monitor.start([&](std::vector<HealthFinding> e) { evidence = std::move(e); });
  clock.advance(0s);
  CHECK(monitor.healthy());
  nvml.set("count 4\ngpu2.name Fake A100\ngpu2.ecc 1\n");
  clock.advance(30s);
  CHECK_FALSE(monitor.healthy());
  REQUIRE(evidence.size() == 1);
  CHECK(evidence[0].check == "gpu");
  CHECK(evidence[0].evidence.find("GPU 2 (Fake A100): 1 uncorrectable ECC error") !=
        std::string::npos);
}
