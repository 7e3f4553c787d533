// Lifecycle hooks (hooks/lifecycle.h): each fired event becomes runs on the EventLoop;
// commands and webhooks report back through weak pointers, so destroying the hooks drops them.
#include "hooks/lifecycle.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <boost/json.hpp>
#include <deque>

#include "core/log_limiter.h"
#include "core/terminal_text.h"
#include "core/units.h"
#include "io/event_loop.h"
#include "io/http_client.h"
#include "io/process.h"

namespace shardguard::hooks {
namespace {

std::string describe(const HookSpec& spec) {
  std::string out = "hook '" + spec.event + "'";
  if (!spec.command.empty()) out += " command '" + spec.command[0] + "'";
  if (!spec.url.empty()) out += " url '" + spec.url + "'";
  return out;
}

// argv as one line for the log: each word quoted, terminal escapes made visible.
std::string argv_text(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) out += (out.empty() ? "" : " ") + ("'" + escape_for_terminal(a) + "'");
  return out;
}

std::string json_body(std::string_view event, int64_t unix_ms, const EventFields& fields) {
  boost::json::object f;
  for (const auto& [k, v] : fields) f[k] = v;
  return boost::json::serialize(
      boost::json::object{{"event", event}, {"time_unix_ms", unix_ms}, {"fields", std::move(f)}});
}

}  // namespace

Status validate_hook(const HookSpec& spec) {
  const auto bad = [&](const std::string& why) {
    return Error(ErrorCode::kInvalid, "hook '" + spec.event + "': " + why);
  };
  if (std::find(kHookEvents.begin(), kHookEvents.end(), spec.event) == kHookEvents.end())
    return bad(
        "unknown event (use preempt_notice, checkpoint_committed, restart, give_up, "
        "node_unhealthy or divergence)");
  if (spec.command.empty() && spec.url.empty()) return bad("needs a command or a url");
  if (!spec.command.empty() && spec.command[0].empty()) return bad("empty program name");
  if (!spec.url.empty()) {
    if (auto u = io::parse_url(spec.url); !u.ok()) return bad(u.error().message());
  }
  if (spec.timeout <= Duration::zero()) return bad("timeout must be positive");
  if (spec.retries < 0 || spec.retries > kMaxHookRetries)
    return bad("retries must be 0.." + std::to_string(kMaxHookRetries));
  return {};
}

