// sg_bench_ckpt stall: what an async save costs the training loop, first and steady, through
// the real job-side client (hooks::Client, async mode); and sg_bench_ckpt resume: a rank under
// `shardguard run` that resumes its share of a checkpoint and takes one step.
//
// resume [STEP_BYTES]: builds its "model" first (this rank's tensors allocated and zeroed:
// excluded from the resume time, like an interpreter's start-up), then opens the resume
// checkpoint through the client, reads its boxes, updates STEP_BYTES (default 64 MiB) of
// state and heartbeats. It prints CLOCK_MONOTONIC timestamps of each phase.
//
// stall TOTAL GAP_MS MODE DIR. The staging the snapshot copies into is sized by MODE:
//   none      nothing: the first save maps it (huge pages advised) and pays its population;
//   hint      client.reserve(TOTAL) right after the client starts (the C++/C/Python hint;
//             SHARDGUARD_STAGING_BYTES does the same);
//   manifest  a resume manifest (a checkpoint of the same state written first into DIR).
// Between client start and the first save the loop "trains" for GAP_MS: it sleeps in
// 10 ms steps with a heartbeat each, as a GPU job's CPU thread mostly waits on the device.
// Then 1 + 3 saves; each save's stall is the duration of client.save() (the snapshot), the
// write is waited for before the next one. Prints the first stall, the median of the later
// three, one thread's memcpy of the same bytes into touched memory, and the background
// population's bytes, seconds and huge pages.
#include <sys/mman.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <fstream>
#include <memory>
#include <thread>
#include <vector>

#include "bench/ckpt_bench.h"
#include "checkpoint/paths.h"
#include "hooks/client.h"

