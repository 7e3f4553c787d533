#include "supervisor/local_launcher.h"

#include <signal.h>
#include <spdlog/spdlog.h>

#include "io/event_loop.h"
#include "io/process.h"
#include "io/process_record.h"
#include "io/process_tree.h"

namespace shardguard::supervisor {

struct LocalLauncher::Impl {
  io::EventLoop& loop;
  io::ProcessLauncher& processes;
  std::string record;
  struct Rank {
    std::unique_ptr<io::ChildProcess> child;
    pid_t pid = 0;
    pid_t pgid = 0;
    bool exited = false;
  };
  Epoch epoch = 0;
  std::map<uint32_t, Rank> ranks;
  ExitCallback on_exit;
  // Bumped on every launch and destroy, so a callback of an older generation does nothing.
  uint64_t generation = 0;

  Impl(io::EventLoop& l, io::ProcessLauncher& p, std::string r)
      : loop(l), processes(p), record(std::move(r)) {}

  void kill_started() {
    for (auto& [r, rk] : ranks)
      if (!rk.exited) (void)rk.child->signal_group(SIGKILL);
  }
};

LocalLauncher::LocalLauncher(io::EventLoop& loop, io::ProcessLauncher& processes,
                             std::string process_record)
    : impl_(std::make_unique<Impl>(loop, processes, std::move(process_record))) {}

LocalLauncher::~LocalLauncher() { impl_->kill_started(); }

Status LocalLauncher::launch(Epoch epoch, std::vector<RankLaunch> ranks, ExitCallback on_exit) {
  Impl& m = *impl_;
  m.ranks.clear();
  m.epoch = epoch;
  m.on_exit = std::move(on_exit);
  const uint64_t generation = ++m.generation;
  for (auto& r : ranks) {
    r.spec.die_with_parent = true;
    r.spec.isolate = io::Isolation::kAuto;
    auto child = m.processes.launch(r.spec);
    if (!child.ok()) {
      m.kill_started();
      return std::move(child).error().context("rank " + std::to_string(r.rank));
    }
    if (!m.record.empty())
      if (auto st = io::record_launched(m.record, **child); !st.ok())
        spdlog::warn("process record: {}", st.error().message());
    Impl::Rank rk;
    rk.pid = (*child)->pid();
    rk.pgid = (*child)->pgid();
    rk.child = std::move(*child);
    m.ranks.emplace(r.rank, std::move(rk));
  }
  for (auto& [rank, rk] : m.ranks) {
    rk.child->async_wait([this, rank = rank, generation](Result<io::ExitStatus> st) {
      Impl& m = *impl_;
      if (generation != m.generation) return;
      auto it = m.ranks.find(rank);
      if (it == m.ranks.end() || it->second.exited) return;
      it->second.exited = true;
      if (m.on_exit) m.on_exit(rank, st.ok() ? *st : io::ExitStatus::killed(SIGKILL));
    });
  }
  return {};
}

void LocalLauncher::destroy(Epoch epoch, std::function<void()> done) {
  Impl& m = *impl_;
  if (epoch != m.epoch || m.ranks.empty()) {
    m.loop.post(std::move(done));
    return;
  }
  auto pending = std::make_shared<size_t>(m.ranks.size());
  auto finish = std::make_shared<std::function<void()>>(std::move(done));
  for (auto& [rank, rk] : m.ranks) {
    io::KillTreeOptions o;
    o.first_signal = SIGKILL;  // the stop message was the polite request
    o.grace = Duration{0};
    io::async_kill_tree(m.loop, rk.pgid, o, rk.exited ? nullptr : rk.child.get(),
                        [pending, finish, rank = rank](Result<io::KillTreeReport> r) {
                          if (!r.ok())
                            spdlog::error("teardown of rank {}: {}", rank, r.error().message());
                          if (--*pending == 0) (*finish)();
                        });
  }
}

void LocalLauncher::signal(uint32_t rank, int sig) {
  auto it = impl_->ranks.find(rank);
  if (it != impl_->ranks.end() && !it->second.exited) (void)it->second.child->signal(sig);
}

std::optional<pid_t> LocalLauncher::pid_of(uint32_t rank) const {
  auto it = impl_->ranks.find(rank);
  if (it == impl_->ranks.end() || it->second.exited) return std::nullopt;
  return it->second.pid;
}

bool LocalLauncher::owns(uint32_t rank, pid_t pid) const {
  auto it = impl_->ranks.find(rank);
  if (it == impl_->ranks.end() || it->second.exited) return false;
  const Impl::Rank& rk = it->second;
  if (pid == rk.pid) return true;
  if (auto tree = rk.child->tree()) return tree->contains(pid);
  return io::is_descendant_of(pid, rk.pid);
}

std::optional<pid_t> LocalLauncher::group_of(uint32_t rank) const {
  auto it = impl_->ranks.find(rank);
  if (it == impl_->ranks.end()) return std::nullopt;
  return it->second.pgid;
}

}  // namespace shardguard::supervisor
