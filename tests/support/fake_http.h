// FakeHttpClient: io::HttpClient with scripted answers, driven by a FakeClock (or any
// TimerFactory), for unit tests of components that fetch over HTTP. Routes are keyed by
// method and URL path (the query is ignored for routing but kept in the recorded request).
// An answer arrives on a timer after its latency (0: the next clock turn, never inside
// request()); a parked request waits for release() or fails with kTimeout when its own
// timeout passes, as BeastHttpClient does. Unrouted requests get 404.
//
// Thread-safety: none; use on the test thread that advances the clock. Declare the clock
// before the client: the client cancels its timers when destroyed.
#pragma once

#include <functional>
#include <list>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/units.h"
#include "io/http_client.h"

namespace shardguard::testing {

class FakeHttpClient final : public io::HttpClient {
 public:
  struct Reply {
    Result<io::HttpResponse> result;
    Duration latency{0};
  };
  // Returns the reply for a request, or nullopt to park it.
  using Handler = std::function<std::optional<Reply>(const io::HttpRequest&)>;

  explicit FakeHttpClient(TimerFactory& timers) : timers_(timers) {}
  ~FakeHttpClient() override {
    for (auto& x : exchanges_) x->timer->cancel();  // the armed callbacks hold the exchanges
  }
  FakeHttpClient(const FakeHttpClient&) = delete;
  FakeHttpClient& operator=(const FakeHttpClient&) = delete;

  static Reply answer(int status, std::string body = "", io::HttpHeaders headers = {},
                      Duration latency = Duration(0)) {
    io::HttpResponse r;
    r.status = status;
    r.body = std::move(body);
    r.headers = std::move(headers);
    return Reply{std::move(r), latency};
  }

  // Sets the handler for `method` + `path` (replacing an earlier one).
  void route(const std::string& method, const std::string& path, Handler handler) {
    routes_[method + " " + path] = std::move(handler);
  }
  // Every request to the route gets this answer.
  void respond(const std::string& method, const std::string& path, int status,
               std::string body = "", io::HttpHeaders headers = {},
               Duration latency = Duration(0)) {
    Reply reply = answer(status, std::move(body), std::move(headers), latency);
    route(method, path, [reply](const io::HttpRequest&) { return std::optional<Reply>(reply); });
  }
  // Every request to the route fails with `error` (e.g. connection refused).
  void fail(const std::string& method, const std::string& path, Error error) {
    route(method, path, [error](const io::HttpRequest&) {
      return std::optional<Reply>(Reply{Result<io::HttpResponse>(error), Duration(0)});
    });
  }
  // Every request to the route is parked (a hanging GET, or a server that never answers).
  void hang(const std::string& method, const std::string& path) {
    route(method, path, [](const io::HttpRequest&) { return std::optional<Reply>(); });
  }
  // Answers every parked request on the route with `reply`; returns how many.
  size_t release(const std::string& method, const std::string& path, const Reply& reply) {
    size_t n = 0;
    for (auto& x : exchanges_) {
      if (x->finished || !x->parked || x->key != method + " " + path) continue;
      x->parked = false;
      arm(x, reply);
      ++n;
    }
    return n;
  }

  void request(io::HttpRequest request, Callback done) override {
    exchanges_.remove_if([](const auto& x) { return x->finished; });
    requests_.push_back(request);
    auto x = std::make_shared<Exchange>();
    x->key = request.method + " " + path_of(request.url);
    x->request = std::move(request);
    x->done = std::move(done);
    x->timer = timers_.make_timer();
    exchanges_.push_back(x);
    auto it = routes_.find(x->key);
    std::optional<Reply> reply = it == routes_.end()
                                     ? std::optional<Reply>(answer(404, "not found"))
                                     : it->second(x->request);
    if (reply) return arm(x, *reply);
    x->parked = true;
    const io::HttpRequest& r = x->request;
    arm(x, Reply{Error(ErrorCode::kTimeout,
                       r.method + " " + r.url + ": timed out after " + format_duration(r.timeout)),
                 r.timeout});
  }

  const std::vector<io::HttpRequest>& requests() const { return requests_; }
  // Requests seen on `method` + `path`.
  size_t count(const std::string& method, const std::string& path) const {
    size_t n = 0;
    for (const auto& r : requests_) n += r.method == method && path_of(r.url) == path;
    return n;
  }
  // Requests not answered yet.
  size_t in_flight() const {
    size_t n = 0;
    for (const auto& x : exchanges_) n += !x->finished;
    return n;
  }
  // "/a/b" of "http://host:port/a/b?q".
  static std::string path_of(const std::string& url) {
    auto parsed = io::parse_url(url);
    std::string target = parsed.ok() ? parsed->target : url;
    return target.substr(0, target.find('?'));
  }

 private:
  struct Exchange {
    std::string key;
    io::HttpRequest request;
    Callback done;
    std::unique_ptr<Timer> timer;
    bool parked = false;
    bool finished = false;
  };

  void arm(const std::shared_ptr<Exchange>& x, Reply reply) {
    x->timer->arm(reply.latency, [x, result = std::move(reply.result)]() mutable {
      if (x->finished) return;
      x->finished = true;
      auto done = std::move(x->done);
      done(std::move(result));
    });
  }

  TimerFactory& timers_;
  std::map<std::string, Handler> routes_;
  std::vector<io::HttpRequest> requests_;
  std::list<std::shared_ptr<Exchange>> exchanges_;
};

}  // namespace shardguard::testing
