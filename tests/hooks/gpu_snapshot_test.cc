// GPU snapshots (hooks/gpu_snapshot.h) against a fake CUDA runtime (fake_cudart.cc: streams
// are threads, "device" memory is host memory, copies can be slowed down): the runtime is
// loaded at run time (a missing one is kUnsupported, nothing else breaks); the copy runs
// after the work queued on the training stream and beside the caller, start() returns at
// once, fence() keeps a later kernel from changing the bytes mid-copy, the write starts when
// poll() sees the copy done, the staging is page-locked while in use and unpinned after;
// and the same through the C ABI.
#include "hooks/gpu_snapshot.h"

#include <dlfcn.h>

#include <catch2/catch.hpp>
#include <chrono>
#include <cstdlib>
#include <thread>
#include <vector>

#include "checkpoint/reader.h"
#include "hooks/include/shardguard.h"
#include "tests/support/temp_dir.h"

using namespace std::chrono_literals;
using namespace shardguard;
using namespace shardguard::hooks;
using shardguard::testing::TempDir;

namespace {

// The fake's entry points the test drives directly (the same library the code under test
// loads: dlopen returns the one already loaded).
struct Fake {
  void* lib = ::dlopen(SG_FAKE_CUDART, RTLD_NOW);
  int (*stream_create)(void**, unsigned) = nullptr;
  int (*stream_sync)(void*) = nullptr;
  int (*stream_destroy)(void*) = nullptr;
  int (*launch)(void*, void (*)(void*), void*) = nullptr;
  size_t (*registered)(const void*) = nullptr;

  Fake() {
    REQUIRE(lib != nullptr);
    stream_create =
        reinterpret_cast<decltype(stream_create)>(::dlsym(lib, "cudaStreamCreateWithFlags"));
    stream_sync = reinterpret_cast<decltype(stream_sync)>(::dlsym(lib, "cudaStreamSynchronize"));
    stream_destroy = reinterpret_cast<decltype(stream_destroy)>(::dlsym(lib, "cudaStreamDestroy"));
    launch = reinterpret_cast<decltype(launch)>(::dlsym(lib, "cudaLaunchHostFunc"));
    registered = reinterpret_cast<decltype(registered)>(::dlsym(lib, "fake_cuda_registered_bytes"));
    REQUIRE((stream_create && stream_sync && stream_destroy && launch && registered));
    ::setenv("SHARDGUARD_CUDART", SG_FAKE_CUDART, 1);
  }
  ~Fake() {
    ::unsetenv("SG_FAKE_CUDA_COPY_DELAY_MS");
    ::dlclose(lib);
  }
};

// A "kernel" on a fake stream: sleeps, then fills the "device" buffer with a value.
struct Fill {
  std::vector<float>* device;
  float value;
  int sleep_ms;
  static void run(void* p) {
    auto* f = static_cast<Fill*>(p);
    std::this_thread::sleep_for(std::chrono::milliseconds(f->sleep_ms));
    std::fill(f->device->begin(), f->device->end(), f->value);
  }
};

std::unique_ptr<Client> make_client(const std::string& dir, bool async) {
  ClientOptions o;
  o.job_id = "gpu-job";
  o.checkpoint_dir = dir;
  o.async = async;
  o.checkpoint_signal = 0;
  auto c = Client::create(o);
  if (!c.ok()) FAIL(c.error().message());
  return std::move(c).value();
}

std::vector<float> read_w(const std::string& step_dir, size_t n) {
  auto r = checkpoint::CheckpointReader::open(PosixFilesystem::instance(), step_dir);
  if (!r.ok()) FAIL(r.error().message());
  std::vector<float> back(n);
  auto st = r->read("w", checkpoint::Box{{0}, {n}}, std::as_writable_bytes(std::span(back)));
  if (!st.ok()) FAIL(st.error().message());
  return back;
}

template <typename Pred>
bool within(std::chrono::milliseconds limit, Pred pred) {
  for (auto until = std::chrono::steady_clock::now() + limit;
       std::chrono::steady_clock::now() < until; std::this_thread::sleep_for(2ms))
    if (pred()) return true;
  return pred();
}

constexpr size_t kN = 1 << 20;  // 4 MiB of "device" floats

}  // namespace

