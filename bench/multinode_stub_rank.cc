// sg_bench_stub_rank: the smallest rank a multi-node benchmark can supervise. It steps about
// once a millisecond through hooks/client.h (heartbeats, the supervisor's schedule), writes
// the wall-clock time (ns) at which it first sees a checkpoint request of the supervisor, saves
// one float when the request's step comes, and exits 75 after an emergency checkpoint (or at
// once on `stop`). bench/multinode_bench.py reads the times it writes:
//
//   <out>/a<attempt>-r<rank>.txt   start_unix_ns=..., then checkpoint_now_unix_ns=... at_step=...
//
// Polling the client every ~1 ms bounds how late a request is seen; the figure is the latency
// of the network plane plus at most that.
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <thread>

#include "hooks/client.h"

using namespace shardguard;

namespace {

int64_t now_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

}  // namespace

int main(int argc, char** argv) {
  std::string out_dir = ".";
  double max_seconds = 600;
  CLI::App app{"sg_bench_stub_rank: a stub rank that timestamps the supervisor's requests"};
  app.add_option("--out", out_dir, "where to write a<attempt>-r<rank>.txt")->capture_default_str();
  app.add_option("--max-seconds", max_seconds, "exit 0 after this long")->capture_default_str();
  CLI11_PARSE(app, argc, argv);

  hooks::ClientOptions defaults;
  defaults.checkpoint_dir = "checkpoints";
  auto client = hooks::Client::from_env(defaults);
  if (!client.ok()) {
    spdlog::error("stub rank: {}", client.error().message());
    return 2;
  }
  hooks::Client& c = **client;
  const auto& o = c.options();
  const std::string path =
      out_dir + "/a" + std::to_string(o.attempt) + "-r" + std::to_string(o.rank) + ".txt";
  std::ofstream out(path, std::ios::app);
  out << "start_unix_ns=" << now_ns() << "\n" << std::flush;

  const auto until = std::chrono::steady_clock::now() + std::chrono::duration<double>(max_seconds);
  bool seen = false;
  for (uint64_t step = 1; std::chrono::steady_clock::now() < until; ++step) {
    c.heartbeat(step);
    if (!seen) {
      if (auto at = c.requested_step()) {
        out << "checkpoint_now_unix_ns=" << now_ns() << "\nat_step=" << *at << "\n" << std::flush;
        seen = true;
      }
    }
    if (c.should_checkpoint(step)) {
      auto w = c.begin_save(step);
      const float value = static_cast<float>(step);
      auto st = w.add_chunk("value", checkpoint::DType::kF32, {o.world_size},
                            checkpoint::Box{{o.rank}, {1}}, std::as_bytes(std::span(&value, 1)));
      if (st.ok() && o.rank == 0) w.set_global_state({step, "null", "null"});
      if (st.ok()) st = c.save(std::move(w));
      if (!st.ok() && st.error().code() != ErrorCode::kCancelled)
        spdlog::warn("stub rank {}: save of step {}: {}", o.rank, step, st.error().message());
      seen = false;  // the next request is timed again
    }
    if (c.should_exit()) return kJobExitAfterEmergency;
    std::this_thread::sleep_for(std::chrono::milliseconds(1));
  }
  return 0;
}
