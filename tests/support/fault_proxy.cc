// FaultProxy: an acceptor thread and a thread per client connection, on non-blocking POSIX
// sockets. Every wait is a poll() of at most one tick that also watches an eventfd written
// once at stop, so stop is seen at once and blackhole/release within a tick.
#include "tests/support/fault_proxy.h"

#include <arpa/inet.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <list>
#include <mutex>
#include <optional>
#include <system_error>
#include <thread>
#include <utility>

namespace shardguard::testing {
namespace {

using SteadyClock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using Kind = FaultRule::Kind;

constexpr milliseconds kTick{20};           // how often blackhole and stall waits re-check
constexpr milliseconds kDataPoll{250};      // a wait for bytes: they end it, this is for deadlines
constexpr milliseconds kIoTimeout{60'000};  // no progress on an exchange: drop it
constexpr milliseconds kKeepAliveTimeout{300'000};  // an idle client connection is closed
constexpr milliseconds kConnectTimeout{5'000};
constexpr milliseconds kLingerTime{2'000};  // reading a client out after a final answer
constexpr size_t kMaxHeadBytes = 64 * 1024;
constexpr size_t kReadBytes = 64 * 1024;
constexpr size_t kMaxConnections = 512;
constexpr size_t kMaxLoggedRequests = 100'000;

class Fd {
 public:
  Fd() = default;
  explicit Fd(int fd) : fd_(fd) {}
  ~Fd() { reset(); }
  Fd(Fd&& other) noexcept : fd_(std::exchange(other.fd_, -1)) {}
  Fd& operator=(Fd&& other) noexcept {
    if (this != &other) {
      reset();
      fd_ = std::exchange(other.fd_, -1);
    }
    return *this;
  }
  int get() const { return fd_; }
  bool valid() const { return fd_ >= 0; }
  void reset() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
};

// ---- HTTP/1.1 message framing -------------------------------------------------------------

bool iequals(std::string_view a, std::string_view b) {
  return a.size() == b.size() && std::equal(a.begin(), a.end(), b.begin(), [](char x, char y) {
           return std::tolower(static_cast<unsigned char>(x)) ==
                  std::tolower(static_cast<unsigned char>(y));
         });
}

std::string_view trim(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  while (!s.empty() && (s.back() == ' ' || s.back() == '\t')) s.remove_suffix(1);
  return s;
}

// Where the head in `buf` ends (just past the blank line), or npos.
size_t head_end(std::string_view buf) {
  size_t pos = buf.find("\r\n\r\n");
  return pos == std::string_view::npos ? pos : pos + 4;
}

struct Head {
  std::string raw;                      // as received, through the blank line
  std::string method, target, version;  // a request's start line (version: both)
  int status = 0;                       // a response's
  std::vector<std::pair<std::string, std::string>> fields;

  // The comma-separated tokens of every `name` field, in order.
  std::vector<std::string_view> tokens(std::string_view name) const {
    std::vector<std::string_view> out;
    for (const auto& [field, value] : fields) {
      if (!iequals(field, name)) continue;
      std::string_view rest = value;
      while (!rest.empty()) {
        size_t comma = rest.find(',');
        std::string_view token = trim(rest.substr(0, comma));
        if (!token.empty()) out.push_back(token);
        rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
      }
    }
    return out;
  }
  bool has_token(std::string_view name, std::string_view token) const {
    auto all = tokens(name);
    return std::any_of(all.begin(), all.end(), [&](auto t) { return iequals(t, token); });
  }
  // Whether the connection ends after this message.
  bool wants_close() const {
    return has_token("connection", "close") ||
           (version == "HTTP/1.0" && !has_token("connection", "keep-alive"));
  }
};

Error bad_head(std::string_view what, std::string_view line) {
  return Error(ErrorCode::kInvalid,
               std::string(what) + " '" + std::string(line.substr(0, 200)) + "'");
}

// Splits a head (start line, fields, blank line) into its parts.
Result<Head> parse_head(std::string raw, bool request) {
  Head h;
  h.raw = std::move(raw);
  std::string_view text(h.raw);
  text.remove_suffix(4);
  size_t eol = text.find("\r\n");
  std::string_view start = text.substr(0, eol);
  text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 2);
  size_t sp1 = start.find(' ');
  size_t sp2 = sp1 == std::string_view::npos ? sp1 : start.find(' ', sp1 + 1);
  if (request) {
    if (sp2 == std::string_view::npos) return bad_head("bad request line", start);
    h.method = start.substr(0, sp1);
    h.target = start.substr(sp1 + 1, sp2 - sp1 - 1);
    h.version = start.substr(sp2 + 1);
  } else {
    if (sp1 == std::string_view::npos) return bad_head("bad status line", start);
    h.version = start.substr(0, sp1);
    std::string_view code =
        start.substr(sp1 + 1, sp2 == std::string_view::npos ? 3 : sp2 - sp1 - 1);
    if (code.size() != 3 || !std::all_of(code.begin(), code.end(), ::isdigit)) {
      return bad_head("bad status line", start);
    }
    h.status = std::stoi(std::string(code));
  }
  if (h.version.rfind("HTTP/1.", 0) != 0 || (request && (h.method.empty() || h.target.empty()))) {
    return bad_head(request ? "bad request line" : "bad status line", start);
  }
  while (!text.empty()) {
    eol = text.find("\r\n");
    std::string_view line = text.substr(0, eol);
    text = eol == std::string_view::npos ? std::string_view() : text.substr(eol + 2);
    size_t colon = line.find(':');
    if (line.empty() || line[0] == ' ' || line[0] == '\t' || colon == 0 ||
        colon == std::string_view::npos ||
        line.substr(0, colon).find_first_of(" \t") != std::string_view::npos) {
      return bad_head("bad header field", line);
    }
    h.fields.emplace_back(line.substr(0, colon), trim(line.substr(colon + 1)));
  }
  return h;
}

// Finds where a message body ends in a stream of bytes, without decoding it.
class BodyFramer {
 public:
  enum class Mode { kNone, kLength, kChunked, kUntilClose };

  static BodyFramer none() { return BodyFramer(Mode::kNone, 0); }
  static BodyFramer length(uint64_t n) { return n == 0 ? none() : BodyFramer(Mode::kLength, n); }
  static BodyFramer chunked() { return BodyFramer(Mode::kChunked, 0); }
  static BodyFramer until_close() { return BodyFramer(Mode::kUntilClose, 0); }

  Mode mode() const { return mode_; }
  bool done() const { return done_; }
  bool failed() const { return failed_; }

  // Returns how many leading bytes of `in` belong to the body (all of them until it ends).
  size_t feed(std::string_view in) {
    if (done_ || failed_) return 0;
    if (mode_ == Mode::kUntilClose) return in.size();
    if (mode_ == Mode::kLength) return take_data(in);
    size_t used = 0;
    while (used < in.size() && !done_ && !failed_) {
      if (state_ == Chunk::kData) {
        used += take_data(in.substr(used));
        continue;
      }
      size_t eol = in.find('\n', used);
      size_t end = eol == std::string_view::npos ? in.size() : eol + 1;
      line_.append(in.substr(used, end - used));
      used = end;
      if (line_.size() > 4096) failed_ = true;
      if (eol != std::string_view::npos) end_line();
    }
    return used;
  }

 private:
  enum class Chunk { kSize, kData, kDataEnd, kTrailer };

  BodyFramer(Mode mode, uint64_t remaining)
      : mode_(mode), remaining_(remaining), done_(mode == Mode::kNone) {}

  size_t take_data(std::string_view in) {
    size_t n = static_cast<size_t>(std::min<uint64_t>(remaining_, in.size()));
    remaining_ -= n;
    if (remaining_ == 0) {
      if (mode_ == Mode::kLength) done_ = true;
      state_ = Chunk::kDataEnd;
    }
    return n;
  }

  void end_line() {
    std::string_view line = line_;
    line.remove_suffix(1);
    if (!line.empty() && line.back() == '\r') line.remove_suffix(1);
    if (state_ == Chunk::kSize) {
      std::string_view hex = trim(line.substr(0, line.find(';')));
      if (hex.empty() || hex.size() > 15 ||
          hex.find_first_not_of("0123456789abcdefABCDEF") != std::string_view::npos) {
        failed_ = true;
      } else {
        remaining_ = std::stoull(std::string(hex), nullptr, 16);
        state_ = remaining_ == 0 ? Chunk::kTrailer : Chunk::kData;
      }
    } else if (state_ == Chunk::kDataEnd) {
      failed_ = !line.empty();
      state_ = Chunk::kSize;
    } else if (state_ == Chunk::kTrailer && line.empty()) {
      done_ = true;
    }
    line_.clear();
  }

  Mode mode_;
  uint64_t remaining_;
  bool done_;
  bool failed_ = false;
  Chunk state_ = Chunk::kSize;
  std::string line_;
};

Result<uint64_t> content_length(const Head& h) {
  auto values = h.tokens("content-length");
  if (values.empty()) return uint64_t{0};
  for (auto v : values) {
    if (v != values[0] || v.size() > 18 || v.find_first_not_of("0123456789") != v.npos) {
      return bad_head("bad Content-Length", v);
    }
  }
  return std::stoull(std::string(values[0]));
}

Result<BodyFramer> request_body(const Head& h) {
  auto codings = h.tokens("transfer-encoding");
  if (!codings.empty()) {
    if (!iequals(codings.back(), "chunked"))
      return bad_head("bad Transfer-Encoding", codings.back());
    return BodyFramer::chunked();
  }
  SG_ASSIGN_OR_RETURN(uint64_t n, content_length(h));
  return BodyFramer::length(n);
}

BodyFramer response_body(const Head& h, std::string_view request_method) {
  if (iequals(request_method, "HEAD") || h.status / 100 == 1 || h.status == 204 ||
      h.status == 304) {
    return BodyFramer::none();
  }
  auto codings = h.tokens("transfer-encoding");
  if (!codings.empty()) {
    return iequals(codings.back(), "chunked") ? BodyFramer::chunked() : BodyFramer::until_close();
  }
  if (h.tokens("content-length").empty()) return BodyFramer::until_close();
  auto n = content_length(h);
  return n ? BodyFramer::length(*n) : BodyFramer::until_close();
}

// ---- Canned answers -----------------------------------------------------------------------

std::string_view reason_phrase(int status) {
  static constexpr std::pair<int, std::string_view> kPhrases[] = {
      {400, "Bad Request"},
      {403, "Forbidden"},
      {404, "Not Found"},
      {409, "Conflict"},
      {429, "Too Many Requests"},
      {431, "Request Header Fields Too Large"},
      {500, "Internal Server Error"},
      {501, "Not Implemented"},
      {502, "Bad Gateway"},
      {503, "Service Unavailable"},
      {504, "Gateway Timeout"},
  };
  for (const auto& [code, phrase] : kPhrases) {
    if (code == status) return phrase;
  }
  return "Error";
}

std::string_view default_message(std::string_view code) {
  if (code == "SlowDown") return "Please reduce your request rate.";
  if (code == "InternalError") return "We encountered an internal error. Please try again.";
  if (code == "ServiceUnavailable") return "Service is unable to handle request.";
  if (code == "RequestTimeTooSkewed") {
    return "The difference between the request time and the current time is too large.";
  }
  if (code == "AccessDenied") return "Access Denied";
  if (code == "RequestTimeout") {
    return "Your socket connection to the server was not read from or written to within the "
           "timeout period.";
  }
  return code;
}

std::string xml_escape(std::string_view s) {
  std::string out;
  for (char c : s) {
    out += c == '&' ? "&amp;" : c == '<' ? "&lt;" : c == '>' ? "&gt;" : std::string(1, c);
  }
  return out;
}

std::string response_text(int status, std::string_view content_type, std::string_view body,
                          std::string_view extra_fields, bool close, bool send_body) {
  std::string out = "HTTP/1.1 " + std::to_string(status) + " " +
                    std::string(reason_phrase(status)) +
                    "\r\nContent-Type: " + std::string(content_type) +
                    "\r\nContent-Length: " + std::to_string(body.size()) + "\r\n";
  out += extra_fields;
  if (close) out += "Connection: close\r\n";
  out += "\r\n";
  if (send_body) out += body;
  return out;
}

std::string s3_error_text(const FaultRule& rule, uint64_t serial, bool close, bool send_body) {
  char id[24];
  std::snprintf(id, sizeof(id), "FP%014llX", static_cast<unsigned long long>(serial));
  std::string message =
      rule.s3_message.empty() ? std::string(default_message(rule.s3_code)) : rule.s3_message;
  std::string body = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Error><Code>" +
                     xml_escape(rule.s3_code) + "</Code><Message>" + xml_escape(message) +
                     "</Message><RequestId>" + id + "</RequestId></Error>";
  return response_text(rule.status, "application/xml", body,
                       "x-amz-request-id: " + std::string(id) + "\r\n", close, send_body);
}

// ---- State shared by the acceptor, the sessions and the API -------------------------------

struct RuleState {
  RuleState(int rule_id, FaultRule r)
      : id(rule_id), rule(std::move(r)), remaining(rule.count < 0 ? -1 : rule.count) {}
  const int id;
  const FaultRule rule;
  int remaining;    // guarded by ProxyState::mu; -1: unlimited
  int applied = 0;  // guarded by ProxyState::mu
  std::atomic<bool> removed{false};
  std::atomic<uint64_t> releases{0};  // bumped by release(): stalls in progress end
};

struct LoggedRequest {
  std::string method, target, path, query;
};

LoggedRequest split_target(const Head& h) {
  LoggedRequest r{h.method, h.target, h.target, ""};
  if (size_t scheme = r.path.find("://"); scheme != std::string::npos && r.path[0] != '/') {
    size_t slash = r.path.find('/', scheme + 3);
    r.path = slash == std::string::npos ? "/" : r.path.substr(slash);
  }
  if (size_t q = r.path.find('?'); q != std::string::npos) {
    r.query = r.path.substr(q + 1);
    r.path.resize(q);
  }
  return r;
}

bool matches(const FaultRule& rule, const LoggedRequest& r) {
  return (rule.method.empty() || iequals(rule.method, r.method)) &&
         r.path.find(rule.path_contains) != std::string::npos &&
         r.query.find(rule.query_contains) != std::string::npos;
}

struct ProxyState {
  sockaddr_storage upstream{};
  socklen_t upstream_len = 0;
  Fd wake;  // an eventfd, readable from stop on
  std::atomic<bool> stopping{false};
  std::atomic<bool> blackhole{false};
  std::atomic<uint64_t> connections{0};
  std::atomic<uint64_t> answers{0};  // serial numbers of canned answers

  mutable std::mutex mu;
  std::vector<std::shared_ptr<RuleState>> rules;  // in order; removed ones stay for applied()
  int next_id = 1;
  uint64_t requests = 0;
  std::vector<LoggedRequest> log;

  // Counts and logs the request; returns the rule applied to it (nullptr: none).
  std::shared_ptr<RuleState> on_request(const Head& head) {
    LoggedRequest entry = split_target(head);
    std::lock_guard lock(mu);
    ++requests;
    std::shared_ptr<RuleState> hit;
    for (const auto& r : rules) {
      if (r->removed || r->remaining == 0 || !matches(r->rule, entry)) continue;
      if (r->remaining > 0) --r->remaining;
      ++r->applied;
      hit = r;
      break;
    }
    if (log.size() < kMaxLoggedRequests) log.push_back(std::move(entry));
    return hit;
  }

  std::shared_ptr<RuleState> find(int id) const {
    for (const auto& r : rules) {
      if (r->id == id) return r;
    }
    return nullptr;
  }

  // Sleeps for `d` unless stop comes first; false when stopping.
  bool nap(milliseconds d) const {
    auto deadline = SteadyClock::now() + d;
    while (!stopping) {
      auto left = std::chrono::ceil<milliseconds>(deadline - SteadyClock::now()).count();
      if (left <= 0) break;
      pollfd p{wake.get(), POLLIN, 0};
      ::poll(&p, 1, static_cast<int>(std::min<int64_t>(left, 60'000)));
    }
    return !stopping;
  }
};

// ---- One client connection ----------------------------------------------------------------

enum class Io { kOk, kEof, kFailed, kTimeout, kStopped, kReset };

// The fault of the exchange in progress, if it acts on the bytes of one direction.
struct ActiveFault {
  std::shared_ptr<RuleState> rule;
  bool fired = false;
  bool pending(Kind reset, Kind stall) const {
    return rule && !fired && (rule->rule.kind == reset || rule->rule.kind == stall);
  }
};

struct ResponseState {
  std::string request_method;
  BodyFramer body = BodyFramer::none();
  bool in_body = false;
  bool done = false;
  bool close = false;  // the upstream ends the connection after this response
  uint64_t sent = 0;   // bytes of the final response sent to the client
};

class Session {
 public:
  Session(ProxyState& state, Fd client) : s_(state), client_(std::move(client)) {}

  // Serves requests until the client leaves, a fault ends the connection, or stop.
  void run() {
    while (!s_.stopping) {
      std::optional<Head> head = read_request_head();
      if (!head || !serve(*head)) break;
    }
    if (!s_.stopping) linger_close();
  }

 private:
  // Waits while the blackhole is on; false when stopping.
  bool pass_blackhole() {
    while (s_.blackhole && !s_.stopping) s_.nap(kTick);
    return !s_.stopping;
  }

  // Polls `fd` for `events` for at most `wait`, or until stop; returns the revents (0: none).
  short poll_one(int fd, short events, milliseconds wait = kDataPoll) {
    pollfd p[2] = {{fd, events, 0}, {s_.wake.get(), POLLIN, 0}};
    int n = ::poll(p, 2, static_cast<int>(wait.count()));
    return n > 0 ? p[0].revents : 0;
  }

  // Appends what one recv() gets from `fd` now to `buf`: kOk also when nothing was there.
  Io recv_now(int fd, std::string& buf, bool* got = nullptr) {
    ssize_t n = ::recv(fd, scratch_.data(), scratch_.size(), 0);
    if (got != nullptr) *got = n > 0;
    if (n > 0) buf.append(scratch_.data(), static_cast<size_t>(n));
    if (n > 0) return Io::kOk;
    if (n == 0) return Io::kEof;
    return errno == EAGAIN || errno == EWOULDBLOCK || errno == EINTR ? Io::kOk : Io::kFailed;
  }

  // Appends what one recv() gets from `fd` to `buf`, waiting until `deadline` for it.
  Io read_more(int fd, std::string& buf, SteadyClock::time_point deadline) {
    while (true) {
      if (!pass_blackhole()) return Io::kStopped;
      if (SteadyClock::now() >= deadline) return Io::kTimeout;
      if (poll_one(fd, POLLIN) == 0) continue;
      if (s_.stopping) return Io::kStopped;
      if (s_.blackhole) continue;
      bool got = false;
      Io r = recv_now(fd, buf, &got);
      if (r != Io::kOk || got) return r;
    }
  }

  Io write_all(int fd, std::string_view data) {
    auto deadline = SteadyClock::now() + kIoTimeout;
    while (!data.empty()) {
      if (!pass_blackhole()) return Io::kStopped;
      ssize_t n = ::send(fd, data.data(), data.size(), MSG_NOSIGNAL);
      if (n > 0) {
        data.remove_prefix(static_cast<size_t>(n));
        deadline = SteadyClock::now() + kIoTimeout;
      } else if (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK && errno != EINTR) {
        return Io::kFailed;
      } else if (SteadyClock::now() >= deadline) {
        return Io::kTimeout;
      } else {
        poll_one(fd, POLLOUT);
        if (s_.stopping) return Io::kStopped;
      }
    }
    return Io::kOk;
  }

  // Ends the client connection with a TCP reset (and drops the upstream one).
  Io reset_client() {
    linger l{1, 0};
    ::setsockopt(client_.get(), SOL_SOCKET, SO_LINGER, &l, sizeof(l));
    client_.reset();
    upstream_.reset();
    return Io::kReset;
  }

  // Closes the client after a final answer, reading what it still sends for a while, so
  // that our close does not reset a client still sending and lose it our answer.
  void linger_close() {
    if (!client_.valid()) return;
    ::shutdown(client_.get(), SHUT_WR);
    auto deadline = SteadyClock::now() + kLingerTime;
    std::string sink;
    while (read_more(client_.get(), sink, deadline) == Io::kOk) sink.clear();
    client_.reset();
  }

  // Holds a stall of `r` until its duration passes, it is released or removed, the client
  // hangs up (kEof) or stop (kStopped).
  Io hold_stall(const RuleState& r) {
    uint64_t mark = r.releases;
    auto end = r.rule.duration.count() > 0 ? SteadyClock::now() + r.rule.duration
                                           : SteadyClock::time_point::max();
    while (!s_.stopping) {
      if (r.removed || r.releases != mark || SteadyClock::now() >= end) return Io::kOk;
      if (client_eof_) {
        s_.nap(kTick);
      } else if (poll_one(client_.get(), POLLRDHUP, kTick) & (POLLRDHUP | POLLHUP | POLLERR)) {
        return Io::kEof;  // e.g. curl gave up on its low-speed limit
      }
    }
    return Io::kStopped;
  }

  // Applies the fault now: a reset, or a stall (then a reset or kOk to go on).
  Io fire(ActiveFault& fault) {
    fault.fired = true;
    const FaultRule& rule = fault.rule->rule;
    if (rule.kind == Kind::kResetRequest || rule.kind == Kind::kResetResponse) {
      return reset_client();
    }
    Io held = hold_stall(*fault.rule);
    if (held != Io::kOk) return held;
    return rule.reset_after_stall ? reset_client() : Io::kOk;
  }

  // Sends `data`, counting into `sent`, and fires the fault of this direction (reset or
  // stall kinds) when `sent` reaches its after_bytes with bytes still to send.
  Io send_faulted(int fd, std::string_view data, uint64_t& sent, ActiveFault& fault, Kind reset,
                  Kind stall) {
    while (!data.empty()) {
      size_t n = data.size();
      if (fault.pending(reset, stall)) {
        uint64_t at = fault.rule->rule.after_bytes;
        if (sent >= at) {
          if (Io r = fire(fault); r != Io::kOk) return r;
          continue;
        }
        n = static_cast<size_t>(std::min<uint64_t>(n, at - sent));
      }
      if (Io r = write_all(fd, data.substr(0, n)); r != Io::kOk) return r;
      sent += n;
      data.remove_prefix(n);
    }
    return Io::kOk;
  }

  std::optional<Head> read_request_head() {
    while (true) {
      size_t blank = cbuf_.find_first_not_of("\r\n");  // tolerated before a request line
      cbuf_.erase(0, blank == std::string::npos ? cbuf_.size() : blank);
      if (size_t end = head_end(cbuf_); end != std::string::npos) {
        auto head = parse_head(cbuf_.substr(0, end), /*request=*/true);
        cbuf_.erase(0, end);
        if (head) return std::move(head).value();
        answer_plain(400, head.error().message());
        return std::nullopt;
      }
      if (cbuf_.size() > kMaxHeadBytes) {
        answer_plain(431, "request head over 64 KiB");
        return std::nullopt;
      }
      auto wait = cbuf_.empty() ? kKeepAliveTimeout : kIoTimeout;
      if (read_more(client_.get(), cbuf_, SteadyClock::now() + wait) != Io::kOk) {
        return std::nullopt;
      }
    }
  }

  // Answers with a plain-text error and Connection: close (the session then ends).
  void answer_plain(int status, std::string_view text) {
    write_all(client_.get(), response_text(status, "text/plain", std::string(text) + "\n", "",
                                           /*close=*/true, /*send_body=*/true));
  }

  // Serves one request; returns whether the connection stays open for the next.
  bool serve(const Head& req) {
    auto body = request_body(req);
    if (!body) {
      answer_plain(400, body.error().message());
      return false;
    }
    ActiveFault fault{s_.on_request(req)};
    if (fault.rule && fault.rule->rule.kind == Kind::kDelay) {
      if (!s_.nap(fault.rule->rule.duration)) return false;
      fault.rule.reset();
    }
    if (fault.rule && fault.rule->rule.kind == Kind::kStatus) {
      return answer_status(req, *body, fault.rule->rule);
    }
    return forward(req, *body, fault);
  }

  // Answers an S3 error without forwarding. A body announced with Expect: 100-continue is
  // not asked for (the connection closes); any other body is read and dropped first.
  bool answer_status(const Head& req, BodyFramer body, const FaultRule& rule) {
    if (rule.duration.count() > 0 && !s_.nap(rule.duration)) return false;
    bool close = req.wants_close();
    if (!body.done() && req.has_token("expect", "100-continue")) {
      close = true;
    } else {
      while (!body.done()) {
        if (cbuf_.empty() &&
            read_more(client_.get(), cbuf_, SteadyClock::now() + kIoTimeout) != Io::kOk) {
          return false;
        }
        cbuf_.erase(0, body.feed(cbuf_));
        if (body.failed()) return false;
      }
    }
    std::string text = s3_error_text(rule, ++s_.answers, close, !iequals(req.method, "HEAD"));
    return write_all(client_.get(), text) == Io::kOk && !close;
  }

  bool connect_upstream() {
    if (upstream_.valid() && poll_one_now(upstream_.get()) != 0) upstream_.reset();  // stale
    ubuf_.clear();
    if (upstream_.valid()) return true;
    if (!pass_blackhole()) return false;
    Fd fd(::socket(s_.upstream.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
    if (!fd.valid()) return false;
    int one = 1;
    ::setsockopt(fd.get(), IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    if (::connect(fd.get(), reinterpret_cast<const sockaddr*>(&s_.upstream), s_.upstream_len) !=
        0) {
      if (errno != EINPROGRESS) return false;
      auto deadline = SteadyClock::now() + kConnectTimeout;
      while (poll_one(fd.get(), POLLOUT) == 0) {
        if (s_.stopping || SteadyClock::now() >= deadline) return false;
      }
      int err = 0;
      socklen_t len = sizeof(err);
      if (::getsockopt(fd.get(), SOL_SOCKET, SO_ERROR, &err, &len) != 0 || err != 0) return false;
    }
    upstream_ = std::move(fd);
    return true;
  }

  static short poll_one_now(int fd) {
    pollfd p{fd, POLLIN | POLLRDHUP, 0};
    return ::poll(&p, 1, 0) > 0 ? p.revents : 0;
  }

  // Relays what `ubuf_` holds of the response: interim heads as they are, then the final
  // head and body through the response faults.
  Io relay_response(ResponseState& r, ActiveFault& fault) {
    while (!r.done && !ubuf_.empty()) {
      if (!r.in_body) {
        size_t end = head_end(ubuf_);
        if (end == std::string::npos) return ubuf_.size() > kMaxHeadBytes ? Io::kFailed : Io::kOk;
        auto head = parse_head(ubuf_.substr(0, end), /*request=*/false);
        ubuf_.erase(0, end);
        if (!head) return Io::kFailed;
        if (head->status / 100 == 1 && head->status != 101) {  // 100 Continue and friends
          if (Io w = write_all(client_.get(), head->raw); w != Io::kOk) return w;
          continue;
        }
        r.body = response_body(*head, r.request_method);
        r.close = head->wants_close() || r.body.mode() == BodyFramer::Mode::kUntilClose;
        r.in_body = true;
        r.done = r.body.done();
        Io w = send_faulted(client_.get(), head->raw, r.sent, fault, Kind::kResetResponse,
                            Kind::kStallResponse);
        if (w != Io::kOk) return w;
        continue;
      }
      size_t n = r.body.feed(ubuf_);
      if (r.body.failed()) return Io::kFailed;
      Io w = send_faulted(client_.get(), std::string_view(ubuf_).substr(0, n), r.sent, fault,
                          Kind::kResetResponse, Kind::kStallResponse);
      ubuf_.erase(0, n);
      if (w != Io::kOk) return w;
      r.done = r.body.done();
    }
    return Io::kOk;
  }

  // Forwards the request and relays its response; returns whether the connection goes on.
  bool forward(const Head& req, BodyFramer body, ActiveFault& fault) {
    if (!connect_upstream()) {
      if (!s_.stopping) answer_plain(502, "fault proxy: cannot connect to the upstream");
      return false;
    }
    if (write_all(upstream_.get(), req.raw) != Io::kOk) return false;
    uint64_t request_sent = 0;
    bool request_done = false;
    auto end_request = [&] {
      request_done = true;
      return fault.pending(Kind::kResetRequest, Kind::kStallRequest) ? fire(fault) : Io::kOk;
    };
    if (body.done() && end_request() != Io::kOk) return false;
    ResponseState resp{req.method};
    auto idle_deadline = SteadyClock::now() + kIoTimeout;
    while (!resp.done) {
      if (!request_done && !cbuf_.empty()) {
        size_t n = body.feed(cbuf_);
        if (body.failed()) return false;
        Io w = send_faulted(upstream_.get(), std::string_view(cbuf_).substr(0, n), request_sent,
                            fault, Kind::kResetRequest, Kind::kStallRequest);
        cbuf_.erase(0, n);
        if (w != Io::kOk || (body.done() && end_request() != Io::kOk)) return false;
        idle_deadline = SteadyClock::now() + kIoTimeout;
        continue;
      }
      size_t unrelayed = ubuf_.size();
      if (relay_response(resp, fault) != Io::kOk) return false;
      if (resp.done) break;
      if (ubuf_.size() != unrelayed) idle_deadline = SteadyClock::now() + kIoTimeout;
      if (!pass_blackhole()) return false;
      if (SteadyClock::now() >= idle_deadline) return false;
      bool want_client = !request_done && !client_eof_;
      pollfd p[3] = {{upstream_.get(), POLLIN, 0},
                     {want_client ? client_.get() : -1, POLLIN, 0},
                     {s_.wake.get(), POLLIN, 0}};
      if (::poll(p, 3, static_cast<int>(kDataPoll.count())) <= 0 || s_.stopping || s_.blackhole) {
        continue;
      }
      if (p[1].revents != 0) {
        Io got = recv_now(client_.get(), cbuf_);
        if (got == Io::kEof) client_eof_ = true;
        if (got == Io::kEof || got == Io::kFailed) return false;  // the request is cut short
        idle_deadline = SteadyClock::now() + kIoTimeout;
      }
      if (p[0].revents != 0) {
        Io got = recv_now(upstream_.get(), ubuf_);
        if (got == Io::kEof && resp.in_body && resp.body.mode() == BodyFramer::Mode::kUntilClose) {
          resp.done = true;
        } else if (got == Io::kEof || got == Io::kFailed) {
          return false;  // the upstream hung up mid-answer: so does the proxy
        }
        idle_deadline = SteadyClock::now() + kIoTimeout;
      }
    }
    bool keep = !resp.close && request_done && !req.wants_close() && ubuf_.empty();
    if (!keep) upstream_.reset();
    return keep;
  }

  ProxyState& s_;
  Fd client_;
  Fd upstream_;
  std::string cbuf_;  // read from the client, not yet forwarded
  std::string ubuf_;  // read from the upstream, not yet relayed
  std::vector<char> scratch_ = std::vector<char>(kReadBytes);
  bool client_eof_ = false;
};

struct Worker {
  std::thread thread;
  std::atomic<bool> done{false};
};

}  // namespace

// ---- FaultProxy ---------------------------------------------------------------------------

struct FaultProxy::Impl {
  ProxyState state;
  Fd listener;
  uint16_t port = 0;
  std::thread acceptor;
  std::list<std::unique_ptr<Worker>> workers;  // the acceptor's, then the destructor's

  void accept_loop() {
    while (!state.stopping) {
      reap();
      pollfd p[2] = {{listener.get(), POLLIN, 0}, {state.wake.get(), POLLIN, 0}};
      if (::poll(p, 2, 100) <= 0 || state.stopping || !(p[0].revents & POLLIN)) continue;
      int fd = ::accept4(listener.get(), nullptr, nullptr, SOCK_NONBLOCK | SOCK_CLOEXEC);
      if (fd < 0) {
        if (errno != EAGAIN && errno != EINTR && errno != ECONNABORTED) state.nap(kTick);
        continue;
      }
      Fd client(fd);
      if (workers.size() >= kMaxConnections) continue;  // closed: a bounded test tool
      int one = 1;
      ::setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
      ++state.connections;
      spawn(std::move(client));
    }
  }

  void spawn(Fd client) {
    auto worker = std::make_unique<Worker>();
    Worker* w = worker.get();
    try {
      w->thread = std::thread([this, w, c = std::move(client)]() mutable {
        try {
          Session(state, std::move(c)).run();
        } catch (...) {  // e.g. bad_alloc: the connection ends, the proxy goes on
        }
        w->done = true;
      });
    } catch (const std::system_error&) {
      return;  // no thread: the client connection closes with the lambda
    }
    workers.push_back(std::move(worker));
  }

  void reap() {
    for (auto it = workers.begin(); it != workers.end();) {
      if ((*it)->done) {
        (*it)->thread.join();
        it = workers.erase(it);
      } else {
        ++it;
      }
    }
  }

  void stop() {
    state.stopping = true;
    uint64_t one = 1;
    [[maybe_unused]] ssize_t n = ::write(state.wake.get(), &one, sizeof(one));
    if (acceptor.joinable()) acceptor.join();
    for (auto& w : workers) w->thread.join();
    workers.clear();
  }
};

namespace {

bool is_loopback(const sockaddr* sa) {
  if (sa->sa_family == AF_INET) {
    return (ntohl(reinterpret_cast<const sockaddr_in*>(sa)->sin_addr.s_addr) >> 24) == 127;
  }
  if (sa->sa_family == AF_INET6) {
    const auto* a6 = reinterpret_cast<const sockaddr_in6*>(sa);
    return IN6_IS_ADDR_LOOPBACK(&a6->sin6_addr);
  }
  return false;
}

Status resolve_loopback(const std::string& host, uint16_t port, ProxyState& state) {
  addrinfo hints{};
  hints.ai_socktype = SOCK_STREAM;
  hints.ai_flags = AI_NUMERICSERV;
  addrinfo* found = nullptr;
  std::string service = std::to_string(port);
  if (int rc = ::getaddrinfo(host.c_str(), service.c_str(), &hints, &found); rc != 0) {
    return Error(ErrorCode::kInvalid,
                 "fault proxy: resolve upstream '" + host + "': " + ::gai_strerror(rc));
  }
  for (addrinfo* ai = found; ai != nullptr; ai = ai->ai_next) {
    if (!is_loopback(ai->ai_addr) || ai->ai_addrlen > sizeof(state.upstream)) continue;
    std::memcpy(&state.upstream, ai->ai_addr, ai->ai_addrlen);
    state.upstream_len = ai->ai_addrlen;
    break;
  }
  ::freeaddrinfo(found);
  if (state.upstream_len == 0) {
    return Error(ErrorCode::kInvalid,
                 "fault proxy: upstream '" + host + "' is not a loopback address");
  }
  return ok_status();
}

}  // namespace

namespace {

Result<int64_t> parse_number(std::string_view spec, std::string_view key, std::string_view value) {
  int64_t n = 0;
  bool negative = !value.empty() && value[0] == '-';
  std::string_view digits = value.substr(negative ? 1 : 0);
  if (digits.empty() || digits.size() > 18 ||
      digits.find_first_not_of("0123456789") != std::string_view::npos) {
    return Error(ErrorCode::kInvalid, "fault rule '" + std::string(spec) +
                                          "': " + std::string(key) + " '" + std::string(value) +
                                          "' is not a number");
  }
  for (char c : digits) n = n * 10 + (c - '0');
  return negative ? -n : n;
}

Result<Kind> parse_kind(std::string_view spec, std::string_view name) {
  static constexpr std::pair<std::string_view, Kind> kKinds[] = {
      {"status", Kind::kStatus},
      {"reset-request", Kind::kResetRequest},
      {"reset-response", Kind::kResetResponse},
      {"stall-request", Kind::kStallRequest},
      {"stall-response", Kind::kStallResponse},
      {"stall", Kind::kStallResponse},
      {"delay", Kind::kDelay}};
  for (const auto& [text, kind] : kKinds) {
    if (text == name) return kind;
  }
  return Error(ErrorCode::kInvalid,
               "fault rule '" + std::string(spec) + "': unknown kind '" + std::string(name) + "'");
}

}  // namespace

Result<FaultRule> parse_fault_rule(std::string_view spec) {
  FaultRule rule;
  std::string_view rest = spec;
  while (!rest.empty()) {
    size_t comma = rest.find(',');
    std::string_view item = trim(rest.substr(0, comma));
    rest = comma == std::string_view::npos ? std::string_view() : rest.substr(comma + 1);
    if (item.empty()) continue;
    size_t eq = item.find('=');
    std::string_view key = item.substr(0, eq);
    std::string_view value = eq == std::string_view::npos ? "" : item.substr(eq + 1);
    if (eq == std::string_view::npos) {
      return Error(ErrorCode::kInvalid, "fault rule '" + std::string(spec) + "': '" +
                                            std::string(item) + "' is not key=value");
    }
    auto number = [&]() { return parse_number(spec, key, value); };
    if (key == "kind") {
      SG_ASSIGN_OR_RETURN(rule.kind, parse_kind(spec, value));
    } else if (key == "method") {
      rule.method = value;
    } else if (key == "path") {
      rule.path_contains = value;
    } else if (key == "query") {
      rule.query_contains = value;
    } else if (key == "code") {
      rule.s3_code = value;
    } else if (key == "message") {
      rule.s3_message = value;
    } else if (key == "status" || key == "after" || key == "ms" || key == "count" ||
               key == "reset_after_stall") {
      SG_ASSIGN_OR_RETURN(int64_t n, number());
      if (key == "status") rule.status = static_cast<int>(n);
      if (key == "after") rule.after_bytes = static_cast<uint64_t>(std::max<int64_t>(n, 0));
      if (key == "ms") rule.duration = milliseconds(std::max<int64_t>(n, 0));
      if (key == "count") rule.count = static_cast<int>(std::max<int64_t>(n, -1));
      if (key == "reset_after_stall") rule.reset_after_stall = n != 0;
    } else {
      return Error(ErrorCode::kInvalid, "fault rule '" + std::string(spec) + "': unknown key '" +
                                            std::string(key) + "'");
    }
  }
  if (rule.status < 100 || rule.status > 599) {
    return Error(ErrorCode::kInvalid, "fault rule '" + std::string(spec) + "': status " +
                                          std::to_string(rule.status) + " is not 100-599");
  }
  return rule;
}

Result<std::unique_ptr<FaultProxy>> FaultProxy::start(std::string upstream_host,
                                                      uint16_t upstream_port) {
  auto impl = std::make_unique<Impl>();
  SG_RETURN_IF_ERROR(resolve_loopback(upstream_host, upstream_port, impl->state));
  impl->state.wake = Fd(::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK));
  if (!impl->state.wake.valid()) return Error::from_errno("fault proxy: eventfd", errno);
  impl->listener = Fd(::socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0));
  if (!impl->listener.valid()) return Error::from_errno("fault proxy: socket", errno);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  int fd = impl->listener.get();
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    return Error::from_errno("fault proxy: bind 127.0.0.1:0", errno);
  }
  if (::listen(fd, 128) != 0) return Error::from_errno("fault proxy: listen", errno);
  if (::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    return Error::from_errno("fault proxy: getsockname", errno);
  }
  impl->port = ntohs(addr.sin_port);
  Impl* raw = impl.get();
  try {
    impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  } catch (const std::system_error& e) {
    return Error(ErrorCode::kIo, std::string("fault proxy: start the acceptor: ") + e.what());
  }
  return std::unique_ptr<FaultProxy>(new FaultProxy(std::move(impl)));
}

FaultProxy::FaultProxy(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

FaultProxy::~FaultProxy() { impl_->stop(); }

uint16_t FaultProxy::port() const { return impl_->port; }

std::string FaultProxy::endpoint() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port);
}

int FaultProxy::add(FaultRule rule) {
  ProxyState& s = impl_->state;
  std::lock_guard lock(s.mu);
  int id = s.next_id++;
  s.rules.push_back(std::make_shared<RuleState>(id, std::move(rule)));
  return id;
}

void FaultProxy::remove(int id) {
  std::lock_guard lock(impl_->state.mu);
  if (auto r = impl_->state.find(id)) r->removed = true;
}

void FaultProxy::clear() {
  std::lock_guard lock(impl_->state.mu);
  for (const auto& r : impl_->state.rules) r->removed = true;
}

void FaultProxy::release(int id) {
  std::lock_guard lock(impl_->state.mu);
  if (auto r = impl_->state.find(id)) ++r->releases;
}

uint64_t FaultProxy::requests() const {
  std::lock_guard lock(impl_->state.mu);
  return impl_->state.requests;
}

uint64_t FaultProxy::requests_matching(std::string_view method,
                                       std::string_view path_contains) const {
  std::lock_guard lock(impl_->state.mu);
  return static_cast<uint64_t>(
      std::count_if(impl_->state.log.begin(), impl_->state.log.end(), [&](const auto& r) {
        return (method.empty() || iequals(method, r.method)) &&
               r.path.find(path_contains) != std::string::npos;
      }));
}

int FaultProxy::applied(int id) const {
  std::lock_guard lock(impl_->state.mu);
  auto r = impl_->state.find(id);
  return r ? r->applied : 0;
}

uint64_t FaultProxy::connections() const { return impl_->state.connections; }

void FaultProxy::set_blackhole(bool on) { impl_->state.blackhole = on; }

std::vector<std::string> FaultProxy::request_log() const {
  std::lock_guard lock(impl_->state.mu);
  std::vector<std::string> out;
  out.reserve(impl_->state.log.size());
  for (const auto& r : impl_->state.log) out.push_back(r.method + " " + r.target);
  return out;
}

}  // namespace shardguard::testing
