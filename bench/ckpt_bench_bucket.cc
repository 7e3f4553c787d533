// sg_bench_ckpt's commands on a bucket (DIR given as s3://BUCKET/PREFIX), for
// bench/bucket_bench.py:
//
//   save  s3://.. STEP RANK WORLD TOTAL_BYTES   this rank's share uploaded (multipart, the
//                                               parts in parallel within max_inflight); rank 0
//                                               then commits the manifest (one conditional PUT)
//   load  s3://.. STEP RANK WORLD               this rank's rows of every tensor read by
//                                               ranged GETs (one read_many) into the rank's
//                                               whole state, every block checked
//   clear s3://..                               every object under the prefix removed
//
// The connection is what a rank under `shardguard run` builds: SHARDGUARD_S3_* and AWS's own
// variables (endpoint, keys, region). Each JSON line carries the rank's peak RSS and the bytes
// of state it holds itself, so the driver can tell the transfers' memory from the state's.
#include <sys/resource.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bench/ckpt_bench.h"
#include "checkpoint/commit.h"
#include "storage/connect.h"
#include "storage/s3/s3_options.h"

namespace shardguard::bench {

using namespace shardguard::checkpoint;

namespace {

uint64_t peak_rss_bytes() {
  struct rusage u {};
  ::getrusage(RUSAGE_SELF, &u);
  return static_cast<uint64_t>(u.ru_maxrss) * 1024;
}

Result<std::unique_ptr<storage::Connection>> connect_bucket(const std::string& url,
                                                            storage::s3::S3Options* used = nullptr) {
  SG_ASSIGN_OR_RETURN(storage::Location location, storage::Location::parse(url));
  auto getenv = [](std::string_view name) -> std::optional<std::string> {
    const char* v = std::getenv(std::string(name).c_str());
    if (v == nullptr || *v == '\0') return std::nullopt;
    return std::string(v);
  };
  storage::ConnectOptions o;
  SG_ASSIGN_OR_RETURN(o.s3, storage::s3::s3_options_from_env(getenv));
  if (used != nullptr) *used = o.s3;
  o.getenv = getenv;
  return storage::connect(location, std::move(o));
}

}  // namespace

int bucket_save(const std::string& url, uint64_t step, uint32_t rank, uint32_t world,
                uint64_t total) {
  auto conn = connect_bucket(url);
  if (!conn.ok()) return die(conn.error());
  storage::Store& store = (*conn)->store();
  const uint64_t rows = rows_for(total);
  auto state = make_state(rows, rank, world);
  uint64_t held = 0;
  for (const auto& t : state) held += t.size() * sizeof(float);
  WriterOptions o;
  o.job_id = "bench";
  o.step = step;
  o.rank = rank;
  o.world_size = world;
  ShardWriter writer(store, o);
  if (auto st = add_state(writer, step, rows, rank, world, state); !st.ok()) return die(st.error());
  wait_for_go();
  auto t0 = BenchClock::now();
  auto sidecar = writer.finish();
  if (!sidecar.ok()) return die(sidecar.error());
  auto t1 = BenchClock::now();
  double commit_s = 0;
  if (rank == 0) {
    CommitOptions c;
    c.job_id = "bench";
    c.step = step;
    c.world_size = world;
    c.poll_interval = std::chrono::milliseconds(20);  // the bench's ranks are released together
    auto m = commit_checkpoint(store, RealClock::instance(), c);
    if (!m.ok()) return die(m.error());
    commit_s = since(t1);
    t1 = BenchClock::now();
  }
  std::printf(
      "{\"cmd\":\"save\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld,"
      "\"commit_seconds\":%.6f,\"rss_peak_bytes\":%llu,\"state_bytes\":%llu}\n",
      rank, static_cast<unsigned long long>(sidecar->file.size),
      static_cast<long long>(mono_ns(t0)), static_cast<long long>(mono_ns(t1)), commit_s,
      static_cast<unsigned long long>(peak_rss_bytes()), static_cast<unsigned long long>(held));
  return 0;
}

int bucket_load(const std::string& url, uint64_t step, uint32_t rank, uint32_t world) {
  storage::s3::S3Options s3;
  auto conn = connect_bucket(url, &s3);
  if (!conn.ok()) return die(conn.error());
  storage::Store& store = (*conn)->store();
  // The rank's whole state exists and is touched before the clock starts, as a model's
  // tensors are before a resume.
  auto probe = CheckpointReader::open(store, step);
  if (!probe.ok()) return die(probe.error());
  std::vector<std::string> names = probe->tensor_names();
  std::vector<std::vector<std::byte>> state;
  uint64_t held = 0;
  for (const auto& name : names) {
    const Box box = rank_box(probe->tensor(name)->shape[0], rank, world);
    state.emplace_back(box.volume() * 4);
    std::memset(state.back().data(), 0, state.back().size());
    held += state.back().size();
  }
  wait_for_go();
  auto t0 = BenchClock::now();
  // Requests shaped as a client's resume shapes them (hooks/client.cc open_resume).
  ReaderOptions r;
  r.request_bytes = s3.read_size;
  r.io_threads = storage::s3::parallel_reads(s3);
  auto reader = CheckpointReader::open(store, step, r);
  if (!reader.ok()) return die(reader.error());
  // One read_many, as the Python client's load() does: the ranged GETs stay in flight
  // across tensors.
  uint64_t bytes = 0;
  std::vector<CheckpointReader::TensorRead> reads;
  for (size_t i = 0; i < names.size(); ++i) {
    reads.push_back({names[i], rank_box(reader->tensor(names[i])->shape[0], rank, world),
                     state[i]});
    bytes += state[i].size();
  }
  if (auto st = reader->read_many(reads); !st.ok()) return die(st.error());
  auto t1 = BenchClock::now();
  std::printf(
      "{\"cmd\":\"load\",\"rank\":%u,\"bytes\":%llu,\"start_ns\":%lld,\"end_ns\":%lld,"
      "\"rss_peak_bytes\":%llu,\"state_bytes\":%llu}\n",
      rank, static_cast<unsigned long long>(bytes), static_cast<long long>(mono_ns(t0)),
      static_cast<long long>(mono_ns(t1)), static_cast<unsigned long long>(peak_rss_bytes()),
      static_cast<unsigned long long>(held));
  return 0;
}

int bucket_clear(const std::string& url) {
  auto conn = connect_bucket(url);
  if (!conn.ok()) return die(conn.error());
  storage::Store& store = (*conn)->store();
  auto all = store.list_all("");
  if (!all.ok()) return die(all.error());
  std::vector<std::string> keys;
  for (const auto& o : *all) keys.push_back(o.key);
  if (auto st = store.remove_many(keys); !st.ok()) return die(st.error());
  if (auto n = store.abort_uploads(""); !n.ok()) return die(n.error());
  std::printf("{\"cmd\":\"clear\",\"removed\":%zu}\n", keys.size());
  return 0;
}

}  // namespace shardguard::bench
