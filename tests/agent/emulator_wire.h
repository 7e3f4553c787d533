// The metadata emulator's HTTP/1.1 wire: reading one request from a socket and writing one
// answer with "Connection: close". Internal to the emulator. Thread-safety: functions on
// distinct sockets may run concurrently.
#pragma once

#include <atomic>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace shardguard::testing {

struct WireRequest {
  std::string method;
  std::string target;  // path?query
  std::string path;
  std::string query;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;

  std::optional<std::string> header(std::string_view name) const;
  // The URL-decoded value of query parameter `name`.
  std::optional<std::string> param(std::string_view name) const;
};

using WireHeaders = std::vector<std::pair<std::string, std::string>>;

// Reads one request (head and Content-Length body). False on EOF, garbage or `stopping`.
bool read_request(int fd, WireRequest& out, const std::atomic<bool>& stopping);
// Writes a whole answer; Content-Length and Connection: close are added.
void write_response(int fd, int status, const WireHeaders& headers, const std::string& body);
// True when the peer closed its side (or the socket failed); waits up to `wait_ms` for news.
bool client_gone(int fd, int wait_ms);
bool iequals(std::string_view a, std::string_view b);

}  // namespace shardguard::testing
