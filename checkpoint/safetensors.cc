#include "checkpoint/safetensors.h"

#include <algorithm>
#include <boost/json/value.hpp>
#include <optional>
#include <utility>

#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace json = boost::json;

namespace {

constexpr std::string_view kMetadataKey = "__metadata__";

// A name as it appears in messages: quoted, control bytes escaped, long names cut.
std::string quoted(std::string_view name) {
  static constexpr char kHex[] = "0123456789abcdef";
  std::string out = "'";
  for (char c : name.substr(0, 200)) {
    auto u = static_cast<uint8_t>(c);
    if (u < 0x20 || u == 0x7F) {
      out += "\\x";
      out += kHex[u >> 4];
      out += kHex[u & 0xF];
    } else {
      out += c;
    }
  }
  if (name.size() > 200) out += "...";
  out += '\'';
  return out;
}

std::string dims(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(shape[i]);
  }
  out += ']';
  return out;
}

std::string offsets(const TensorEntry& t) {
  return "[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]";
}

std::string describe(const TensorEntry& t) {
  return std::string(dtype_name(t.dtype)) + " " + dims(t.shape);
}

Error corrupt(std::string_view file, std::string_view what) {
  std::string message(file);
  message += ": ";
  message += what;
  return Error(ErrorCode::kCorrupt, std::move(message));
}

Error corrupt_tensor(std::string_view file, std::string_view name, std::string_view what) {
  return corrupt(file, "tensor " + quoted(name) + ": " + std::string(what));
}

std::optional<uint64_t> as_u64(const json::value& v) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<uint64_t>(v.get_int64());
  return std::nullopt;
}

// `null` is accepted as "no metadata", as the reference's Option<HashMap> does.
Result<std::map<std::string, std::string>> parse_metadata(const json::value& v,
                                                          std::string_view file) {
  std::map<std::string, std::string> metadata;
  if (v.is_null()) return metadata;
  if (!v.is_object()) return corrupt(file, "__metadata__ is not a JSON object");
  for (const auto& [key, value] : v.get_object()) {
    if (!value.is_string()) {
      return corrupt(file, "__metadata__ value of " + quoted(key) + " is not a string");
    }
    metadata.emplace(std::string(key), std::string(value.get_string()));
  }
  return metadata;
}

// Field types only; offsets and sizes are checked later, in offset order (rules 6-9).
Result<TensorEntry> parse_tensor_info(std::string_view name, const json::value& v,
                                      std::string_view file) {
  TensorEntry entry;
  entry.name = std::string(name);
  const json::object* fields = v.if_object();
  if (fields == nullptr) return corrupt_tensor(file, name, "entry is not a JSON object");

  const json::value* dtype = fields->if_contains("dtype");
  if (dtype == nullptr || !dtype->is_string()) {
    return corrupt_tensor(file, name, "\"dtype\" is missing or not a string");
  }
  auto parsed = parse_dtype(std::string_view(dtype->get_string()));
  if (!parsed.ok()) return corrupt_tensor(file, name, parsed.error().message());
  entry.dtype = *parsed;

  const json::value* shape = fields->if_contains("shape");
  if (shape == nullptr || !shape->is_array()) {
    return corrupt_tensor(file, name, "\"shape\" is missing or not an array");
  }
  for (const json::value& dim : shape->get_array()) {
    auto d = as_u64(dim);
    if (!d) return corrupt_tensor(file, name, "\"shape\" holds a non-integer or negative dim");
    entry.shape.push_back(*d);
  }

  const json::value* range = fields->if_contains("data_offsets");
  const json::array* pair = range == nullptr ? nullptr : range->if_array();
  std::optional<uint64_t> begin, end;
  if (pair != nullptr && pair->size() == 2) {
    begin = as_u64((*pair)[0]);
    end = as_u64((*pair)[1]);
  }
  if (!begin || !end) {
    return corrupt_tensor(file, name, "\"data_offsets\" is not two non-negative integers");
  }
  entry.begin = *begin;
  entry.end = *end;
  return entry;
}

