#include "tests/checkpoint/safetensors_fixtures.h"

#include <cmath>
#include <cstdlib>
#include <cstring>

namespace shardguard::checkpoint {
namespace {

// Deterministic contents: small integers encoded in the dtype, so sums are exact.
int64_t element_value(std::size_t i) { return static_cast<int64_t>(i % 7) - 3; }

uint16_t half_bits(int64_t k) {  // exact for |k| < 2048
  if (k == 0) return 0;
  uint16_t sign = k < 0 ? 0x8000 : 0;
  int exponent = 0;
  double mantissa = std::frexp(static_cast<double>(std::llabs(k)), &exponent);  // [0.5, 1)
  auto fraction = static_cast<uint16_t>((mantissa * 2 - 1) * 1024);
  return static_cast<uint16_t>(sign | ((exponent - 1 + 15) << 10) | fraction);
}

void put_le(Bytes& out, uint64_t bits, std::size_t bytes) {
  for (std::size_t b = 0; b < bytes; ++b) out.push_back(static_cast<std::byte>(bits >> (8 * b)));
}

// Appends the tensor's bytes; returns the expected sum as st_read.py prints it ("-" if
// the dtype has no integer meaning to check).
std::string fill_tensor(Bytes& out, const TensorEntry& t) {
  uint64_t bytes = t.byte_size();
  uint32_t bits = bit_size(t.dtype);
  if (bits < 8 || t.dtype == DType::kU8 || t.dtype == DType::kI8 || t.dtype == DType::kBool ||
      dtype_name(t.dtype).starts_with("F8")) {
    int64_t sum = 0;
    for (uint64_t i = 0; i < bytes; ++i) {
      uint8_t byte = static_cast<uint8_t>(i * 37 + 11);
      if (t.dtype == DType::kBool) byte = i % 2;
      if (t.dtype == DType::kI8) byte = static_cast<uint8_t>(element_value(i));
      out.push_back(static_cast<std::byte>(byte));
      sum += t.dtype == DType::kI8 ? static_cast<int8_t>(byte) : byte;
    }
    bool integral = t.dtype == DType::kU8 || t.dtype == DType::kI8 || t.dtype == DType::kBool;
    return integral ? std::to_string(sum) : "-";
  }
  uint64_t count = bytes * 8 / bits;
  int64_t sum = 0, imag = 0;
  for (uint64_t i = 0; i < count; ++i) {
    int64_t v = element_value(i);
    bool is_unsigned = dtype_name(t.dtype).starts_with("U");
    if (is_unsigned) v = static_cast<int64_t>(i % 7);
    sum += v;
    switch (t.dtype) {
      case DType::kF16:
        put_le(out, half_bits(v), 2);
        break;
      case DType::kBF16: {
        float f = static_cast<float>(v);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        put_le(out, u >> 16, 2);
        break;
      }
      case DType::kF32: {
        float f = static_cast<float>(v);
        uint32_t u;
        std::memcpy(&u, &f, 4);
        put_le(out, u, 4);
        break;
      }
      case DType::kF64: {
        double d = static_cast<double>(v);
        uint64_t u;
        std::memcpy(&u, &d, 8);
        put_le(out, u, 8);
        break;
      }
      case DType::kC64: {
        float parts[2] = {static_cast<float>(v), static_cast<float>(i % 3)};
        imag += static_cast<int64_t>(i % 3);
        uint32_t u[2];
        std::memcpy(u, parts, 8);
        put_le(out, u[0], 4);
        put_le(out, u[1], 4);
        break;
      }
      default:
        put_le(out, static_cast<uint64_t>(v), bits / 8);
    }
  }
  if (t.dtype == DType::kC64) return std::to_string(sum) + ":" + std::to_string(imag);
  return std::to_string(sum);
}

}  // namespace

Bytes to_bytes(std::string_view s) {
  Bytes out(s.size());
  std::memcpy(out.data(), s.data(), s.size());
  return out;
}

// A file whose header is `json` verbatim (N = its length) followed by `data_size` zeros.
Bytes file_with_header(std::string_view json, std::size_t data_size) {
  Bytes out;
  uint64_t n = json.size();
  for (int i = 0; i < 8; ++i) out.push_back(static_cast<std::byte>(n >> (8 * i)));
  Bytes body = to_bytes(json);
  out.insert(out.end(), body.begin(), body.end());
  out.resize(out.size() + data_size, std::byte{0});
  return out;
}

// Sub-byte dtypes get element counts that fill whole bytes.
std::vector<std::vector<uint64_t>> shapes_for(DType dtype) {
  if (bit_size(dtype) == 4) return {{2}, {3, 2}, {0, 5}, {2, 0, 3}};
  if (bit_size(dtype) == 6) return {{4}, {2, 4}, {0}, {4, 0}};
  return {{}, {1}, {3, 4}, {2, 3, 2}, {0}, {5, 0, 2}};
}

// The whole file for a plan: header bytes then each tensor's contents in offset order.
Bytes build_file(const SafetensorsLayout& layout, std::vector<std::string>* sums) {
  Bytes file = layout.header_bytes;
  for (const TensorEntry& t : layout.header.tensors) {
    std::string sum = fill_tensor(file, t);
    if (sums) sums->push_back(sum);
  }
  return file;
}

std::string dims_text(const std::vector<uint64_t>& shape) {
  std::string out = "[";
  for (std::size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

}  // namespace shardguard::checkpoint
