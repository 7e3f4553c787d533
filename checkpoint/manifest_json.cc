// JSON form of sidecars and manifests (Boost.JSON), strict on read.
#include <boost/json.hpp>

#include <algorithm>

#include "checkpoint/json_fields.h"
#include "checkpoint/manifest.h"
#include "checkpoint/paths.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace json = boost::json;
namespace {

constexpr std::string_view kSidecarFormat = "shardguard.sidecar";
constexpr std::string_view kManifestFormat = "shardguard.manifest";

// Embeds JSON text as a value; text that does not parse is stored as null (writers
// validate user JSON before it gets here).
json::value embed(const std::string& text) {
  if (text.empty()) return nullptr;
  boost::system::error_code ec;
  auto v = json::parse(text, ec);
  return ec ? json::value(nullptr) : v;
}

json::array u64_array(const std::vector<uint64_t>& v) {
  json::array a;
  for (uint64_t x : v) a.emplace_back(x);
  return a;
}

json::object tensor_to_json(const TensorRecord& t, bool with_file) {
  json::array chunks;
  for (const auto& c : t.chunks) {
    json::object o;
    if (with_file) o["file"] = c.file;
    o["key"] = c.key;
    o["offsets"] = u64_array(c.box.offsets);
    o["sizes"] = u64_array(c.box.sizes);
    chunks.emplace_back(std::move(o));
  }
  json::object o;
  o["dtype"] = dtype_name(t.dtype);
  o["shape"] = u64_array(t.shape);
  o["chunks"] = std::move(chunks);
  return o;
}

json::object rank_state_to_json(const RankState& s) {
  json::object o;
  o["rng"] = base64_encode(s.rng);
  o["data_position"] = embed(s.data_position);
  o["user"] = embed(s.user);
  if (!s.tree.empty()) o["tree"] = embed(s.tree);
  return o;
}

json::object global_to_json(const GlobalState& g) {
  json::object o;
  o["step"] = g.step;
  o["lr_schedule"] = embed(g.lr_schedule);
  o["user"] = embed(g.user);
  if (!g.tree.empty()) o["tree"] = embed(g.tree);
  return o;
}

Result<TensorRecord> tensor_from_json(const json::value& v, const std::string& where,
                                      const std::string* implied_file) {
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(v, where));
  TensorRecord t;
  SG_ASSIGN_OR_RETURN(auto dtype_text, f.string("dtype"));
  auto dtype = parse_dtype(dtype_text);
  if (!dtype.ok()) return Error(ErrorCode::kCorrupt, f.path("dtype") + ": unknown dtype '" +
                                                         dtype_text + "'");
  t.dtype = *dtype;
  SG_ASSIGN_OR_RETURN(t.shape, f.u64_list("shape"));
  if (auto size = checked_byte_size(t.shape, t.dtype); !size.ok())
    return Error(ErrorCode::kCorrupt, f.path("shape") + ": " + size.error().message());
  SG_ASSIGN_OR_RETURN(auto chunks, f.array("chunks"));
  if (chunks->empty()) return Error(ErrorCode::kCorrupt, f.path("chunks") + ": empty");
  for (size_t i = 0; i < chunks->size(); ++i) {
    SG_ASSIGN_OR_RETURN(auto c, JsonFields::of((*chunks)[i], f.path("chunks") + "[" +
                                                                 std::to_string(i) + "]"));
    ChunkRecord chunk;
    if (implied_file != nullptr) {
      chunk.file = *implied_file;
    } else {
      SG_ASSIGN_OR_RETURN(chunk.file, c.string("file"));
      if (!is_safe_relative_path(chunk.file))
        return Error(ErrorCode::kCorrupt, c.path("file") + ": unsafe path '" + chunk.file +
                                              "' (must be relative, without '..')");
    }
    SG_ASSIGN_OR_RETURN(chunk.key, c.string("key"));
    SG_ASSIGN_OR_RETURN(chunk.box.offsets, c.u64_list("offsets"));
    SG_ASSIGN_OR_RETURN(chunk.box.sizes, c.u64_list("sizes"));
    if (auto st = check_box_in_shape(chunk.box, t.shape); !st.ok())
      return Error(ErrorCode::kCorrupt, c.where() + ": " + st.error().message());
    SG_RETURN_IF_ERROR(c.finish());
    t.chunks.push_back(std::move(chunk));
  }
  SG_RETURN_IF_ERROR(f.finish());
  return t;
}

