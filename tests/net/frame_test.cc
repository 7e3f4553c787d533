// Frames between the two ends of an in-memory handshake: round trips in any chunking, and
// rejection of flipped bits, replays, reorders, drops, oversize frames and frames of another
// connection.
#include "net/frame.h"

#include <catch2/catch.hpp>

#include "tests/net/session_fixture.h"

using shardguard::ErrorCode;
using shardguard::testing::handshake_pair;
using shardguard::testing::make_secret;
using namespace shardguard::net;

namespace {

struct Link {
  explicit Link(size_t max_payload = kDefaultMaxPayload) {
    auto pair = handshake_pair(make_secret('k'));
    auto enc = FrameEncoder::create(pair.client.send, max_payload);
    auto dec = FrameDecoder::create(pair.server.recv, max_payload);
    REQUIRE(enc.ok());
    REQUIRE(dec.ok());
    encoder.emplace(std::move(enc).value());
    decoder.emplace(std::move(dec).value());
    sessions = pair;
  }
  std::string frame(std::string_view payload) {
    auto f = encoder->encode(payload);
    REQUIRE(f.ok());
    return *f;
  }
  shardguard::testing::SessionPair sessions;
  std::optional<FrameEncoder> encoder;
  std::optional<FrameDecoder> decoder;
};

// Decodes everything available: the payloads, and the error if one came.
struct Drained {
  std::vector<std::string> payloads;
  std::optional<shardguard::Error> error;
};

Drained drain(FrameDecoder& d) {
  Drained out;
  for (;;) {
    auto r = d.next();
    if (!r.ok()) {
      out.error = r.error();
      return out;
    }
    if (!*r) return out;
    out.payloads.push_back(**r);
  }
}

}  // namespace

TEST_CASE("Frames round-trip in order, whatever the chunking") {
  Link link;
  const std::vector<std::string> payloads = {"", "a", std::string(1000, 'b'),
                                             std::string(70000, 'c'), "{\"type\":\"hello\"}"};
  std::string stream;
  for (const auto& p : payloads) stream += link.frame(p);
  CHECK(link.encoder->next_sequence() == payloads.size());
  const size_t chunk = GENERATE(size_t{1}, size_t{13}, size_t{4096}, size_t{1} << 20);
  std::vector<std::string> got;
  for (size_t i = 0; i < stream.size(); i += chunk) {
    link.decoder->feed(std::string_view(stream).substr(i, chunk));
    auto d = drain(*link.decoder);
    REQUIRE_FALSE(d.error);
    got.insert(got.end(), d.payloads.begin(), d.payloads.end());
  }
  CHECK(got == payloads);
  CHECK(link.decoder->expected_sequence() == payloads.size());
  CHECK(link.decoder->buffered() == 0);
}

TEST_CASE("The wire layout is [u32 length][u64 sequence][payload][32-byte MAC], big-endian") {
  Link link;
  (void)link.frame("x");
  const std::string f = link.frame("hello");
  REQUIRE(f.size() == kFrameOverheadBytes + 5);
  CHECK(f.substr(0, 4) == std::string("\0\0\0\5", 4));
  CHECK(f.substr(4, 8) == std::string("\0\0\0\0\0\0\0\1", 8));
  CHECK(f.substr(12, 5) == "hello");
}

