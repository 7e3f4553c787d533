#include "cli/job_services.h"

#include <spdlog/spdlog.h>

#include <cstdlib>

#include "core/units.h"
#include "hooks/lifecycle.h"
#include "io/event_loop.h"
#include "io/http_server.h"

namespace shardguard::cli {

struct JobServices::Impl {
  const io::Deps* deps = nullptr;
  supervisor::Supervisor* sup = nullptr;
  std::unique_ptr<hooks::LifecycleHooks> hooks;
  std::unique_ptr<io::HttpServer> metrics;
  bool stopped = false;

  // The hook runs in flight finish, or are killed at their limit or the emergency's deadline.
  void finish_hooks() {
    if (!hooks || hooks->idle()) return;
    Duration budget = hooks->longest_run();
    std::string why = "shardguard exits and the hook ran past its own time limit";
    if (auto deadline = sup->emergency_deadline()) {
      const auto left =
          std::chrono::duration_cast<Duration>(*deadline - deps->clock.wall_now());
      if (left < budget) {
        budget = std::max(Duration{0}, left);
        why = "the emergency checkpoint's deadline came (the machine goes then)";
      }
    }
    const auto in_flight = hooks->stats().in_flight;
    spdlog::info("waiting up to {} for {} hook run(s) in flight before exiting",
                 format_duration(budget), in_flight);
    deps->loop.run_until([this] { return hooks->idle(); }, budget);
    if (!hooks->idle()) hooks->stop(why);
  }
};

JobServices::JobServices(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
JobServices::~JobServices() { stop(); }

Result<std::unique_ptr<JobServices>> JobServices::start(const io::Deps& deps,
                                                        const supervisor::JobConfig& cfg,
                                                        supervisor::Supervisor& sup,
                                                        Observer observer) {
  auto impl = std::make_unique<Impl>();
  impl->deps = &deps;
  impl->sup = &sup;
  // The job's [[hooks]], never blocking the loop.
  auto hooks = hooks::LifecycleHooks::create(deps.loop, deps.launcher, deps.http, deps.timers,
                                             deps.clock, cfg.hooks);
  if (!hooks.ok()) return std::move(hooks).error().context("hooks");
  impl->hooks = std::move(*hooks);
  hooks::LifecycleHooks* h = impl->hooks.get();
  sup.set_on_lifecycle([h, observer = std::move(observer)](
                           std::string_view event, std::map<std::string, std::string> fields) {
    if (observer) observer(event, fields);
    h->fire(event, std::move(fields));
  });
  // Prometheus metrics, on loopback unless [metrics] address (or SHARDGUARD_METRICS_ADDRESS)
  // says otherwise.
  if (cfg.metrics_port != 0) {
    const char* env = std::getenv("SHARDGUARD_METRICS_ADDRESS");
    const std::string addr = !cfg.metrics_address.empty() ? cfg.metrics_address
                             : env != nullptr             ? std::string(env)
                                                          : std::string("127.0.0.1");
    impl->metrics = std::make_unique<io::HttpServer>(deps.loop, addr, cfg.metrics_port);
    impl->metrics->handle("/metrics", [&sup] {
      return io::HttpReply{200, "text/plain; version=0.0.4", sup.metrics_text()};
    });
    if (auto st = impl->metrics->start(); !st.ok())
      return Error(ErrorCode::kInvalid, "metrics: " + st.error().message());
    spdlog::info("metrics on http://{}:{}/metrics", addr, impl->metrics->port());
  }
  return std::unique_ptr<JobServices>(new JobServices(std::move(impl)));
}

void JobServices::stop() {
  if (!impl_ || impl_->stopped) return;
  impl_->stopped = true;
  impl_->finish_hooks();
  if (impl_->metrics) impl_->metrics->stop();
}

}  // namespace shardguard::cli