Result<std::string> embedded_text(JsonFields& f, std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, f.any(key));
  return json::serialize(*v);
}

// Format 2's optional state tree: JSON text, or "" when absent (and always in version 1,
// where the field is unknown and finish() refuses it).
Result<std::string> optional_tree(JsonFields& f, int version) {
  if (version < 2) return std::string();
  const auto* v = f.optional("tree");
  if (v == nullptr) return std::string();
  if (!v->is_object() && !v->is_array() && !v->is_null())
    return Error(ErrorCode::kCorrupt, f.path("tree") + ": expected an object or an array");
  return json::serialize(*v);
}

Result<RankState> rank_state_from_json(JsonFields& f, int version) {
  RankState s;
  SG_ASSIGN_OR_RETURN(auto rng64, f.string("rng"));
  auto rng = base64_decode(rng64);
  if (!rng.ok()) return Error(ErrorCode::kCorrupt, f.path("rng") + ": " + rng.error().message());
  s.rng = std::move(*rng);
  SG_ASSIGN_OR_RETURN(s.data_position, embedded_text(f, "data_position"));
  SG_ASSIGN_OR_RETURN(s.user, embedded_text(f, "user"));
  SG_ASSIGN_OR_RETURN(s.tree, optional_tree(f, version));
  return s;
}

Result<GlobalState> global_from_json(const json::value& v, const std::string& where,
                                     int version) {
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(v, where));
  GlobalState g;
  SG_ASSIGN_OR_RETURN(g.step, f.u64("step"));
  SG_ASSIGN_OR_RETURN(g.lr_schedule, embedded_text(f, "lr_schedule"));
  SG_ASSIGN_OR_RETURN(g.user, embedded_text(f, "user"));
  SG_ASSIGN_OR_RETURN(g.tree, optional_tree(f, version));
  SG_RETURN_IF_ERROR(f.finish());
  return g;
}

// Format 2's block sums: both fields or neither; a block size this build accepts, and one
// 16-hex-digit sum per block of the file's size.
Status block_sums_from_json(JsonFields& f, FileRecord& r) {
  const auto* bytes_v = f.optional("block_bytes");
  const auto* sums_v = f.optional("block_xxh3");
  if (bytes_v == nullptr && sums_v == nullptr) return {};
  if (bytes_v == nullptr) return Error(ErrorCode::kCorrupt, f.path("block_bytes") + ": missing");
  if (sums_v == nullptr) return Error(ErrorCode::kCorrupt, f.path("block_xxh3") + ": missing");
  SG_ASSIGN_OR_RETURN(r.block_bytes, json_u64(*bytes_v, f.path("block_bytes")));
  if (!valid_checksum_block_bytes(r.block_bytes))
    return Error(ErrorCode::kCorrupt, f.path("block_bytes") + ": " + std::to_string(r.block_bytes) +
                                          " is not a power of two from 4 KiB to 64 MiB");
  if (!sums_v->is_array())
    return Error(ErrorCode::kCorrupt, f.path("block_xxh3") + ": expected an array");
  const auto& sums = sums_v->get_array();
  const uint64_t want = checksum_block_count(r.size, r.block_bytes);
  if (sums.size() != want)
    return Error(ErrorCode::kCorrupt, f.path("block_xxh3") + ": " + std::to_string(sums.size()) +
                                          " sums for " + std::to_string(want) + " blocks of " +
                                          std::to_string(r.size) + " bytes");
  r.block_xxh3.reserve(sums.size());
  for (size_t i = 0; i < sums.size(); ++i) {
    std::optional<uint64_t> sum;
    if (sums[i].is_string()) sum = parse_u64_hex(sums[i].get_string());
    if (!sum)
      return Error(ErrorCode::kCorrupt, f.path("block_xxh3") + "[" + std::to_string(i) +
                                            "]: expected 16 lower-case hex digits");
    r.block_xxh3.push_back(*sum);
  }
  return {};
}

