#include "storage/curl_transport.h"

#include <curl/curl.h>

#include <algorithm>
#include <atomic>
#include <cctype>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <mutex>
#include <thread>

namespace shardguard::storage {
namespace {

// One request while it is in flight: what curl reads from and writes to, and how the caller
// learns it is done.
struct Transfer {
  const HttpRequest* request = nullptr;
  HttpResponse response;
  size_t sent = 0;          // bytes of the body handed to curl
  bool overflow = false;    // the body was larger than the sink or max_body
  CURLcode code = CURLE_OK;
  char error[CURL_ERROR_SIZE] = {};
  std::optional<std::string> interrupted;  // the reason the request's Interrupt gave
  curl_slist* headers = nullptr;
  CURL* easy = nullptr;

  // Progress, for the stall rule (loop thread only): bytes this transfer moved either way,
  // the transport's count it adds to, and where the current low-speed window began.
  uint64_t moved = 0;
  uint64_t* transport_moved = nullptr;
  std::chrono::steady_clock::time_point window_start{};
  uint64_t window_moved = 0;
  uint64_t window_transport = 0;
  bool stalled = false;

  void count(size_t bytes) {
    moved += bytes;
    if (transport_moved != nullptr) *transport_moved += bytes;
  }

  std::mutex mu;
  std::condition_variable cv;
  bool done = false;
  bool cancelled = false;

  ~Transfer() {
    if (headers != nullptr) curl_slist_free_all(headers);
    if (easy != nullptr) curl_easy_cleanup(easy);
  }

  void finish(CURLcode c, bool cancel = false) {
    std::lock_guard lock(mu);
    code = c;
    cancelled = cancel;
    done = true;
    cv.notify_all();
  }
};

size_t on_write(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const size_t bytes = size * n;
  t->count(bytes);
  const HttpRequest& r = *t->request;
  // Only a success's body goes into the sink; an error's (an S3 XML error) into body.
  long status = 0;
  curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
  const bool success = status >= 200 && status < 300;
  if (!success) {
    constexpr size_t kMaxErrorBody = 64 * 1024;
    t->response.body.append(data, std::min(bytes, kMaxErrorBody - std::min(kMaxErrorBody,
                                                                            t->response.body.size())));
    return bytes;
  }
  if (r.sink) {
    if (t->response.sink_bytes + bytes > r.sink->size()) {
      t->overflow = true;
      return 0;  // aborts the transfer: CURLE_WRITE_ERROR
    }
    std::memcpy(r.sink->data() + t->response.sink_bytes, data, bytes);
    t->response.sink_bytes += bytes;
    return bytes;
  }
  if (t->response.body.size() + bytes > r.max_body) {
    t->overflow = true;
    return 0;
  }
  t->response.body.append(data, bytes);
  return bytes;
}

size_t on_read(char* buffer, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const auto body = t->request->body;
  const size_t left = body.size() - t->sent;
  const size_t bytes = std::min(left, size * n);
  std::memcpy(buffer, body.data() + t->sent, bytes);
  t->sent += bytes;
  t->count(bytes);
  return bytes;
}

// Every ~100 ms of a transfer (libcurl's progress callback): the request's Interrupt decides.
int on_progress(void* user, curl_off_t, curl_off_t, curl_off_t, curl_off_t) {
  auto* t = static_cast<Transfer*>(user);
  if (t->interrupted) return 1;
  if (auto why = t->request->interrupt()) {
    t->interrupted = std::move(why);
    return 1;
  }
  return 0;
}

// curl rewinds a body it must send again (a reused connection that turned out closed).
int on_seek(void* user, curl_off_t offset, int origin) {
  auto* t = static_cast<Transfer*>(user);
  if (origin != SEEK_SET || offset < 0 ||
      static_cast<uint64_t>(offset) > t->request->body.size())
    return CURL_SEEKFUNC_FAIL;
  t->sent = static_cast<size_t>(offset);
  return CURL_SEEKFUNC_OK;
}

std::string trim(std::string_view s) {
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.front()))) s.remove_prefix(1);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.remove_suffix(1);
  return std::string(s);
}

