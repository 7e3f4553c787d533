#include "net/frame.h"

#include <cstring>

#include "net/wire.h"

namespace shardguard::net {
namespace {

// MAC input: direction | sequence | length | payload. The direction byte makes a frame sent
// one way useless the other way even if both keys were equal.
Result<Mac> frame_mac(HmacSha256& mac, Direction direction, uint64_t sequence,
                      std::string_view payload) {
  const char dir = static_cast<char>(direction);
  char header[12];
  for (int i = 0; i < 8; ++i) header[i] = static_cast<char>(sequence >> (56 - 8 * i));
  const auto length = static_cast<uint32_t>(payload.size());
  for (int i = 0; i < 4; ++i) header[8 + i] = static_cast<char>(length >> (24 - 8 * i));
  return mac.compute({std::string_view(&dir, 1), std::string_view(header, sizeof header), payload});
}

}  // namespace

std::string_view frame_fault_name(FrameFault fault) {
  switch (fault) {
    case FrameFault::kNone:
      return "none";
    case FrameFault::kOversize:
      return "oversize";
    case FrameFault::kBadMac:
      return "bad MAC";
    case FrameFault::kReplayed:
      return "replayed";
    case FrameFault::kReordered:
      return "reordered";
  }
  return "unknown";
}

Result<FrameEncoder> FrameEncoder::create(const FrameKey& key, size_t max_payload) {
  SG_ASSIGN_OR_RETURN(HmacSha256 mac, HmacSha256::create(key.key));
  if (max_payload > UINT32_MAX) max_payload = UINT32_MAX;
  return FrameEncoder(std::move(mac), key.direction, max_payload);
}

Status FrameEncoder::encode_to(std::string_view payload, std::string& out) {
  if (payload.size() > max_payload_) {
    return Error(ErrorCode::kInvalid, "frame payload of " + std::to_string(payload.size()) +
                                          " bytes, more than the " + std::to_string(max_payload_) +
                                          " allowed");
  }
  SG_ASSIGN_OR_RETURN(Mac mac, frame_mac(mac_, direction_, sequence_, payload));
  out.reserve(out.size() + kFrameOverheadBytes + payload.size());
  wire::put_u32(out, static_cast<uint32_t>(payload.size()));
  wire::put_u64(out, sequence_);
  out.append(payload);
  out.append(as_chars(mac));
  ++sequence_;
  return ok_status();
}

Result<std::string> FrameEncoder::encode(std::string_view payload) {
  std::string out;
  SG_RETURN_IF_ERROR(encode_to(payload, out));
  return out;
}

Result<FrameDecoder> FrameDecoder::create(const FrameKey& key, size_t max_payload) {
  SG_ASSIGN_OR_RETURN(HmacSha256 mac, HmacSha256::create(key.key));
  if (max_payload > UINT32_MAX) max_payload = UINT32_MAX;
  return FrameDecoder(std::move(mac), key.direction, max_payload);
}

void FrameDecoder::feed(std::string_view bytes) {
  if (error_) return;
  // Drop consumed bytes before growing, so the buffer stays about one frame long.
  if (pos_ > 0 && (pos_ == buffer_.size() || pos_ >= buffer_.size() / 2)) {
    buffer_.erase(0, pos_);
    pos_ = 0;
  }
  buffer_.append(bytes);
}

Error FrameDecoder::fail(FrameFault fault, std::string message) {
  fault_ = fault;
  error_ = Error(ErrorCode::kCorrupt, std::move(message));
  buffer_.clear();
  pos_ = 0;
  return *error_;
}

Result<std::optional<std::string>> FrameDecoder::next() {
  if (error_) return *error_;
  const std::string_view data = std::string_view(buffer_).substr(pos_);
  if (data.size() < kFrameHeaderBytes) return std::optional<std::string>();
  const uint64_t length = wire::get_be(data, 0, 4);
  const uint64_t sequence = wire::get_be(data, 4, 8);
  const auto which = [&] { return "frame " + std::to_string(expected_); };
  // Checked before waiting for the payload, so a bogus length cannot make us buffer 4 GiB.
  if (length > max_payload_) {
    return fail(FrameFault::kOversize, which() + ": payload of " + std::to_string(length) +
                                           " bytes, more than the " + std::to_string(max_payload_) +
                                           " allowed");
  }
  const size_t total = kFrameOverheadBytes + static_cast<size_t>(length);
  if (data.size() < total) return std::optional<std::string>();
  const std::string_view payload = data.substr(kFrameHeaderBytes, length);
  const std::string_view got_mac = data.substr(kFrameHeaderBytes + length, kMacBytes);
  SG_ASSIGN_OR_RETURN(Mac want, frame_mac(mac_, direction_, sequence, payload));
  // The MAC first: only an authentic frame's sequence number means anything.
  if (!equal_constant_time(want.data(), reinterpret_cast<const uint8_t*>(got_mac.data()),
                           kMacBytes)) {
    return fail(FrameFault::kBadMac,
                which() +
                    ": MAC does not verify (altered in transit, or from another "
                    "connection or key)");
  }
  if (sequence < expected_) {
    return fail(FrameFault::kReplayed, which() + ": replayed frame (sequence " +
                                           std::to_string(sequence) + " was already received)");
  }
  if (sequence > expected_) {
    return fail(FrameFault::kReordered, which() + ": out of order (sequence " +
                                            std::to_string(sequence) + ", expected " +
                                            std::to_string(expected_) + ")");
  }
  std::string out(payload);
  pos_ += total;
  ++expected_;
  return std::optional<std::string>(std::move(out));
}

}  // namespace shardguard::net