Result<FileRecord> file_from_json(JsonFields& f, bool with_rank, int version) {
  FileRecord r;
  SG_ASSIGN_OR_RETURN(r.path, f.string("path"));
  if (!is_safe_relative_path(r.path))
    return Error(ErrorCode::kCorrupt, f.path("path") + ": unsafe path '" + r.path +
                                          "' (must be relative, without '..')");
  SG_ASSIGN_OR_RETURN(r.size, f.u64("size"));
  SG_ASSIGN_OR_RETURN(r.xxh3_128, f.string("xxh3_128"));
  if (r.xxh3_128.size() != 32 ||
      !std::all_of(r.xxh3_128.begin(), r.xxh3_128.end(),
                   [](char c) { return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'f'); }))
    return Error(ErrorCode::kCorrupt, f.path("xxh3_128") + ": expected 32 lower-case hex digits");
  if (with_rank) {
    SG_ASSIGN_OR_RETURN(uint64_t rank, f.u64("rank"));
    r.rank = static_cast<uint32_t>(rank);
  }
  // Version 1 has no block sums: there the fields are unknown, and finish() says so.
  if (version >= 2) SG_RETURN_IF_ERROR(block_sums_from_json(f, r));
  return r;
}

json::object file_to_json(const FileRecord& f, bool with_rank, int version) {
  json::object o{{"path", f.path}, {"size", f.size}, {"xxh3_128", f.xxh3_128}};
  if (with_rank) o["rank"] = f.rank;
  if (version >= 2 && f.has_block_sums()) {
    o["block_bytes"] = f.block_bytes;
    json::array sums;
    sums.reserve(f.block_xxh3.size());
    for (uint64_t s : f.block_xxh3) sums.emplace_back(u64_hex(s));
    o["block_xxh3"] = std::move(sums);
  }
  return o;
}

// Checks the record's format and returns its version. A version newer than this build
// reads is kUnsupported before any other field is looked at: its fields may be anything.
Result<int> check_header(JsonFields& f, std::string_view format) {
  SG_ASSIGN_OR_RETURN(auto fmt, f.string("format"));
  if (fmt != format)
    return Error(ErrorCode::kCorrupt, "format is '" + fmt + "', expected '" +
                                          std::string(format) + "'");
  SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
  if (version > static_cast<uint64_t>(kManifestVersion))
    return Error(ErrorCode::kUnsupported,
                 "written by a newer shardguard (format " + std::to_string(version) +
                     "; this build reads up to " + std::to_string(kManifestVersion) + ")");
  if (version < static_cast<uint64_t>(kOldestManifestVersion))
    return Error(ErrorCode::kCorrupt,
                 "version " + std::to_string(version) + " is not a shardguard format version");
  return static_cast<int>(version);
}

Result<uint32_t> u32(JsonFields& f, std::string_view key) {
  SG_ASSIGN_OR_RETURN(uint64_t v, f.u64(key));
  if (v > UINT32_MAX) return Error(ErrorCode::kCorrupt, f.path(key) + ": too large");
  return static_cast<uint32_t>(v);
}

Result<Sidecar> parse_sidecar_value(const json::value& root) {
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
  Sidecar s;
  SG_ASSIGN_OR_RETURN(s.version, check_header(f, kSidecarFormat));
  SG_ASSIGN_OR_RETURN(s.job_id, f.string("job_id"));
  SG_ASSIGN_OR_RETURN(s.step, f.u64("step"));
  SG_ASSIGN_OR_RETURN(s.attempt, f.u64("attempt"));
  SG_ASSIGN_OR_RETURN(s.rank, u32(f, "rank"));
  SG_ASSIGN_OR_RETURN(s.world_size, u32(f, "world_size"));
  if (s.world_size == 0 || s.rank >= s.world_size)
    return Error(ErrorCode::kCorrupt, "rank " + std::to_string(s.rank) + " outside world size " +
                                          std::to_string(s.world_size));
  SG_ASSIGN_OR_RETURN(auto file_v, f.any("file"));
  SG_ASSIGN_OR_RETURN(auto ff, JsonFields::of(*file_v, "file"));
  SG_ASSIGN_OR_RETURN(s.file, file_from_json(ff, false, s.version));
  SG_RETURN_IF_ERROR(ff.finish());
  s.file.rank = s.rank;
  SG_ASSIGN_OR_RETURN(auto tensors, f.object("tensors"));
  for (const auto& kv : *tensors) {
    SG_ASSIGN_OR_RETURN(auto t, tensor_from_json(kv.value(), "tensors." + std::string(kv.key()),
                                                 &s.file.path));
    s.tensors.emplace(std::string(kv.key()), std::move(t));
  }
  SG_ASSIGN_OR_RETURN(auto state_v, f.any("state"));
  SG_ASSIGN_OR_RETURN(auto sf, JsonFields::of(*state_v, "state"));
  SG_ASSIGN_OR_RETURN(s.state, rank_state_from_json(sf, s.version));
  SG_RETURN_IF_ERROR(sf.finish());
  SG_ASSIGN_OR_RETURN(auto global_v, f.any("global"));
  if (!global_v->is_null()) {
    SG_ASSIGN_OR_RETURN(auto g, global_from_json(*global_v, "global", s.version));
    s.global = std::move(g);
  }
  SG_RETURN_IF_ERROR(f.finish());
  return s;
}

