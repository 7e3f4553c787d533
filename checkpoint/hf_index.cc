#include "checkpoint/hf_index.h"

#include <algorithm>
#include <boost/json.hpp>
#include <iterator>
#include <map>
#include <set>
#include <utility>

#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace json = boost::json;
namespace {

constexpr std::string_view kSingleFileName = "model.safetensors";

// Decodes one UTF-8 sequence at `i` (advancing it); invalid bytes come back as themselves.
uint32_t next_code_point(std::string_view s, size_t& i) {
  auto byte = [&](size_t k) { return static_cast<uint8_t>(s[k]); };
  uint32_t c = byte(i);
  size_t extra = c >= 0xF0 ? 3 : c >= 0xE0 ? 2 : c >= 0xC0 ? 1 : 0;
  if (extra == 0 || i + extra >= s.size()) {
    ++i;
    return c;
  }
  uint32_t cp = c & (0x3F >> extra);
  for (size_t k = 1; k <= extra; ++k) cp = (cp << 6) | (byte(i + k) & 0x3F);
  i += extra + 1;
  return cp;
}

void append_u_escape(std::string& out, uint32_t unit) {
  static constexpr char kHex[] = "0123456789abcdef";
  out += "\\u";
  for (int shift = 12; shift >= 0; shift -= 4) out += kHex[(unit >> shift) & 0xF];
}

constexpr std::pair<char, std::string_view> kShortEscapes[] = {
    {'"', "\\\""}, {'\\', "\\\\"}, {'\n', "\\n"}, {'\r', "\\r"},
    {'\t', "\\t"}, {'\b', "\\b"},  {'\f', "\\f"}};

// A JSON string as Python's json.dumps writes it (ensure_ascii=True).
std::string python_json_string(std::string_view s) {
  std::string out = "\"";
  for (size_t i = 0; i < s.size();) {
    char c = s[i];
    if (static_cast<uint8_t>(c) >= 0x80) {
      uint32_t cp = next_code_point(s, i);
      if (cp >= 0x10000) {
        cp -= 0x10000;
        append_u_escape(out, 0xD800 | (cp >> 10));
        append_u_escape(out, 0xDC00 | (cp & 0x3FF));
      } else {
        append_u_escape(out, cp);
      }
      continue;
    }
    ++i;
    auto short_form = std::find_if(std::begin(kShortEscapes), std::end(kShortEscapes),
                                   [c](const auto& e) { return e.first == c; });
    if (short_form != std::end(kShortEscapes)) {
      out += short_form->second;
    } else if (static_cast<uint8_t>(c) < 0x20 || c == 0x7F) {  // Python escapes DEL too
      append_u_escape(out, static_cast<uint8_t>(c));
    } else {
      out += c;
    }
  }
  return out + "\"";
}

Error corrupt(const std::string& file, const std::string& what) {
  return Error(ErrorCode::kCorrupt, file + ": " + what);
}

struct HfIndex {
  std::map<std::string, std::string> weight_map;  // tensor -> file
};

Result<HfIndex> parse_hf_index(std::string_view text, const std::string& label) {
  auto root = parse_json_strict(text);
  if (!root.ok()) return corrupt(label, root.error().message());
  const json::object* obj = root->if_object();
  if (obj == nullptr) return corrupt(label, "not a JSON object");
  // Other writers add metadata fields (total_parameters); only weight_map matters here.
  const json::value* map = obj->if_contains("weight_map");
  if (map == nullptr || !map->is_object())
    return corrupt(label, "weight_map missing or not an object");
  HfIndex index;
  for (const auto& kv : map->get_object()) {
    if (!kv.value().is_string())
      return corrupt(label, "weight_map value of '" + std::string(kv.key()) + "' is not a string");
    std::string file(kv.value().get_string());
    if (!is_safe_relative_path(file))
      return corrupt(label, "weight_map names unsafe path '" + file + "'");
    index.weight_map.emplace(std::string(kv.key()), std::move(file));
  }
  return index;
}

struct HfShard {
  uint64_t size = 0;
  SafetensorsHeader header;
};

Result<HfShard> read_hf_shard(Filesystem& fs, const std::string& path) {
  SG_ASSIGN_OR_RETURN(auto mapped, fs.map_readonly(path));
  HfShard shard;
  shard.size = mapped->bytes().size();
  SG_ASSIGN_OR_RETURN(shard.header, parse_safetensors(mapped->bytes(), path));
  return shard;
}

Manifest empty_hf_manifest() {
  Manifest m;
  m.job_id = "hf";
  m.world_size = 1;
  m.ranks.push_back(RankState{"", "null", "null"});
  return m;
}

void add_whole_tensor(Manifest& m, const std::string& file, const TensorEntry& t) {
  TensorRecord rec;
  rec.dtype = t.dtype;
  rec.shape = t.shape;
  rec.chunks.push_back(ChunkRecord{file, t.name, Box::whole(t.shape)});
  m.tensors.emplace(t.name, std::move(rec));
}

Result<Manifest> manifest_from_index(Filesystem& fs, const std::string& dir,
                                     const std::string& index_path) {
  SG_ASSIGN_OR_RETURN(std::string text, fs.read_file(index_path));
  SG_ASSIGN_OR_RETURN(HfIndex index, parse_hf_index(text, index_path));
  std::set<std::string> files;
  for (const auto& [name, file] : index.weight_map) files.insert(file);
  Manifest m = empty_hf_manifest();
  std::map<std::string, HfShard> shards;
  for (const std::string& file : files) {
    SG_ASSIGN_OR_RETURN(HfShard shard, read_hf_shard(fs, join_path(dir, file)));
    m.files.push_back(FileRecord{file, shard.size, "", 0});
    shards.emplace(file, std::move(shard));
  }
  for (const auto& [name, file] : index.weight_map) {
    const TensorEntry* t = shards.at(file).header.find(name);
    if (t == nullptr)
      return corrupt(index_path, "tensor '" + name + "' is not in " + join_path(dir, file));
    add_whole_tensor(m, file, *t);
  }
  return m;
}

}  // namespace