size_t on_header(char* data, size_t size, size_t n, void* user) {
  auto* t = static_cast<Transfer*>(user);
  const std::string_view line(data, size * n);
  // A new status line (after an interim 100 Continue): the headers so far were not its own.
  if (line.starts_with("HTTP/")) {
    t->response.headers.clear();
    return size * n;
  }
  const auto colon = line.find(':');
  if (colon == std::string_view::npos || colon == 0) return size * n;
  std::string name(line.substr(0, colon));
  for (char& c : name) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  t->response.headers.push_back({std::move(name), trim(line.substr(colon + 1))});
  return size * n;
}

long to_ms(Duration d) {
  return static_cast<long>(std::chrono::duration_cast<std::chrono::milliseconds>(d).count());
}

}  // namespace

struct CurlTransport::Impl {
  CurlOptions options;
  CURLM* multi = nullptr;
  std::thread loop;
  std::mutex mu;
  std::deque<Transfer*> incoming;  // by mu: to be added to the multi handle
  std::vector<Transfer*> running;  // loop thread only
  uint64_t moved = 0;              // loop thread only: bytes every transfer moved
  bool stopping = false;           // by mu

  ~Impl() {
    {
      std::lock_guard lock(mu);
      stopping = true;
    }
    if (multi != nullptr) curl_multi_wakeup(multi);
    if (loop.joinable()) loop.join();
    if (multi != nullptr) curl_multi_cleanup(multi);
  }

