#include "tests/multinode/checks.h"

#include <sys/stat.h>

#include <algorithm>
#include <catch2/catch.hpp>
#include <cinttypes>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/reader.h"
#include "core/filesystem.h"
#include "storage/dir_store.h"
#include "tests/multinode/cluster.h"
#include "tests/support/command.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing::multinode {
namespace {

using namespace std::chrono_literals;

// The arguments as one string, without --sleep-ms (pacing only: results do not depend on it,
// and a reference run need not wait).
std::string join(const std::vector<std::string>& args) {
  std::string out;
  for (size_t i = 0; i < args.size(); ++i) {
    if (args[i] == "--sleep-ms") {
      ++i;
      continue;
    }
    out += " " + args[i];
  }
  return out;
}

// "key=value" lines.
std::map<std::string, std::string> read_pairs(const std::string& path) {
  std::map<std::string, std::string> out;
  std::ifstream in(path);
  std::string line;
  while (std::getline(in, line)) {
    const auto eq = line.find('=');
    if (eq != std::string::npos) out[line.substr(0, eq)] = line.substr(eq + 1);
  }
  return out;
}

uint64_t to_u64(const std::string& s) { return std::strtoull(s.c_str(), nullptr, 10); }

// The value of "allreduce_prev" in the trainer's global user JSON ("" when absent).
std::string allreduce_prev(const std::string& user) {
  const std::string key = "\"allreduce_prev\":\"";
  const auto at = user.find(key);
  if (at == std::string::npos) return "";
  const auto end = user.find('"', at + key.size());
  return user.substr(at + key.size(), end - at - key.size());
}

}  // namespace

std::string field(const EventRecord& e, const std::string& key) {
  for (const auto& [k, v] : e.fields)
    if (k == key) return v;
  return "";
}

std::vector<EventRecord> of_type(const std::vector<EventRecord>& events, const std::string& type) {
  std::vector<EventRecord> out;
  for (const auto& e : events)
    if (e.type == type) out.push_back(e);
  return out;
}

int64_t wall_ms_now() {
  return std::chrono::duration_cast<std::chrono::milliseconds>(
             std::chrono::system_clock::now().time_since_epoch())
      .count();
}

std::optional<EventRecord> wait_event(const Cluster& cluster,
                                      const std::function<bool(const EventRecord&)>& pred,
                                      std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  do {
    for (const auto& e : cluster.events())
      if (pred(e)) return e;
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < until);
  return std::nullopt;
}

std::optional<EventRecord> wait_event_type(const Cluster& cluster, const std::string& type,
                                           std::chrono::milliseconds timeout, size_t nth) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  do {
    const auto found = of_type(cluster.events(), type);
    if (found.size() > nth) return found[nth];
    std::this_thread::sleep_for(50ms);
  } while (std::chrono::steady_clock::now() < until);
  return std::nullopt;
}

bool wait_all_unless_race(Cluster& cluster, int code, std::chrono::milliseconds timeout) {
  const auto until = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    bool all = true;
    for (int k = 0; k < cluster.options().nodes; ++k) {
      const int got = cluster.wait(k, 1ms);
      if (got >= 0 && got != code) {
        UNSCOPED_INFO("node " << k << " exited " << got);
        return false;
      }
      all = all && got == code;
    }
    if (all) return true;
    for (int k = 0; k < cluster.options().nodes; ++k)
      if (cluster.log(k).find("hello refused: no attempt is running") != std::string::npos) {
        WARN("node " << k << ": a relaunched rank was refused (the NodeRunner relaunch race)");
        return false;
      }
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(200ms);
  }
}

std::string final_hash(const std::string& ckpt) {
  return run_command(shardguard_bin() + " ckpt inspect --hash " + ckpt).out;
}

std::string row_parallel_reference(const std::vector<std::string>& trainer_args) {
  static std::map<std::string, std::string> cache;
  const std::string key = join(trainer_args);
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  TempDir ref;
  const auto r = run_command(trainer_path() + " --checkpoint-dir " + ref.path() + "/ckpt" + key);
  REQUIRE(r.exit_code == 0);
  return cache[key] = final_hash(ref.path() + "/ckpt");
}

std::string allreduce_reference(const std::vector<std::string>& trainer_args, uint32_t world) {
  static std::map<std::string, std::string> cache;
  const std::string args = join(trainer_args);
  const std::string key = std::to_string(world) + args;
  if (auto it = cache.find(key); it != cache.end()) return it->second;
  TempDir ref;
  std::ofstream(ref / "job.toml") << "[job]\ncheckpoint_dir = \"" << ref.path() << "/ckpt\"\n"
                                  << "run_dir = \"" << ref.path() << "/run\"\n"
                                  << "master_port = " << free_port_block(2) << "\n"
                                  << "[checkpoint]\nevery_steps = 1000000\n";
  const auto r =
      run_command(shardguard_bin() + " run --config " + ref.path() + "/job.toml --nproc " +
                  std::to_string(world) + " -- " + trainer_path() + " --allreduce" + args);
  INFO(r.err);
  REQUIRE(r.exit_code == 0);
  return cache[key] = final_hash(ref.path() + "/ckpt");
}

std::vector<CommittedCheckpoint> checkpoints(const std::string& ckpt) {
  storage::DirectoryStore store(PosixFilesystem::instance(), ckpt);
  return checkpoints(store);
}

