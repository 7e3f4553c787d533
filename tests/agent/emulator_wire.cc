#include "tests/agent/emulator_wire.h"

#include <poll.h>
#include <sys/socket.h>

#include <cctype>
#include <cstdlib>

namespace shardguard::testing {

namespace {

constexpr size_t kMaxRequest = 1 << 20;

std::string_view reason(int status) {
  switch (status) {
    case 200:
      return "OK";
    case 400:
      return "Bad Request";
    case 401:
      return "Unauthorized";
    case 403:
      return "Forbidden";
    case 404:
      return "Not Found";
    case 405:
      return "Method Not Allowed";
    case 410:
      return "Gone";
    case 429:
      return "Too Many Requests";
    case 500:
      return "Internal Server Error";
    case 503:
      return "Service Unavailable";
    default:
      return "Status";
  }
}

std::string url_decode(std::string_view s) {
  std::string out;
  for (size_t i = 0; i < s.size(); ++i) {
    if (s[i] == '%' && i + 2 < s.size()) {
      out += static_cast<char>(std::strtol(std::string(s.substr(i + 1, 2)).c_str(), nullptr, 16));
      i += 2;
    } else {
      out += s[i];
    }
  }
  return out;
}

}  // namespace

bool iequals(std::string_view a, std::string_view b) {
  if (a.size() != b.size()) return false;
  for (size_t i = 0; i < a.size(); ++i) {
    if (std::tolower(static_cast<unsigned char>(a[i])) !=
        std::tolower(static_cast<unsigned char>(b[i]))) {
      return false;
    }
  }
  return true;
}

std::optional<std::string> WireRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return std::nullopt;
}

std::optional<std::string> WireRequest::param(std::string_view name) const {
  std::string_view q = query;
  while (!q.empty()) {
    const size_t amp = q.find('&');
    std::string_view part = q.substr(0, amp);
    const size_t eq = part.find('=');
    if (part.substr(0, eq) == name) {
      return eq == std::string_view::npos ? std::string() : url_decode(part.substr(eq + 1));
    }
    if (amp == std::string_view::npos) break;
    q.remove_prefix(amp + 1);
  }
  return std::nullopt;
}

bool read_request(int fd, WireRequest& out, const std::atomic<bool>& stopping) {
  std::string data;
  size_t head_end = std::string::npos;
  size_t body_len = 0;
  char buf[4096];
  while (!stopping) {
    if (head_end != std::string::npos && data.size() >= head_end + 4 + body_len) break;
    pollfd p{fd, POLLIN, 0};
    if (::poll(&p, 1, 50) <= 0) continue;
    const ssize_t n = ::recv(fd, buf, sizeof buf, 0);
    if (n <= 0) return false;
    data.append(buf, static_cast<size_t>(n));
    if (data.size() > kMaxRequest) return false;
    if (head_end == std::string::npos && (head_end = data.find("\r\n\r\n")) != std::string::npos) {
      // Parse the head now, to learn the body length.
      std::string_view head(data.data(), head_end);
      size_t line_end = head.find("\r\n");
      std::string_view line = head.substr(0, line_end);
      const size_t sp1 = line.find(' '), sp2 = line.rfind(' ');
      if (sp1 == std::string_view::npos || sp2 == sp1) return false;
      out.method = std::string(line.substr(0, sp1));
      out.target = std::string(line.substr(sp1 + 1, sp2 - sp1 - 1));
      const size_t qm = out.target.find('?');
      out.path = out.target.substr(0, qm);
      out.query = qm == std::string::npos ? "" : out.target.substr(qm + 1);
      while (line_end != std::string_view::npos) {
        const size_t start = line_end + 2;
        line_end = head.find("\r\n", start);
        std::string_view field = head.substr(
            start, line_end == std::string_view::npos ? std::string_view::npos : line_end - start);
        const size_t colon = field.find(':');
        if (colon == std::string_view::npos) continue;
        std::string_view value = field.substr(colon + 1);
        while (!value.empty() && value.front() == ' ') value.remove_prefix(1);
        out.headers.emplace_back(std::string(field.substr(0, colon)), std::string(value));
      }
      if (auto cl = out.header("Content-Length")) body_len = std::strtoul(cl->c_str(), nullptr, 10);
      if (body_len > kMaxRequest) return false;
    }
  }
  if (stopping || head_end == std::string::npos) return false;
  out.body = data.substr(head_end + 4, body_len);
  return true;
}

void write_response(int fd, int status, const WireHeaders& headers, const std::string& body) {
  std::string out =
      "HTTP/1.1 " + std::to_string(status) + " " + std::string(reason(status)) + "\r\n";
  for (const auto& [k, v] : headers) out += k + ": " + v + "\r\n";
  out += "Content-Length: " + std::to_string(body.size()) + "\r\nConnection: close\r\n\r\n";
  out += body;
  size_t sent = 0;
  while (sent < out.size()) {
    const ssize_t n = ::send(fd, out.data() + sent, out.size() - sent, MSG_NOSIGNAL);
    if (n <= 0) return;
    sent += static_cast<size_t>(n);
  }
}

bool client_gone(int fd, int wait_ms) {
  pollfd p{fd, POLLIN | POLLRDHUP, 0};
  if (::poll(&p, 1, wait_ms) <= 0) return false;
  if (p.revents & (POLLRDHUP | POLLHUP | POLLERR | POLLNVAL)) return true;
  char c;
  return ::recv(fd, &c, 1, MSG_PEEK | MSG_DONTWAIT) <= 0;
}

}  // namespace shardguard::testing
