// sg_trainer: the example C++ trainer. Each rank owns a block of rows of a multi-output
// linear model trained with Adam (warm-up + cosine LR) on a shuffled synthetic data set,
// checkpoints through the shardguard client (periodic, emergency, final) and resumes from
// any world size. Run it alone, or as N ranks under `shardguard run --nproc N -- sg_trainer`.
#include <CLI/CLI.hpp>
#include <spdlog/spdlog.h>

#include <unistd.h>

#include <cerrno>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <limits>
#include <optional>
#include <thread>

#include "examples/trainer/model.h"
#include "examples/trainer/tcp_allreduce.h"
#include "hooks/client.h"

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
  // Fault injection for tests and demos, applied on attempt `fault_attempt` only (-1: all).
  uint64_t fail_at_step = 0;   // exit with `fail_code` when reaching this step
  uint64_t fail_after = 0;     // ... or this many steps after the resume point
  int fail_code = 1;
  uint64_t hang_at_step = 0;   // stop heartbeating and sleep forever at this step
  int64_t fault_attempt = 0;
  uint32_t fault_rank = 0;
  // Bad data: training on this batch (numbered from 0 since the start of training) turns the
  // fault rank's weights to NaN, on every attempt that draws it (--fault-attempt aside): what
  // the divergence guard must catch, roll back past, and skip with SHARDGUARD_SKIP_BATCHES.
  std::optional<uint64_t> poison_batch;
  std::string spawn_child_pid_file;  // start a `sleep` grandchild, write its pid here
  // A per-step all-reduce over TCP between ranks (MASTER_ADDR:MASTER_PORT): the previous
  // step's loss summed over ranks scales the learning rate, so ranks block on each other.
  bool allreduce = false;
  // Where to write what a resume loaded (see dump_resume), so that tests can compare it byte
  // for byte with the checkpoint it came from; empty: nothing is written.
  std::string dump_resume_dir;
};

// The global loss of the step before, carried in checkpoints for a bit-exact resume.
double g_prev_global_loss = 0;

bool fault_applies(const Flags& f, const hooks::ClientOptions& o) {
  return o.rank == f.fault_rank &&
         (f.fault_attempt < 0 || uint64_t(f.fault_attempt) == o.attempt);
}

checkpoint::Box rows_box(const Shard& s) { return checkpoint::Box{{s.row0, 0}, {s.rows, s.in_dim}}; }

Status save(hooks::Client& client, const Flags& f, const Shard& shard, const DataLoader& loader,
            uint64_t step, bool final_save) {
  auto w = client.begin_save(step);
  const std::vector<uint64_t> shape = {f.cfg.rows, f.cfg.in_dim};
  for (auto [name, data] : {std::pair{"weight", &shard.w}, std::pair{"adam.exp_avg", &shard.m},
                            std::pair{"adam.exp_avg_sq", &shard.v}})
    SG_RETURN_IF_ERROR(w.add_chunk(name, checkpoint::DType::kF32, shape, rows_box(shard),
                                   std::as_bytes(std::span(*data))));
  w.set_rank_state({loader.rng_state(), loader.position_json(), "null"});
  if (client.options().rank == 0) {
    char lr[160];
    std::snprintf(lr, sizeof lr, R"({"base_lr":%.9g,"warmup":%llu,"total":%llu,"current":%.9g})",
                  double(f.cfg.lr), static_cast<unsigned long long>(f.cfg.warmup),
                  static_cast<unsigned long long>(f.cfg.steps),
                  double(learning_rate(f.cfg, step)));
    char user[192];
    std::snprintf(user, sizeof user,
                  R"({"rows":%llu,"in_dim":%llu,"seed":%llu,"allreduce_prev":"%a"})",
                  static_cast<unsigned long long>(f.cfg.rows),
                  static_cast<unsigned long long>(f.cfg.in_dim),
                  static_cast<unsigned long long>(f.cfg.seed), g_prev_global_loss);
    w.set_global_state({step, lr, user});
  }
  return client.save(std::move(w), final_save ? std::optional(checkpoint::SaveReason::kFinal)
                                              : std::nullopt);
}

