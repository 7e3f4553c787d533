// A SecureChannel peer in another process, killed with SIGKILL: the survivor's on_closed must
// follow at once (the kernel closes the dead process's sockets), so a coordinator can declare
// a node lost without waiting for heartbeats.
#include <signal.h>
#include <sys/stat.h>

#include <catch2/catch.hpp>

#include "io/secure_channel.h"
#include "tests/io/secure_fixture.h"
#include "tests/support/background.h"
#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::testing;

namespace {

std::string ready_line(const std::string& path, const std::string& prefix) {
  std::string found;
  eventually(
      [&] {
        std::ifstream in(path);
        std::string line;
        while (std::getline(in, line)) {
          if (line.rfind(prefix, 0) == 0) {
            found = line;
            return true;
          }
        }
        return false;
      },
      10000ms);
  return found;
}

}  // namespace

TEST_CASE("A peer process killed with SIGKILL is seen closed within 100 ms") {
  TempDir dir;
  const std::string secret_file = dir / "secret";
  spit(secret_file, std::string(40, 'k') + "\n");
  REQUIRE(::chmod(secret_file.c_str(), 0600) == 0);
  const std::string ready = dir / "ready";
  const bool peer_is_client = GENERATE(true, false);
  Host self(peer_is_client ? "coordinator" : "node-1", secret_of('k'));
  ConnectionId id = 0;
  std::unique_ptr<Background> peer;
  if (peer_is_client) {
    const uint16_t port = self.listen();
    peer = std::make_unique<Background>(
        std::vector<std::string>{SG_SECURE_PEER, "connect", std::to_string(port), secret_file,
                                 ready},
        dir / "peer.log");
    REQUIRE(self.wait_connected(1, 10000ms));
    id = self.first_connected();
    CHECK(self.connected().at(id) == "peer-client");
  } else {
    peer = std::make_unique<Background>(
        std::vector<std::string>{SG_SECURE_PEER, "listen", secret_file, ready}, dir / "peer.log");
    const std::string line = ready_line(ready, "port ");
    REQUIRE_FALSE(line.empty());
    id = self.connect(static_cast<uint16_t>(std::stoi(line.substr(5))));
    REQUIRE(self.wait_connected(1, 10000ms));
    CHECK(self.connected().at(id) == "peer-server");
  }
  REQUIRE_FALSE(ready_line(ready, "connected").empty());

  const auto killed = SteadyClock::now();
  REQUIRE(::kill(peer->pid(), SIGKILL) == 0);
  REQUIRE(self.wait_closed(id, 2000ms));
  const auto latency = self.closed_at(id) - killed;
  const double ms = std::chrono::duration<double, std::milli>(latency).count();
  WARN("SIGKILL of the " << (peer_is_client ? "client" : "server") << " -> on_closed: " << ms
                         << " ms");
  CHECK(latency < 100ms);
  CHECK_THAT(self.closed_reason(id),
             Catch::Contains("connection closed by the peer") || Catch::Contains("reset"));
}
