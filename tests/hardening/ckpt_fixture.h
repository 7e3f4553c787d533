// Checkpoints for the hardening tests: a small committed step (tests/checkpoint/
// step_fixture.h), shards rewritten with legal but enormous headers, and shards whose header
// no longer parses, with the manifest updated (sizes and checksums) so only the header is
// at fault.
#pragma once

#include <cstring>
#include <string>

#include "checkpoint/manifest.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/verify.h"
#include "core/clock.h"
#include "tests/checkpoint/step_fixture.h"
#include "tests/support/temp_dir.h"

namespace shardguard::testing {

// A committed step `step` of `world` ranks under `dir`; returns the step directory.
inline std::string committed_step(const std::string& dir, uint64_t step, uint32_t world = 2) {
  FakeClock clock;
  auto st = write_step(PosixFilesystem::instance(), clock, dir, step, world, {16, 256});
  if (!st.ok()) throw std::runtime_error(st.error().message());
  return join_path(dir, checkpoint::step_dir_name(step));
}

// What fills a grown header.
enum class Padding {
  kZeroTensors,      // many zero-size tensors (legal: they all sit at one offset)
  kMetadataEntries,  // many small __metadata__ entries
  kMetadataString,   // one huge __metadata__ string
  kWideShapes,       // zero-size tensors of 32 dimensions each (the most this reader takes)
};

namespace detail {

inline std::string tensor_json(const checkpoint::TensorEntry& t) {
  std::string s = "\"" + t.name + "\":{\"dtype\":\"" +
                  std::string(checkpoint::dtype_name(t.dtype)) + "\",\"shape\":[";
  for (size_t i = 0; i < t.shape.size(); ++i) s += (i ? "," : "") + std::to_string(t.shape[i]);
  return s + "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
}

// Writes `header` (padded to a multiple of 8) and `data` as the file at `path`, and updates
// its record in `m` (size and, where it had them, checksums).
inline void write_shard(const std::string& path, std::string header, std::string_view data,
                        checkpoint::FileRecord& rec) {
  auto& fs = PosixFilesystem::instance();
  header.resize((header.size() + 7) / 8 * 8, ' ');
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) bytes[i] = static_cast<char>((n >> (8 * i)) & 0xff);
  bytes += header;
  bytes += data;
  spit(path, bytes);
  rec.size = bytes.size();
  if (rec.has_block_sums() || !rec.xxh3_128.empty()) {
    auto sums = checkpoint::file_checksums(
        fs, path, rec.has_block_sums() ? rec.block_bytes : checkpoint::kDefaultChecksumBlockBytes);
    if (!sums.ok()) throw std::runtime_error(sums.error().message());
    rec.xxh3_128 = sums->xxh3_128;
    if (rec.has_block_sums()) rec.block_xxh3 = sums->block_xxh3;
  }
}

inline checkpoint::Manifest read_manifest(const std::string& step_dir) {
  auto m = checkpoint::parse_manifest(slurp(join_path(step_dir, "manifest.json")), "manifest");
  if (!m.ok()) throw std::runtime_error(m.error().message());
  return std::move(m).value();
}

inline void write_manifest(const std::string& step_dir, const checkpoint::Manifest& m) {
  spit(join_path(step_dir, "manifest.json"), checkpoint::manifest_to_json(m));
}

}  // namespace detail

// Rewrites every shard of `step_dir` with a header of about `header_bytes` (at most the
// format's 100 MB), the tensors and data unchanged, filled as `padding` says.
inline void grow_headers(const std::string& step_dir, uint64_t header_bytes, Padding padding) {
  auto m = detail::read_manifest(step_dir);
  for (auto& rec : m.files) {
    const std::string path = join_path(step_dir, rec.path);
    const std::string bytes = slurp(path);
    auto h =
        checkpoint::parse_safetensors(std::as_bytes(std::span(bytes.data(), bytes.size())), path);
    if (!h.ok()) throw std::runtime_error(h.error().message());
    std::string json = "{";
    for (const auto& t : h->tensors) json += (json.size() > 1 ? "," : "") + detail::tensor_json(t);
    const uint64_t limit = std::min<uint64_t>(header_bytes, checkpoint::kMaxSafetensorsHeaderSize);
    char buf[64];
    if (padding == Padding::kZeroTensors) {
      for (uint64_t i = 0; json.size() + 64 < limit; ++i) {
        std::snprintf(buf, sizeof buf, ",\"z%09llu\":{\"dtype\":\"U8\",\"shape\":[0],",
                      static_cast<unsigned long long>(i));
        (json += buf) += "\"data_offsets\":[0,0]}";
      }
    } else if (padding == Padding::kWideShapes) {
      std::string dims = "0";
      for (int d = 1; d < 32; ++d) dims += ",0";
      for (uint64_t i = 0; json.size() + 160 < limit; ++i) {
        std::snprintf(buf, sizeof buf, ",\"z%09llu\":{\"dtype\":\"U8\",\"shape\":[",
                      static_cast<unsigned long long>(i));
        ((json += buf) += dims) += "],\"data_offsets\":[0,0]}";
      }
    } else if (padding == Padding::kMetadataEntries) {
      json += ",\"__metadata__\":{\"format\":\"pt\"";
      for (uint64_t i = 0; json.size() + 32 < limit; ++i) {
        std::snprintf(buf, sizeof buf, ",\"m%09llu\":\"v\"", static_cast<unsigned long long>(i));
        json += buf;
      }
      json += "}";
    } else {
      json += ",\"__metadata__\":{\"format\":\"pt\",\"blob\":\"";
      json.append(limit > json.size() + 16 ? limit - json.size() - 16 : 0, 'x');
      json += "\"}";
    }
    json += "}";
    detail::write_shard(path, std::move(json), std::string_view(bytes).substr(h->data_start), rec);
  }
  detail::write_manifest(step_dir, m);
}

// Rewrites the first shard of `step_dir` with `header` as its header text (the data kept),
// updating the manifest so that sizes and checksums match the new bytes.
inline void replace_header(const std::string& step_dir, const std::string& header) {
  auto m = detail::read_manifest(step_dir);
  auto& rec = m.files.at(0);
  const std::string path = join_path(step_dir, rec.path);
  const std::string bytes = slurp(path);
  auto h =
      checkpoint::parse_safetensors(std::as_bytes(std::span(bytes.data(), bytes.size())), path);
  if (!h.ok()) throw std::runtime_error(h.error().message());
  detail::write_shard(path, header, std::string_view(bytes).substr(h->data_start), rec);
  detail::write_manifest(step_dir, m);
}

}  // namespace shardguard::testing
