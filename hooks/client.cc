#include "hooks/client.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <cmath>
#include <mutex>
#include <set>
#include <thread>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/paths.h"
#include "storage/connect.h"
#include "hooks/client_internal.h"
#include "hooks/protocol.h"
#include "io/unix_socket_server.h"

namespace shardguard::hooks {
namespace {

using namespace std::chrono_literals;

// A size hint counts tensor bytes; the shard file adds its safetensors header (names,
// shapes, chunk boxes: ~100-200 bytes per tensor) to them.
constexpr uint64_t kHeaderRoom = 1 << 20;

// Set by the checkpoint signal; the handler does nothing else.
std::atomic<bool> g_signal_seen{false};
extern "C" void on_checkpoint_signal(int) { g_signal_seen.store(true); }
// Set by SIGTERM when the client catches it; the handler does nothing else.
std::atomic<bool> g_term_seen{false};
extern "C" void on_term_signal(int) { g_term_seen.store(true); }

// Installs a flag-setting handler, keeping the old disposition in `previous` (if given).
Status install_signal(int sig, struct sigaction* previous,
                      void (*handler)(int) = on_checkpoint_signal) {
  if (sig == 0) return {};
  struct sigaction sa {};
  sa.sa_handler = handler;
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
  Clock& clock;
  Filesystem& fs;
  std::shared_ptr<storage::Store> owned_store;  // the default connection's
  storage::Store* store = nullptr;
  std::optional<io::UnixSocketClient> socket;
  std::mutex send_mu;
  std::thread reader;
  std::atomic<bool> closing{false};
  struct sigaction previous_handler {};
  bool handler_installed = false;
  bool handle_term = false;  // catches SIGTERM (options.handle_sigterm, resolved)
  struct sigaction previous_term {};

  mutable std::mutex mu;
  Schedule schedule;
  // The supervisor's current request, emergency or not; replaced by a later one.
  std::optional<CheckpointNow> request;
  // The emergency of a signal outside shardguard (no supervisor to choose the step).
  std::optional<EmergencyRequest> local_emergency;
  bool request_passed = false;      // told the supervisor we are past request->at_step
  std::set<uint64_t> aborted;       // steps whose commit will not happen
  std::set<uint64_t> all_written;   // steps every rank wrote (said by the supervisor)
  std::set<uint64_t> committed;     // steps whose commit the supervisor read back
  std::condition_variable changed;  // any of the above, or stop, or a new request
  bool stop_requested = false;
  bool exit_ready = false;
  uint64_t last_committed = 0;
  uint64_t last_step = 0;
  std::optional<uint64_t> last_checked;  // the last step given to should_checkpoint
  SteadyTime last_heartbeat{};
  // Scalars reported since the last heartbeat went out (the divergence guard's input).
  StepScalars pending_scalars;
  bool pending_nonfinite = false;  // one of them is NaN or Inf: send at once

  // This rank's long transfer, one at a time (a save's writes or the resume's reads): its
  // progress goes to the supervisor every second once it has run for two (by mu, but `done`).
  struct Transfer {
    bool active = false;
    TransferPhase phase = TransferPhase::kSave;
    uint64_t step = 0;
    uint64_t total = 0;
    SteadyTime started{}, last_sent{};
  } transfer;
  std::atomic<uint64_t> transfer_done{0};
  // The deadline of the save in flight (unix ms; 0: none): its writes stop there.
  std::atomic<int64_t> save_deadline_ms{0};

  // Async saves.
  checkpoint::StagingBuffer staging;
  std::thread saver;
  std::optional<Status> save_result;

  Impl(ClientOptions o)
      : opt(std::move(o)),
        clock(opt.deps.clock ? *opt.deps.clock : RealClock::instance()),
        fs(opt.deps.fs ? *opt.deps.fs : PosixFilesystem::instance()) {}

  void send(const JobMessage& m) {
    if (!socket) return;
    std::lock_guard lock(send_mu);
    auto st = socket->send_line(strip_newline(encode(m)));
    if (!st.ok()) spdlog::warn("shardguard client: {}", st.error().message());
  }

  void on_request(const CheckpointNow& c) {
    std::optional<uint64_t> passed;
    {
      std::lock_guard lock(mu);
      request = c;
      request_passed = false;
      // Already evaluated at_step without saving it: the supervisor must pick another step
      // for every rank; saving a later step alone would split the checkpoint.
      if (last_checked && *last_checked >= c.at_step) {
        request_passed = true;
        passed = *last_checked;
      }
    }
    if (passed) send(Passed{*passed});
  }

  // A SIGTERM caught since the last call goes to the supervisor, which picks the step every
  // rank saves. Called by the reader thread (every 100 ms at most) and the training thread.
  void report_signals() {
    if (!socket || !handle_term || !g_term_seen.exchange(false)) return;
    spdlog::warn(
        "shardguard client: SIGTERM: telling the supervisor; training goes on until it "
        "names the step to save");
    send(SignalReceived{"SIGTERM"});
  }

  void begin_transfer(TransferPhase phase, uint64_t step, uint64_t total) {
    std::lock_guard lock(mu);
    transfer = Transfer{true, phase, step, total, clock.now(), SteadyTime{}};
    transfer_done = 0;
  }

  void end_transfer(TransferPhase phase) {
    std::lock_guard lock(mu);
    if (transfer.phase == phase) transfer.active = false;
  }

  // From the reader thread: a transfer running for 2 s or more is told every second.
  void report_progress() {
    std::optional<Progress> p;
    {
      std::lock_guard lock(mu);
      const SteadyTime now = clock.now();
      if (!transfer.active || now - transfer.started < 2s || now - transfer.last_sent < 1s) return;
      transfer.last_sent = now;
      p = Progress{transfer.phase, transfer.step, transfer_done.load(), transfer.total};
    }
    send(*p);
  }

  // Why the writes of the save of `step` must stop now, if they must (its deadline passed,
  // or the save was abandoned). Asked from the write threads and the transport's.
  std::optional<std::string> save_interrupted(uint64_t step) const {
    const int64_t deadline = save_deadline_ms.load();
    if (deadline != 0 && to_unix_ms(clock.wall_now()) >= deadline)
      return "the deadline of the save of step " + std::to_string(step) + " passed";
    return cancelled(step);
  }

  void read_loop() {
    while (!closing.load()) {
      report_signals();
      report_progress();
      auto line = socket->read_line(100ms);
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
      if (auto* c = std::get_if<CheckpointNow>(&*msg)) {
        on_request(*c);
        continue;
      }
      std::lock_guard lock(mu);
      if (auto* s = std::get_if<Schedule>(&*msg)) {
        schedule = *s;
      } else if (auto* a = std::get_if<AbortSave>(&*msg)) {
        aborted.insert(a->step);
        spdlog::warn("shardguard client: the save of step {} is abandoned: {}", a->step, a->reason);
      } else if (auto* w = std::get_if<AllWritten>(&*msg)) {
        all_written.insert(w->step);
      } else if (auto* c = std::get_if<Committed>(&*msg)) {
        committed.insert(c->step);
      } else if (std::get_if<Stop>(&*msg) != nullptr) {
        stop_requested = true;
      } else if (auto* e = std::get_if<ErrorReply>(&*msg)) {
        spdlog::warn("shardguard client: agent says: {}", e->message);
      }
      // Bounded: steps far behind the newest cannot matter any more.
      for (auto* steps : {&aborted, &all_written, &committed})
        while (steps->size() > 64) steps->erase(steps->begin());
      changed.notify_all();
    }
  }

  // Why a save of `step` must stop waiting, if it must.
  std::optional<std::string> cancelled(uint64_t step) const {
    std::lock_guard lock(mu);
    if (stop_requested) return std::string("the supervisor said stop");
    if (aborted.contains(step)) return std::string("another rank's save of this step failed");
    if (request && request->kind == RequestKind::kEmergency && request->at_step > step)
      return "every rank now saves step " + std::to_string(request->at_step);
    return std::nullopt;
  }

  bool emergency_for(uint64_t step) const {
    std::lock_guard lock(mu);
    if (local_emergency && step >= local_emergency->at_step) return true;
    return request && request->kind == RequestKind::kEmergency && step >= request->at_step;
  }

  // Waits until the supervisor says `set` holds `step` (all_written, committed), the wait is
  // cancelled or `deadline` passes. The supervisor's word, not a look at the checkpoint
  // location: a bucket would be asked once per rank per look. `fallback` is asked every
  // second meanwhile (a lost message must not cost the save) and may end the wait too.
  // A look at the checkpoint location as a fallback: a directory's costs nothing, a bucket's
  // is a request per rank, so once a second.
  Duration look_every() const { return store->location().is_bucket() ? Duration(1s) : Duration(20ms); }

  Status wait_for(const std::set<uint64_t>& set, uint64_t step, WallTime deadline,
                  const std::string& what, const std::function<bool()>& fallback) {
    const Duration every = look_every();
    SteadyTime next_look = clock.now() + every;
    for (;;) {
      {
        std::unique_lock lock(mu);
        changed.wait_for(lock, std::min<Duration>(every, 50ms),
                         [&] { return set.contains(step) || stop_requested; });
        if (set.contains(step)) return {};
      }
      if (auto why = cancelled(step))
        return Error(ErrorCode::kCancelled, what + " abandoned: " + *why);
      if (clock.wall_now() >= deadline)
        return Error(ErrorCode::kTimeout, what + ": the deadline passed");
      if (fallback && clock.now() >= next_look) {
        if (fallback()) return {};
        next_look = clock.now() + every;
      }
    }
  }

  // Waits until the manifest of `step` is committed, the deadline passes, or the wait is
  // cancelled.
  Status wait_for_manifest(uint64_t step, WallTime deadline) {
    const std::string key = checkpoint::manifest_key(step);
    auto there = [this, key] {
      auto exists = store->stat(key);
      return exists.ok() && exists->has_value();
    };
    if (!socket) {  // outside shardguard nobody tells: look, as rarely as a bucket deserves
      while (clock.wall_now() < deadline) {
        if (there()) return {};
        if (auto why = cancelled(step))
          return Error(ErrorCode::kCancelled, "emergency checkpoint of step " +
                                                  std::to_string(step) + " abandoned: " + *why);
        std::this_thread::sleep_for(store->location().is_bucket() ? 250ms : 20ms);
      }
      return Error(ErrorCode::kTimeout, "emergency checkpoint of step " + std::to_string(step) +
                                            " not committed by rank 0 before the deadline");
    }
    auto st = wait_for(committed, step, deadline,
                       "emergency checkpoint of step " + std::to_string(step), there);
    if (!st.ok() && st.error().code() == ErrorCode::kTimeout)
      return Error(ErrorCode::kTimeout, "emergency checkpoint of step " + std::to_string(step) +
                                            " not committed by rank 0 before the deadline");
    return st;
  }

  // finish() + (rank 0) commit + report. Runs on the training thread or the save thread.
  Status persist(checkpoint::ShardWriter writer, bool emergency_save, WallTime deadline,
                 std::optional<checkpoint::SaveReason> reason) {
    const uint64_t step = writer.options().step;
    // Writes stop at the save's deadline; one already past when the save starts says the
    // clocks disagree (the supervisor's and this host's), not that the save is late: then the
    // supervisor's own deadline decides.
    save_deadline_ms = deadline > clock.wall_now() ? to_unix_ms(deadline) : 0;
    begin_transfer(TransferPhase::kSave, step, writer.planned_file_size().value_or(0));
    auto sidecar = writer.finish();
    end_transfer(TransferPhase::kSave);
    if (!sidecar.ok()) {
      send(CheckpointFailed{step, sidecar.error().message(),
                            sidecar.error().code() == ErrorCode::kNoSpace});
      return std::move(sidecar).error();
    }
    send(CheckpointWritten{step});
    if (opt.rank == 0) {
      checkpoint::CommitOptions c;
      c.checkpoint_dir = opt.checkpoint_dir;
      // A bucket is not polled like a directory: every look is a request per rank.
      if (store->location().is_bucket()) c.poll_interval = 250ms;
      c.job_id = opt.job_id;
      c.step = step;
      c.attempt = opt.attempt;
      c.world_size = opt.world_size;
      c.reason = reason.value_or(emergency_save ? checkpoint::SaveReason::kEmergency
                                                : checkpoint::SaveReason::kPeriodic);
      c.timeout = emergency_save ? std::max<Duration>(deadline - clock.wall_now(), 1s)
                                 : opt.commit_timeout;
      c.cancelled = [this, step] { return cancelled(step); };
      c.on_waiting = [step](const std::string& missing) {
        spdlog::warn("shardguard client: the commit of step {} is still waiting: {}", step, missing);
      };
      // The supervisor says when every rank's part is there; then one look commits. A look
      // now and then (a directory's as often as before) covers a word that never comes.
      std::optional<Result<checkpoint::Manifest>> looked;
      if (socket) {
        const WallTime until = clock.wall_now() + c.timeout;
        auto look = [&] {
          auto r = checkpoint::try_commit_checkpoint(*store, clock, c);
          if (!r.ok() && r.error().code() == ErrorCode::kNotFound) return false;
          looked = std::move(r);
          return true;
        };
        auto ready =
            wait_for(all_written, step, until, "the commit of step " + std::to_string(step), look);
        if (!ready.ok()) {
          if (ready.error().code() != ErrorCode::kCancelled)
            send(CheckpointFailed{step,
                                  ready.error().message() + " (not every rank said it wrote its "
                                                            "part)",
                                  false});
          return std::move(ready).error();
        }
        c.timeout = std::min<Duration>(c.timeout, 30s);  // visible now: strong consistency
      }
      auto m = looked ? std::move(*looked) : checkpoint::commit_checkpoint(*store, clock, c);
      if (!m.ok()) {
        if (m.error().code() != ErrorCode::kCancelled)
          send(CheckpointFailed{step, m.error().message(), m.error().code() == ErrorCode::kNoSpace});
        return std::move(m).error();
      }
      send(CheckpointCommitted{step, store->describe(checkpoint::manifest_key(step))});
    } else if (emergency_save) {
      SG_RETURN_IF_ERROR(wait_for_manifest(step, deadline));
    }
    std::lock_guard lock(mu);
    last_committed = std::max(last_committed, step);
    if (emergency_save) exit_ready = true;
    return {};
  }

  void join_saver() {
    if (saver.joinable()) saver.join();
  }

  // The given store, or a connection to checkpoint_dir of the client's own.
  Status open_store() {
    if (opt.deps.store != nullptr) {
      store = opt.deps.store;
      return {};
    }
    SG_ASSIGN_OR_RETURN(storage::Location loc, storage::Location::parse(opt.checkpoint_dir));
    storage::ConnectOptions c;
    c.fs = &fs;
    c.s3 = opt.s3;
    c.clock = &clock;
    c.warn = [](std::string_view what) { spdlog::warn("shardguard client: {}", what); };
    auto conn = storage::connect(loc, std::move(c));
    if (!conn.ok()) return std::move(conn).error().context("client");
    owned_store = storage::shared_store(std::move(*conn));
    store = owned_store.get();
    return {};
  }

  // The key of a manifest given by path or URL, and its step.
  Result<uint64_t> step_of(const std::string& manifest) const {
    SG_ASSIGN_OR_RETURN(std::string key, storage::key_within(store->location(), manifest));
    const auto slash = key.find('/');
    auto step = checkpoint::parse_step_dir_name(key.substr(0, slash));
    if (!step || key.substr(slash + 1) != checkpoint::kManifestName)
      return Error(ErrorCode::kInvalid, "'" + manifest + "' is not a step's manifest under '" +
                                            store->location().str() + "'");
    return *step;
  }

  // Populates the staging of async saves from start-up: sized from this rank's file in the
  // resume manifest, else the staging_bytes hint. Without either the first save pays.
  void prepare_staging(const std::optional<std::string>& manifest) {
    uint64_t bytes = 0;
    if (manifest) {
      auto key = storage::key_within(store->location(), *manifest);
      auto text = key.ok() ? store->read(*key) : Result<std::string>(std::move(key).error());
      auto m = text.ok() ? checkpoint::parse_manifest(*text, *manifest)
                         : Result<checkpoint::Manifest>(std::move(text).error());
      if (m.ok()) bytes = checkpoint::staging_bytes_for(*m, opt.rank, opt.world_size);
    }
    if (bytes == 0 && opt.staging_bytes > 0) bytes = opt.staging_bytes + kHeaderRoom;
    if (bytes == 0) return;
    if (auto st = staging.prepare(bytes); !st.ok())
      spdlog::warn("shardguard client: {}", st.error().message());
  }
};

Client::Client(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Client::~Client() {
  impl_->join_saver();
  impl_->closing = true;
  if (impl_->reader.joinable()) impl_->reader.join();
  if (impl_->handler_installed)
    ::sigaction(impl_->opt.checkpoint_signal, &impl_->previous_handler, nullptr);
  if (impl_->handle_term) ::sigaction(SIGTERM, &impl_->previous_term, nullptr);
}

Result<std::unique_ptr<Client>> Client::from_env(ClientOptions defaults) {
  SG_ASSIGN_OR_RETURN(auto opt, options_from_env(std::move(defaults)));
  return create(std::move(opt));
}

Result<std::unique_ptr<Client>> Client::create(ClientOptions opt) {
  if (opt.checkpoint_dir.empty())
    return Error(ErrorCode::kInvalid, "client: no checkpoint directory given");
  auto impl = std::make_unique<Impl>(std::move(opt));
  impl->schedule.every_steps = impl->opt.every_steps;
  SG_RETURN_IF_ERROR(impl->open_store());

  if (!impl->opt.control_socket.empty()) {
    auto sock = io::UnixSocketClient::connect(impl->opt.control_socket);
    if (!sock.ok()) return std::move(sock).error().context("control socket");
    impl->socket.emplace(std::move(*sock));
  }
  SG_RETURN_IF_ERROR(install_signal(impl->opt.checkpoint_signal, &impl->previous_handler));
  impl->handler_installed = impl->opt.checkpoint_signal != 0;
  // A checkpoint signal that is SIGTERM keeps its old meaning: the supervisor sends it.
  const bool term = impl->opt.handle_sigterm.value_or(impl->opt.under_shardguard) &&
                    impl->opt.checkpoint_signal != SIGTERM;
  impl->opt.handle_sigterm = term;
  if (term) {
    SG_RETURN_IF_ERROR(install_signal(SIGTERM, &impl->previous_term, on_term_signal));
    impl->handle_term = true;
  }
  if (impl->socket) {
    impl->send(Hello{impl->opt.rank, impl->opt.world_size, ::getpid(), impl->opt.job_id,
                     impl->opt.attempt});
    impl->reader = std::thread([p = impl.get()] { p->read_loop(); });
  }
  std::unique_ptr<Client> client(new Client(std::move(impl)));
  if (client->impl_->opt.async) client->impl_->prepare_staging(client->resume_manifest());
  return client;
}

const ClientOptions& Client::options() const { return impl_->opt; }

std::optional<std::string> Client::resume_manifest() const {
  const auto& o = impl_->opt;
  if (!o.resume_manifest.empty()) return o.resume_manifest;
  if (o.under_shardguard) return std::nullopt;  // the supervisor said: fresh start
  auto latest = checkpoint::latest_complete(*impl_->store, checkpoint::Verify::kSize);
  if (!latest.ok()) return std::nullopt;
  return impl_->store->describe(checkpoint::manifest_key(latest->step));
}

Result<checkpoint::CheckpointReader> Client::open_resume() const {
  auto manifest = resume_manifest();
  if (!manifest) return Error(ErrorCode::kNotFound, "no checkpoint to resume from");
  Impl* m = impl_.get();
  checkpoint::ReaderOptions r;
  r.on_read = [m](uint64_t bytes) { m->transfer_done += bytes; };
  auto begin = [&](const checkpoint::CheckpointReader& reader) {
    // This rank's share of the bytes, as an estimate of what it reads.
    const uint64_t world = std::max<uint32_t>(1, m->opt.world_size);
    m->begin_transfer(TransferPhase::kResume, reader.manifest().step,
                      reader.manifest().total_bytes() / world);
  };
  if (impl_->store->as_directory() != nullptr) {
    auto reader = checkpoint::CheckpointReader::open(impl_->fs, *manifest, r);
    if (reader.ok()) begin(*reader);
    return reader;
  }
  SG_ASSIGN_OR_RETURN(uint64_t step, impl_->step_of(*manifest));
  // A bucket's reads are ranged GETs of read_size, as many at once as the budget allows.
  r.request_bytes = impl_->opt.s3.read_size;
  r.io_threads = storage::s3::parallel_reads(impl_->opt.s3);
  auto reader = checkpoint::CheckpointReader::open(*impl_->store, step, r);
  if (reader.ok()) begin(*reader);
  return reader;
}

void Client::report_resume_failure(const Error& error) {
  ResumeFailed msg;
  msg.manifest = resume_manifest().value_or("");
  msg.error = error.message();
  impl_->send(msg);
}

void Client::report_resume_failure(const Error& error, const checkpoint::ChecksumFailure& where) {
  ResumeFailed msg;
  msg.manifest = where.manifest.empty() ? resume_manifest().value_or("") : where.manifest;
  msg.file = where.file;
  msg.offset = where.offset.value_or(0);
  msg.error = error.message();
  impl_->send(msg);
}

void Client::heartbeat(uint64_t step) {
  impl_->end_transfer(TransferPhase::kResume);  // training runs: the resume's reads are over
  impl_->report_signals();
  const auto now = impl_->clock.now();
  Heartbeat beat{step, {}};
  {
    std::lock_guard lock(impl_->mu);
    impl_->last_step = step;
    // A NaN or an infinity goes out at once: every step trained on bad weights is wasted.
    if (now - impl_->last_heartbeat < 100ms && impl_->last_heartbeat != SteadyTime{} &&
        !impl_->pending_nonfinite)
      return;
    impl_->last_heartbeat = now;
    beat.scalars = std::exchange(impl_->pending_scalars, {});
    impl_->pending_nonfinite = false;
  }
  impl_->send(beat);
}

Status Client::report_scalar(std::string_view name, uint64_t step, double value) {
  std::lock_guard lock(impl_->mu);
  auto* slot = impl_->pending_scalars.find(name);
  if (slot == nullptr)
    return Error(ErrorCode::kInvalid, "report_scalar: unknown scalar '" + std::string(name) +
                                          "' (known: loss, grad_norm)");
  if (!*slot) *slot = ScalarWindow{};
  (*slot)->add(step, value);
  if (!std::isfinite(value)) impl_->pending_nonfinite = true;
  return {};
}

bool Client::should_checkpoint(uint64_t step) {
  Impl& m = *impl_;
  const bool signal_seen = g_signal_seen.exchange(false) && !m.socket;
  const bool term_seen = !m.socket && m.handle_term && g_term_seen.exchange(false);
  if (signal_seen || term_seen) {
    // Outside shardguard nobody else will choose a step: save the one at hand.
    std::lock_guard lock(m.mu);
    if (!m.local_emergency)
      m.local_emergency =
          EmergencyRequest{m.clock.wall_now() + 30s, signal_seen ? "signal" : "sigterm", step};
  }
  // Under shardguard a signal needs nothing here: the supervisor sends checkpoint_now (before
  // the checkpoint signal) with the step every rank saves; a SIGTERM is reported to it.
  m.report_signals();
  bool save = false;
  {
    std::lock_guard lock(m.mu);
    m.last_checked = step;
    if (m.exit_ready || m.stop_requested) return false;
    if (m.local_emergency && step >= m.local_emergency->at_step) return true;
    if (m.request && !m.request_passed) {
      if (step >= m.request->at_step) {
        save = true;
        if (m.request->kind != RequestKind::kEmergency) m.request.reset();
      }
    }
    if (!save)
      save = m.schedule.every_steps > 0 && step > 0 && step % m.schedule.every_steps == 0 &&
             step > m.last_committed;
  }
  return save;
}

std::optional<EmergencyRequest> Client::emergency() const {
  std::lock_guard lock(impl_->mu);
  if (impl_->local_emergency) return impl_->local_emergency;
  if (impl_->request && impl_->request->kind == RequestKind::kEmergency)
    return EmergencyRequest{from_unix_ms(impl_->request->deadline_unix_ms), impl_->request->reason,
                            impl_->request->at_step};
  return std::nullopt;
}

std::optional<uint64_t> Client::requested_step() const {
  std::lock_guard lock(impl_->mu);
  if (!impl_->request || impl_->request_passed) return std::nullopt;
  return impl_->request->at_step;
}

void Client::notify_signal() { g_signal_seen.store(true); }
void Client::notify_sigterm() { g_term_seen.store(true); }
bool Client::handles_sigterm() const { return impl_->handle_term; }

Status Client::restore_signal_handlers() {
  if (impl_->handler_installed)
    SG_RETURN_IF_ERROR(install_signal(impl_->opt.checkpoint_signal, nullptr));
  if (impl_->handle_term) SG_RETURN_IF_ERROR(install_signal(SIGTERM, nullptr, on_term_signal));
  return {};
}

bool Client::should_exit() const {
  std::lock_guard lock(impl_->mu);
  return impl_->exit_ready || impl_->stop_requested;
}

bool Client::emergency_committed() const {
  std::lock_guard lock(impl_->mu);
  return impl_->exit_ready;
}

checkpoint::ShardWriter Client::begin_save(uint64_t step) {
  checkpoint::WriterOptions w;
  w.checkpoint_dir = impl_->opt.checkpoint_dir;
  w.job_id = impl_->opt.job_id;
  w.step = step;
  w.attempt = impl_->opt.attempt;
  w.attempts_numbered = impl_->opt.attempts_numbered || impl_->opt.under_shardguard;
  w.rank = impl_->opt.rank;
  w.world_size = impl_->opt.world_size;
  w.io_threads = impl_->opt.io_threads;
  Impl* m = impl_.get();
  w.interrupt = [m, step] { return m->save_interrupted(step); };
  w.on_written = [m](uint64_t bytes) { m->transfer_done += bytes; };
  if (impl_->store->location().is_bucket()) {
    // A bucket's blocks are its multipart upload's parts, as many in flight as the budget.
    w.block_size = impl_->opt.s3.part_size;
    w.io_threads = storage::s3::parallel_parts(impl_->opt.s3);
  }
  return checkpoint::ShardWriter(*impl_->store, w);
}

Status Client::save(checkpoint::ShardWriter writer, std::optional<checkpoint::SaveReason> reason) {
  Impl& m = *impl_;
  const uint64_t step = writer.options().step;
  const bool emergency = m.emergency_for(step);
  // One save in flight at a time; its failure was reported already.
  if (auto previous = wait(); !previous.ok())
    spdlog::warn("shardguard client: previous save failed: {}", previous.error().message());
  m.send(CheckpointBegin{step});
  if (!m.opt.async || emergency) {
    WallTime deadline = m.clock.wall_now() + m.opt.commit_timeout;
    if (emergency) {
      if (auto e = this->emergency()) deadline = e->deadline;
    }
    Status st = m.persist(std::move(writer), emergency, deadline, reason);
    m.send(Heartbeat{step, {}});  // the save is over: this rank is not stuck in it
    return st;
  }
  auto copied = writer.snapshot(m.staging);
  if (!copied.ok()) {
    m.send(CheckpointFailed{step, copied.error().message(),
                            copied.error().code() == ErrorCode::kNoSpace});
    return std::move(copied).error();
  }
  m.save_result.reset();
  m.send(Heartbeat{step, {}});  // the training thread goes on
  const WallTime deadline = m.clock.wall_now() + m.opt.commit_timeout;
  m.saver = std::thread([&m, reason, deadline, w = std::move(writer)]() mutable {
    m.save_result = m.persist(std::move(w), false, deadline, reason);
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

Status Client::reserve(uint64_t bytes) {
  impl_->join_saver();
  return impl_->staging.prepare(bytes + kHeaderRoom);
}

checkpoint::StagingBuffer& Client::staging() { return impl_->staging; }

uint64_t Client::last_committed_step() const {
  std::lock_guard lock(impl_->mu);
  return impl_->last_committed;
}

}  // namespace shardguard::hooks