  Status configure(Transfer& t) {
    const HttpRequest& r = *t.request;
    t.easy = curl_easy_init();
    if (t.easy == nullptr) return Error(ErrorCode::kIo, "curl_easy_init failed");
    CURL* e = t.easy;
    curl_easy_setopt(e, CURLOPT_URL, r.url.c_str());
    curl_easy_setopt(e, CURLOPT_PRIVATE, &t);
    curl_easy_setopt(e, CURLOPT_NOSIGNAL, 1L);
    curl_easy_setopt(e, CURLOPT_HTTP_VERSION, CURL_HTTP_VERSION_1_1);
    curl_easy_setopt(e, CURLOPT_ERRORBUFFER, t.error);
    curl_easy_setopt(e, CURLOPT_WRITEFUNCTION, on_write);
    curl_easy_setopt(e, CURLOPT_WRITEDATA, &t);
    curl_easy_setopt(e, CURLOPT_HEADERFUNCTION, on_header);
    curl_easy_setopt(e, CURLOPT_HEADERDATA, &t);
    curl_easy_setopt(e, CURLOPT_BUFFERSIZE, static_cast<long>(options.buffer_bytes));
    curl_easy_setopt(e, CURLOPT_UPLOAD_BUFFERSIZE,
                     static_cast<long>(std::min<size_t>(options.buffer_bytes, 2 * 1024 * 1024)));
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYPEER, options.verify_tls ? 1L : 0L);
    curl_easy_setopt(e, CURLOPT_SSL_VERIFYHOST, options.verify_tls ? 2L : 0L);
    if (!options.ca_file.empty()) curl_easy_setopt(e, CURLOPT_CAINFO, options.ca_file.c_str());
    curl_easy_setopt(e, CURLOPT_PROTOCOLS_STR, "http,https");
    curl_easy_setopt(e, CURLOPT_FOLLOWLOCATION, 0L);
    curl_easy_setopt(e, CURLOPT_TCP_NODELAY, 1L);
    if (r.timeout.count() > 0) curl_easy_setopt(e, CURLOPT_TIMEOUT_MS, to_ms(r.timeout));
    if (r.connect_timeout.count() > 0)
      curl_easy_setopt(e, CURLOPT_CONNECTTIMEOUT_MS, to_ms(r.connect_timeout));
    // The low-speed limit is the loop's (check_stalls), not curl's per-handle one.
    if (r.interrupt) {
      curl_easy_setopt(e, CURLOPT_NOPROGRESS, 0L);
      curl_easy_setopt(e, CURLOPT_XFERINFOFUNCTION, on_progress);
      curl_easy_setopt(e, CURLOPT_XFERINFODATA, &t);
    }
    if (r.method == "HEAD") {
      curl_easy_setopt(e, CURLOPT_NOBODY, 1L);
    } else if (r.method == "PUT" || r.method == "POST") {
      curl_easy_setopt(e, CURLOPT_UPLOAD, 1L);  // a PUT reading from on_read
      curl_easy_setopt(e, CURLOPT_READFUNCTION, on_read);
      curl_easy_setopt(e, CURLOPT_READDATA, &t);
      curl_easy_setopt(e, CURLOPT_SEEKFUNCTION, on_seek);
      curl_easy_setopt(e, CURLOPT_SEEKDATA, &t);
      curl_easy_setopt(e, CURLOPT_INFILESIZE_LARGE, static_cast<curl_off_t>(r.body.size()));
      if (r.method == "POST") curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, "POST");
    } else if (r.method != "GET") {
      curl_easy_setopt(e, CURLOPT_CUSTOMREQUEST, r.method.c_str());
    }
    for (const auto& h : r.headers) {
      const std::string line = h.name + ": " + h.value;
      curl_slist* next = curl_slist_append(t.headers, line.c_str());
      if (next == nullptr) return Error(ErrorCode::kIo, "curl_slist_append failed");
      t.headers = next;
    }
    // No 100-continue round trip before a body: S3 servers answer errors after it anyway.
    for (const char* line : {"Expect:", "Accept:"}) {
      curl_slist* next = curl_slist_append(t.headers, line);
      if (next == nullptr) return Error(ErrorCode::kIo, "curl_slist_append failed");
      t.headers = next;
    }
    curl_easy_setopt(e, CURLOPT_HTTPHEADER, t.headers);
    return {};
  }

  // A transfer that moved fewer than low_speed_bytes a second over its low_speed_time is cut
  // off only when no transfer of this transport moved that much either: a busy server that
  // serves some connections while others wait their turn (RGW with 64 parts in flight gives
  // some nothing for 10 s) is slow, not stalled; a connection the network dropped, or a server
  // that stopped answering, moves nothing anywhere. A request that waits while others move is
  // bounded by its own timeout.
  void check_stalls() {
    const auto now = std::chrono::steady_clock::now();
    for (size_t i = 0; i < running.size();) {
      Transfer* t = running[i];
      const HttpRequest& r = *t->request;
      if (r.low_speed_bytes == 0 || r.low_speed_time.count() <= 0 ||
          now - t->window_start < r.low_speed_time) {
        ++i;
        continue;
      }
      const uint64_t floor = static_cast<uint64_t>(
          static_cast<double>(r.low_speed_bytes) *
          std::chrono::duration<double>(r.low_speed_time).count());
      const bool slow = t->moved - t->window_moved < floor;
      const bool quiet = moved - t->window_transport < floor;
      if (slow && quiet) {
        t->stalled = true;
        curl_multi_remove_handle(multi, t->easy);
        running.erase(running.begin() + static_cast<std::ptrdiff_t>(i));
        t->finish(CURLE_OPERATION_TIMEDOUT);
        continue;
      }
      t->window_start = now;
      t->window_moved = t->moved;
      t->window_transport = moved;
      ++i;
    }
  }

  void run() {
    for (;;) {
      {
        std::lock_guard lock(mu);
        if (stopping) break;
        while (!incoming.empty()) {
          Transfer* t = incoming.front();
          incoming.pop_front();
          if (curl_multi_add_handle(multi, t->easy) != CURLM_OK) {
            t->finish(CURLE_FAILED_INIT);
            continue;
          }
          t->transport_moved = &moved;
          t->window_start = std::chrono::steady_clock::now();
          t->window_transport = moved;
          running.push_back(t);
        }
      }
      int still = 0;
      curl_multi_perform(multi, &still);
      int queued = 0;
      while (CURLMsg* msg = curl_multi_info_read(multi, &queued)) {
        if (msg->msg != CURLMSG_DONE) continue;
        Transfer* t = nullptr;
        curl_easy_getinfo(msg->easy_handle, CURLINFO_PRIVATE, reinterpret_cast<char**>(&t));
        const CURLcode result = msg->data.result;
        curl_multi_remove_handle(multi, msg->easy_handle);
        std::erase(running, t);
        long status = 0;
        curl_easy_getinfo(t->easy, CURLINFO_RESPONSE_CODE, &status);
        t->response.status = static_cast<int>(status);
        t->finish(result);
      }
      check_stalls();
      curl_multi_poll(multi, nullptr, 0, 1000, nullptr);
    }
    // Stopping: whatever is in flight or queued fails.
    for (Transfer* t : running) {
      curl_multi_remove_handle(multi, t->easy);
      t->finish(CURLE_ABORTED_BY_CALLBACK, true);
    }
    running.clear();
    std::lock_guard lock(mu);
    for (Transfer* t : incoming) t->finish(CURLE_ABORTED_BY_CALLBACK, true);
    incoming.clear();
  }
};