// Rules 5-10: in offset order, each tensor starts where the previous ended (the first at
// 0), covers exactly its bytes, and the last one ends at the end of the file.
Status check_layout(std::vector<TensorEntry>& tensors, uint64_t data_size, std::string_view file) {
  std::stable_sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return std::pair(a.begin, a.end) < std::pair(b.begin, b.end);
  });
  uint64_t start = 0;
  const TensorEntry* previous = nullptr;
  for (const TensorEntry& t : tensors) {
    if (t.begin != start) {
      std::string what = "data_offsets " + offsets(t);
      if (previous == nullptr) {
        what += " do not start the data section at 0";
      } else {
        what += t.begin > start ? " leave a gap after tensor " : " overlap tensor ";
        what += quoted(previous->name) + " (ends at " + std::to_string(start) + ")";
      }
      return corrupt_tensor(file, t.name, what);
    }
    if (t.end < t.begin) {
      return corrupt_tensor(file, t.name, "data_offsets " + offsets(t) + " end before they begin");
    }
    start = t.end;
    previous = &t;
    auto size = checked_byte_size(t.shape, t.dtype);
    if (!size.ok())
      return corrupt_tensor(file, t.name, describe(t) + ": " + size.error().message());
    if (t.byte_size() != *size) {
      return corrupt_tensor(file, t.name,
                            "data_offsets " + offsets(t) + " but " + describe(t) + " needs " +
                                std::to_string(*size) + " bytes");
    }
  }
  if (start < data_size) {
    return corrupt(file, std::to_string(data_size - start) +
                             " bytes after the last tensor (data section holds " +
                             std::to_string(data_size) + ", tensors cover " +
                             std::to_string(start) + ")");
  }
  if (start > data_size) {
    return corrupt(file, "truncated: tensors cover " + std::to_string(start) +
                             " data bytes but the data section holds " + std::to_string(data_size));
  }
  return ok_status();
}

uint64_t load_le64(std::span<const std::byte> bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | std::to_integer<uint64_t>(bytes[i]);
  return value;
}

}  // namespace

const TensorEntry* SafetensorsHeader::find(std::string_view name) const {
  for (const TensorEntry& t : tensors) {
    if (t.name == name) return &t;
  }
  return nullptr;
}

Result<uint64_t> read_safetensors_header_size(std::span<const std::byte> first_bytes,
                                              uint64_t file_size, std::string_view file_name) {
  if (file_size < kSafetensorsLengthPrefix) {
    return corrupt(file_name, "file is " + std::to_string(file_size) +
                                  " bytes, too small for the 8-byte header length");
  }
  if (first_bytes.size() < kSafetensorsLengthPrefix) {
    return Error(ErrorCode::kInvalid, std::string(file_name) + ": need the first 8 bytes, got " +
                                          std::to_string(first_bytes.size()));
  }
  uint64_t n = load_le64(first_bytes);
  if (n > kMaxSafetensorsHeaderSize) {
    return corrupt(file_name, "header length " + std::to_string(n) + " exceeds the limit of " +
                                  std::to_string(kMaxSafetensorsHeaderSize) + " bytes");
  }
  if (kSafetensorsLengthPrefix + n > file_size) {
    return corrupt(file_name, "header length " + std::to_string(n) + " runs past the end of the " +
                                  std::to_string(file_size) + "-byte file");
  }
  return n;
}

Result<SafetensorsHeader> parse_safetensors_header(std::span<const std::byte> head,
                                                   uint64_t file_size, std::string_view file_name) {
  SG_ASSIGN_OR_RETURN(uint64_t n, read_safetensors_header_size(head, file_size, file_name));
  SafetensorsHeader header;
  header.header_size = n;
  header.data_start = kSafetensorsLengthPrefix + n;
  if (head.size() < header.data_start) {
    return Error(ErrorCode::kInvalid, std::string(file_name) + ": need the first " +
                                          std::to_string(header.data_start) + " bytes, got " +
                                          std::to_string(head.size()));
  }
  std::string_view text(reinterpret_cast<const char*>(head.data()) + kSafetensorsLengthPrefix, n);
  if (!is_valid_utf8(text)) return corrupt(file_name, "header is not valid UTF-8");
  auto parsed = parse_json_strict(text);
  if (!parsed.ok()) return corrupt(file_name, "header " + parsed.error().message());
  const json::object* root = parsed->if_object();
  if (root == nullptr) return corrupt(file_name, "header is not a JSON object");

  for (const auto& [key, value] : *root) {
    if (key == kMetadataKey) {
      SG_ASSIGN_OR_RETURN(header.metadata, parse_metadata(value, file_name));
      continue;
    }
    SG_ASSIGN_OR_RETURN(TensorEntry entry, parse_tensor_info(key, value, file_name));
    header.tensors.push_back(std::move(entry));
  }
  SG_RETURN_IF_ERROR(check_layout(header.tensors, file_size - header.data_start, file_name));
  return header;
}

Result<SafetensorsHeader> parse_safetensors(std::span<const std::byte> file_bytes,
                                            std::string_view file_name) {
  return parse_safetensors_header(file_bytes, file_bytes.size(), file_name);
}

}  // namespace shardguard::checkpoint
