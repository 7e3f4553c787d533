// libFuzzer target: arbitrary bytes into the safetensors reader. It must never crash, leak
// or hit undefined behaviour (built with ASan + UBSan), whatever the header says.
#include <cstddef>
#include <cstdint>
#include <span>

#include "checkpoint/safetensors.h"

using namespace shardguard::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::span<const std::byte> bytes(reinterpret_cast<const std::byte*>(data), size);
  auto whole = parse_safetensors(bytes, "fuzz.safetensors");
  // The header-only path must agree with the whole-file path on the same bytes.
  auto head = parse_safetensors_header(bytes, size, "fuzz.safetensors");
  if (whole.ok() != head.ok()) __builtin_trap();
  if (whole.ok()) {
    if (!(*whole == *head)) __builtin_trap();
    // Anything we accept, we can re-plan; the plan must parse back to the same tensors
    // (unless the names are ones our writer refuses, e.g. empty).
    std::vector<PlannedTensor> planned;
    for (const TensorEntry& t : whole->tensors) planned.push_back({t.name, t.dtype, t.shape});
    auto layout = plan_safetensors(planned, whole->metadata);
    if (layout.ok()) {
      auto reparsed = parse_safetensors_header(layout->header_bytes, layout->file_size, "re");
      if (!reparsed.ok() || reparsed->tensors.size() != whole->tensors.size() ||
          reparsed->metadata != whole->metadata) {
        __builtin_trap();
      }
    }
  }
  // A file size beyond the bytes we hold exercises the "head only" bounds checks.
  (void)parse_safetensors_header(bytes, uint64_t{size} + 1000, "fuzz.safetensors");
  return 0;
}