bool every_tensor_whole(const Manifest& manifest) {
  for (const auto& [name, t] : manifest.tensors) {
    if (t.chunks.size() != 1) return false;
    const ChunkRecord& c = t.chunks.front();
    if (c.key != name || c.box != Box::whole(t.shape)) return false;
  }
  return true;
}

std::string hf_index_json(const Manifest& manifest) {
  uint64_t total = 0;
  for (const auto& [name, t] : manifest.tensors)
    total += checked_byte_size(t.shape, t.dtype).value_or(0);
  std::string out = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total) +
                    "\n  },\n  \"weight_map\": {";
  bool first = true;
  // std::map orders UTF-8 bytewise, which is Python's code-point order for sort_keys.
  for (const auto& [name, t] : manifest.tensors) {
    if (t.chunks.empty()) continue;
    out += first ? "\n" : ",\n";
    first = false;
    out += "    " + python_json_string(name) + ": " + python_json_string(t.chunks.front().file);
  }
  out += first ? "}\n}\n" : "\n  }\n}\n";
  return out;
}

Result<Manifest> manifest_from_hf_dir(Filesystem& fs, const std::string& dir) {
  const std::string index_path = join_path(dir, std::string(kHfIndexName));
  SG_ASSIGN_OR_RETURN(bool has_index, fs.exists(index_path));
  if (has_index) return manifest_from_index(fs, dir, index_path);
  const std::string single = join_path(dir, std::string(kSingleFileName));
  SG_ASSIGN_OR_RETURN(bool has_single, fs.exists(single));
  if (!has_single)
    return Error(ErrorCode::kNotFound, dir + ": neither " + std::string(kHfIndexName) + " nor " +
                                           std::string(kSingleFileName));
  SG_ASSIGN_OR_RETURN(HfShard shard, read_hf_shard(fs, single));
  Manifest m = empty_hf_manifest();
  m.files.push_back(FileRecord{std::string(kSingleFileName), shard.size, "", 0});
  for (const TensorEntry& t : shard.header.tensors)
    add_whole_tensor(m, std::string(kSingleFileName), t);
  return m;
}

}  // namespace shardguard::checkpoint
