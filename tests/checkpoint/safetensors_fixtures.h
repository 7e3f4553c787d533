// Test fixtures for the safetensors tests: raw files with a hand-written header, and
// whole files built from a plan with deterministic contents whose sums a reader can check.
#pragma once

#include <cstddef>
#include <string>
#include <string_view>
#include <vector>

#include "checkpoint/safetensors.h"

namespace shardguard::checkpoint {

using Bytes = std::vector<std::byte>;

Bytes to_bytes(std::string_view s);

// A file whose header is `json` verbatim (N = its length) followed by `data_size` zeros.
Bytes file_with_header(std::string_view json, std::size_t data_size);

// Shapes every dtype can store (sub-byte dtypes need whole bytes), incl. scalars and zeros.
std::vector<std::vector<uint64_t>> shapes_for(DType dtype);

// The whole file for a plan: header bytes then each tensor's contents in offset order.
// `sums` gets, per tensor, the element sum st_read.py prints ("-" if not checkable).
Bytes build_file(const SafetensorsLayout& layout, std::vector<std::string>* sums = nullptr);

// "[2,3]", "[]" for a scalar.
std::string dims_text(const std::vector<uint64_t>& shape);

}  // namespace shardguard::checkpoint
