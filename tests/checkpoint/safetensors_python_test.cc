// Cross-check: an independent Python reader (tests/checkpoint/st_read.py, numpy; torch
// when installed) loads the files we write and sees the same tensors and values.
// Skips with a warning where /usr/bin/python3 or the library is missing.
#include <sys/wait.h>
#include <unistd.h>

#include <boost/crc.hpp>
#include <catch2/catch.hpp>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "checkpoint/safetensors.h"
#include "tests/checkpoint/safetensors_fixtures.h"

namespace shardguard::checkpoint {
namespace {

std::string run_capture(const std::string& command, int* status) {
  std::string out;
  FILE* pipe = popen(command.c_str(), "r");
  if (pipe == nullptr) {
    *status = -1;
    return out;
  }
  char buffer[4096];
  std::size_t n;
  while ((n = fread(buffer, 1, sizeof buffer, pipe)) > 0) out.append(buffer, n);
  int raw = pclose(pipe);
  *status = WIFEXITED(raw) ? WEXITSTATUS(raw) : -1;
  return out;
}

struct ReaderLine {
  std::string name, dtype, shape, nbytes, crc, sum;
};

std::vector<ReaderLine> parse_reader_output(const std::string& out,
                                            std::vector<std::string>* meta) {
  std::vector<ReaderLine> lines;
  std::istringstream in(out);
  std::string line;
  while (std::getline(in, line)) {
    std::istringstream fields(line);
    ReaderLine r;
    fields >> r.name;
    if (r.name == "meta") {
      meta->push_back(line);
      continue;
    }
    fields >> r.dtype >> r.shape >> r.nbytes >> r.crc >> r.sum;
    lines.push_back(r);
  }
  return lines;
}

void cross_check(bool with_torch) {
  if (access("/usr/bin/python3", X_OK) != 0) {
    WARN("SKIP: /usr/bin/python3 not found");
    return;
  }
  std::vector<PlannedTensor> planned;
  for (DType d : kAllDTypes) {
    std::string base = "layer." + std::string(dtype_name(d));
    for (auto& shape : shapes_for(d)) planned.push_back({base + dims_text(shape), d, shape});
  }
  auto layout = plan_safetensors(planned, {{"format", "pt"}, {"step", "1200"}}, 4096);
  REQUIRE(layout.ok());
  std::vector<std::string> sums;
  Bytes file = build_file(*layout, &sums);

  auto path = std::filesystem::temp_directory_path() /
              ("sg_st_" + std::to_string(getpid()) + (with_torch ? "_t" : "_n") + ".safetensors");
  {
    std::ofstream out(path, std::ios::binary);
    out.write(reinterpret_cast<const char*>(file.data()),
              static_cast<std::streamsize>(file.size()));
    REQUIRE(out.good());
  }
  int status = 0;
  std::string output = run_capture(std::string("/usr/bin/python3 ") + SG_ST_READ_PY +
                                       (with_torch ? " --torch " : " ") + path.string() + " 2>&1",
                                   &status);
  std::filesystem::remove(path);
  if (status == 3) {
    WARN("SKIP: " << (with_torch ? "torch" : "numpy") << " is not installed: " << output);
    return;
  }
  INFO(output);
  REQUIRE(status == 0);
  std::vector<std::string> meta;
  auto lines = parse_reader_output(output, &meta);
  CHECK(meta == std::vector<std::string>{"meta format pt", "meta step 1200"});
  const auto& tensors = layout->header.tensors;
  REQUIRE(lines.size() == tensors.size());
  int value_checks = 0;
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const TensorEntry& t = tensors[i];
    CAPTURE(t.name);
    CHECK(lines[i].name == t.name);
    CHECK(lines[i].dtype == dtype_name(t.dtype));
    CHECK(lines[i].shape == dims_text(t.shape));
    CHECK(lines[i].nbytes == std::to_string(t.byte_size()));
    boost::crc_32_type crc;
    crc.process_bytes(file.data() + layout->header.file_offset(t), t.byte_size());
    CHECK(lines[i].crc == std::to_string(crc.checksum()));
    if (lines[i].sum != "-") {
      CHECK(lines[i].sum == sums[i]);
      ++value_checks;
    } else if (!with_torch) {
      CHECK(sums[i] == "-");  // numpy must interpret every dtype we can check
    }
  }
  CHECK(value_checks > 0);
}

TEST_CASE("an independent numpy reader loads what we write", "[safetensors]") {
  cross_check(false);
}

TEST_CASE("torch loads what we write, when installed", "[safetensors]") { cross_check(true); }

}  // namespace
}  // namespace shardguard::checkpoint
