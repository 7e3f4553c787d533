// Authenticated framing for a connection after the handshake (net/handshake.h). A frame is
//
//   [u32 length][u64 sequence][payload: length bytes][32-byte HMAC-SHA256]
//
// big-endian, with the MAC over direction | sequence | length | payload under the session key
// of that direction. The receiver requires sequence == 0, 1, 2, ... per direction, so a frame
// cannot be replayed, dropped or reordered within a connection, and the per-connection keys
// make a frame of one connection fail the MAC on any other. Payloads are authenticated, not
// encrypted: they are readable on the wire.
//
// Thread-safety: an encoder or decoder belongs to one connection and one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/result.h"
#include "net/crypto.h"

namespace shardguard::net {

inline constexpr size_t kFrameHeaderBytes = 4 + 8;
inline constexpr size_t kFrameOverheadBytes = kFrameHeaderBytes + kMacBytes;
inline constexpr size_t kDefaultMaxPayload = size_t{1} << 20;  // 1 MiB

// Which way a frame travels; part of the MAC input, and each way has its own key.
enum class Direction : uint8_t { kClientToServer = 1, kServerToClient = 2 };

struct FrameKey {
  Direction direction = Direction::kClientToServer;
  Key key{};
};

// Why a decoder refused the stream; the transport logs (rate-limited) per cause.
enum class FrameFault {
  kNone,
  kOversize,   // the length field is above the limit
  kBadMac,     // altered bytes, the wrong key, or a frame of another connection
  kReplayed,   // a valid frame whose sequence number was already seen
  kReordered,  // a valid frame that skips ahead of the expected sequence number
};
std::string_view frame_fault_name(FrameFault fault);

class FrameEncoder {
 public:
  // kInternal if libcrypto cannot set up the MAC.
  static Result<FrameEncoder> create(const FrameKey& key, size_t max_payload = kDefaultMaxPayload);

  // Appends the frame for `payload` (the next sequence number) to `out`. kInvalid, naming the
  // sizes, when `payload` is longer than max_payload; nothing is appended then.
  Status encode_to(std::string_view payload, std::string& out);
  // The frame alone.
  Result<std::string> encode(std::string_view payload);

  uint64_t next_sequence() const { return sequence_; }
  size_t max_payload() const { return max_payload_; }

 private:
  FrameEncoder(HmacSha256 mac, Direction direction, size_t max_payload)
      : mac_(std::move(mac)), direction_(direction), max_payload_(max_payload) {}
  HmacSha256 mac_;
  Direction direction_;
  size_t max_payload_;
  uint64_t sequence_ = 0;
};

// Incremental decoder: feed() bytes as they arrive in any chunking, then call next() until it
// yields nothing. Buffers at most one incomplete frame plus what was fed since.
class FrameDecoder {
 public:
  static Result<FrameDecoder> create(const FrameKey& key, size_t max_payload = kDefaultMaxPayload);

  // Appends received bytes (ignored once the decoder has failed).
  void feed(std::string_view bytes);
  // The next complete, verified payload; nullopt when more bytes are needed. An error (kCorrupt
  // naming the frame and the reason; fault() says which) is final: past one bad frame nothing
  // in the stream can be trusted, and every later call returns the same error.
  Result<std::optional<std::string>> next();

  FrameFault fault() const { return fault_; }
  uint64_t expected_sequence() const { return expected_; }
  // Bytes fed but not yet returned as frames.
  size_t buffered() const { return buffer_.size() - pos_; }

 private:
  FrameDecoder(HmacSha256 mac, Direction direction, size_t max_payload)
      : mac_(std::move(mac)), direction_(direction), max_payload_(max_payload) {}
  Error fail(FrameFault fault, std::string message);

  HmacSha256 mac_;
  Direction direction_;
  size_t max_payload_;
  uint64_t expected_ = 0;
  std::string buffer_;
  size_t pos_ = 0;  // start of the first unconsumed byte in buffer_
  FrameFault fault_ = FrameFault::kNone;
  std::optional<Error> error_;
};

}  // namespace shardguard::net