TEST_CASE("gpu snapshot: without a CUDA runtime, kUnsupported naming what was tried", "[unit]") {
  TempDir dir;
  auto c = make_client(dir.path(), true);
  ::setenv("SHARDGUARD_CUDART", "/nonexistent/libcudart.so.13", 1);
  auto g = GpuSnapshot::create(*c);
  ::unsetenv("SHARDGUARD_CUDART");
  REQUIRE_FALSE(g.ok());
  CHECK(g.error().code() == ErrorCode::kUnsupported);
  CHECK_THAT(g.error().message(), Catch::Contains("/nonexistent/libcudart.so.13"));
}

TEST_CASE("gpu snapshot: copied after the queued work, beside training, fenced, then written",
          "[integration]") {
  Fake fake;
  TempDir dir;
  auto client = make_client(dir.path(), true);
  auto g = GpuSnapshot::create(*client);
  REQUIRE(g.ok());
  GpuSnapshot& gpu = **g;
  void* stream = nullptr;
  REQUIRE(fake.stream_create(&stream, 1) == 0);
  std::vector<float> device(kN, 1.0f);

  // The step's kernel, still running when the snapshot starts: the copy must wait for it.
  Fill step_kernel{&device, 2.0f, 300};
  REQUIRE(fake.launch(stream, &Fill::run, &step_kernel) == 0);
  ::setenv("SG_FAKE_CUDA_COPY_DELAY_MS", "200", 1);
  GpuSave save = gpu.begin(1);
  REQUIRE(save.add_device_tensor("w", checkpoint::DType::kF32, {kN}, device.data(), kN * 4).ok());
  save.writer.set_global_state({1, "null", "null"});
  const auto t0 = std::chrono::steady_clock::now();
  REQUIRE(gpu.start(std::move(save), stream).ok());
  CHECK(std::chrono::steady_clock::now() - t0 < 150ms);  // returned before the kernel ended
  CHECK(gpu.pending());
  auto early = gpu.poll();
  REQUIRE(early.ok());
  CHECK_FALSE(*early);  // not copied yet: nothing handed to the client
  // Pinned while the copy may run into it.
  CHECK(fake.registered(client->staging().data()) == client->staging().capacity());

  // The next step writes the same memory; the fence holds it back until the copy is done.
  REQUIRE(gpu.fence(stream).ok());
  Fill next_kernel{&device, 3.0f, 0};
  REQUIRE(fake.launch(stream, &Fill::run, &next_kernel) == 0);

  bool handed = false;
  REQUIRE(within(10s, [&] {
    auto p = gpu.poll();
    REQUIRE(p.ok());
    handed = handed || *p;
    return handed;
  }));
  CHECK_FALSE(gpu.pending());
  REQUIRE(client->wait().ok());
  CHECK(client->last_committed_step() == 1);
  const auto back = read_w(dir / "step-000000001", kN);
  CHECK(back.front() == 2.0f);  // after the queued step, before the fenced one
  CHECK(back.back() == 2.0f);
  REQUIRE(fake.stream_sync(stream) == 0);
  CHECK(device.front() == 3.0f);  // and the fenced step did run afterwards
  const GpuSnapshotTiming t = gpu.last_timing();
  CHECK(t.bytes == kN * 4);
  CHECK(t.copy_seconds >= 0.15);
  CHECK(t.start_seconds < 0.15);

  SECTION("a second snapshot reuses the pinned staging") {
    ::setenv("SG_FAKE_CUDA_COPY_DELAY_MS", "0", 1);
    std::byte* staging = client->staging().data();
    GpuSave again = gpu.begin(2);
    REQUIRE(
        again.add_device_tensor("w", checkpoint::DType::kF32, {kN}, device.data(), kN * 4).ok());
    again.writer.set_global_state({2, "null", "null"});
    REQUIRE(gpu.start(std::move(again), stream).ok());
    REQUIRE(gpu.finish().ok());
    REQUIRE(client->wait().ok());
    CHECK(client->staging().data() == staging);
    CHECK(read_w(dir / "step-000000002", kN).front() == 3.0f);
  }
  SECTION("the staging is unpinned when the snapshotter goes") {
    std::byte* staging = client->staging().data();
    g->reset();
    CHECK(fake.registered(staging) == 0);
  }
  REQUIRE(fake.stream_destroy(stream) == 0);
}

