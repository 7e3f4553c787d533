// libFuzzer target: the frame decoder, fed (1) arbitrary bytes in arbitrary chunks and
// (2) genuine frames built from the input, then altered by one input-chosen mutation. It
// must never crash, never return a payload that was not sent in that position, and return
// every payload when nothing was altered.
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

#include "fuzz/net_fuzz_keys.h"
#include "net/frame.h"

using namespace shardguard;

namespace {

constexpr size_t kMaxPayload = 4096;  // small, so oversize lengths are easy to reach

// Feeds `stream` in chunks of 1..256 bytes chosen by `seed`, collecting payloads until the
// decoder fails or runs dry.
std::vector<std::string> decode(std::string_view stream, uint8_t seed, bool* failed) {
  auto decoder = net::FrameDecoder::create(fuzz::fuzz_sessions().server.recv, kMaxPayload);
  if (!decoder.ok()) std::abort();
  std::vector<std::string> out;
  size_t chunk = seed + 1u;
  *failed = false;
  for (size_t at = 0; at < stream.size() && !*failed;) {
    decoder->feed(stream.substr(at, chunk));
    at += chunk;
    for (;;) {
      auto next = decoder->next();
      if (!next.ok()) {
        if (decoder->fault() == net::FrameFault::kNone) std::abort();
        *failed = true;
        break;
      }
      if (!*next) break;
      out.push_back(std::move(**next));
    }
    chunk = (chunk * 7 + 3) % 256 + 1;
  }
  return out;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 4) return 0;
  const uint8_t mode = data[0], seed = data[1], op = data[2], where = data[3];
  const std::string_view rest(reinterpret_cast<const char*>(data) + 4, size - 4);
  bool failed = false;
  if (mode % 2 == 0) {
    (void)decode(rest, seed, &failed);  // raw bytes: no crash, no leak
    return 0;
  }
  // Genuine frames: payloads separated by '|' in the input.
  std::vector<std::string> payloads;
  size_t start = 0;
  for (size_t i = 0; i <= rest.size(); ++i) {
    if (i == rest.size() || rest[i] == '|') {
      payloads.emplace_back(rest.substr(start, std::min(i - start, kMaxPayload)));
      start = i + 1;
    }
  }
  auto encoder = net::FrameEncoder::create(fuzz::fuzz_sessions().client.send, kMaxPayload);
  if (!encoder.ok()) std::abort();
  std::vector<std::string> frames;
  for (const auto& p : payloads) frames.push_back(*encoder->encode(p));
  std::string stream;
  for (const auto& f : frames) stream += f;
  bool altered = true;
  switch (op % 4) {
    case 0:
      altered = false;
      break;
    case 1: {  // flip one bit
      const size_t at = (static_cast<size_t>(where) * 131 + seed) % stream.size();
      stream[at] = static_cast<char>(stream[at] ^ (1 << (op >> 5)));
      break;
    }
    case 2:  // replay a frame at the end
      stream += frames[where % frames.size()];
      break;
    case 3:  // drop a frame
      if (frames.size() < 2) return 0;
      stream.erase(0, frames[0].size());
      break;
  }
  const auto got = decode(stream, seed, &failed);
  if (!altered && (failed || got != payloads)) std::abort();
  // Whatever came out is a prefix of what was sent, in order.
  if (op % 4 == 3) {
    if (!got.empty()) std::abort();  // frame 1 arrives first: out of order
  } else {
    for (size_t i = 0; i < got.size(); ++i) {
      if (i >= payloads.size() || got[i] != payloads[i]) std::abort();
    }
  }
  if (op % 4 == 2 && !failed) std::abort();  // a replay is always caught
  return 0;
}
