// sg_trainer_cuda: the example trainer (examples/trainer/) on the GPU. The same model,
// data, data loader, learning-rate schedule, checkpoint layout and command-line flags as
// sg_trainer, but this rank's rows of W and their Adam moments live in device memory and
// one CUDA thread block updates each row; the logged loss is summed over the ranks with an
// NCCL all-reduce. Checkpoints (--snapshot gpu, the default) go through the client's GPU
// snapshot path (hooks/gpu_snapshot.h): the state is copied from device memory straight
// into the client's pinned staging on its own copy stream while the next steps run (the
// training stream is fenced before its next kernel, which rewrites the state), and the write
// starts once the copy is done. --snapshot host is the synchronous path for comparison: the
// loop waits for a device-to-host copy, then hands host memory to the client. Resume reads
// this rank's rows from any world size's checkpoint into pinned memory and uploads them. At
// the end the trainer logs what its checkpoints cost the loop ("snapshot stall ...").
//
// Reproducibility: the final weights are bit-identical between runs of this binary (same
// flags, same GPU model), whatever the world size and however many times the run is
// interrupted and resumed: every row's arithmetic is fixed by kernels.cu and depends on
// no other row. They are NOT bit-identical to sg_trainer's (fused multiply-add on the GPU,
// another summation order within a row). The logged loss is a sum over ranks and may
// differ in its last bits between world sizes; it is never fed back into training.
//
// Rank r uses GPU (LOCAL_RANK mod device count). Ranks are joined through files in the
// checkpoint directory (nccl_rendezvous.h). Run it alone, or as N ranks on N GPUs under
// `shardguard run --nproc N -- sg_trainer_cuda ...`.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <filesystem>
#include <limits>
#include <thread>

#include "examples/trainer/model.h"
#include "examples/trainer_cuda/cuda_check.h"
#include "examples/trainer_cuda/gpu_shard.h"
#include "examples/trainer_cuda/nccl_rendezvous.h"
#include "examples/trainer_cuda/snapshot_stats.h"
#include "hooks/client.h"
#include "hooks/gpu_snapshot.h"

using namespace shardguard;
using namespace shardguard::example;

