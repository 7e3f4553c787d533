// `shardguard ckpt ...` end to end: the real binary on real checkpoint directories.
#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <set>

#include "tests/checkpoint/step_fixture.h"
#include "tests/support/command.h"
#include "tests/support/fixture_text.h"

using namespace shardguard;
using shardguard::testing::run_command;
using shardguard::testing::shardguard_bin;
using shardguard::testing::TempDir;
namespace fs = std::filesystem;

namespace {

const testing::StepShape kShape{24, 100};

void write_steps(const std::string& dir, std::initializer_list<uint64_t> steps, uint32_t world) {
  for (uint64_t s : steps)
    REQUIRE(testing::write_step(PosixFilesystem::instance(), RealClock::instance(), dir, s, world,
                                kShape)
                .ok());
}

std::string ckpt(const std::string& args) { return shardguard_bin() + " ckpt " + args; }

void flip_byte(const std::string& path, uint64_t offset) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(static_cast<std::streamoff>(offset));
  char c;
  f.get(c);
  f.seekp(static_cast<std::streamoff>(offset));
  f.put(static_cast<char>(c ^ 0x40));
}

}  // namespace

TEST_CASE("ckpt ls lists newest first with state, world size and reason", "[cli]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200}, 2);
  fs::create_directories(dir / "step-000000300");  // a save that never committed
  auto r = run_command(ckpt("ls " + dir.path()));
  REQUIRE(r.exit_code == 0);
  INFO(r.out);
  auto p300 = r.out.find("300"), p200 = r.out.find("200 "), p100 = r.out.find("100 ");
  REQUIRE(p300 != std::string::npos);
  CHECK(p300 < p200);
  CHECK(p200 < p100);
  CHECK_THAT(r.out, Catch::Contains("incomplete"));
  CHECK_THAT(r.out, Catch::Contains("complete"));
  CHECK_THAT(r.out, Catch::Contains("periodic"));

  auto j = run_command(ckpt("ls --json " + dir.path()));
  REQUIRE(j.exit_code == 0);
  CHECK_THAT(j.out, Catch::StartsWith("[{\"step\":300,\"state\":\"incomplete\""));
  CHECK_THAT(j.out, Catch::Contains("\"world_size\":2"));
}

TEST_CASE("ckpt verify: sizes by default, every byte with --full", "[cli]") {
  TempDir dir;
  write_steps(dir.path(), {100}, 2);
  CHECK(run_command(ckpt("verify " + dir.path())).exit_code == 0);
  CHECK(run_command(ckpt("verify --full " + dir.path() + " --step 100")).exit_code == 0);

  const std::string shard = dir / "step-000000100/shard-00001-of-00002.safetensors";
  flip_byte(shard, fs::file_size(shard) - 10);
  CHECK(run_command(ckpt("verify " + dir.path())).exit_code == 0);  // same size
  auto full = run_command(ckpt("verify --full " + dir.path()));
  CHECK(full.exit_code == 3);
  CHECK_THAT(full.err, Catch::Contains("shard-00001-of-00002.safetensors"));
  CHECK_THAT(full.err, Catch::Contains("checksum"));

  fs::resize_file(shard, fs::file_size(shard) - 1);
  auto truncated = run_command(ckpt("verify " + dir.path() + " --step 100"));
  CHECK(truncated.exit_code == 3);
  CHECK_THAT(truncated.err, Catch::Contains("shard-00001-of-00002.safetensors"));

  CHECK(run_command(ckpt("verify " + dir.path() + " --step 999")).exit_code == 3);
  fs::remove(dir / "step-000000100/manifest.json");
  auto incomplete = run_command(ckpt("verify " + dir.path() + " --step 100"));
  CHECK(incomplete.exit_code == 3);
  CHECK_THAT(incomplete.err, Catch::Contains("incomplete"));
}

TEST_CASE("ckpt inspect --hash is the same whatever world size wrote the state", "[cli]") {
  TempDir one, three;
  write_steps(one.path(), {100}, 1);
  write_steps(three.path(), {100}, 3);
  auto a = run_command(ckpt("inspect --hash " + one.path()));
  auto b = run_command(ckpt("inspect --hash " + three.path()));
  REQUIRE(a.exit_code == 0);
  REQUIRE(b.exit_code == 0);
  CHECK(a.out == b.out);
  CHECK_THAT(a.out, Catch::Matches("count [0-9a-f]{16}\nw [0-9a-f]{16}\n"));

  TempDir other;
  write_steps(other.path(), {101}, 3);
  CHECK(run_command(ckpt("inspect --hash " + other.path())).out != a.out);

  auto text = run_command(ckpt("inspect " + three.path()));
  REQUIRE(text.exit_code == 0);
  CHECK_THAT(text.out, Catch::Contains("3 chunk(s)"));
  CHECK_THAT(text.out, Catch::Contains("world size 3"));
}