TEST_CASE("A flipped bit anywhere in a frame is rejected; nothing of it is delivered") {
  Link base;
  const std::string original = base.frame("payload");
  for (size_t byte = 0; byte < original.size(); ++byte) {
    for (int bit = 0; bit < 8; ++bit) {
      Link link;
      std::string bad = link.frame("payload");
      bad[byte] = static_cast<char>(bad[byte] ^ (1 << bit));
      // Valid frames follow, longer than any length the flip can produce below the 1 MiB
      // limit, so a longer length field is decided too rather than left waiting.
      link.decoder->feed(bad + link.frame("next") + link.frame(std::string(600'000, 'z')));
      auto d = drain(*link.decoder);
      INFO("byte " << byte << " bit " << bit);
      CHECK(d.payloads.empty());
      REQUIRE(d.error);
      CHECK(d.error->code() == ErrorCode::kCorrupt);
      CHECK(link.decoder->fault() != FrameFault::kNone);
    }
  }
}

TEST_CASE("Replayed, reordered and dropped frames are rejected with the reason") {
  Link link;
  const std::string f0 = link.frame("zero");
  const std::string f1 = link.frame("one");
  const std::string f2 = link.frame("two");
  SECTION("replay of an earlier frame") {
    link.decoder->feed(f0 + f1 + f0);
    auto d = drain(*link.decoder);
    CHECK(d.payloads == std::vector<std::string>{"zero", "one"});
    REQUIRE(d.error);
    CHECK(link.decoder->fault() == FrameFault::kReplayed);
    CHECK_THAT(d.error->message(),
               Catch::Contains("frame 2: replayed") && Catch::Contains("sequence 0"));
  }
  SECTION("the same frame twice in a row") {
    link.decoder->feed(f0 + f0);
    auto d = drain(*link.decoder);
    CHECK(d.payloads == std::vector<std::string>{"zero"});
    CHECK(link.decoder->fault() == FrameFault::kReplayed);
  }
  SECTION("reordered") {
    link.decoder->feed(f1 + f0);
    auto d = drain(*link.decoder);
    CHECK(d.payloads.empty());
    CHECK(link.decoder->fault() == FrameFault::kReordered);
    CHECK_THAT(d.error->message(), Catch::Contains("sequence 1, expected 0"));
  }
  SECTION("a dropped frame") {
    link.decoder->feed(f0 + f2);
    auto d = drain(*link.decoder);
    CHECK(d.payloads == std::vector<std::string>{"zero"});
    CHECK(link.decoder->fault() == FrameFault::kReordered);
  }
  SECTION("after an error the decoder stays failed, even for valid bytes") {
    link.decoder->feed(f1);
    REQUIRE_FALSE(link.decoder->next().ok());
    link.decoder->feed(f0);
    auto again = link.decoder->next();
    REQUIRE_FALSE(again.ok());
    CHECK_THAT(again.error().message(), Catch::Contains("expected 0"));
  }
}

TEST_CASE("Oversize frames are refused by the encoder and, from the header alone, the decoder") {
  Link small(100);
  CHECK(small.encoder->encode(std::string(100, 'x')).ok());
  auto big = small.encoder->encode(std::string(101, 'x'));
  REQUIRE_FALSE(big.ok());
  CHECK_THAT(big.error().message(), Catch::Contains("101 bytes, more than the 100"));
  CHECK(small.encoder->next_sequence() == 1);  // a refused payload uses no sequence number

  // A peer with a larger limit: the decoder refuses before the payload arrives.
  auto pair = small.sessions;
  auto wide = FrameEncoder::create(pair.client.send, 1 << 20);
  REQUIRE(wide.ok());
  auto dec = FrameDecoder::create(pair.server.recv, 100);
  REQUIRE(dec.ok());
  const std::string f = *wide->encode(std::string(5000, 'y'));
  dec->feed(f.substr(0, kFrameHeaderBytes));
  auto r = dec->next();
  REQUIRE_FALSE(r.ok());
  CHECK(dec->fault() == FrameFault::kOversize);
  CHECK_THAT(r.error().message(), Catch::Contains("5000 bytes, more than the 100"));

  // A length field of 4 GiB - 1 is refused the same way.
  auto dec2 = FrameDecoder::create(pair.server.recv);
  REQUIRE(dec2.ok());
  dec2->feed(std::string("\xff\xff\xff\xff\0\0\0\0\0\0\0\0", 12));
  REQUIRE_FALSE(dec2->next().ok());
  CHECK(dec2->fault() == FrameFault::kOversize);
}

TEST_CASE("A frame of connection A replayed into connection B is rejected") {
  Link a;
  Link b;
  const std::string from_a = a.frame("from A");
  b.decoder->feed(from_a);
  auto d = drain(*b.decoder);
  CHECK(d.payloads.empty());
  CHECK(b.decoder->fault() == FrameFault::kBadMac);
  CHECK_THAT(d.error->message(), Catch::Contains("MAC does not verify"));

  // Nor is a frame reflected back to its sender (the other direction has another key).
  auto back = FrameDecoder::create(a.sessions.client.recv);
  REQUIRE(back.ok());
  back->feed(from_a);
  CHECK_FALSE(back->next().ok());
  CHECK(back->fault() == FrameFault::kBadMac);
}
