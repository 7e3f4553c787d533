#include "checkpoint/hf_export.h"

#include <fnmatch.h>
#include <unistd.h>

#include <boost/json.hpp>

#include <algorithm>
#include <bit>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <map>
#include <string_view>

#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"

namespace shardguard::checkpoint {
namespace {

struct Group {
  std::vector<ExportName> names;
  uint64_t bytes = 0;
};

bool matches_any(const std::vector<std::string>& globs, const std::string& name) {
  return std::any_of(globs.begin(), globs.end(), [&](const std::string& g) {
    return ::fnmatch(g.c_str(), name.c_str(), 0) == 0;
  });
}

std::string joined(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "'" : ", '") + s + "'";
  return out;
}

bool castable(DType d) { return d == DType::kF16 || d == DType::kF32 || d == DType::kF64; }

// The dtype a tensor is exported as.
DType exported_dtype(DType d, const ExportOptions& o) {
  return o.cast_to && castable(d) ? *o.cast_to : d;
}

// torch's round_to_nearest_even (c10/util/BFloat16.h).
uint16_t bf16_of(float f) {
  if (std::isnan(f)) return 0x7FC0;
  const uint32_t bits = std::bit_cast<uint32_t>(f);
  const uint32_t rounding_bias = ((bits >> 16) & 1) + 0x7FFF;
  return static_cast<uint16_t>((bits + rounding_bias) >> 16);
}

// IEEE half -> float, exactly (every half is a float).
float float_of_half(uint16_t h) {
  const uint32_t sign = static_cast<uint32_t>(h & 0x8000) << 16;
  uint32_t exp = (h >> 10) & 0x1F, mant = h & 0x3FF;
  uint32_t bits;
  if (exp == 0x1F) {
    bits = sign | 0x7F800000 | (mant << 13);  // inf, nan
  } else if (exp != 0) {
    bits = sign | ((exp + 112) << 23) | (mant << 13);
  } else if (mant == 0) {
    bits = sign;  // +-0
  } else {        // subnormal half: normalise
    int shift = 0;
    while ((mant & 0x400) == 0) {
      mant <<= 1;
      ++shift;
    }
    bits = sign | (static_cast<uint32_t>(113 - shift) << 23) | ((mant & 0x3FF) << 13);
  }
  return std::bit_cast<float>(bits);
}

template <typename T>
T load_le(const std::byte* p) {
  T v;
  std::memcpy(&v, p, sizeof v);  // little-endian hosts only (x86-64, aarch64)
  return v;
}

std::string numbered(const std::string& prefix, size_t i, size_t n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
  return prefix + buf;
}

Status write_one(Filesystem& fs, const CheckpointReader& reader, const Group& group,
                 const std::string& path, const ExportOptions& options) {
  std::vector<PlannedTensor> planned;
  std::map<std::string, const ExportName*> by_target;
  for (const auto& n : group.names) {
    const TensorRecord* t = reader.tensor(n.source);
    planned.push_back({n.target, exported_dtype(t->dtype, options), t->shape});
    by_target.emplace(n.target, &n);
  }
  SG_ASSIGN_OR_RETURN(auto layout, plan_safetensors(std::move(planned), {{"format", "pt"}}));
  const std::string tmp = temp_name(path.substr(path.find_last_of('/') + 1), 0, ::getpid());
  const std::string tmp_path = join_path(parent_dir(path), tmp);
  auto write = [&]() -> Status {
    // Exclusive: a name planted in --out (a link to a file elsewhere) fails the export
    // instead of being written through.
    SG_ASSIGN_OR_RETURN(auto file, fs.open_for_write(tmp_path, {.exclusive = true}));
    SG_RETURN_IF_ERROR(file->preallocate(layout.file_size));
    SG_RETURN_IF_ERROR(file->append(layout.header_bytes));
    // The layout orders tensors by dtype then name; write them in that order.
    for (const auto& e : layout.header.tensors) {
      const std::string& source = by_target.at(e.name)->source;
      SG_ASSIGN_OR_RETURN(auto bytes, reader.read_whole(source));
      const DType from = reader.tensor(source)->dtype;
      if (exported_dtype(from, options) != from) {
        std::vector<std::byte> cast(bytes.size() / (bit_size(from) / 8) * 2);
        SG_RETURN_IF_ERROR(cast_to_bf16(from, bytes, cast));
        bytes = std::move(cast);
      }
      SG_RETURN_IF_ERROR(file->append(bytes));
    }
    SG_RETURN_IF_ERROR(file->sync());
    SG_RETURN_IF_ERROR(file->close());
    return fs.rename(tmp_path, path);
  };
  if (auto st = write(); !st.ok()) {
    // Only a temp file this call created is removed, never one it found there.
    if (st.error().sys_errno() != EEXIST) (void)fs.remove(tmp_path);
    return st;
  }
  return {};
}

}  // namespace