Result<Manifest> parse_manifest_value(const json::value& root) {
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
  Manifest m;
  SG_ASSIGN_OR_RETURN(m.version, check_header(f, kManifestFormat));
  SG_ASSIGN_OR_RETURN(m.job_id, f.string("job_id"));
  SG_ASSIGN_OR_RETURN(m.step, f.u64("step"));
  SG_ASSIGN_OR_RETURN(m.attempt, f.u64("attempt"));
  SG_ASSIGN_OR_RETURN(auto reason, f.string("reason"));
  auto r = parse_save_reason(reason);
  if (!r.ok()) return Error(ErrorCode::kCorrupt, "reason: unknown value '" + reason + "'");
  m.reason = *r;
  SG_ASSIGN_OR_RETURN(m.world_size, u32(f, "world_size"));
  if (m.world_size == 0) return Error(ErrorCode::kCorrupt, "world_size: must be at least 1");
  SG_ASSIGN_OR_RETURN(m.created_unix_ms, f.i64("created_unix_ms"));

  SG_ASSIGN_OR_RETURN(auto files, f.array("files"));
  for (size_t i = 0; i < files->size(); ++i) {
    SG_ASSIGN_OR_RETURN(auto ff, JsonFields::of((*files)[i], "files[" + std::to_string(i) + "]"));
    SG_ASSIGN_OR_RETURN(auto rec, file_from_json(ff, true, m.version));
    SG_RETURN_IF_ERROR(ff.finish());
    if (m.find_file(rec.path) != nullptr)
      return Error(ErrorCode::kCorrupt, ff.path("path") + ": '" + rec.path + "' listed twice");
    m.files.push_back(std::move(rec));
  }
  SG_ASSIGN_OR_RETURN(auto tensors, f.object("tensors"));
  for (const auto& kv : *tensors) {
    const std::string where = "tensors." + std::string(kv.key());
    SG_ASSIGN_OR_RETURN(auto t, tensor_from_json(kv.value(), where, nullptr));
    std::vector<Box> boxes;
    for (const auto& c : t.chunks) {
      if (m.find_file(c.file) == nullptr)
        return Error(ErrorCode::kCorrupt, where + ": chunk in '" + c.file +
                                              "', which is not among the files");
      boxes.push_back(c.box);
    }
    if (auto st = check_tiling(t.shape, boxes); !st.ok())
      return Error(ErrorCode::kCorrupt, where + ": " + st.error().message());
    m.tensors.emplace(std::string(kv.key()), std::move(t));
  }
  SG_ASSIGN_OR_RETURN(auto ranks, f.array("ranks"));
  if (ranks->size() != m.world_size)
    return Error(ErrorCode::kCorrupt, "ranks: " + std::to_string(ranks->size()) +
                                          " entries for world size " +
                                          std::to_string(m.world_size));
  for (size_t i = 0; i < ranks->size(); ++i) {
    SG_ASSIGN_OR_RETURN(auto rf, JsonFields::of((*ranks)[i], "ranks[" + std::to_string(i) + "]"));
    SG_ASSIGN_OR_RETURN(uint64_t rank, rf.u64("rank"));
    if (rank != i)
      return Error(ErrorCode::kCorrupt, rf.path("rank") + ": " + std::to_string(rank) +
                                            " out of order");
    SG_ASSIGN_OR_RETURN(auto st, rank_state_from_json(rf, m.version));
    SG_RETURN_IF_ERROR(rf.finish());
    m.ranks.push_back(std::move(st));
  }
  SG_ASSIGN_OR_RETURN(auto global_v, f.any("global"));
  SG_ASSIGN_OR_RETURN(m.global, global_from_json(*global_v, "global", m.version));
  SG_RETURN_IF_ERROR(f.finish());
  return m;
}

