// sg_secure_peer: a SecureChannel endpoint in its own process, for tests that kill it.
//   sg_secure_peer connect PORT SECRET_FILE READY_FILE   connects to 127.0.0.1:PORT
//   sg_secure_peer listen SECRET_FILE READY_FILE         listens on 127.0.0.1, any port
// READY_FILE gets "port N" once listening and "connected" once a peer is authenticated
// (written to a temp name and renamed, so a reader never sees half a line). Runs until killed.
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "io/event_loop.h"
#include "io/secure_channel.h"
#include "net/secret.h"

using namespace shardguard;

namespace {

void announce(const std::string& path, const std::string& line) {
  static std::string text;
  text += line + "\n";
  {
    std::ofstream out(path + ".tmp", std::ios::trunc);
    out << text;
  }
  std::filesystem::rename(path + ".tmp", path);
}

}  // namespace

int main(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "";
  const bool connecting = mode == "connect" && argc == 5;
  if (!connecting && !(mode == "listen" && argc == 4)) {
    std::fprintf(stderr,
                 "usage: %s connect PORT SECRET_FILE READY_FILE | listen SECRET_FILE READY_FILE\n",
                 argv[0]);
    return 2;
  }
  const std::string secret_file = argv[connecting ? 3 : 2];
  const std::string ready = argv[connecting ? 4 : 3];
  auto secret = net::load_secret_file(secret_file);
  if (!secret.ok()) {
    std::fprintf(stderr, "%s\n", secret.error().message().c_str());
    return 1;
  }
  io::EventLoop loop;
  io::SecureChannelOptions options;
  options.secret = std::make_shared<const net::Secret>(std::move(secret).value());
  options.name = connecting ? "peer-client" : "peer-server";
  options.on_connected = [&](io::ConnectionId, const std::string&) {
    announce(ready, "connected");
  };
  options.on_closed = [&](io::ConnectionId, const std::string& reason) {
    std::fprintf(stderr, "closed: %s\n", reason.c_str());
  };
  io::SecureChannel channel(loop, std::move(options));
  if (connecting) {
    if (!channel.connect("127.0.0.1", static_cast<uint16_t>(std::stoi(argv[2]))).ok()) return 1;
  } else {
    auto port = channel.listen("127.0.0.1", 0);
    if (!port.ok()) {
      std::fprintf(stderr, "%s\n", port.error().message().c_str());
      return 1;
    }
    announce(ready, "port " + std::to_string(*port));
  }
  for (;;) loop.run_until([] { return false; }, std::chrono::hours(1));
}