Result<std::pair<std::string, std::string>> parse_rename_prefix(std::string_view text) {
  const auto eq = text.find('=');
  if (eq == std::string_view::npos || eq == 0)
    return Error(ErrorCode::kInvalid, "rename '" + std::string(text) +
                                          "': expected FROM=TO with a non-empty FROM "
                                          "(e.g. model.= to strip 'model.')");
  return std::pair{std::string(text.substr(0, eq)), std::string(text.substr(eq + 1))};
}

Result<std::vector<ExportName>> plan_export(const std::vector<std::string>& names,
                                            const ExportOptions& options) {
  std::map<std::string, std::string> targets;  // target -> source
  for (const auto& name : names) {
    if (!options.include.empty() && !matches_any(options.include, name)) continue;
    if (matches_any(options.exclude, name)) continue;
    std::string target = name;
    for (const auto& [from, to] : options.rename_prefixes) {
      if (name.compare(0, from.size(), from) == 0) {
        target = to + name.substr(from.size());
        break;
      }
    }
    if (target.empty())
      return Error(ErrorCode::kInvalid, "tensor '" + name + "' would be renamed to an empty name");
    auto [it, inserted] = targets.emplace(target, name);
    if (!inserted)
      return Error(ErrorCode::kInvalid, "tensors '" + it->second + "' and '" + name +
                                            "' would both be exported as '" + target +
                                            "'; narrow --include or change --rename-prefix");
  }
  if (targets.empty())
    return Error(ErrorCode::kInvalid,
                 "no tensor is selected (" + std::to_string(names.size()) + " in the checkpoint" +
                     (options.include.empty() ? "" : "; --include " + joined(options.include)) +
                     (options.exclude.empty() ? "" : "; --exclude " + joined(options.exclude)) +
                     ")");
  std::vector<ExportName> out;
  for (auto& [target, source] : targets) out.push_back({source, target});
  return out;
}

Status cast_to_bf16(DType from, std::span<const std::byte> in, std::span<std::byte> out) {
  if (!castable(from))
    return Error(ErrorCode::kInvalid, "cannot cast " + std::string(dtype_name(from)) + " to BF16");
  const size_t width = bit_size(from) / 8;
  if (in.size() % width != 0 || out.size() != in.size() / width * 2)
    return Error(ErrorCode::kInvalid, "cast to BF16: buffer sizes do not match");
  for (size_t i = 0, n = in.size() / width; i < n; ++i) {
    const std::byte* p = in.data() + i * width;
    float f = 0;
    if (from == DType::kF16) f = float_of_half(load_le<uint16_t>(p));
    if (from == DType::kF32) f = load_le<float>(p);
    if (from == DType::kF64) f = static_cast<float>(load_le<double>(p));
    const uint16_t w = bf16_of(f);
    std::memcpy(out.data() + 2 * i, &w, 2);
  }
  return {};
}