// Loads this rank's rows (from any world size) and the data loader position.
Result<uint64_t> resume(hooks::Client& client, const Flags& f, Shard& shard, DataLoader& loader) {
  auto reader = client.open_resume();
  if (!reader.ok()) {
    if (reader.error().code() == ErrorCode::kNotFound) return uint64_t{0};
    return std::move(reader).error();
  }
  for (auto [name, data] : {std::pair{"weight", &shard.w}, std::pair{"adam.exp_avg", &shard.m},
                            std::pair{"adam.exp_avg_sq", &shard.v}}) {
    const auto* t = reader->tensor(name);
    if (t == nullptr || t->shape != std::vector<uint64_t>{f.cfg.rows, f.cfg.in_dim})
      return Error(ErrorCode::kInvalid, std::string("checkpoint tensor '") + name +
                                            "' is missing or has another shape than --rows x "
                                            "--in-dim");
    SG_RETURN_IF_ERROR(reader->read(name, rows_box(shard), std::as_writable_bytes(std::span(*data))));
  }
  // Every rank's loader state is the same (one global shuffle); take ours or rank 0's.
  const uint32_t rank = client.options().rank;
  const auto& st = reader->rank_state(rank < reader->manifest().world_size ? rank : 0);
  if (!loader.restore(st.rng, st.data_position))
    return Error(ErrorCode::kCorrupt, "checkpoint data loader state does not parse");
  const std::string& user = reader->global().user;
  const std::string key = "\"allreduce_prev\":\"";
  if (auto at = user.find(key); at != std::string::npos)
    g_prev_global_loss = std::strtod(user.c_str() + at + key.size(), nullptr);
  return reader->global().step;
}