std::vector<CommittedCheckpoint> checkpoints(storage::Store& store) {
  auto entries = checkpoint::list_checkpoints(store, checkpoint::Verify::kSize);
  REQUIRE(entries.ok());
  std::vector<CommittedCheckpoint> out;
  for (const auto& e : *entries) {
    if (e.state != checkpoint::CheckpointState::kComplete || !e.manifest) continue;
    const auto& m = *e.manifest;
    out.push_back({m.step, m.attempt, m.world_size,
                   std::string(checkpoint::save_reason_name(m.reason)), m.created_unix_ms});
  }
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) { return a.step < b.step; });
  return out;
}

void check_history(const std::vector<EventRecord>& events, const std::string& ckpt) {
  storage::DirectoryStore store(PosixFilesystem::instance(), ckpt);
  check_history(events, store);
}

void check_history(const std::vector<EventRecord>& events, storage::Store& store) {
  // The timeline: each step committed once, steps only forward.
  uint64_t last = 0;
  bool any = false;
  for (const auto& e : of_type(events, "checkpoint_committed")) {
    const uint64_t step = to_u64(field(e, "step"));
    INFO("checkpoint_committed of step " << step << " by attempt " << field(e, "attempt")
                                         << " after step " << last);
    CHECK((!any || step > last));
    last = step;
    any = true;
  }
  // Each epoch's lifetime, from its launch to its end.
  std::map<uint64_t, std::pair<int64_t, int64_t>> lifetime;
  for (const auto& e : events) {
    if (e.type != "launch" && e.type != "attempt_end") continue;
    const uint64_t a = to_u64(field(e, "attempt"));
    if (e.type == "launch") lifetime[a] = {e.time_unix_ms, INT64_MAX};
    if (e.type == "attempt_end" && lifetime.count(a)) lifetime[a].second = e.time_unix_ms;
  }
  const auto all = checkpoints(store);
  REQUIRE(!all.empty());
  uint64_t prev_attempt = 0;
  for (const auto& c : all) {
    INFO("manifest of step " << c.step << ": attempt " << c.attempt << ", world " << c.world_size
                             << ", created " << c.created_unix_ms);
    CHECK(c.attempt >= prev_attempt);
    prev_attempt = c.attempt;
    REQUIRE(lifetime.count(c.attempt) == 1);
    // The manifest is written before the coordinator hears of it; the events are stamped when
    // they are handled, so allow the launch a little slack on the early side only.
    CHECK(c.created_unix_ms >= lifetime[c.attempt].first);
    CHECK(c.created_unix_ms <= lifetime[c.attempt].second);
  }
}

namespace {

using OpenDumped = std::function<Result<checkpoint::CheckpointReader>(const ResumeDump&)>;

std::vector<ResumeDump> verify_dumps(const std::string& dump_dir, const OpenDumped& open) {
  std::vector<ResumeDump> out;
  std::vector<std::string> names;
  for (const auto& entry : std::filesystem::directory_iterator(dump_dir))
    if (entry.path().extension() == ".txt") names.push_back(entry.path().stem().string());
  std::sort(names.begin(), names.end());
  for (const auto& name : names) {
    INFO("resume dump " << dump_dir << "/" << name);
    auto kv = read_pairs(dump_dir + "/" + name + ".txt");
    const std::string bin = slurp(dump_dir + "/" + name + ".bin");
    ResumeDump d;
    REQUIRE(std::sscanf(name.c_str(), "resume-a%" SCNu64 "-r%" SCNu64, &d.attempt, &d.rank) == 2);
    d.step = to_u64(kv["step"]);
    d.world_size = static_cast<uint32_t>(to_u64(kv["world_size"]));
    d.manifest = kv["manifest"];
    const uint64_t row0 = to_u64(kv["row0"]), rows = to_u64(kv["rows"]),
                   in_dim = to_u64(kv["in_dim"]);
    auto reader = open(d);
    INFO("manifest " << d.manifest << ": " << (reader.ok() ? "" : reader.error().message()));
    REQUIRE(reader.ok());
    d.saved_world_size = reader->manifest().world_size;
    CHECK(reader->manifest().step == d.step);
    const size_t tensor_bytes = rows * in_dim * sizeof(float);
    REQUIRE(bin.size() == 3 * tensor_bytes);
    size_t at = 0;
    for (const char* tensor : {"weight", "adam.exp_avg", "adam.exp_avg_sq"}) {
      std::vector<std::byte> saved(tensor_bytes);
      REQUIRE(reader->read(tensor, checkpoint::Box{{row0, 0}, {rows, in_dim}}, saved).ok());
      INFO("tensor " << tensor << " rows [" << row0 << ", " << row0 + rows << ")");
      CHECK(std::memcmp(saved.data(), bin.data() + at, tensor_bytes) == 0);
      at += tensor_bytes;
    }
    const auto& rs =
        reader->rank_state(d.rank < d.saved_world_size ? static_cast<uint32_t>(d.rank) : 0);
    CHECK(rs.rng == kv["rng"]);
    CHECK(rs.data_position == kv["position"]);
    CHECK(allreduce_prev(reader->global().user) == kv["prev_global_loss"]);
    out.push_back(d);
  }
  return out;
}

}  // namespace

std::vector<ResumeDump> verify_resume_dumps(const std::string& dump_dir) {
  return verify_dumps(dump_dir, [](const ResumeDump& d) {
    return checkpoint::CheckpointReader::open(PosixFilesystem::instance(), d.manifest);
  });
}

std::vector<ResumeDump> verify_resume_dumps(const std::string& dump_dir, storage::Store& store) {
  return verify_dumps(dump_dir, [&store](const ResumeDump& d) {
    return checkpoint::CheckpointReader::open(store, d.step);
  });
}

}  // namespace shardguard::testing::multinode