Status check_export_options(const ExportOptions& options) {
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos)
    return Error(ErrorCode::kInvalid,
                 "export prefix '" + options.prefix + "' must be a plain file name part");
  if (options.max_shard_size == 0)
    return Error(ErrorCode::kInvalid, "max shard size must be positive");
  if (options.cast_to && *options.cast_to != DType::kBF16)
    return Error(ErrorCode::kInvalid,
                 "export can cast to BF16 only, not " + std::string(dtype_name(*options.cast_to)));
  return {};
}

bool is_export_file(const std::string& name, const std::string& prefix) {
  if (name == prefix + ".safetensors" || name == prefix + ".safetensors.index.json") return true;
  // <prefix>-NNNNN-of-NNNNN.safetensors
  constexpr std::string_view kShape = "-00000-of-00000.safetensors";
  if (name.size() != prefix.size() + kShape.size() || name.compare(0, prefix.size(), prefix) != 0)
    return false;
  for (size_t i = 0; i < kShape.size(); ++i) {
    const char c = name[prefix.size() + i];
    if (kShape[i] == '0' ? !std::isdigit(static_cast<unsigned char>(c)) : c != kShape[i])
      return false;
  }
  return true;
}

Result<ExportWritten> export_hf(Filesystem& fs, const CheckpointReader& reader,
                                const ExportOptions& options) {
  SG_RETURN_IF_ERROR(check_export_options(options));
  SG_ASSIGN_OR_RETURN(auto selected, plan_export(reader.tensor_names(), options));
  std::vector<Group> groups;
  uint64_t total = 0;
  for (const auto& n : selected) {  // sorted by exported name
    const TensorRecord* t = reader.tensor(n.source);
    SG_ASSIGN_OR_RETURN(uint64_t bytes,
                        checked_byte_size(t->shape, exported_dtype(t->dtype, options)));
    total += bytes;
    if (groups.empty() ||
        (groups.back().bytes + bytes > options.max_shard_size && !groups.back().names.empty()))
      groups.emplace_back();
    groups.back().names.push_back(n);
    groups.back().bytes += bytes;
  }
  SG_RETURN_IF_ERROR(fs.create_dirs(options.out_dir));

  std::vector<std::string> written;
  boost::json::object weight_map;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string file = groups.size() == 1 ? options.prefix + ".safetensors"
                                                : numbered(options.prefix, i, groups.size());
    const std::string path = join_path(options.out_dir, file);
    if (auto st = write_one(fs, reader, groups[i], path, options); !st.ok())
      return std::move(st).error().context("export '" + path + "'");
    written.push_back(path);
    for (const auto& n : groups[i].names) weight_map[n.target] = file;
  }
  if (groups.size() > 1) {
    // transformers writes the index with indent=2 and sorted keys; keys here are sorted.
    std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total) +
                        "\n  },\n  \"weight_map\": {\n";
    size_t k = 0;
    for (const auto& kv : weight_map) {
      index += "    " + boost::json::serialize(boost::json::value(kv.key())) + ": " +
               boost::json::serialize(kv.value()) + (++k < weight_map.size() ? ",\n" : "\n");
    }
    index += "  }\n}\n";
    const std::string path = join_path(options.out_dir, options.prefix + ".safetensors.index.json");
    SG_RETURN_IF_ERROR(atomic_write_file(fs, path, index));
    written.push_back(path);
  }
  // An earlier export's files of the same names, now stale: removed once the new ones are in.
  std::vector<std::string> removed;
  SG_ASSIGN_OR_RETURN(auto entries, fs.list(options.out_dir));
  for (const auto& e : entries) {
    if (e.is_dir || !is_export_file(e.name, options.prefix)) continue;
    const std::string path = join_path(options.out_dir, e.name);
    if (std::find(written.begin(), written.end(), path) != written.end()) continue;
    SG_RETURN_IF_ERROR(fs.remove(path));
    removed.push_back(path);
  }
  SG_RETURN_IF_ERROR(fs.sync_dir(options.out_dir));
  return ExportWritten{std::move(written), std::move(removed)};
}

}  // namespace shardguard::checkpoint
