// libFuzzer target: the control protocol as a rank - or any process of the job's uid - can
// send it. The bytes go through a real Unix socket into the real line framing
// (io::UnixSocketClient::read_line, what the job side runs), and every line into both
// decoders (hooks/protocol.h: decode_job_message, decode_agent_message). Nothing may crash,
// leak or hit undefined behaviour (ASan + UBSan); whatever decodes must encode to one line
// that decodes back to the same message. Inputs are split into writes at 0xff bytes, so
// lines that arrive in pieces are exercised too.
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <string>
#include <string_view>

#include "hooks/protocol.h"
#include "io/unix_socket_server.h"

using namespace shardguard;

namespace {

// A listening socket for the whole run: each input is one connection to it.
struct Listener {
  std::string dir, path;
  int fd = -1;
  Listener() {
    const char* tmp = std::getenv("TMPDIR");
    dir = std::string(tmp && *tmp ? tmp : "/tmp") + "/sg-control-fuzz-XXXXXX";
    if (::mkdtemp(dir.data()) == nullptr) std::abort();
    path = dir + "/control.sock";
    fd = ::socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_un addr{};
    addr.sun_family = AF_UNIX;
    std::memcpy(addr.sun_path, path.c_str(), path.size() + 1);
    if (fd < 0 || ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
        ::listen(fd, 16) != 0)
      std::abort();
  }
  ~Listener() {  // at exit: leave nothing behind
    ::close(fd);
    ::unlink(path.c_str());
    ::rmdir(dir.c_str());
  }
};

template <typename Decode>
void round_trip(std::string_view line, Decode decode) {
  auto m = decode(line);
  if (!m.ok()) return;
  const std::string once = hooks::encode(*m);
  if (once.empty() || once.back() != '\n' || once.find('\n') != once.size() - 1) __builtin_trap();
  auto again = decode(once);
  if (!again.ok() || hooks::encode(*again) != once) __builtin_trap();
  if (hooks::message_type(*again) != hooks::message_type(*m)) __builtin_trap();
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  static Listener listener;
  const std::string_view bytes(reinterpret_cast<const char*>(data), size);
  // The decoders on each piece as the bytes split at '\n', as the server's framing does.
  for (size_t at = 0; at <= bytes.size();) {
    const size_t nl = bytes.find('\n', at);
    const std::string_view line = bytes.substr(at, nl == std::string_view::npos ? nl : nl - at);
    round_trip(line, hooks::decode_job_message);
    round_trip(line, hooks::decode_agent_message);
    if (nl == std::string_view::npos) break;
    at = nl + 1;
  }
  // And through the client's framing, over a real connection.
  auto client = io::UnixSocketClient::connect(listener.path);
  if (!client.ok()) std::abort();
  const int peer = ::accept4(listener.fd, nullptr, nullptr, SOCK_CLOEXEC);
  if (peer < 0) std::abort();
  int sndbuf = 1 << 20;
  (void)::setsockopt(peer, SOL_SOCKET, SO_SNDBUF, &sndbuf, sizeof sndbuf);
  for (size_t at = 0; at < bytes.size();) {
    size_t end = bytes.find('\xff', at);
    end = end == std::string_view::npos ? bytes.size() : end + 1;
    if (::send(peer, bytes.data() + at, end - at, MSG_NOSIGNAL) < 0) break;
    at = end;
  }
  ::shutdown(peer, SHUT_WR);
  for (int lines = 0; lines < 10000; ++lines) {
    auto line = client->read_line(std::chrono::milliseconds(1000));
    if (!line.ok()) break;  // the end of the input (or a line past the client's limit)
    if (line->find('\n') != std::string::npos) __builtin_trap();
    (void)hooks::decode_job_message(*line);
    (void)hooks::decode_agent_message(*line);
  }
  ::close(peer);
  return 0;
}