namespace shardguard::bench {

using namespace shardguard::checkpoint;

namespace {

// AnonHugePages (kB) of the mapping that starts at `p`, from /proc/self/smaps.
uint64_t anon_huge_kb(const void* p) {
  std::ifstream in("/proc/self/smaps");
  std::string line;
  bool inside = false;
  char start[32];
  std::snprintf(start, sizeof start, "%lx-", reinterpret_cast<unsigned long>(p));
  while (std::getline(in, line)) {
    const auto colon = line.find(':'), space = line.find(' ');
    if (space != std::string::npos && (colon == std::string::npos || colon > space)) {
      inside = line.rfind(start, 0) == 0;  // a mapping's first line: "start-end perms ..."
      continue;
    }
    if (inside && line.rfind("AnonHugePages:", 0) == 0) return std::stoull(line.substr(14));
  }
  return 0;
}

Result<std::unique_ptr<hooks::Client>> make_client(const std::string& dir, bool async,
                                                   const std::string& resume_manifest) {
  hooks::ClientOptions o;
  o.job_id = "bench";
  o.checkpoint_dir = dir;
  o.async = async;
  o.checkpoint_signal = 0;
  o.resume_manifest = resume_manifest;
  o.under_shardguard = !resume_manifest.empty();  // resume from exactly that manifest
  return hooks::Client::create(o);
}

// One save through the client; returns the duration of save(), the training loop's stall.
Result<double> timed_save(hooks::Client& c, uint64_t step, uint64_t rows,
                          const std::vector<std::vector<float>>& state) {
  auto w = c.begin_save(step);
  SG_RETURN_IF_ERROR(add_state(w, step, rows, 0, 1, state));
  const auto t0 = BenchClock::now();
  SG_RETURN_IF_ERROR(c.save(std::move(w)));
  const double stall = since(t0);
  SG_RETURN_IF_ERROR(c.wait());
  return stall;
}

}  // namespace

int stall(uint64_t total, uint64_t gap_ms, const std::string& mode, const std::string& dir) {
  if (mode != "none" && mode != "hint" && mode != "manifest")
    return die(Error(ErrorCode::kInvalid, "stall: MODE is none, hint or manifest"));
  const uint64_t rows = rows_for(total);
  auto state = make_state(rows, 0, 1);
  const uint64_t bytes = rows * kCols * 4 * kTensors;
  // Reference: one thread's memcpy of the same bytes into memory that was already touched.
  double memcpy_s = 1e30;
  {
    std::vector<std::vector<float>> target(kTensors);
    for (uint64_t t = 0; t < kTensors; ++t) target[t].assign(state[t].size(), 1.0f);
    for (int i = 0; i < 3; ++i) {
      const auto t0 = BenchClock::now();
      for (uint64_t t = 0; t < kTensors; ++t)
        std::memcpy(target[t].data(), state[t].data(), state[t].size() * 4);
      memcpy_s = std::min(memcpy_s, since(t0));
    }
  }
  std::string manifest;
  uint64_t step = 1;
  if (mode == "manifest") {
    auto writer = make_client(dir, false, "");
    if (!writer.ok()) return die(writer.error());
    auto st = timed_save(**writer, step, rows, state);
    if (!st.ok()) return die(st.error());
    manifest = join_path(join_path(dir, step_dir_name(step)), std::string(kManifestName));
    ++step;
  }

  const auto t_start = BenchClock::now();
  auto client = make_client(dir, true, manifest);
  if (!client.ok()) return die(client.error());
  hooks::Client& c = **client;
  if (mode == "hint") {
    if (auto st = c.reserve(bytes); !st.ok()) return die(st.error());
  }
  const double start_s = since(t_start);  // what creating the client cost the loop
  for (uint64_t ms = 0; ms < gap_ms; ms += 10) {
    std::this_thread::sleep_for(std::chrono::milliseconds(10));
    c.heartbeat(ms);
  }
  const StagingStats before = c.staging().stats();
  auto first = timed_save(c, step++, rows, state);
  if (!first.ok()) return die(first.error());
  const StagingStats populated = c.staging().stats();  // stopped by the first snapshot
  const uint64_t huge_kb = anon_huge_kb(c.staging().data());
  std::vector<double> later;
  for (int i = 0; i < 3; ++i) {
    auto s = timed_save(c, step++, rows, state);
    if (!s.ok()) return die(s.error());
    later.push_back(*s);
  }
  std::sort(later.begin(), later.end());
  std::printf(
      "{\"cmd\":\"stall\",\"mode\":\"%s\",\"bytes\":%llu,\"gap_seconds\":%.3f,"
      "\"client_start_seconds\":%.6f,\"memcpy_seconds\":%.6f,\"first_stall_seconds\":%.6f,"
      "\"stall_seconds\":%.6f,\"stall_min_seconds\":%.6f,\"staging_bytes\":%llu,"
      "\"populated_bytes\":%llu,\"populate_seconds\":%.6f,\"populating_at_first_save\":%s,"
      "\"huge_page_kb\":%llu,\"huge_pages_advised\":%s}\n",
      mode.c_str(), static_cast<unsigned long long>(bytes), gap_ms / 1e3, start_s, memcpy_s, *first,
      later[later.size() / 2], later.front(),
      static_cast<unsigned long long>(c.staging().capacity()),
      static_cast<unsigned long long>(populated.populated_bytes), populated.populate_seconds,
      before.populating ? "true" : "false", static_cast<unsigned long long>(huge_kb),
      populated.huge_pages_advised ? "true" : "false");
  return 0;
}

int resume_job(uint64_t step_bytes) {
  const int64_t entry_ns = mono_now_ns();
  auto client = hooks::Client::from_env({});
  if (!client.ok()) return die(client.error());
  hooks::Client& c = **client;
  const uint32_t rank = c.options().rank, world = c.options().world_size;
  // The model: this rank's tensors, allocated and initialised before the load (as a
  // trainer builds its model first), so the load writes into touched memory.
  auto probe = c.open_resume();
  if (!probe.ok()) return die(probe.error());
  std::vector<std::string> names = probe->tensor_names();
  std::vector<std::vector<float>> state;
  for (const auto& name : names) {
    const TensorRecord* t = probe->tensor(name);
    state.emplace_back(rank_box(t->shape[0], rank, world).volume(), 0.0f);
  }
  const int64_t load_start_ns = mono_now_ns();
  auto reader = c.open_resume();  // what the job's resume costs, manifest included
  if (!reader.ok()) return die(reader.error());
  uint64_t bytes = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const TensorRecord* t = reader->tensor(names[i]);
    auto st = reader->read(names[i], rank_box(t->shape[0], rank, world),
                           std::as_writable_bytes(std::span(state[i])));
    if (!st.ok()) {
      c.report_resume_failure(st.error());
      return die(st.error());
    }
    bytes += state[i].size() * 4;
  }
  const int64_t load_end_ns = mono_now_ns();
  // One step: a read-modify-write pass over the first `step_bytes` of the state (an
  // optimizer update of that much), then the heartbeat that tells the supervisor the job
  // is training again.
  const uint64_t step = reader->global().step + 1;
  uint64_t left = step_bytes / 4;
  for (auto& t : state)
    for (size_t i = 0; i < t.size() && left > 0; ++i, --left) t[i] = t[i] * 0.999f + 0.001f;
  c.heartbeat(step);
  const int64_t step_end_ns = mono_now_ns();
  std::printf(
      "{\"cmd\":\"resume\",\"rank\":%u,\"world\":%u,\"bytes\":%llu,\"entry_ns\":%lld,"
      "\"load_start_ns\":%lld,\"load_end_ns\":%lld,\"step_end_ns\":%lld}\n",
      rank, world, static_cast<unsigned long long>(bytes), static_cast<long long>(entry_ns),
      static_cast<long long>(load_start_ns), static_cast<long long>(load_end_ns),
      static_cast<long long>(step_end_ns));
  std::fflush(stdout);
  return 0;
}

}  // namespace shardguard::bench
