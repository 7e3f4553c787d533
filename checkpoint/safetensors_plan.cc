// Writer side of checkpoint/safetensors.h: plan_safetensors().
#include <algorithm>
#include <unordered_set>

#include "checkpoint/safetensors.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {

namespace {

Error invalid(std::string what) { return Error(ErrorCode::kInvalid, "safetensors: " + what); }

Status check_names(const std::vector<PlannedTensor>& tensors,
                   const std::map<std::string, std::string>& metadata) {
  std::unordered_set<std::string_view> seen;
  for (const PlannedTensor& t : tensors) {
    if (t.name.empty()) return invalid("empty tensor name");
    if (t.name.starts_with("__metadata__")) {
      return invalid("tensor name '" + t.name + "' is reserved");
    }
    if (!is_valid_utf8(t.name)) return invalid("tensor name is not valid UTF-8");
    if (!seen.insert(t.name).second) return invalid("duplicate tensor name '" + t.name + "'");
  }
  for (const auto& [key, value] : metadata) {
    if (!is_valid_utf8(key) || !is_valid_utf8(value)) {
      return invalid("metadata entry is not valid UTF-8");
    }
  }
  return ok_status();
}

void append_tensor_json(std::string& out, const TensorEntry& t) {
  append_json_string(out, t.name);
  out += ":{\"dtype\":\"";
  out += dtype_name(t.dtype);
  out += "\",\"shape\":[";
  for (std::size_t i = 0; i < t.shape.size(); ++i) {
    if (i > 0) out += ',';
    out += std::to_string(t.shape[i]);
  }
  out += "],\"data_offsets\":[" + std::to_string(t.begin) + "," + std::to_string(t.end) + "]}";
}

// Compact like serde_json: no spaces, `__metadata__` (when non-empty) first.
std::string render_json(const SafetensorsHeader& header) {
  std::string out = "{";
  if (!header.metadata.empty()) {
    out += "\"__metadata__\":{";
    bool first = true;
    for (const auto& [key, value] : header.metadata) {
      if (!first) out += ',';
      first = false;
      append_json_string(out, key);
      out += ':';
      append_json_string(out, value);
    }
    out += '}';
  }
  for (const TensorEntry& t : header.tensors) {
    if (out.size() > 1) out += ',';
    append_tensor_json(out, t);
  }
  out += '}';
  return out;
}

}  // namespace

Result<SafetensorsLayout> plan_safetensors(std::vector<PlannedTensor> tensors,
                                           std::map<std::string, std::string> metadata,
                                           uint64_t data_alignment) {
  if ((data_alignment & (data_alignment - 1)) != 0) {
    return invalid("data alignment " + std::to_string(data_alignment) + " is not a power of two");
  }
  SG_RETURN_IF_ERROR(check_names(tensors, metadata));
  // Larger elements first keeps every tensor aligned to its element size.
  std::sort(tensors.begin(), tensors.end(), [](const auto& a, const auto& b) {
    return a.dtype != b.dtype ? a.dtype > b.dtype : a.name < b.name;
  });

  SafetensorsLayout layout;
  SafetensorsHeader& header = layout.header;
  header.metadata = std::move(metadata);
  uint64_t offset = 0;
  for (PlannedTensor& t : tensors) {
    auto size = checked_byte_size(t.shape, t.dtype);
    if (!size.ok()) return invalid("tensor '" + t.name + "': " + size.error().message());
    uint64_t end = 0;
    if (__builtin_add_overflow(offset, *size, &end)) return invalid("total size overflows");
    header.tensors.push_back({std::move(t.name), t.dtype, std::move(t.shape), offset, end});
    offset = end;
  }

  std::string json = render_json(header);
  // Spaces are JSON whitespace, so any reader accepts the padding that aligns the data.
  uint64_t alignment = std::max<uint64_t>(data_alignment, 8);
  uint64_t unpadded = kSafetensorsLengthPrefix + json.size();
  uint64_t padding = (alignment - unpadded % alignment) % alignment;
  header.header_size = json.size() + padding;
  if (header.header_size > kMaxSafetensorsHeaderSize) {
    return invalid("header of " + std::to_string(header.header_size) + " bytes exceeds the limit");
  }
  header.data_start = kSafetensorsLengthPrefix + header.header_size;
  if (__builtin_add_overflow(header.data_start, offset, &layout.file_size)) {
    return invalid("file size overflows");
  }

  layout.header_bytes.reserve(header.data_start);
  for (int i = 0; i < 8; ++i) {
    layout.header_bytes.push_back(static_cast<std::byte>(header.header_size >> (8 * i)));
  }
  for (char c : json) layout.header_bytes.push_back(static_cast<std::byte>(c));
  layout.header_bytes.resize(header.data_start, std::byte{' '});
  return layout;
}

}  // namespace shardguard::checkpoint
