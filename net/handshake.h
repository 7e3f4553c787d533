// Mutual authentication of a new connection by a shared secret K (net/secret.h), before any
// frame (net/frame.h) is accepted. Challenge-response over fresh 32-byte nonces:
//
//   client -> server  hello     {version, nonce_c, client name}
//   server -> client  challenge {nonce_s, server name,
//                                HMAC-SHA256(K, "sg1 server" | nonce_c | nonce_s | names)}
//   client -> server  response  {HMAC-SHA256(K, "sg1 client" | nonce_s | nonce_c | names)}
//
// names = u8 len | client name | u8 len | server name. Each side proves it holds K over the
// other side's fresh nonce, so a recorded handshake cannot be replayed; the labels differ, so
// one side's MAC is never accepted as the other's. Then each direction gets its own session
// key: HKDF-SHA256(K, salt = nonce_c | nonce_s, info = "sg1 client->server" | names, or
// "sg1 server->client" | names), so frames are bound to this connection.
//
// On the wire each message is [u16 length][body], body[0] the message type. The machines are
// pure: bytes in, bytes out, a verdict; the transport bounds them in time and closes the
// connection on any error. Nothing here is encrypted: the secret never crosses the wire, but
// names and payloads are readable.
//
// Thread-safety: a handshake object belongs to one connection and one thread at a time.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/result.h"
#include "net/crypto.h"
#include "net/frame.h"
#include "net/secret.h"

namespace shardguard::net {

inline constexpr uint8_t kProtocolVersion = 1;
inline constexpr size_t kMaxNameBytes = 255;
// Bodies are at most 1 + 32 + 1 + 255 + 32 bytes; anything longer is not our protocol.
inline constexpr size_t kMaxHandshakeBody = 512;

enum class HandshakeType : uint8_t { kHello = 1, kChallenge = 2, kResponse = 3 };

struct Hello {
  uint8_t version = kProtocolVersion;
  Nonce nonce{};
  std::string name;
};

struct Challenge {
  Nonce nonce{};
  std::string name;
  Mac mac{};
};

struct Response {
  Mac mac{};
};

// A peer name: 1 to 255 printable ASCII characters, no spaces (it goes into logs).
// kInvalid naming `what` and the first offending byte otherwise.
Status check_peer_name(std::string_view name, std::string_view what);

// Encoders return the message with its u16 length prefix, ready to send.
std::string encode_hello(const Hello& hello);
std::string encode_challenge(const Challenge& challenge);
std::string encode_response(const Response& response);

// Parsers take one body (without the length prefix) and check every length, the type and the
// names; kCorrupt naming the message and what is wrong. Versions are checked by the server.
Result<Hello> parse_hello(std::string_view body);
Result<Challenge> parse_challenge(std::string_view body);
Result<Response> parse_response(std::string_view body);

// What a handshake yields: who the peer is and the keys for frames each way.
struct Session {
  std::string peer_name;
  FrameKey send;
  FrameKey recv;
};

// What one feed() produced.
struct HandshakeStep {
  std::string to_send;  // bytes for the peer, possibly empty
  bool done = false;    // authenticated: session() and take_leftover() are ready
};

// Splits the byte stream into handshake messages. Internal to the two machines below.
class HandshakeReader {
 public:
  // The next complete body; nullopt when more bytes are needed; kCorrupt for an empty or
  // oversized message.
  Result<std::optional<std::string>> next(std::string_view what);
  void feed(std::string_view bytes) { buffer_.append(bytes); }
  // Bytes past the last message taken: after the handshake, the first frames.
  std::string take_rest() { return std::exchange(buffer_, {}); }
  size_t buffered() const { return buffer_.size(); }

 private:
  std::string buffer_;
};

class ClientHandshake {
 public:
  // `nonce` must be fresh (random_nonce()); tests pass fixed ones.
  ClientHandshake(std::shared_ptr<const Secret> secret, std::string name, Nonce nonce);

  // The hello to send first. kInvalid for a bad name.
  Result<std::string> start();
  // Feeds bytes from the server. An error means the server is not authentic (or not a
  // shardguard server): close the connection. After done, bytes go to take_leftover().
  Result<HandshakeStep> feed(std::string_view bytes);
  // The error to report when the server closes the connection before the handshake is done.
  Error closed_early() const;

  bool done() const { return state_ == State::kDone; }
  const Session& session() const { return session_; }
  std::string take_leftover() { return reader_.take_rest(); }

 private:
  enum class State { kNew, kAwaitChallenge, kDone, kFailed };
  Error fail(Error error);

  std::shared_ptr<const Secret> secret_;
  std::string name_;
  Nonce nonce_;
  State state_ = State::kNew;
  HandshakeReader reader_;
  Session session_;
  std::optional<Error> error_;
};

class ServerHandshake {
 public:
  ServerHandshake(std::shared_ptr<const Secret> secret, std::string name, Nonce nonce);

  // Feeds bytes from the client; the challenge comes back in to_send. An error means the
  // client is not authentic (or not a shardguard client): close the connection.
  Result<HandshakeStep> feed(std::string_view bytes);
  Error closed_early() const;

  bool done() const { return state_ == State::kDone; }
  const Session& session() const { return session_; }
  std::string take_leftover() { return reader_.take_rest(); }
  // The name the client claimed in its hello (unverified until done()); empty before it.
  const std::string& claimed_name() const { return claimed_name_; }

 private:
  enum class State { kAwaitHello, kAwaitResponse, kDone, kFailed };
  Error fail(Error error);

  std::shared_ptr<const Secret> secret_;
  std::string name_;
  Nonce nonce_;
  Nonce client_nonce_{};
  std::string claimed_name_;
  State state_ = State::kAwaitHello;
  HandshakeReader reader_;
  Session session_;
  std::optional<Error> error_;
};

}  // namespace shardguard::net
