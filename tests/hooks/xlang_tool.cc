// sg_xlang_tool: the C++ side of the cross-language checkpoint test (test_xlang.py).
//   write DIR RANK WORLD   saves step 42 as rank RANK through hooks::Client
//   check DIR FROM         checks step 42 written by FROM (python or cxx), exit 0 if all good
// The tensors are the table below, filled with a byte pattern that xlang_py.py makes the
// same way; rows of the "rows_*" tensors are split across the ranks as chunks.
#include <algorithm>
#include <boost/json.hpp>
#include <cstdio>
#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "hooks/client.h"

using namespace shardguard;
using checkpoint::DType;

namespace {

struct Spec {
  const char* name;
  DType dtype;
  std::vector<uint64_t> shape;
  bool rows_split;  // chunked by rows across the ranks
};

// Keep in step with SPECS in xlang_py.py.
const std::vector<Spec> kSpecs = {
    {"f32", DType::kF32, {3, 5}, false},       {"bf16", DType::kBF16, {4, 6}, false},
    {"f16", DType::kF16, {7}, false},          {"i64", DType::kI64, {2, 3}, false},
    {"mask", DType::kBool, {9}, false},        {"u8", DType::kU8, {4}, false},
    {"f64", DType::kF64, {2, 2}, false},       {"i32", DType::kI32, {3}, false},
    {"scalar", DType::kF32, {}, false},        {"empty", DType::kF32, {0, 3}, false},
    {"rows_bf16", DType::kBF16, {6, 4}, true}, {"rows_i64", DType::kI64, {4, 2}, true},
};
constexpr uint64_t kStep = 42;

std::vector<std::byte> pattern(size_t k, const Spec& s) {
  const uint64_t n = checkpoint::checked_byte_size(s.shape, s.dtype).value();
  std::vector<std::byte> out(n);
  for (uint64_t i = 0; i < n; ++i) {
    const uint64_t v = (i * 131 + k * 29 + 7) & 0xff;
    out[i] = std::byte(s.dtype == DType::kBool ? (v >> 3) & 1 : v);
  }
  return out;
}

checkpoint::Box rows_of(const Spec& s, uint32_t rank, uint32_t world) {
  checkpoint::Box b = checkpoint::Box::whole(s.shape);
  const uint64_t r0 = s.shape[0] * rank / world, r1 = s.shape[0] * (rank + 1) / world;
  b.offsets[0] = r0;
  b.sizes[0] = r1 - r0;
  return b;
}

std::string rng_bytes(uint32_t rank) {
  std::string out;
  for (int j = 0; j < 40; ++j) out += char((rank * 7 + j) & 0xff);
  return out;
}

int write(const std::string& dir, uint32_t rank, uint32_t world) {
  hooks::ClientOptions o;
  o.checkpoint_dir = dir;
  o.rank = rank;
  o.world_size = world;
  o.job_id = "xlang";
  auto client = hooks::Client::create(o);
  if (!client.ok()) return std::fprintf(stderr, "%s\n", client.error().message().c_str()), 1;
  auto w = (*client)->begin_save(kStep);
  std::vector<std::vector<std::byte>> keep;
  for (size_t k = 0; k < kSpecs.size(); ++k) {
    const Spec& s = kSpecs[k];
    keep.push_back(pattern(k, s));
    const auto& all = keep.back();
    Status st;
    if (s.rows_split) {
      auto box = rows_of(s, rank, world);
      const uint64_t row_bytes = all.size() / s.shape[0];
      std::span<const std::byte> part(all.data() + box.offsets[0] * row_bytes,
                                      box.sizes[0] * row_bytes);
      st = w.add_chunk(s.name, s.dtype, s.shape, box, part);
    } else if (rank == 0) {
      st = w.add_tensor(s.name, s.dtype, s.shape, all);
    }
    if (!st.ok()) return std::fprintf(stderr, "%s\n", st.error().message().c_str()), 1;
  }
  w.set_rank_state({rng_bytes(rank), R"({"epoch":1,"index":)" + std::to_string(rank) + "}",
                    R"({"rank":)" + std::to_string(rank) + "}"});
  if (rank == 0) w.set_global_state({kStep, R"({"lr":0.25})", R"({"writer":"cxx"})"});
  auto st = (*client)->save(std::move(w), checkpoint::SaveReason::kManual);
  if (!st.ok()) return std::fprintf(stderr, "%s\n", st.error().message().c_str()), 1;
  return 0;
}

int errors = 0;
void expect(bool ok, const std::string& what) {
  if (!ok) {
    std::fprintf(stderr, "MISMATCH: %s\n", what.c_str());
    ++errors;
  }
}

boost::json::value parse(const std::string& text) { return boost::json::parse(text); }

int check(const std::string& dir, const std::string& from) {
  auto r = checkpoint::CheckpointReader::open(PosixFilesystem::instance(), dir + "/step-000000042");
  if (!r.ok()) return std::fprintf(stderr, "%s\n", r.error().message().c_str()), 1;
  const uint32_t world = r->manifest().world_size;
  expect(r->tensor_names().size() == kSpecs.size(), "tensor count");
  for (size_t k = 0; k < kSpecs.size(); ++k) {
    const Spec& s = kSpecs[k];
    const auto* t = r->tensor(s.name);
    if (t == nullptr) {
      expect(false, std::string("missing tensor ") + s.name);
      continue;
    }
    expect(t->dtype == s.dtype, std::string(s.name) + " dtype");
    expect(t->shape == s.shape, std::string(s.name) + " shape");
    auto whole = r->read_whole(s.name);
    expect(whole.ok() && *whole == pattern(k, s), std::string(s.name) + " bytes");
    if (s.rows_split) {
      expect(t->chunks.size() == world, std::string(s.name) + " chunk count");
      // A box across the rank boundary, assembled from both chunks.
      checkpoint::Box box = checkpoint::Box::whole(s.shape);
      box.offsets[0] = 1;
      box.sizes[0] = s.shape[0] - 2;
      const auto all = pattern(k, s);
      const uint64_t row_bytes = all.size() / s.shape[0];
      std::vector<std::byte> part(box.sizes[0] * row_bytes);
      expect(r->read(s.name, box, part).ok() &&
                 std::equal(part.begin(), part.end(), all.begin() + row_bytes),
             std::string(s.name) + " box across chunks");
    }
  }
  for (uint32_t rank = 0; rank < world; ++rank) {
    const auto& st = r->rank_state(rank);
    const std::string who = "rank " + std::to_string(rank) + " ";
    if (from == "cxx") {
      expect(st.rng == rng_bytes(rank), who + "rng bytes");
      expect(parse(st.user) == parse(R"({"rank":)" + std::to_string(rank) + "}"), who + "user");
    } else {
      auto rng = parse(st.rng);
      expect(rng.as_object().at("format") == "shardguard.python.rng/1", who + "python rng");
      expect(parse(st.user).at("extra") == parse(R"({"rank":)" + std::to_string(rank) + "}"),
             who + "extra state");
    }
    expect(parse(st.data_position) == parse(R"({"epoch":1,"index":)" + std::to_string(rank) + "}"),
           who + "data position");
  }
  expect(r->global().step == kStep, "global step");
  expect(parse(r->global().lr_schedule) == parse(R"({"lr":0.25})"), "lr schedule");
  expect(parse(r->global().user) == parse(R"({"writer":")" + from + "\"}"), "global user");
  if (errors == 0)
    std::printf("xlang check: %zu tensors from %s OK\n", kSpecs.size(), from.c_str());
  return errors == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const std::string cmd = argc > 1 ? argv[1] : "";
    if (cmd == "write" && argc == 5)
      return write(argv[2], std::stoul(argv[3]), std::stoul(argv[4]));
    if (cmd == "check" && argc == 4) return check(argv[2], argv[3]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "sg_xlang_tool: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "usage: sg_xlang_tool write DIR RANK WORLD | check DIR python|cxx\n");
  return 2;
}
