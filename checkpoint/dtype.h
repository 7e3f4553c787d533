// Element types of safetensors files: names, bit sizes and overflow-checked byte sizes.
//
// The enum is declared in the reference implementation's order (increasing alignment), so
// comparing two DTypes compares their alignment the way the reference writer sorts them.
// Thread-safety: pure functions over constants; safe from any thread.
#pragma once

#include <array>
#include <cstdint>
#include <span>
#include <string_view>

#include "core/result.h"

namespace shardguard::checkpoint {

enum class DType : uint8_t {
  kBool,
  kF4,
  kF6E2M3,
  kF6E3M2,
  kU8,
  kI8,
  kF8E5M2,
  kF8E4M3,
  kF8E8M0,
  kF8E4M3Fnuz,
  kF8E5M2Fnuz,
  kI16,
  kU16,
  kF16,
  kBF16,
  kI32,
  kU32,
  kF32,
  kC64,
  kF64,
  kI64,
  kU64,
};

inline constexpr std::array<DType, 22> kAllDTypes = {
    DType::kBool,       DType::kF4,     DType::kF6E2M3, DType::kF6E3M2, DType::kU8,
    DType::kI8,         DType::kF8E5M2, DType::kF8E4M3, DType::kF8E8M0, DType::kF8E4M3Fnuz,
    DType::kF8E5M2Fnuz, DType::kI16,    DType::kU16,    DType::kF16,    DType::kBF16,
    DType::kI32,        DType::kU32,    DType::kF32,    DType::kC64,    DType::kF64,
    DType::kI64,        DType::kU64,
};

// The safetensors spelling: "F32", "BF16", "F8_E4M3", ...
std::string_view dtype_name(DType dtype);

// Inverse of dtype_name (exact, case-sensitive); kInvalid for any other string.
Result<DType> parse_dtype(std::string_view name);

// Bits per element: 4 (F4), 6 (F6_*), 8, 16, 32 or 64 (C64 is two packed F32).
uint32_t bit_size(DType dtype);

// Bytes of a packed tensor of this shape (scalar for an empty shape), checked as the
// reference reader does: element count then bit count without overflow, and whole bytes
// for sub-byte types. kInvalid names which rule failed.
Result<uint64_t> checked_byte_size(std::span<const uint64_t> shape, DType dtype);

}  // namespace shardguard::checkpoint
