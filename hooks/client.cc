#include "hooks/client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/paths.h"
#include "hooks/client_internal.h"
#include "hooks/protocol.h"
#include "io/unix_socket_server.h"

namespace shardguard::hooks {
namespace {

using namespace std::chrono_literals;

// Set by the checkpoint signal; the handler does nothing else.
std::atomic<bool> g_signal_seen{false};
extern "C" void on_checkpoint_signal(int) { g_signal_seen.store(true); }

// Installs the flag-setting handler, keeping the old disposition in `previous`.
Status install_signal(int sig, struct sigaction* previous) {
  if (sig == 0) return {};
  struct sigaction sa {};
  sa.sa_handler = on_checkpoint_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  if (::sigaction(sig, &sa, previous) != 0)
    return Error::from_errno("install handler for signal " + std::to_string(sig), errno);
  return {};
}

std::string strip_newline(std::string line) {
  if (!line.empty() && line.back() == '\n') line.pop_back();
  return line;
}

}  // namespace

struct Client::Impl {
  ClientOptions opt;
  std::optional<io::UnixSocketClient> socket;
  std::mutex send_mu;
  std::thread reader;
  std::atomic<bool> closing{false};
  struct sigaction previous_handler {};
  bool handler_installed = false;

  mutable std::mutex mu;
  Schedule schedule;
  std::optional<EmergencyRequest> emergency;   // from checkpoint_now or the signal
  std::optional<uint64_t> periodic_at_step;    // checkpoint_now{reason: periodic}
  bool stop_requested = false;
  bool exit_ready = false;
  uint64_t last_committed = 0;
  uint64_t last_step = 0;
  SteadyTime last_heartbeat{};

  // Async saves.
  checkpoint::StagingBuffer staging;
  std::thread saver;
  std::optional<Status> save_result;

  void send(const JobMessage& m) {
    if (!socket) return;
    std::lock_guard lock(send_mu);
    auto st = socket->send_line(strip_newline(encode(m)));
    if (!st.ok()) spdlog::warn("shardguard client: {}", st.error().message());
  }

  void read_loop() {
    while (!closing.load()) {
      auto line = socket->read_line(200ms);
      if (!line.ok()) {
        if (line.error().code() == ErrorCode::kTimeout) continue;
        if (!closing.load())
          spdlog::warn("shardguard client: control socket: {}", line.error().message());
        return;
      }
      auto msg = decode_agent_message(*line);
      if (!msg.ok()) {
        spdlog::warn("shardguard client: bad message from agent: {}", msg.error().message());
        continue;
      }
      std::lock_guard lock(mu);
      if (auto* s = std::get_if<Schedule>(&*msg)) {
        schedule = *s;
      } else if (auto* c = std::get_if<CheckpointNow>(&*msg)) {
        // Periodic and advisory requests are plain saves; anything else is an emergency.
        if (c->reason == "periodic" || c->reason.rfind("advisory:", 0) == 0)
          periodic_at_step = c->at_step;
        else
          emergency = EmergencyRequest{from_unix_ms(c->deadline_unix_ms), c->reason, c->at_step};
      } else if (auto* s = std::get_if<Stop>(&*msg)) {
        (void)s;
        stop_requested = true;
      } else if (auto* e = std::get_if<ErrorReply>(&*msg)) {
        spdlog::warn("shardguard client: agent says: {}", e->message);
      }
    }
  }

  // Waits until the manifest of `step` exists or the deadline passes.
  bool wait_for_manifest(uint64_t step, WallTime deadline) {
    const std::string manifest = join_path(
        join_path(opt.checkpoint_dir, checkpoint::step_dir_name(step)),
        std::string(checkpoint::kManifestName));
    while (RealClock::instance().wall_now() < deadline) {
      if (::access(manifest.c_str(), F_OK) == 0) return true;
      std::this_thread::sleep_for(20ms);
    }
    return false;
  }

