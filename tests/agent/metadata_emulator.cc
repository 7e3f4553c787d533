// The metadata emulator's server: a listening socket on 127.0.0.1, an accept thread, one
// thread per connection; faults from the script are applied before the cloud answers.
#include "tests/agent/metadata_emulator.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <boost/json.hpp>
#include <cerrno>
#include <list>
#include <thread>

#include "tests/agent/emulator_state.h"

namespace shardguard::testing {

struct MetadataEmulator::Impl {
  struct Connection {
    int fd = -1;
    std::thread thread;
    std::atomic<bool> done{false};
  };

  EmulatorState state;
  int listen_fd = -1;
  uint16_t port = 0;
  std::thread acceptor;
  std::mutex conn_mu;
  std::list<Connection> connections;
  std::vector<int> fault_hits;  // guarded by state.mu
  mutable std::mutex record_mu;
  std::vector<RecordedRequest> records;
  std::function<void(const RecordedRequest&)> hook;

  void accept_loop();
  void serve(Connection& c);
  // The fault that applies to `r`, counting it; nullopt when none.
  std::optional<EmulatorFault> take_fault(const WireRequest& r, int64_t now_ms);
  EmulatorAnswer answer(const WireRequest& r, int fd);
};

std::optional<std::string> RecordedRequest::header(std::string_view name) const {
  for (const auto& [k, v] : headers) {
    if (iequals(k, name)) return v;
  }
  return std::nullopt;
}

Result<std::unique_ptr<MetadataEmulator>> MetadataEmulator::start(EmulatorScenario scenario,
                                                                  uint16_t port) {
  auto impl = std::make_unique<Impl>();
  for (const AzureEventScript& e : scenario.azure_events) {
    boost::system::error_code ec;
    boost::json::value v = boost::json::parse(e.event_json, ec);
    const boost::json::value* id =
        !ec && v.is_object() ? v.get_object().if_contains("EventId") : nullptr;
    if (id == nullptr || !id->is_string()) {
      return Error(ErrorCode::kInvalid,
                   "emulator: azure event without a string EventId: " + e.event_json.substr(0, 80));
    }
    impl->state.azure_event_ids.emplace_back(id->get_string());
  }
  impl->fault_hits.assign(scenario.faults.size(), 0);
  impl->state.scenario = std::move(scenario);
  impl->listen_fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (impl->listen_fd < 0) return Error::from_errno("emulator: socket", errno);
  const int one = 1;
  ::setsockopt(impl->listen_fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(port);
  if (::bind(impl->listen_fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr) != 0 ||
      ::listen(impl->listen_fd, 64) != 0) {
    const int err = errno;
    ::close(impl->listen_fd);
    return Error::from_errno("emulator: listen on 127.0.0.1:" + std::to_string(port), err);
  }
  socklen_t len = sizeof addr;
  ::getsockname(impl->listen_fd, reinterpret_cast<sockaddr*>(&addr), &len);
  impl->port = ntohs(addr.sin_port);
  Impl* raw = impl.get();
  impl->acceptor = std::thread([raw] { raw->accept_loop(); });
  return std::unique_ptr<MetadataEmulator>(new MetadataEmulator(std::move(impl)));
}

MetadataEmulator::MetadataEmulator(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

MetadataEmulator::~MetadataEmulator() { stop(); }

void MetadataEmulator::stop() {
  if (impl_->state.stopping.exchange(true)) return;
  if (impl_->acceptor.joinable()) impl_->acceptor.join();
  ::close(impl_->listen_fd);
  std::lock_guard lock(impl_->conn_mu);
  for (auto& c : impl_->connections) {
    if (c.thread.joinable()) c.thread.join();
  }
  impl_->connections.clear();
}

uint16_t MetadataEmulator::port() const { return impl_->port; }

std::string MetadataEmulator::base_url() const {
  return "http://127.0.0.1:" + std::to_string(impl_->port);
}

int64_t MetadataEmulator::now_ms() const { return impl_->state.now_ms(); }

std::vector<RecordedRequest> MetadataEmulator::requests() const {
  std::lock_guard lock(impl_->record_mu);
  return impl_->records;
}

size_t MetadataEmulator::count(std::string_view method, std::string_view path) const {
  std::lock_guard lock(impl_->record_mu);
  size_t n = 0;
  for (const auto& r : impl_->records) n += r.method == method && r.path == path;
  return n;
}

bool MetadataEmulator::wait_for(
    const std::function<bool(const std::vector<RecordedRequest>&)>& pred,
    std::chrono::milliseconds timeout) const {
  const auto until = std::chrono::steady_clock::now() + timeout;
  while (true) {
    if (pred(requests())) return true;
    if (std::chrono::steady_clock::now() >= until) return false;
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  }
}

void MetadataEmulator::set_on_request(std::function<void(const RecordedRequest&)> hook) {
  std::lock_guard lock(impl_->record_mu);
  impl_->hook = std::move(hook);
}

void MetadataEmulator::Impl::accept_loop() {
  while (!state.stopping) {
    {
      std::lock_guard lock(conn_mu);
      connections.remove_if([](Connection& c) {
        if (!c.done) return false;
        c.thread.join();
        return true;
      });
    }
    pollfd p{listen_fd, POLLIN, 0};
    if (::poll(&p, 1, 20) <= 0) continue;
    const int fd = ::accept4(listen_fd, nullptr, nullptr, SOCK_CLOEXEC);
    if (fd < 0) continue;
    std::lock_guard lock(conn_mu);
    Connection& c = connections.emplace_back();
    c.fd = fd;
    c.thread = std::thread([this, &c] { serve(c); });
  }
}

void MetadataEmulator::Impl::serve(Connection& c) {
  WireRequest r;
  if (read_request(c.fd, r, state.stopping)) {
    RecordedRequest rec;
    rec.at_ms = state.now_ms();
    rec.method = r.method;
    rec.target = r.target;
    rec.path = r.path;
    rec.headers = r.headers;
    rec.body = r.body;
    size_t index;
    {
      std::lock_guard lock(record_mu);  // recorded on arrival: a hanging GET shows at once
      index = records.size();
      records.push_back(rec);
    }
    EmulatorAnswer a = answer(r, c.fd);
    if (a.status != 0) write_response(c.fd, a.status, a.headers, a.body);
    rec.status = a.status;
    std::function<void(const RecordedRequest&)> hook_copy;
    {
      std::lock_guard lock(record_mu);
      records[index].status = a.status;
      hook_copy = hook;
    }
    if (hook_copy) hook_copy(rec);
  }
  ::shutdown(c.fd, SHUT_RDWR);
  ::close(c.fd);
  c.done = true;
}

std::optional<EmulatorFault> MetadataEmulator::Impl::take_fault(const WireRequest& r,
                                                                int64_t now_ms) {
  std::lock_guard lock(state.mu);
  for (size_t i = 0; i < state.scenario.faults.size(); ++i) {
    const EmulatorFault& f = state.scenario.faults[i];
    if (!f.method.empty() && f.method != r.method) continue;
    if (r.path.compare(0, f.path_prefix.size(), f.path_prefix) != 0) continue;
    if (now_ms < f.from_ms || (f.until_ms >= 0 && now_ms >= f.until_ms)) continue;
    if (f.count >= 0 && fault_hits[i] >= f.count) continue;
    ++fault_hits[i];
    return f;
  }
  return std::nullopt;
}

EmulatorAnswer MetadataEmulator::Impl::answer(const WireRequest& r, int fd) {
  auto alive = [this, fd] { return !state.stopping && !client_gone(fd, 10); };
  if (auto f = take_fault(r, state.now_ms())) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(f->delay_ms);
    while ((f->hang || std::chrono::steady_clock::now() < until) && alive()) {
    }
    if (f->hang || f->close || !alive()) return EmulatorAnswer{0, {}, ""};
    if (f->status != 0) return EmulatorAnswer{f->status, {{"Content-Type", "text/plain"}}, f->body};
  }
  const bool aws = r.path.rfind("/latest/", 0) == 0;
  const bool gcp = r.path.rfind("/computeMetadata/", 0) == 0;
  const bool azure = r.path.rfind("/metadata/", 0) == 0;
  if (aws && state.scenario.aws) return answer_aws(state, r);
  if (gcp && state.scenario.gcp) return answer_gcp(state, r, alive);
  if (azure && state.scenario.azure) return answer_azure(state, r);
  if (auto a = timeline_answer(state, r.path, state.now_ms())) {
    return EmulatorAnswer{a->status, {}, a->body};
  }
  return EmulatorAnswer{404, {}, "not found"};
}

}  // namespace shardguard::testing