template <typename T, typename F>
Result<T> parse_with(std::string_view text, std::string_view source, F&& parse_value) {
  auto root = parse_json_strict(text);
  if (!root.ok()) return std::move(root).error().context(source);
  auto out = parse_value(*root);
  if (!out.ok()) return std::move(out).error().context(source);
  return out;
}

}  // namespace

std::string_view save_reason_name(SaveReason reason) {
  switch (reason) {
    case SaveReason::kPeriodic: return "periodic";
    case SaveReason::kEmergency: return "emergency";
    case SaveReason::kFinal: return "final";
    case SaveReason::kManual: return "manual";
  }
  return "periodic";
}

Result<SaveReason> parse_save_reason(std::string_view text) {
  for (auto r : {SaveReason::kPeriodic, SaveReason::kEmergency, SaveReason::kFinal,
                 SaveReason::kManual})
    if (save_reason_name(r) == text) return r;
  return Error(ErrorCode::kInvalid, "unknown save reason '" + std::string(text) +
                                        "' (use periodic, emergency, final or manual)");
}

uint64_t Manifest::total_bytes() const {
  uint64_t total = 0;
  for (const auto& f : files) total += f.size;
  return total;
}

const FileRecord* Manifest::find_file(std::string_view path) const {
  for (const auto& f : files)
    if (f.path == path) return &f;
  return nullptr;
}

std::string sidecar_to_json(const Sidecar& s) {
  json::object o;
  o["format"] = kSidecarFormat;
  o["version"] = s.version;
  o["job_id"] = s.job_id;
  o["step"] = s.step;
  o["attempt"] = s.attempt;
  o["rank"] = s.rank;
  o["world_size"] = s.world_size;
  o["file"] = file_to_json(s.file, false, s.version);
  json::object tensors;
  for (const auto& [name, t] : s.tensors) tensors[name] = tensor_to_json(t, false);
  o["tensors"] = std::move(tensors);
  o["state"] = rank_state_to_json(s.state);
  o["global"] = s.global ? json::value(global_to_json(*s.global)) : json::value(nullptr);
  return json::serialize(o) + "\n";
}

Result<Sidecar> parse_sidecar(std::string_view text, std::string_view source) {
  return parse_with<Sidecar>(text, source, parse_sidecar_value);
}

std::string manifest_to_json(const Manifest& m) {
  json::object o;
  o["format"] = kManifestFormat;
  o["version"] = m.version;
  o["job_id"] = m.job_id;
  o["step"] = m.step;
  o["attempt"] = m.attempt;
  o["reason"] = save_reason_name(m.reason);
  o["world_size"] = m.world_size;
  o["created_unix_ms"] = m.created_unix_ms;
  json::array files;
  for (const auto& f : m.files) files.emplace_back(file_to_json(f, true, m.version));
  o["files"] = std::move(files);
  json::object tensors;
  for (const auto& [name, t] : m.tensors) tensors[name] = tensor_to_json(t, true);
  o["tensors"] = std::move(tensors);
  json::array ranks;
  for (size_t i = 0; i < m.ranks.size(); ++i) {
    json::object r{{"rank", i}};
    for (auto& kv : rank_state_to_json(m.ranks[i])) r[kv.key()] = kv.value();
    ranks.emplace_back(std::move(r));
  }
  o["ranks"] = std::move(ranks);
  o["global"] = global_to_json(m.global);
  return json::serialize(o) + "\n";
}

Result<Manifest> parse_manifest(std::string_view text, std::string_view source) {
  return parse_with<Manifest>(text, source, parse_manifest_value);
}

}  // namespace shardguard::checkpoint