  // finish() + (rank 0) commit + report. Runs on the training thread or the save thread.
  Status persist(checkpoint::ShardWriter writer, bool emergency_save, WallTime deadline,
                 std::optional<checkpoint::SaveReason> reason) {
    const uint64_t step = writer.options().step;
    auto sidecar = writer.finish();
    if (!sidecar.ok()) {
      send(CheckpointFailed{step, sidecar.error().message()});
      return std::move(sidecar).error();
    }
    if (opt.rank == 0) {
      checkpoint::CommitOptions c;
      c.checkpoint_dir = opt.checkpoint_dir;
      c.job_id = opt.job_id;
      c.step = step;
      c.attempt = opt.attempt;
      c.world_size = opt.world_size;
      c.reason = reason.value_or(emergency_save ? checkpoint::SaveReason::kEmergency
                                                : checkpoint::SaveReason::kPeriodic);
      c.timeout = emergency_save ? std::max<Duration>(
                                       deadline - RealClock::instance().wall_now(), 1s)
                                 : opt.commit_timeout;
      auto m = checkpoint::commit_checkpoint(PosixFilesystem::instance(), RealClock::instance(), c);
      if (!m.ok()) {
        send(CheckpointFailed{step, m.error().message()});
        return std::move(m).error();
      }
      const std::string manifest = join_path(
          join_path(opt.checkpoint_dir, checkpoint::step_dir_name(step)),
          std::string(checkpoint::kManifestName));
      send(CheckpointCommitted{step, manifest});
    } else if (emergency_save && !wait_for_manifest(step, deadline)) {
      return Error(ErrorCode::kTimeout, "emergency checkpoint of step " + std::to_string(step) +
                                            " not committed by rank 0 before the deadline");
    }
    std::lock_guard lock(mu);
    last_committed = std::max(last_committed, step);
    if (emergency_save) exit_ready = true;
    return {};
  }

