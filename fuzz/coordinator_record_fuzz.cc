// libFuzzer target: the coordinator's record (a successor reads it from the checkpoint
// location, which others may reach) gets arbitrary bytes. It must never crash, and whatever
// parses must serialise and parse back to the same record.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string_view>

#include "supervisor/coordinator_log.h"

using namespace shardguard::supervisor;

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view text(reinterpret_cast<const char*>(data), size);
  if (auto s = parse_coordinator_state(text); s.ok()) {
    const std::string again = coordinator_state_to_json(*s);
    auto back = parse_coordinator_state(again);
    if (!back.ok() || !(*back == *s)) std::abort();
  }
  return 0;
}