// Writes this rank's loaded state to <dir>/resume-a<attempt>-r<rank>.{bin,txt}: the .bin holds
// its rows of weight, adam.exp_avg and adam.exp_avg_sq (raw f32, in that order), the .txt the
// step, the rows and the loader and global state as loaded. The .txt is renamed into place
// last, so a reader that sees it sees both whole. A test reads the checkpoint itself and
// compares: this is how a resharded resume is checked exactly when the all-reduce makes the
// final weights depend on the world size.
Status dump_resume(const std::string& dir, const hooks::ClientOptions& o, uint64_t step,
                   const Shard& shard, const DataLoader& loader, const std::string& manifest) {
  const std::string base = dir + "/resume-a" + std::to_string(o.attempt) + "-r" +
                           std::to_string(o.rank);
  {
    std::ofstream bin(base + ".bin", std::ios::binary | std::ios::trunc);
    for (const auto* data : {&shard.w, &shard.m, &shard.v})
      bin.write(reinterpret_cast<const char*>(data->data()),
                static_cast<std::streamsize>(data->size() * sizeof(float)));
    if (!bin.flush()) return Error::from_errno("write '" + base + ".bin'", errno);
  }
  char loss[64];
  std::snprintf(loss, sizeof loss, "%a", g_prev_global_loss);
  {
    std::ofstream txt(base + ".txt.tmp", std::ios::trunc);
    txt << "step=" << step << "\nworld_size=" << o.world_size << "\nrow0=" << shard.row0
        << "\nrows=" << shard.rows << "\nin_dim=" << shard.in_dim << "\nmanifest=" << manifest
        << "\nprev_global_loss=" << loss << "\nposition=" << loader.position_json()
        << "\nrng=" << loader.rng_state() << "\n";
    if (!txt.flush()) return Error::from_errno("write '" + base + ".txt.tmp'", errno);
  }
  if (std::rename((base + ".txt.tmp").c_str(), (base + ".txt").c_str()) != 0)
    return Error::from_errno("rename '" + base + ".txt.tmp' -> '" + base + ".txt'", errno);
  return {};
}

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
  const uint64_t row0 = o.rank * f.cfg.rows / o.world_size;
  const uint64_t row1 = (o.rank + 1) * f.cfg.rows / o.world_size;
  Shard shard = init_shard(f.cfg, row0, row1 - row0);
  DataSet data(f.cfg);
  DataLoader loader(f.cfg);
  auto start = resume(**client, f, shard, loader);
  if (!start.ok()) {
    spdlog::error("trainer rank {}: resume: {}", o.rank, start.error().message());
    if (start.error().code() != ErrorCode::kCorrupt) return 1;
    // A checkpoint that fails verification: the supervisor sets it aside and falls back.
    (*client)->report_resume_failure(start.error());
    return shardguard::kJobExitResumeFailed;
  }
  spdlog::info("trainer rank {}/{}: rows [{}, {}), {} at step {}", o.rank, o.world_size, row0, row1,
               *start == 0 ? "fresh start" : "resumed", *start);
  if (o.skip_batches > 0) {
    // The supervisor rolled back past bad weights: leave the data that led there behind.
    spdlog::warn("trainer rank {}: skipping {} data batches (SHARDGUARD_SKIP_BATCHES) from batch {}",
                 o.rank, o.skip_batches, loader.batches_drawn());
    for (uint64_t i = 0; i < o.skip_batches; ++i) (void)loader.next_batch();
  }
  if (!f.dump_resume_dir.empty() && *start > 0) {
    const auto manifest = (*client)->resume_manifest();
    if (auto st = dump_resume(f.dump_resume_dir, o, *start, shard, loader, manifest.value_or(""));
        !st.ok()) {
      spdlog::error("trainer rank {}: --dump-resume: {}", o.rank, st.error().message());
      return 1;
    }
  }

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
  std::unique_ptr<TcpAllReduce> collective;
  if (f.allreduce && o.world_size > 1) {
    const char* addr = std::getenv("MASTER_ADDR");
    const char* port = std::getenv("MASTER_PORT");
    auto c = TcpAllReduce::connect(o.rank, o.world_size, addr ? addr : "127.0.0.1",
                                   static_cast<uint16_t>(port ? std::atoi(port) : 29500),
                                   std::chrono::seconds(60));
    if (!c.ok()) {
      spdlog::error("trainer rank {}: {}", o.rank, c.error().message());
      return 1;
    }
    collective = std::move(*c);
  }
  for (uint64_t step = *start + 1; step <= f.cfg.steps; ++step) {
    if (fault_applies(f, o) &&
        (step == f.fail_at_step || (f.fail_after && step == *start + f.fail_after))) {
      spdlog::error("trainer rank {}: injected failure at step {} (exit {})", o.rank, step, f.fail_code);
      return f.fail_code;
    }
    if (fault_applies(f, o) && step == f.hang_at_step) {
      spdlog::error("trainer rank {}: injected hang at step {}", o.rank, step);
      for (;;) std::this_thread::sleep_for(std::chrono::hours(1));
    }
    const uint64_t batch_number = loader.batches_drawn();
    const auto batch = loader.next_batch();
    const float scale = f.allreduce ? lr_scale_from_global_loss(g_prev_global_loss) : 1.0f;
    const double loss = train_step(f.cfg, data, batch, step, shard, scale);
    if (f.poison_batch == batch_number && o.rank == f.fault_rank && !shard.w.empty()) {
      spdlog::error("trainer rank {}: step {}: batch {} is poisoned: the weights are NaN now",
                    o.rank, step, batch_number);
      for (auto& w : shard.w) w = std::numeric_limits<float>::quiet_NaN();
    }
    const double mean_loss = loss / double(batch.size() * std::max<uint64_t>(shard.rows, 1));
    (void)(*client)->report_scalar("loss", step, mean_loss);
    if (f.allreduce) {
      if (collective) {
        auto total = collective->sum(loss);
        if (!total.ok()) {
          spdlog::error("trainer rank {}: step {}: {}", o.rank, step, total.error().message());
          return 1;
        }
        g_prev_global_loss = *total;
      } else {
        g_prev_global_loss = loss;
      }
    }
    (*client)->heartbeat(step);
    if (f.log_every && step % f.log_every == 0)
      spdlog::info("trainer rank {}: step {} loss {:.6f} lr {:.6f}", o.rank, step, mean_loss,
                   learning_rate(f.cfg, step));
    const bool last = step == f.cfg.steps;
    if (last || (*client)->should_checkpoint(step)) {
      if (auto st = save(**client, f, shard, loader, step, last); !st.ok()) {
        // Abandoned (another rank failed, or every rank now saves a later step): go on.
        if (st.error().code() == ErrorCode::kCancelled && !last) {
          spdlog::warn("trainer rank {}: {}", o.rank, st.error().message());
        } else {
          spdlog::error("trainer rank {}: checkpoint of step {}: {}", o.rank, step,
                        st.error().message());
          if (last || (*client)->emergency()) return 1;
        }
      }
    }
    if ((*client)->should_exit()) {
      if ((*client)->emergency_committed())
        spdlog::warn("trainer rank {}: stopping after the emergency checkpoint of step {}", o.rank,
                     (*client)->last_committed_step());
      else
        spdlog::warn("trainer rank {}: stopping: the supervisor said stop", o.rank);
      return shardguard::kJobExitAfterEmergency;
    }
    if (f.sleep_ms) std::this_thread::sleep_for(std::chrono::milliseconds(f.sleep_ms));
  }
  if (auto st = (*client)->wait(); !st.ok()) {
    spdlog::error("trainer rank {}: {}", o.rank, st.error().message());
    return 1;
  }
  spdlog::info("trainer rank {}: done at step {}", o.rank, f.cfg.steps);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  Flags f;
  CLI::App app{"sg_trainer: example trainer for shardguard (row-parallel linear model, Adam)"};
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
  auto* faults = app.add_option_group("fault injection", "for tests and demos");
  faults->add_option("--fail-at-step", f.fail_at_step, "exit with --fail-code at this step");
  faults->add_option("--fail-after", f.fail_after, "exit with --fail-code N steps after resuming");
  faults->add_option("--fail-code", f.fail_code, "exit code of --fail-at-step");
  faults->add_option("--hang-at-step", f.hang_at_step, "stop heartbeating at this step");
  faults->add_option("--fault-attempt", f.fault_attempt, "attempt the faults apply to (-1: all)");
  faults->add_option("--fault-rank", f.fault_rank, "rank the faults apply to");
  app.add_flag("--allreduce", f.allreduce,
               "all-reduce the loss over TCP every step (MASTER_ADDR:MASTER_PORT): ranks block on "
               "each other as in data-parallel training");
  app.add_option("--dump-resume", f.dump_resume_dir,
                 "after a resume, write this rank's loaded rows and loader state to DIR/"
                 "resume-a<attempt>-r<rank>.{bin,txt} (for tests comparing them with the "
                 "checkpoint)");
  faults->add_option("--poison-batch", f.poison_batch,
                     "training on this batch (0-based, counted from the start of training) "
                     "turns the --fault-rank's weights to NaN, on every attempt");
  faults->add_option("--spawn-child", f.spawn_child_pid_file,
                     "start a `sleep` grandchild and write its pid to this file");
  CLI11_PARSE(app, argc, argv);
  spdlog::set_pattern("%H:%M:%S.%e %^%l%$ %v");
  if (f.cfg.rows == 0 || f.cfg.in_dim == 0 || f.cfg.batch == 0 || f.cfg.samples < f.cfg.batch) {
    spdlog::error("trainer: --rows, --in-dim and --batch must be positive, --samples >= --batch");
    return 2;
  }
  return run(f);
}