std::string event_env_name(std::string_view key) {
  std::string out = "SHARDGUARD_EVENT_";
  for (char c : key) {
    if (c >= 'a' && c <= 'z') c = static_cast<char>(c - 'a' + 'A');
    out += ((c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9')) ? c : '_';
  }
  return out;
}

// One queued hook run: a spec and the event it reacts to.
struct Run {
  const HookSpec* spec;
  std::string event;
  int64_t unix_ms;
  EventFields fields;
};

struct LifecycleHooks::Impl : std::enable_shared_from_this<Impl> {
  io::EventLoop& loop;
  io::ProcessLauncher& launcher;
  io::HttpClient& http;
  TimerFactory& timers;
  Clock& clock;
  std::vector<HookSpec> specs;
  LifecycleHooksOptions opt;

  std::atomic<uint64_t> fired{0}, succeeded{0}, failed{0}, timed_out{0}, http_attempts{0},
      finished{0}, dropped{0}, queued{0}, peak_commands{0}, peak_webhooks{0};
  LogLimiter limiter;

  // Slots for one kind of work (commands or webhooks): loop thread only.
  struct Waiting {
    std::function<void()> start;
    std::function<void()> drop;  // reports the part as failed
  };
  struct Pool {
    Pool(const char* kind, std::atomic<uint64_t>* peak) : kind(kind), peak(peak) {}
    const char* kind;
    std::atomic<uint64_t>* peak;
    size_t limit = 1;
    size_t running = 0;
    std::deque<Waiting> waiting;
  };
  Pool command_pool{"command", &peak_commands};
  Pool webhook_pool{"webhook", &peak_webhooks};

  // Loop thread only: what is running or waiting, by run id.
  struct Command {
    std::unique_ptr<io::ChildProcess> child;
    std::unique_ptr<Timer> deadline;
    const HookSpec* spec = nullptr;
    SteadyTime started{};
    bool killed = false;
  };
  bool stopped = false;
  uint64_t next_id = 0;
  std::map<uint64_t, Command> commands;
  std::map<uint64_t, std::unique_ptr<Timer>> backoffs;

  Impl(io::EventLoop& l, io::ProcessLauncher& p, io::HttpClient& h, TimerFactory& t, Clock& c,
       std::vector<HookSpec> s, LifecycleHooksOptions o)
      : loop(l),
        launcher(p),
        http(h),
        timers(t),
        clock(c),
        specs(std::move(s)),
        opt(o),
        limiter(c, {}, nullptr, &t) {
    command_pool.limit = std::max<size_t>(1, opt.max_concurrent_commands);
    webhook_pool.limit = std::max<size_t>(1, opt.max_concurrent_webhooks);
  }

  // Runs `start` now if `pool` has a free slot, else queues it (dropping the oldest waiting
  // entry when the queue is full). `start` must end in exactly one release(pool).
  void acquire(Pool& pool, const HookSpec& spec, std::function<void()> start,
               std::function<void()> drop) {
    if (pool.running < pool.limit) {
      occupy(pool);
      return start();
    }
    if (pool.waiting.size() >= std::max<size_t>(1, opt.max_queued)) {
      Waiting oldest = std::move(pool.waiting.front());
      pool.waiting.pop_front();
      queued.fetch_sub(1);
      dropped.fetch_add(1);
      limiter.warn(std::string("hook queue full ") + pool.kind,
                   describe(spec) + ": " + std::to_string(pool.waiting.size() + 1) + " " +
                       pool.kind + "s waiting for " + std::to_string(pool.limit) +
                       " slots; dropped the oldest");
      oldest.drop();
    }
    pool.waiting.push_back({std::move(start), std::move(drop)});
    queued.fetch_add(1);
  }

  void occupy(Pool& pool) {
    ++pool.running;
    if (pool.running > pool.peak->load()) pool.peak->store(pool.running);
  }

  // Frees a slot; the next waiting entry starts from the loop, not inside this call stack.
  void release(Pool& pool) {
    --pool.running;
    if (pool.waiting.empty()) return;
    Waiting next = std::move(pool.waiting.front());
    pool.waiting.pop_front();
    queued.fetch_sub(1);
    occupy(pool);
    loop.post([self = weak_from_this(), start = std::move(next.start)] {
      if (self.lock()) start();
    });
  }

  ~Impl() { stop("shardguard is exiting"); }

  void stop(const std::string& why) {
    if (stopped) return;
    stopped = true;
    for (auto& [id, c] : commands) {
      if (c.killed) continue;
      spdlog::warn("{} (argv {}): killed with its process group after {}: {}", describe(*c.spec),
                   argv_text(c.spec->command), format_duration(clock.now() - c.started), why);
      // ChildProcess's destructor SIGKILLs and reaps its group; make the group explicit.
      (void)c.child->signal_group(SIGKILL);
      c.killed = true;
    }
    if (webhook_pool.running > 0)
      spdlog::warn("{} webhook(s) in flight abandoned: {}", webhook_pool.running, why);
    for (Pool* pool : {&command_pool, &webhook_pool}) {
      if (pool->waiting.empty()) continue;
      spdlog::warn("{} hook {}(s) waiting for a slot not run: {}", pool->waiting.size(),
                   pool->kind, why);
      pool->waiting.clear();
    }
    queued.store(0);
  }

  void done(bool ok) {
    (ok ? succeeded : failed).fetch_add(1);
    finished.fetch_add(1);
  }

  void start(const std::shared_ptr<Run>& run) {
    // A run with both a command and a url counts once: it succeeds if both do.
    const bool both = !run->spec->command.empty() && !run->spec->url.empty();
    auto pending = std::make_shared<std::pair<int, bool>>(both ? 2 : 1, true);
    auto part_done = [self = weak_from_this(), pending](bool ok) {
      pending->second = pending->second && ok;
      if (--pending->first > 0) return;
      if (auto s = self.lock()) s->done(pending->second);
    };
    if (!run->spec->command.empty()) {
      auto finish = [self = weak_from_this(), part_done](bool ok) {
        if (auto s = self.lock()) s->release(s->command_pool);
        part_done(ok);
      };
      acquire(
          command_pool, *run->spec,
          [self = weak_from_this(), run, finish] {
            if (auto s = self.lock()) s->start_command(run, finish);
          },
          [part_done] { part_done(false); });
    }
    if (!run->spec->url.empty()) {
      auto finish = [self = weak_from_this(), part_done](bool ok) {
        if (auto s = self.lock()) s->release(s->webhook_pool);
        part_done(ok);
      };
      acquire(
          webhook_pool, *run->spec,
          [self = weak_from_this(), run, finish] {
            if (auto s = self.lock()) s->post(run, 0, finish);
          },
          [part_done] { part_done(false); });
    }
  }

  void start_command(const std::shared_ptr<Run>& run, std::function<void(bool)> part_done) {
    const HookSpec& spec = *run->spec;
    io::ProcessSpec ps;
    ps.argv = spec.command;
    ps.env["SHARDGUARD_EVENT"] = run->event;
    ps.env["SHARDGUARD_EVENT_TIME_UNIX_MS"] = std::to_string(run->unix_ms);
    for (const auto& [k, v] : run->fields) ps.env[event_env_name(k)] = v;
    auto child = launcher.launch(ps);
    if (!child.ok()) {
      spdlog::warn("{}: {}", describe(spec), child.error().message());
      return part_done(false);
    }
    const uint64_t id = next_id++;
    Command& c = commands[id];
    c.spec = &spec;
    c.started = clock.now();
    c.child = std::move(*child);
    c.deadline = timers.make_timer();
    c.deadline->arm(spec.timeout, [self = weak_from_this(), id] {
      if (auto s = self.lock()) s->on_timeout(id);
    });
    c.child->async_wait([self = weak_from_this(), id, run, part_done](Result<io::ExitStatus> st) {
      if (auto s = self.lock()) s->on_exit(id, *run->spec, std::move(st), part_done);
    });
  }

  void on_timeout(uint64_t id) {
    auto it = commands.find(id);
    if (it == commands.end()) return;
    it->second.killed = true;
    (void)it->second.child->signal_group(SIGKILL);
  }

  void on_exit(uint64_t id, const HookSpec& spec, Result<io::ExitStatus> st,
               const std::function<void(bool)>& part_done) {
    auto it = commands.find(id);
    if (it == commands.end()) return;
    const bool killed = it->second.killed;
    it->second.deadline->cancel();
    // The ChildProcess is inside its own wait callback: destroy it after this handler.
    loop.post([self = weak_from_this(), id] {
      if (auto s = self.lock()) s->commands.erase(id);
    });
    if (killed && stopped) return part_done(false);  // logged by stop()
    if (killed) {
      timed_out.fetch_add(1);
      spdlog::warn("{}: killed with its process group at its timeout of {}", describe(spec),
                   format_duration(spec.timeout));
      return part_done(false);
    }
    if (!st.ok()) {
      spdlog::warn("{}: {}", describe(spec), st.error().message());
      return part_done(false);
    }
    if (!st->success()) spdlog::warn("{}: {}", describe(spec), st->describe());
    part_done(st->success());
  }

  void post(const std::shared_ptr<Run>& run, int attempt, std::function<void(bool)> part_done) {
    const HookSpec& spec = *run->spec;
    io::HttpRequest req;
    req.method = "POST";
    req.url = spec.url;
    req.timeout = spec.timeout;
    req.headers.set("Content-Type", "application/json");
    req.body = json_body(run->event, run->unix_ms, run->fields);
    req.max_body_bytes = 64 * 1024;
    http_attempts.fetch_add(1);
    http.request(std::move(req),
                 [self = weak_from_this(), run, attempt, part_done](Result<io::HttpResponse> r) {
                   if (auto s = self.lock()) s->on_response(run, attempt, std::move(r), part_done);
                 });
  }

  void on_response(const std::shared_ptr<Run>& run, int attempt, Result<io::HttpResponse> r,
                   std::function<void(bool)> part_done) {
    const HookSpec& spec = *run->spec;
    if (r.ok() && r->status >= 200 && r->status < 300) return part_done(true);
    const std::string why =
        r.ok() ? "HTTP status " + std::to_string(r->status) : r.error().message();
    if (attempt >= spec.retries) {
      spdlog::warn("{}: giving up after {} attempt(s): {}", describe(spec), attempt + 1, why);
      return part_done(false);
    }
    Duration delay = opt.backoff_initial;
    for (int i = 0; i < attempt && delay < opt.backoff_max; ++i) delay *= 2;
    delay = std::min(delay, opt.backoff_max);
    spdlog::info("{}: attempt {} failed ({}); retrying in {}", describe(spec), attempt + 1, why,
                 format_duration(delay));
    const uint64_t id = next_id++;
    auto& timer = backoffs[id];
    timer = timers.make_timer();
    timer->arm(delay, [self = weak_from_this(), id, run, attempt, part_done] {
      auto s = self.lock();
      if (!s) return;
      // Erasing the timer from inside its own callback: defer it to the loop.
      s->loop.post([w = s->weak_from_this(), id] {
        if (auto t = w.lock()) t->backoffs.erase(id);
      });
      s->post(run, attempt + 1, part_done);
    });
  }
};

LifecycleHooks::LifecycleHooks(std::shared_ptr<Impl> impl) : impl_(std::move(impl)) {}
LifecycleHooks::~LifecycleHooks() = default;

Result<std::unique_ptr<LifecycleHooks>> LifecycleHooks::create(
    io::EventLoop& loop, io::ProcessLauncher& launcher, io::HttpClient& http, TimerFactory& timers,
    Clock& clock, std::vector<HookSpec> specs, LifecycleHooksOptions options) {
  for (size_t i = 0; i < specs.size(); ++i)
    if (auto st = validate_hook(specs[i]); !st.ok())
      return std::move(st).error().context("hooks[" + std::to_string(i) + "]");
  auto impl =
      std::make_shared<Impl>(loop, launcher, http, timers, clock, std::move(specs), options);
  return std::unique_ptr<LifecycleHooks>(new LifecycleHooks(std::move(impl)));
}

size_t LifecycleHooks::fire(std::string_view event, EventFields fields) {
  const int64_t unix_ms = to_unix_ms(impl_->clock.wall_now());
  size_t queued = 0;
  for (const auto& spec : impl_->specs) {
    if (spec.event != event) continue;
    auto run = std::make_shared<Run>(Run{&spec, std::string(event), unix_ms, fields});
    impl_->fired.fetch_add(1);
    impl_->loop.post([self = std::weak_ptr<Impl>(impl_), run] {
      if (auto s = self.lock()) s->start(run);
    });
    ++queued;
  }
  return queued;
}

bool LifecycleHooks::idle() const {
  return impl_->fired.load() == impl_->finished.load();
}

Duration LifecycleHooks::longest_run() const {
  Duration longest{0};
  const Impl& m = *impl_;
  for (const auto& spec : m.specs) {
    Duration run = spec.command.empty() ? Duration{0} : spec.timeout;
    if (!spec.url.empty()) {
      Duration web = spec.timeout, backoff = m.opt.backoff_initial;
      for (int i = 0; i < spec.retries; ++i) {
        web += backoff + spec.timeout;
        backoff = std::min(backoff * 2, m.opt.backoff_max);
      }
      run = std::max(run, web);
    }
    longest = std::max(longest, run);
  }
  return longest;
}

void LifecycleHooks::stop(const std::string& why) { impl_->stop(why); }

HookStats LifecycleHooks::stats() const {
  const Impl& m = *impl_;
  HookStats s;
  s.fired = m.fired.load();
  s.succeeded = m.succeeded.load();
  s.failed = m.failed.load();
  s.timed_out = m.timed_out.load();
  s.http_attempts = m.http_attempts.load();
  s.in_flight = s.fired - m.finished.load();
  s.dropped = m.dropped.load();
  s.queued = m.queued.load();
  s.peak_commands = m.peak_commands.load();
  s.peak_webhooks = m.peak_webhooks.load();
  return s;
}

}  // namespace shardguard::hooks