TEST_CASE("ckpt gc keeps the newest K and every N-th, and removes old incomplete ones",
          "[cli]") {
  TempDir dir;
  write_steps(dir.path(), {100, 200, 300, 400, 500}, 1);
  fs::create_directories(dir / "step-000000150");
  auto dry = run_command(ckpt("gc " + dir.path() + " --keep-last 2 --keep-every 200 --dry-run"));
  REQUIRE(dry.exit_code == 0);
  CHECK(fs::exists(dir / "step-000000100"));
  auto r = run_command(ckpt("gc " + dir.path() + " --keep-last 2 --keep-every 200"));
  REQUIRE(r.exit_code == 0);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(dir.path())) left.insert(e.path().filename());
  CHECK(left == std::set<std::string>{"step-000000200", "step-000000400", "step-000000500"});
}

TEST_CASE("ckpt export writes a consolidated Hugging Face layout", "[cli]") {
  TempDir dir, out, out_split;
  write_steps(dir.path(), {100}, 3);
  auto r = run_command(ckpt("export " + dir.path() + " --step 100 --out " + out.path()));
  REQUIRE(r.exit_code == 0);
  CHECK(fs::exists(out / "model.safetensors"));
  CHECK_FALSE(fs::exists(out / "model.safetensors.index.json"));
  // The export reads back (as an HF directory) to the same tensor hashes.
  auto src = run_command(ckpt("inspect --hash " + dir.path()));
  auto reader = checkpoint::CheckpointReader::open(PosixFilesystem::instance(), out.path());
  REQUIRE(reader.ok());
  std::string hashes;
  for (const auto& name : reader->tensor_names()) {
    auto h = reader->tensor_xxh3_64(name);
    REQUIRE(h.ok());
    char buf[17];
    std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(*h));
    hashes += name + " " + buf + "\n";
  }
  CHECK(hashes == src.out);

  // "w" is 9600 bytes: a 5000-byte limit puts each tensor in a file of its own.
  auto split = run_command(ckpt("export " + dir.path() + " --out " + out_split.path() +
                                " --max-shard-size 5000B"));
  REQUIRE(split.exit_code == 0);
  CHECK(fs::exists(out_split / "model-00001-of-00002.safetensors"));
  CHECK(fs::exists(out_split / "model-00002-of-00002.safetensors"));
  CHECK_THAT(testing::slurp(out_split / "model.safetensors.index.json"),
             Catch::Contains("\"w\": \"model-00002-of-00002.safetensors\""));
  CHECK(run_command(ckpt("export " + dir.path() + " --out " + out.path() +
                         " --max-shard-size 5XB"))
            .exit_code == 2);
}

TEST_CASE(
    "ckpt export into a directory of an earlier export removes that export's files and keeps "
    "the others",
    "[cli]") {
  TempDir dir, out;
  write_steps(dir.path(), {100, 200}, 1);
  // An earlier export of step 100 in two files, beside the model's config.
  REQUIRE(run_command(ckpt("export " + dir.path() + " --step 100 --out " + out.path() +
                           " --max-shard-size 5000B"))
              .exit_code == 0);
  REQUIRE(fs::exists(out / "model.safetensors.index.json"));
  REQUIRE(testing::write_text(out / "config.json", "{}\n").ok());
  REQUIRE(testing::write_text(out / "other-00001-of-00002.safetensors", "another prefix's").ok());
  // Step 200 in one file: the index and the shards of step 100 would still be what a
  // loader reads first (the index), so they go.
  auto r = run_command(ckpt("export " + dir.path() + " --step 200 --out " + out.path()));
  REQUIRE(r.exit_code == 0);
  std::set<std::string> left;
  for (const auto& e : fs::directory_iterator(out.path())) left.insert(e.path().filename());
  CHECK(left == std::set<std::string>{"config.json", "model.safetensors",
                                      "other-00001-of-00002.safetensors"});
  CHECK_THAT(r.err, Catch::Contains("removed " + (out / "model.safetensors.index.json")));
  auto reader = checkpoint::CheckpointReader::open(PosixFilesystem::instance(), out.path());
  REQUIRE(reader.ok());
  CHECK(reader->tensor_names().size() == 2);
}