  void join_saver() {
    if (saver.joinable()) saver.join();
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  impl_->join_saver();
  impl_->closing = true;
  if (impl_->reader.joinable()) impl_->reader.join();
  if (impl_->handler_installed)
    ::sigaction(impl_->opt.checkpoint_signal, &impl_->previous_handler, nullptr);
}

Result<std::unique_ptr<Client>> Client::from_env(ClientOptions defaults) {
  SG_ASSIGN_OR_RETURN(auto opt, options_from_env(std::move(defaults)));
  return create(std::move(opt));
}

Result<std::unique_ptr<Client>> Client::create(ClientOptions opt) {
  if (opt.checkpoint_dir.empty())
    return Error(ErrorCode::kInvalid, "client: no checkpoint directory given");
  auto impl = std::make_unique<Impl>();
  impl->opt = std::move(opt);
  impl->schedule.every_steps = impl->opt.every_steps;
  if (!impl->opt.control_socket.empty()) {
    auto sock = io::UnixSocketClient::connect(impl->opt.control_socket);
    if (!sock.ok()) return std::move(sock).error().context("control socket");
    impl->socket.emplace(std::move(*sock));
  }
  SG_RETURN_IF_ERROR(install_signal(impl->opt.checkpoint_signal, &impl->previous_handler));
  impl->handler_installed = impl->opt.checkpoint_signal != 0;
  if (impl->socket) {
    impl->send(Hello{impl->opt.rank, impl->opt.world_size, ::getpid(), impl->opt.job_id,
                     impl->opt.attempt});
    impl->reader = std::thread([p = impl.get()] { p->read_loop(); });
  }
  return std::unique_ptr<Client>(new Client(std::move(impl)));
}

const ClientOptions& Client::options() const { return impl_->opt; }

std::optional<std::string> Client::resume_manifest() const {
  const auto& o = impl_->opt;
  if (!o.resume_manifest.empty()) return o.resume_manifest;
  if (o.under_shardguard) return std::nullopt;  // the supervisor said: fresh start
  auto latest = checkpoint::latest_complete(PosixFilesystem::instance(), o.checkpoint_dir,
                                            checkpoint::Verify::kSize);
  if (!latest.ok()) return std::nullopt;
  return join_path(latest->dir, std::string(checkpoint::kManifestName));
}

Result<checkpoint::CheckpointReader> Client::open_resume() const {
  auto manifest = resume_manifest();
  if (!manifest) return Error(ErrorCode::kNotFound, "no checkpoint to resume from");
  return checkpoint::CheckpointReader::open(PosixFilesystem::instance(), *manifest);
}

void Client::heartbeat(uint64_t step) {
  const auto now = RealClock::instance().now();
  {
    std::lock_guard lock(impl_->mu);
    impl_->last_step = step;
    if (now - impl_->last_heartbeat < 100ms && impl_->last_heartbeat != SteadyTime{}) return;
    impl_->last_heartbeat = now;
  }
  impl_->send(Heartbeat{step});
}

bool Client::should_checkpoint(uint64_t step) {
  if (g_signal_seen.exchange(false)) {
    // The agent sends checkpoint_now before the signal: give the reader a moment to see it.
    const auto until = RealClock::instance().now() + 200ms;
    while (impl_->socket && RealClock::instance().now() < until) {
      {
        std::lock_guard lock(impl_->mu);
        if (impl_->emergency) break;
      }
      std::this_thread::sleep_for(5ms);
    }
    std::lock_guard lock(impl_->mu);
    if (!impl_->emergency)  // a signal alone: save the step at hand
      impl_->emergency = EmergencyRequest{RealClock::instance().wall_now() + 30s, "signal", step};
  }
  std::lock_guard lock(impl_->mu);
  if (impl_->exit_ready) return false;
  if (impl_->emergency && step >= impl_->emergency->at_step) return true;
  if (impl_->periodic_at_step && step >= *impl_->periodic_at_step) {
    impl_->periodic_at_step.reset();
    return true;
  }
  return impl_->schedule.every_steps > 0 && step > 0 && step % impl_->schedule.every_steps == 0 &&
         step > impl_->last_committed;
}

std::optional<EmergencyRequest> Client::emergency() const {
  std::lock_guard lock(impl_->mu);
  return impl_->emergency;
}

void Client::notify_signal() { g_signal_seen.store(true); }

bool Client::should_exit() const {
  std::lock_guard lock(impl_->mu);
  return impl_->exit_ready || impl_->stop_requested;
}

checkpoint::ShardWriter Client::begin_save(uint64_t step) {
  checkpoint::WriterOptions w;
  w.checkpoint_dir = impl_->opt.checkpoint_dir;
  w.job_id = impl_->opt.job_id;
  w.step = step;
  w.attempt = impl_->opt.attempt;
  w.rank = impl_->opt.rank;
  w.world_size = impl_->opt.world_size;
  w.io_threads = impl_->opt.io_threads;
  return checkpoint::ShardWriter(PosixFilesystem::instance(), w);
}

Status Client::save(checkpoint::ShardWriter writer, std::optional<checkpoint::SaveReason> reason) {
  Impl& m = *impl_;
  const uint64_t step = writer.options().step;
  std::optional<EmergencyRequest> emergency;
  {
    std::lock_guard lock(m.mu);
    if (m.emergency && step >= m.emergency->at_step) emergency = m.emergency;
  }
  // One save in flight at a time; its failure was reported already.
  if (auto previous = wait(); !previous.ok())
    spdlog::warn("shardguard client: previous save failed: {}", previous.error().message());
  m.send(CheckpointBegin{step});
  if (!m.opt.async || emergency) {
    const WallTime deadline = emergency ? emergency->deadline
                                        : RealClock::instance().wall_now() + m.opt.commit_timeout;
    Status st = m.persist(std::move(writer), emergency.has_value(), deadline, reason);
    m.send(Heartbeat{step});  // the save is over: this rank is not stuck in it
    return st;
  }
  auto copied = writer.snapshot(m.staging);
  if (!copied.ok()) {
    m.send(CheckpointFailed{step, copied.error().message()});
    return std::move(copied).error();
  }
  m.save_result.reset();
  m.send(Heartbeat{step});  // the training thread goes on
  m.saver = std::thread([&m, reason, w = std::move(writer)]() mutable {
    m.save_result = m.persist(std::move(w), false, WallTime{}, reason);
  });
  return {};
}

Status Client::wait() {
  impl_->join_saver();
  if (!impl_->save_result) return {};
  Status st = std::move(*impl_->save_result);
  impl_->save_result.reset();
  return st;
}

uint64_t Client::last_committed_step() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_committed;
}

}  // namespace shardguard::hooks