namespace {

struct Flags {
  TrainConfig cfg;
  std::string checkpoint_dir = "checkpoints";
  uint64_t checkpoint_every = 100;
  uint64_t log_every = 100;
  uint64_t sleep_ms = 0;
  bool async = false;
  std::string snapshot = "gpu";  // gpu | host
  // Fault injection for tests and demos, applied on attempt `fault_attempt` only (-1: all).
  uint64_t fail_at_step = 0;   // exit with `fail_code` when reaching this step
  uint64_t fail_after = 0;     // ... or this many steps after the resume point
  int fail_code = 1;
  uint64_t hang_at_step = 0;   // stop heartbeating and sleep forever at this step
  int64_t fault_attempt = 0;
  uint32_t fault_rank = 0;
  std::string spawn_child_pid_file;  // start a `sleep` grandchild, write its pid here
};

bool fault_applies(const Flags& f, const hooks::ClientOptions& o) {
  return o.rank == f.fault_rank &&
         (f.fault_attempt < 0 || uint64_t(f.fault_attempt) == o.attempt);
}

checkpoint::Box rows_box(const GpuShard& s) {
  return checkpoint::Box{{s.row0(), 0}, {s.rows(), s.in_dim()}};
}

const std::vector<std::pair<const char*, int>> kStateTensors = {
    {"weight", 0}, {"adam.exp_avg", 1}, {"adam.exp_avg_sq", 2}};

// The rank and global state of sg_trainer's checkpoints.
void set_states(checkpoint::ShardWriter& w, const Flags& f, const hooks::Client& client,
                const DataLoader& loader, uint64_t step) {
  w.set_rank_state({loader.rng_state(), loader.position_json(), "null"});
  if (client.options().rank != 0) return;
  char lr[160];
  std::snprintf(lr, sizeof lr, R"({"base_lr":%.9g,"warmup":%llu,"total":%llu,"current":%.9g})",
                double(f.cfg.lr), static_cast<unsigned long long>(f.cfg.warmup),
                static_cast<unsigned long long>(f.cfg.steps), double(learning_rate(f.cfg, step)));
  char user[128];
  std::snprintf(user, sizeof user, R"({"rows":%llu,"in_dim":%llu,"seed":%llu})",
                static_cast<unsigned long long>(f.cfg.rows),
                static_cast<unsigned long long>(f.cfg.in_dim),
                static_cast<unsigned long long>(f.cfg.seed));
  w.set_global_state({step, lr, user});
}

// --snapshot gpu: the same tensors as sg_trainer's checkpoints, copied from device memory
// after this step's kernels on the client's copy stream; returns once the copies are queued
// (the write starts in poll()), or - `now`: the last step, an emergency - once saved.
Status save_gpu(hooks::Client& client, hooks::GpuSnapshot& gpu, const Flags& f,
                const GpuShard& shard, const DataLoader& loader, uint64_t step, bool final_save,
                bool now) {
  auto s = gpu.begin(step);
  const std::vector<uint64_t> shape = {f.cfg.rows, f.cfg.in_dim};
  const float* device[3] = {shard.device_w(), shard.device_m(), shard.device_v()};
  for (const auto& [name, i] : kStateTensors)
    SG_RETURN_IF_ERROR(s.add_device_chunk(name, checkpoint::DType::kF32, shape, rows_box(shard),
                                          device[i], shard.elems() * sizeof(float)));
  set_states(s.writer, f, client, loader, step);
  SG_RETURN_IF_ERROR(
      gpu.start(std::move(s), shard.compute_stream(),
                final_save ? std::optional(checkpoint::SaveReason::kFinal) : std::nullopt));
  return now ? gpu.finish() : Status{};
}

// --snapshot host: the loop waits for a device -> pinned host copy, then the client saves
// from host memory (an async client copies it into its staging and writes in the background).
Status save_host(hooks::Client& client, const Flags& f, GpuShard& shard, const DataLoader& loader,
                 uint64_t step, bool final_save) {
  shard.copy_to_host();
  auto w = client.begin_save(step);
  const std::vector<uint64_t> shape = {f.cfg.rows, f.cfg.in_dim};
  const std::span<float> host[3] = {shard.host_w(), shard.host_m(), shard.host_v()};
  for (const auto& [name, i] : kStateTensors)
    SG_RETURN_IF_ERROR(
        w.add_chunk(name, checkpoint::DType::kF32, shape, rows_box(shard), std::as_bytes(host[i])));
  set_states(w, f, client, loader, step);
  return client.save(std::move(w), final_save ? std::optional(checkpoint::SaveReason::kFinal)
                                              : std::nullopt);
}

// Loads this rank's rows (from any world size) into pinned memory, then onto the device,
// and the data loader position.
Result<uint64_t> resume(hooks::Client& client, const Flags& f, GpuShard& shard,
                        DataLoader& loader) {
  auto reader = client.open_resume();
  if (!reader.ok()) {
    if (reader.error().code() == ErrorCode::kNotFound) return uint64_t{0};
    return std::move(reader).error();
  }
  for (auto [name, data] :
       {std::pair{"weight", shard.host_w()}, std::pair{"adam.exp_avg", shard.host_m()},
        std::pair{"adam.exp_avg_sq", shard.host_v()}}) {
    const auto* t = reader->tensor(name);
    if (t == nullptr || t->shape != std::vector<uint64_t>{f.cfg.rows, f.cfg.in_dim} ||
        t->dtype != checkpoint::DType::kF32)
      return Error(ErrorCode::kInvalid, std::string("checkpoint tensor '") + name +
                                            "' is missing or is not F32 of --rows x --in-dim");
    SG_RETURN_IF_ERROR(reader->read(name, rows_box(shard), std::as_writable_bytes(data)));
  }
  shard.upload();
  shard.release_host();
  // Every rank's loader state is the same (one global shuffle); take ours or rank 0's.
  const uint32_t rank = client.options().rank;
  const auto& st = reader->rank_state(rank < reader->manifest().world_size ? rank : 0);
  if (!loader.restore(st.rng, st.data_position))
    return Error(ErrorCode::kCorrupt, "checkpoint data loader state does not parse");
  return reader->global().step;
}

// Picks this rank's GPU: LOCAL_RANK modulo the visible devices.
int select_device(const hooks::ClientOptions& o) {
  int count = 0;
  SG_CUDA_CHECK(cudaGetDeviceCount(&count));
  if (count <= 0) {
    spdlog::error("trainer rank {}: no CUDA device", o.rank);
    std::exit(kExitGpuError);
  }
  const int device = int(o.local_rank % uint32_t(count));
  SG_CUDA_CHECK(cudaSetDevice(device));
  cudaDeviceProp prop{};
  SG_CUDA_CHECK(cudaGetDeviceProperties(&prop, device));
  spdlog::info("trainer rank {}: GPU {} of {}: {} (sm_{}{})", o.rank, device, count, prop.name,
               prop.major, prop.minor);
  return device;
}

// Destroys the communicator on every way out of run().
struct CommGuard {
  ncclComm_t comm = nullptr;
  ~CommGuard() {
    if (comm != nullptr) {
      const ncclResult_t r = ncclCommDestroy(comm);
      if (r != ncclSuccess) spdlog::warn("ncclCommDestroy: {}", ncclGetErrorString(r));
    }
  }
};

int run(const Flags& f) {
  hooks::ClientOptions defaults;
  defaults.checkpoint_dir = f.checkpoint_dir;
  defaults.every_steps = f.checkpoint_every;
  defaults.async = f.async;
  auto client = hooks::Client::from_env(defaults);
  if (!client.ok()) {
    spdlog::error("trainer: {}", client.error().message());
    return 2;
  }
  const auto& o = (*client)->options();
  select_device(o);
  std::error_code ec;
  std::filesystem::create_directories(o.checkpoint_dir, ec);
  if (ec) {
    spdlog::error("trainer rank {}: cannot create {}: {}", o.rank, o.checkpoint_dir, ec.message());
    return 1;
  }
  CommGuard comm;
  comm.comm = nccl_connect({o.checkpoint_dir, o.attempt, o.rank, o.world_size});
  int nccl_version = 0;
  SG_NCCL_CHECK(ncclGetVersion(&nccl_version));
  spdlog::info("trainer rank {}: NCCL {} (headers {}.{}.{}), communicator of {} rank(s)", o.rank,
               nccl_version, NCCL_MAJOR, NCCL_MINOR, NCCL_PATCH, o.world_size);

  const uint64_t row0 = o.rank * f.cfg.rows / o.world_size;
  const uint64_t row1 = (o.rank + 1) * f.cfg.rows / o.world_size;
  GpuShard shard(f.cfg, row0, row1 - row0);
  DataSet data(f.cfg);
  DataLoader loader(f.cfg);
  auto start = resume(**client, f, shard, loader);
  if (!start.ok()) {
    spdlog::error("trainer rank {}: resume: {}", o.rank, start.error().message());
    return 1;
  }
  spdlog::info("trainer rank {}/{}: rows [{}, {}) on the GPU, {} at step {}", o.rank,
               o.world_size, row0, row1, *start == 0 ? "fresh start" : "resumed", *start);
  std::unique_ptr<hooks::GpuSnapshot> gpu;
  if (f.snapshot == "gpu") {
    auto g = hooks::GpuSnapshot::create(**client);
    if (!g.ok()) {
      spdlog::error("trainer rank {}: GPU snapshots: {}", o.rank, g.error().message());
      return 1;
    }
    gpu = std::move(*g);
    // Staging for the three tensors, populated and pinned in the background from now on,
    // so that the first checkpoint stalls no more than later ones.
    if (auto st = gpu->prepare(3 * shard.elems() * sizeof(float)); !st.ok())
      spdlog::warn("trainer rank {}: staging: {}", o.rank, st.error().message());
  }
  if (!gpu && f.async) {
    // The same head start for the synchronous path's staging, for a fair comparison.
    if (auto st = (*client)->reserve(3 * shard.elems() * sizeof(float)); !st.ok())
      spdlog::warn("trainer rank {}: staging: {}", o.rank, st.error().message());
  }
  SnapshotStats stats;
  // Hands a finished snapshot to the writer; false on a failed save.
  auto poll = [&](uint64_t step) {
    if (!gpu) return true;
    auto handed = gpu->poll();
    if (!handed.ok()) {
      spdlog::error("trainer rank {}: checkpoint write: {}", o.rank, handed.error().message());
      return false;
    }
    if (*handed) stats.handed_over(step, gpu->last_timing().copy_seconds);
    return true;
  };

  if (!f.spawn_child_pid_file.empty() && fault_applies(f, o)) {
    pid_t child = ::fork();
    if (child == 0) {
      ::execlp("sleep", "sleep", "1000", static_cast<char*>(nullptr));
      ::_exit(127);
    }
    std::FILE* pf = std::fopen(f.spawn_child_pid_file.c_str(), "w");
    if (pf != nullptr) {
      std::fprintf(pf, "%d\n", child);
      std::fclose(pf);
    }
  }
  for (uint64_t step = *start + 1; step <= f.cfg.steps; ++step) {
    if (fault_applies(f, o) &&
        (step == f.fail_at_step || (f.fail_after && step == *start + f.fail_after))) {
      spdlog::error("trainer rank {}: injected failure at step {} (exit {})", o.rank, step, f.fail_code);
      std::fflush(nullptr);
      std::_Exit(f.fail_code);  // like a crash: no communicator teardown
    }
    if (fault_applies(f, o) && step == f.hang_at_step) {
      spdlog::error("trainer rank {}: injected hang at step {}", o.rank, step);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const auto t_step = std::chrono::steady_clock::now();
    // This step's kernel rewrites the state: not before a snapshot's copy of it is done.
    if (gpu) {
      if (auto st = gpu->fence(shard.compute_stream()); !st.ok()) {
        spdlog::error("trainer rank {}: {}", o.rank, st.error().message());
        return 1;
      }
    }
    const auto batch = loader.next_batch();
    shard.train_step(data, batch, step);
    (*client)->heartbeat(step);
    if (f.log_every && step % f.log_every == 0) {
      // A collective: every rank reaches the same log steps.
      const double loss = shard.global_loss(comm.comm);
      if (o.rank == 0)
        spdlog::info("trainer rank {}: step {} loss {:.6f} lr {:.6f}", o.rank, step,
                     loss / double(batch.size() * f.cfg.rows), learning_rate(f.cfg, step));
    }
    if (!poll(step) && (*client)->emergency()) return 1;
    const bool last = step == f.cfg.steps;
    if (last || (*client)->should_checkpoint(step)) {
      // The last step and an emergency must be on disk before the loop goes on.
      const bool now = last || (*client)->emergency().has_value();
      const auto t0 = std::chrono::steady_clock::now();
      if (gpu && gpu->pending() && gpu->finish().ok())  // one snapshot at a time
        stats.handed_over(step, gpu->last_timing().copy_seconds);
      Status st = gpu ? save_gpu(**client, *gpu, f, shard, loader, step, last, now)
                      : save_host(**client, f, shard, loader, step, last);
      stats.began(step, 3 * shard.elems() * sizeof(float),
                  std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count());
      if (gpu && !gpu->pending()) stats.handed_over(step, gpu->last_timing().copy_seconds);
      if (!st.ok()) {
        spdlog::error("trainer rank {}: checkpoint of step {}: {}", o.rank, step, st.error().message());
        if (last || (*client)->emergency()) return 1;
      }
    }
    if ((*client)->should_exit()) {
      if ((*client)->emergency_committed())
        spdlog::warn("trainer rank {}: stopping after the emergency checkpoint of step {}", o.rank,
                     (*client)->last_committed_step());
      else
        spdlog::warn("trainer rank {}: stopping: the supervisor said stop", o.rank);
      shard.synchronize();
      return shardguard::kJobExitAfterEmergency;
    }
    if (f.sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(f.sleep_ms));
    stats.step_took(
        step, std::chrono::duration<double>(std::chrono::steady_clock::now() - t_step).count());
  }
  shard.synchronize();
  if (gpu) {
    if (auto st = gpu->finish(); !st.ok()) {
      spdlog::error("trainer rank {}: {}", o.rank, st.error().message());
      return 1;
    }
  }
  if (auto st = (*client)->wait(); !st.ok()) {
    spdlog::error("trainer rank {}: {}", o.rank, st.error().message());
    return 1;
  }
  if (const std::string r = stats.report(f.snapshot); !r.empty())
    spdlog::info("trainer rank {}: {}", o.rank, r);
  spdlog::info("trainer rank {}: done at step {}", o.rank, f.cfg.steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"sg_trainer_cuda: example GPU trainer for shardguard (row-parallel linear model, "
               "Adam, CUDA + NCCL)"};
  app.add_option("--steps", f.cfg.steps, "training steps")->capture_default_str();
  app.add_option("--rows", f.cfg.rows, "model outputs (rows split across ranks)")->capture_default_str();
  app.add_option("--in-dim", f.cfg.in_dim, "model inputs")->capture_default_str();
  app.add_option("--samples", f.cfg.samples, "data set size")->capture_default_str();
  app.add_option("--batch", f.cfg.batch, "batch size")->capture_default_str();
  app.add_option("--seed", f.cfg.seed, "seed of data, shuffle and init")->capture_default_str();
  app.add_option("--lr", f.cfg.lr, "peak learning rate")->capture_default_str();
  app.add_option("--warmup", f.cfg.warmup, "warm-up steps")->capture_default_str();
  app.add_option("--checkpoint-every", f.checkpoint_every,
                 "checkpoint every N steps when no agent sets the schedule (0: off)")
      ->capture_default_str();
  app.add_option("--checkpoint-dir", f.checkpoint_dir,
                 "where checkpoints go when SHARDGUARD_CHECKPOINT_DIR is unset")
      ->capture_default_str();
  app.add_option("--log-every", f.log_every, "log the loss every N steps")->capture_default_str();
  app.add_option("--sleep-ms", f.sleep_ms, "pretend each step takes this long")->capture_default_str();
  app.add_flag("--async", f.async, "asynchronous checkpoints (stall only for the snapshot)");
  app.add_option("--snapshot", f.snapshot,
                 "gpu: copy device memory into the client's pinned staging beside the next "
                 "steps; host: wait for a device-to-host copy, then save from host memory")
      ->check(CLI::IsMember({"gpu", "host"}))
      ->capture_default_str();
  auto* faults = app.add_option_group("fault injection", "for tests and demos");
  faults->add_option("--fail-at-step", f.fail_at_step, "exit with --fail-code at this step");
  faults->add_option("--fail-after", f.fail_after, "exit with --fail-code N steps after resuming");
  faults->add_option("--fail-code", f.fail_code, "exit code of --fail-at-step");
  faults->add_option("--hang-at-step", f.hang_at_step, "stop heartbeating at this step");
  faults->add_option("--fault-attempt", f.fault_attempt, "attempt the faults apply to (-1: all)");
  faults->add_option("--fault-rank", f.fault_rank, "rank the faults apply to");
  faults->add_option("--spawn-child", f.spawn_child_pid_file,
                     "start a `sleep` grandchild and write its pid to this file");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  if (f.cfg.rows == 0 || f.cfg.in_dim == 0 || f.cfg.batch == 0 || f.cfg.samples < f.cfg.batch) {
    spdlog::error("trainer: --rows, --in-dim and --batch must be positive, --samples >= --batch");
    return 2;
  }
  // One thread block per row (grid x is at most 2^31 - 1); 32-bit sizes in the kernel.
  constexpr uint64_t kMax = uint64_t(std::numeric_limits<int32_t>::max());
  if (f.cfg.rows > kMax || f.cfg.in_dim > kMax || f.cfg.batch > kMax) {
    spdlog::error("trainer: --rows, --in-dim and --batch must be below 2^31 on the GPU");
    return 2;
  }
  return run(f);
}