TEST_CASE("gpu snapshot: finish() saves at once; misuse is refused", "[integration]") {
  Fake fake;
  TempDir dir;
  auto client = make_client(dir.path(), false);  // sync: the write happens in finish()
  auto g = GpuSnapshot::create(*client);
  REQUIRE(g.ok());
  GpuSnapshot& gpu = **g;
  std::vector<float> device(kN, 5.0f);
  std::vector<int64_t> host_step = {9};
  REQUIRE(gpu.prepare(kN * 4).ok());  // staging and its pinning ahead of the first start()

  SECTION("finish") {
    GpuSave s = gpu.begin(9);
    REQUIRE(s.add_device_tensor("w", checkpoint::DType::kF32, {kN}, device.data(), kN * 4).ok());
    REQUIRE(
        s.writer
            .add_tensor("step", checkpoint::DType::kI64, {1}, std::as_bytes(std::span(host_step)))
            .ok());
    s.writer.set_global_state({9, "null", "null"});
    REQUIRE(gpu.start(std::move(s), nullptr, checkpoint::SaveReason::kFinal).ok());
    SECTION("a second start while one is pending") {
      GpuSave t = gpu.begin(10);
      auto st = gpu.start(std::move(t), nullptr);
      REQUIRE_FALSE(st.ok());
      CHECK(st.error().code() == ErrorCode::kInvalid);
      CHECK_THAT(st.error().message(), Catch::Contains("still pending"));
    }
    REQUIRE(gpu.finish().ok());
    CHECK(client->last_committed_step() == 9);  // committed when finish() returned
    CHECK(read_w(dir / "step-000000009", kN).back() == 5.0f);
    auto r =
        checkpoint::CheckpointReader::open(PosixFilesystem::instance(), dir / "step-000000009");
    REQUIRE(r.ok());
    CHECK(r->manifest().reason == checkpoint::SaveReason::kFinal);
  }
  SECTION("a device tensor of the wrong size") {
    GpuSave s = gpu.begin(3);
    auto st = s.add_device_tensor("w", checkpoint::DType::kF32, {kN}, device.data(), kN * 4 - 4);
    REQUIRE_FALSE(st.ok());
    CHECK(st.error().code() == ErrorCode::kInvalid);
    CHECK_THAT(st.error().message(), Catch::Contains("'w'"));
  }
  SECTION("nothing pending: fence, poll and finish do nothing") {
    CHECK(gpu.fence(nullptr).ok());
    auto p = gpu.poll();
    REQUIRE(p.ok());
    CHECK_FALSE(*p);
    CHECK(gpu.finish().ok());
  }
}

TEST_CASE("C ABI: device tensors snapshotted, polled, written", "[integration]") {
  Fake fake;
  TempDir dir;
  sg_client* c = nullptr;
  REQUIRE(sg_client_from_env(dir.path().c_str(), 0, 1, &c) == SG_OK);
  REQUIRE(sg_client_device_prepare(c, kN * 4) == SG_OK);
  std::vector<float> device(kN, 7.0f);
  sg_writer* w = nullptr;
  REQUIRE(sg_client_begin_save(c, 4, &w) == SG_OK);
  const uint64_t shape[1] = {kN}, off[1] = {0}, size[1] = {kN};
  REQUIRE(sg_writer_add_device_chunk(w, "w", "F32", 1, shape, off, size, device.data(), kN * 4) ==
          SG_OK);
  CHECK(sg_writer_add_device_tensor(w, "bad", "F32", 1, shape, device.data(), 4) == SG_ERR_INVALID);
  REQUIRE(sg_writer_set_global_state(w, 4, nullptr, nullptr) == SG_OK);
  REQUIRE(sg_client_snapshot_device(c, w, nullptr, nullptr) == SG_OK);
  REQUIRE(sg_client_device_fence(c, nullptr) == SG_OK);
  int started = 0;
  REQUIRE(within(10s, [&] {
    REQUIRE(sg_client_device_poll(c, &started) == SG_OK);
    return started == 1;
  }));
  REQUIRE(sg_client_wait(c) == SG_OK);
  CHECK(sg_client_last_committed_step(c) == 4);
  CHECK(read_w(dir / "step-000000004", kN).front() == 7.0f);

  // A writer with device tensors cannot go through the plain save.
  REQUIRE(sg_client_begin_save(c, 5, &w) == SG_OK);
  REQUIRE(sg_writer_add_device_tensor(w, "w", "F32", 1, shape, device.data(), kN * 4) == SG_OK);
  CHECK(sg_client_save(c, w, nullptr) == SG_ERR_INVALID);
  CHECK(std::string(sg_last_error()).find("sg_client_snapshot_device") != std::string::npos);
  sg_client_free(c);
}
