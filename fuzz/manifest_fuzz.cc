// libFuzzer target: the manifest and sidecar parsers get arbitrary bytes. They must never
// crash, and whatever parses must serialise and parse back to the same JSON.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "checkpoint/manifest.h"

using namespace shardguard::checkpoint;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto m = parse_manifest(text, "fuzz"); m.ok()) {
    const std::string again = manifest_to_json(*m);
    auto back = parse_manifest(again, "fuzz-again");
    if (!back.ok() || manifest_to_json(*back) != again) std::abort();
  }
  if (auto s = parse_sidecar(text, "fuzz"); s.ok()) {
    const std::string again = sidecar_to_json(*s);
    auto back = parse_sidecar(again, "fuzz-again");
    if (!back.ok() || sidecar_to_json(*back) != again) std::abort();
  }
  return 0;
}
