#include "net/handshake.h"

#include <algorithm>
#include <cstdio>

#include "net/wire.h"

namespace shardguard::net {
namespace {

constexpr std::string_view kServerLabel = "sg1 server";
constexpr std::string_view kClientLabel = "sg1 client";
constexpr std::string_view kClientToServerInfo = "sg1 client->server";
constexpr std::string_view kServerToClientInfo = "sg1 server->client";

constexpr size_t kHelloFixed = 1 + 1 + kNonceBytes + 1;              // type, version, nonce, len
constexpr size_t kChallengeFixed = 1 + kNonceBytes + 1 + kMacBytes;  // type, nonce, len, mac
constexpr size_t kResponseSize = 1 + kMacBytes;

std::string_view view(const Nonce& n) { return as_chars(n); }

// Length-prefixed, so ("ab", "c") and ("a", "bc") never give the same transcript.
std::string names_of(std::string_view client, std::string_view server) {
  std::string out;
  wire::put_u8(out, static_cast<uint8_t>(client.size()));
  out.append(client);
  wire::put_u8(out, static_cast<uint8_t>(server.size()));
  out.append(server);
  return out;
}

std::string with_length(std::string body) {
  std::string out;
  out.reserve(2 + body.size());
  wire::put_u16(out, static_cast<uint16_t>(body.size()));
  out.append(body);
  return out;
}

Status check_type(std::string_view body, HandshakeType want, std::string_view what) {
  const auto got = static_cast<uint8_t>(body[0]);
  if (got != static_cast<uint8_t>(want)) {
    return Error(ErrorCode::kCorrupt, std::string(what) + ": message type " + std::to_string(got) +
                                          ", expected " +
                                          std::to_string(static_cast<uint8_t>(want)));
  }
  return ok_status();
}

Status check_size(std::string_view body, size_t fixed, size_t name_len, std::string_view what) {
  if (body.size() != fixed + name_len) {
    return Error(ErrorCode::kCorrupt, std::string(what) + ": " + std::to_string(body.size()) +
                                          " bytes, but a name of " + std::to_string(name_len) +
                                          " bytes makes it " + std::to_string(fixed + name_len));
  }
  return ok_status();
}

Status check_min(std::string_view body, size_t min, std::string_view what) {
  if (body.size() < min) {
    return Error(ErrorCode::kCorrupt, std::string(what) + ": truncated (" +
                                          std::to_string(body.size()) + " bytes, at least " +
                                          std::to_string(min) + " needed)");
  }
  return ok_status();
}

Nonce nonce_at(std::string_view body, size_t at) {
  Nonce n{};
  std::copy_n(reinterpret_cast<const uint8_t*>(body.data()) + at, n.size(), n.begin());
  return n;
}

Mac mac_at(std::string_view body, size_t at) {
  Mac m{};
  std::copy_n(reinterpret_cast<const uint8_t*>(body.data()) + at, m.size(), m.begin());
  return m;
}

Result<Mac> server_proof(const Secret& k, const Nonce& nc, const Nonce& ns,
                         std::string_view names) {
  return hmac_sha256(k.bytes(), {kServerLabel, view(nc), view(ns), names});
}

Result<Mac> client_proof(const Secret& k, const Nonce& nc, const Nonce& ns,
                         std::string_view names) {
  return hmac_sha256(k.bytes(), {kClientLabel, view(ns), view(nc), names});
}

// The session keys, seen from `client_side`.
Result<Session> derive_session(const Secret& k, const Nonce& nc, const Nonce& ns,
                               std::string_view names, bool client_side, std::string peer) {
  std::string salt;
  salt.append(view(nc)).append(view(ns));
  SG_ASSIGN_OR_RETURN(
      Key c2s, hkdf_sha256(k.bytes(), salt, std::string(kClientToServerInfo) + std::string(names)));
  SG_ASSIGN_OR_RETURN(
      Key s2c, hkdf_sha256(k.bytes(), salt, std::string(kServerToClientInfo) + std::string(names)));
  const FrameKey up{Direction::kClientToServer, c2s};
  const FrameKey down{Direction::kServerToClient, s2c};
  Session s;
  s.peer_name = std::move(peer);
  s.send = client_side ? up : down;
  s.recv = client_side ? down : up;
  wipe(c2s.data(), c2s.size());
  wipe(s2c.data(), s2c.size());
  return s;
}

std::string closed_message(std::string_view waiting_for, size_t buffered) {
  std::string text = "connection closed during the handshake, " + std::string(waiting_for);
  if (buffered > 0) text += " (" + std::to_string(buffered) + " bytes of a message received)";
  return text;
}

}  // namespace

Status check_peer_name(std::string_view name, std::string_view what) {
  if (name.empty() || name.size() > kMaxNameBytes) {
    return Error(ErrorCode::kInvalid, std::string(what) + ": name must be 1 to " +
                                          std::to_string(kMaxNameBytes) + " bytes, not " +
                                          std::to_string(name.size()));
  }
  for (size_t i = 0; i < name.size(); ++i) {
    const auto c = static_cast<unsigned char>(name[i]);
    if (c < 0x21 || c > 0x7e) {
      char hex[8];
      std::snprintf(hex, sizeof hex, "0x%02x", c);
      return Error(ErrorCode::kInvalid, std::string(what) + ": name has byte " + hex + " at " +
                                            std::to_string(i) +
                                            " (printable ASCII without spaces only)");
    }
  }
  return ok_status();
}

std::string encode_hello(const Hello& hello) {
  std::string body;
  wire::put_u8(body, static_cast<uint8_t>(HandshakeType::kHello));
  wire::put_u8(body, hello.version);
  body.append(view(hello.nonce));
  wire::put_u8(body, static_cast<uint8_t>(hello.name.size()));
  body.append(hello.name);
  return with_length(std::move(body));
}

std::string encode_challenge(const Challenge& challenge) {
  std::string body;
  wire::put_u8(body, static_cast<uint8_t>(HandshakeType::kChallenge));
  body.append(view(challenge.nonce));
  wire::put_u8(body, static_cast<uint8_t>(challenge.name.size()));
  body.append(challenge.name);
  body.append(as_chars(challenge.mac));
  return with_length(std::move(body));
}

std::string encode_response(const Response& response) {
  std::string body;
  wire::put_u8(body, static_cast<uint8_t>(HandshakeType::kResponse));
  body.append(as_chars(response.mac));
  return with_length(std::move(body));
}

Result<Hello> parse_hello(std::string_view body) {
  constexpr std::string_view what = "hello";
  SG_RETURN_IF_ERROR(check_min(body, kHelloFixed + 1, what));
  SG_RETURN_IF_ERROR(check_type(body, HandshakeType::kHello, what));
  Hello hello;
  hello.version = static_cast<uint8_t>(body[1]);
  hello.nonce = nonce_at(body, 2);
  const size_t name_len = static_cast<uint8_t>(body[kHelloFixed - 1]);
  SG_RETURN_IF_ERROR(check_size(body, kHelloFixed, name_len, what));
  hello.name = std::string(body.substr(kHelloFixed, name_len));
  if (auto st = check_peer_name(hello.name, "hello: client"); !st.ok()) {
    return Error(ErrorCode::kCorrupt, st.error().message());
  }
  return hello;
}

Result<Challenge> parse_challenge(std::string_view body) {
  constexpr std::string_view what = "challenge";
  SG_RETURN_IF_ERROR(check_min(body, kChallengeFixed + 1, what));
  SG_RETURN_IF_ERROR(check_type(body, HandshakeType::kChallenge, what));
  Challenge challenge;
  challenge.nonce = nonce_at(body, 1);
  const size_t name_len = static_cast<uint8_t>(body[1 + kNonceBytes]);
  SG_RETURN_IF_ERROR(check_size(body, kChallengeFixed, name_len, what));
  challenge.name = std::string(body.substr(2 + kNonceBytes, name_len));
  if (auto st = check_peer_name(challenge.name, "challenge: server"); !st.ok()) {
    return Error(ErrorCode::kCorrupt, st.error().message());
  }
  challenge.mac = mac_at(body, 2 + kNonceBytes + name_len);
  return challenge;
}

Result<Response> parse_response(std::string_view body) {
  constexpr std::string_view what = "response";
  SG_RETURN_IF_ERROR(check_min(body, kResponseSize, what));
  SG_RETURN_IF_ERROR(check_type(body, HandshakeType::kResponse, what));
  if (body.size() != kResponseSize) {
    return Error(ErrorCode::kCorrupt, "response: " + std::to_string(body.size()) +
                                          " bytes, must be " + std::to_string(kResponseSize));
  }
  return Response{mac_at(body, 1)};
}

Result<std::optional<std::string>> HandshakeReader::next(std::string_view what) {
  if (buffer_.size() < 2) return std::optional<std::string>();
  const size_t len = wire::get_be(buffer_, 0, 2);
  if (len == 0) return Error(ErrorCode::kCorrupt, std::string(what) + ": empty message");
  // Checked before waiting for the body: garbage (an HTTP request, a port scan) fails here.
  if (len > kMaxHandshakeBody) {
    return Error(ErrorCode::kCorrupt, std::string(what) + ": message of " + std::to_string(len) +
                                          " bytes, more than " + std::to_string(kMaxHandshakeBody) +
                                          " (not a shardguard peer?)");
  }
  if (buffer_.size() < 2 + len) return std::optional<std::string>();
  std::string body = buffer_.substr(2, len);
  buffer_.erase(0, 2 + len);
  return std::optional<std::string>(std::move(body));
}

// ---- client ----

ClientHandshake::ClientHandshake(std::shared_ptr<const Secret> secret, std::string name,
                                 Nonce nonce)
    : secret_(std::move(secret)), name_(std::move(name)), nonce_(nonce) {}

Error ClientHandshake::fail(Error error) {
  state_ = State::kFailed;
  error_ = error;
  return error;
}

Result<std::string> ClientHandshake::start() {
  if (state_ != State::kNew) return Error(ErrorCode::kInternal, "handshake: started twice");
  if (auto st = check_peer_name(name_, "handshake: this client"); !st.ok()) return fail(st.error());
  state_ = State::kAwaitChallenge;
  return encode_hello(Hello{kProtocolVersion, nonce_, name_});
}

Result<HandshakeStep> ClientHandshake::feed(std::string_view bytes) {
  if (error_) return *error_;
  reader_.feed(bytes);
  if (state_ != State::kAwaitChallenge) return HandshakeStep{};  // done: bytes are frames
  auto body = reader_.next("challenge");
  if (!body.ok()) return fail(body.error());
  if (!*body) return HandshakeStep{};
  auto challenge = parse_challenge(**body);
  if (!challenge.ok()) return fail(challenge.error());
  const std::string names = names_of(name_, challenge->name);
  auto want = server_proof(*secret_, nonce_, challenge->nonce, names);
  if (!want.ok()) return fail(want.error());
  if (!equal_constant_time(want->data(), challenge->mac.data(), kMacBytes)) {
    return fail(Error(ErrorCode::kCorrupt,
                      "challenge from server '" + challenge->name +
                          "' does not verify: the two sides have different secrets, or the "
                          "message was altered"));
  }
  auto proof = client_proof(*secret_, nonce_, challenge->nonce, names);
  if (!proof.ok()) return fail(proof.error());
  auto session = derive_session(*secret_, nonce_, challenge->nonce, names, true, challenge->name);
  if (!session.ok()) return fail(session.error());
  session_ = std::move(session).value();
  state_ = State::kDone;
  return HandshakeStep{encode_response(Response{*proof}), true};
}

Error ClientHandshake::closed_early() const {
  if (error_) return *error_;
  return Error(ErrorCode::kIo,
               closed_message("waiting for the server's challenge", reader_.buffered()));
}

// ---- server ----

ServerHandshake::ServerHandshake(std::shared_ptr<const Secret> secret, std::string name,
                                 Nonce nonce)
    : secret_(std::move(secret)), name_(std::move(name)), nonce_(nonce) {}

Error ServerHandshake::fail(Error error) {
  state_ = State::kFailed;
  error_ = error;
  return error;
}

Result<HandshakeStep> ServerHandshake::feed(std::string_view bytes) {
  if (error_) return *error_;
  reader_.feed(bytes);
  HandshakeStep step;
  if (state_ == State::kAwaitHello) {
    auto body = reader_.next("hello");
    if (!body.ok()) return fail(body.error());
    if (!*body) return step;
    auto hello = parse_hello(**body);
    if (!hello.ok()) return fail(hello.error());
    if (hello->version != kProtocolVersion) {
      return fail(Error(ErrorCode::kCorrupt, "hello from '" + hello->name + "': protocol version " +
                                                 std::to_string(hello->version) +
                                                 ", this build speaks " +
                                                 std::to_string(kProtocolVersion)));
    }
    if (auto st = check_peer_name(name_, "handshake: this server"); !st.ok())
      return fail(st.error());
    claimed_name_ = hello->name;
    client_nonce_ = hello->nonce;
    auto proof = server_proof(*secret_, client_nonce_, nonce_, names_of(claimed_name_, name_));
    if (!proof.ok()) return fail(proof.error());
    step.to_send = encode_challenge(Challenge{nonce_, name_, *proof});
    state_ = State::kAwaitResponse;
  }
  if (state_ == State::kAwaitResponse) {
    auto body = reader_.next("response");
    if (!body.ok()) return fail(body.error());
    if (!*body) return step;
    auto response = parse_response(**body);
    if (!response.ok()) return fail(response.error());
    const std::string names = names_of(claimed_name_, name_);
    auto want = client_proof(*secret_, client_nonce_, nonce_, names);
    if (!want.ok()) return fail(want.error());
    if (!equal_constant_time(want->data(), response->mac.data(), kMacBytes)) {
      return fail(Error(ErrorCode::kCorrupt,
                        "response from client '" + claimed_name_ +
                            "' does not verify: the two sides have different secrets, the "
                            "message was altered, or it was replayed from another connection"));
    }
    auto session = derive_session(*secret_, client_nonce_, nonce_, names, false, claimed_name_);
    if (!session.ok()) return fail(session.error());
    session_ = std::move(session).value();
    state_ = State::kDone;
    step.done = true;
  }
  return step;
}

Error ServerHandshake::closed_early() const {
  if (error_) return *error_;
  const char* waiting = state_ == State::kAwaitHello ? "waiting for the client's hello"
                                                     : "waiting for the client's response";
  return Error(ErrorCode::kIo, closed_message(waiting, reader_.buffered()));
}

}  // namespace shardguard::net
