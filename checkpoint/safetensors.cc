#include "checkpoint/safetensors.h"

#include <algorithm>
#include <cstdint>
#include <utility>

#include "checkpoint/safetensors_json.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace {

using detail::corrupt;
using detail::corrupt_tensor;
using detail::quoted;

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

// Sorts `tensors` by (begin, end), ties in header order, through an index array: sorting
// the entries themselves would take a temporary copy of half of them (100 MB headers).
void sort_by_offsets(std::vector<TensorEntry>& tensors) {
  const auto by_offsets = [&](uint32_t a, uint32_t b) {
    return std::pair(tensors[a].begin, tensors[a].end) <
           std::pair(tensors[b].begin, tensors[b].end);
  };
  std::vector<uint32_t> order(tensors.size());
  for (uint32_t i = 0; i < order.size(); ++i) order[i] = i;
  if (std::is_sorted(order.begin(), order.end(), by_offsets)) return;  // as our writer lays out
  std::stable_sort(order.begin(), order.end(), by_offsets);
  // Apply the permutation in place, cycle by cycle: slot i takes entry order[i].
  for (uint32_t i = 0; i < order.size(); ++i) {
    if (order[i] == i) continue;
    TensorEntry held = std::move(tensors[i]);
    uint32_t at = i;
    while (order[at] != i) {
      const uint32_t from = order[at];
      tensors[at] = std::move(tensors[from]);
      order[at] = at;
      at = from;
    }
    tensors[at] = std::move(held);
    order[at] = at;
  }
}

// Rules 5-10: in offset order, each tensor starts where the previous ended (the first at
// 0), covers exactly its bytes, and the last one ends at the end of the file.
Status check_layout(std::vector<TensorEntry>& tensors, uint64_t data_size, std::string_view file) {
  sort_by_offsets(tensors);
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
  SG_RETURN_IF_ERROR(detail::parse_header_json(text, file_name, header));
  SG_RETURN_IF_ERROR(check_layout(header.tensors, file_size - header.data_start, file_name));
  return header;
}

Result<SafetensorsHeader> parse_safetensors(std::span<const std::byte> file_bytes,
                                            std::string_view file_name) {
  return parse_safetensors_header(file_bytes, file_bytes.size(), file_name);
}

}  // namespace shardguard::checkpoint