CurlTransport::CurlTransport(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CurlTransport::~CurlTransport() = default;

Result<std::unique_ptr<CurlTransport>> CurlTransport::create(CurlOptions options) {
  // Once per process, before any thread uses curl (not thread-safe itself).
  static const CURLcode global = curl_global_init(CURL_GLOBAL_DEFAULT);
  if (global != CURLE_OK)
    return Error(ErrorCode::kIo, std::string("curl_global_init: ") + curl_easy_strerror(global));
  auto impl = std::make_unique<Impl>();
  impl->options = std::move(options);
  impl->multi = curl_multi_init();
  if (impl->multi == nullptr) return Error(ErrorCode::kIo, "curl_multi_init failed");
  curl_multi_setopt(impl->multi, CURLMOPT_MAXCONNECTS,
                    static_cast<long>(std::max<size_t>(1, impl->options.max_connections)));
  Impl* raw = impl.get();
  impl->loop = std::thread([raw] { raw->run(); });
  return std::unique_ptr<CurlTransport>(new CurlTransport(std::move(impl)));
}

Result<HttpResponse> CurlTransport::perform(const HttpRequest& request) {
  const std::string what = describe_request(request.method, request.url);
  Transfer t;
  t.request = &request;
  SG_RETURN_IF_ERROR(impl_->configure(t));
  {
    std::lock_guard lock(impl_->mu);
    if (impl_->stopping) return Error(ErrorCode::kCancelled, what + ": the transport is stopping");
    impl_->incoming.push_back(&t);
  }
  curl_multi_wakeup(impl_->multi);
  std::unique_lock lock(t.mu);
  t.cv.wait(lock, [&] { return t.done; });
  if (t.cancelled) return Error(ErrorCode::kCancelled, what + ": the transport stopped");
  if (t.interrupted) return Error(ErrorCode::kCancelled, what + ": " + *t.interrupted);
  if (t.overflow)
    return Error(ErrorCode::kIo, what + ": the answer is larger than the " +
                                     std::to_string(request.sink ? request.sink->size()
                                                                 : request.max_body) +
                                     " bytes expected");
  if (t.stalled)
    return Error(ErrorCode::kTimeout,
                 what + ": " + std::string(kTransferStalled) + ": less than " +
                     std::to_string(request.low_speed_bytes) + " bytes/s for " +
                     std::to_string(std::chrono::duration_cast<std::chrono::seconds>(
                                        request.low_speed_time)
                                        .count()) +
                     " s on this connection and on every other one");
  if (t.code != CURLE_OK) {
    std::string detail = t.error[0] != '\0' ? t.error : curl_easy_strerror(t.code);
    const bool timed_out = t.code == CURLE_OPERATION_TIMEDOUT;
    curl_off_t connected_us = 0;
    curl_easy_getinfo(t.easy, CURLINFO_CONNECT_TIME_T, &connected_us);
    if (timed_out && connected_us == 0) detail = std::string(kNoConnection) + ": " + detail;
    return Error(timed_out ? ErrorCode::kTimeout : ErrorCode::kIo, what + ": " + detail);
  }
  return std::move(t.response);
}

}  // namespace shardguard::storage
