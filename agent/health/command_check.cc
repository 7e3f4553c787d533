#include "agent/health/command_check.h"

#include <signal.h>

#include <algorithm>

#include "agent/health/file_range.h"
#include "core/units.h"
#include "io/process.h"

namespace shardguard::agent {

namespace {

constexpr uint64_t kTailBytes = 512;

std::string command_line(const std::vector<std::string>& argv) {
  std::string out;
  for (const auto& a : argv) {
    if (!out.empty()) out += ' ';
    out += a;
  }
  return out.size() > 120 ? out.substr(0, 120) + "..." : out;
}

}  // namespace

CommandCheck::CommandCheck(CommandCheckSettings settings, io::EventLoop& loop,
                           io::ProcessLauncher& launcher, TimerFactory& timers)
    : settings_(std::move(settings)),
      name_("command:" + settings_.name),
      loop_(loop),
      launcher_(launcher),
      timer_(timers.make_timer()) {}

CommandCheck::~CommandCheck() {
  guard_.invalidate();
  timer_->cancel();
  child_.reset();  // SIGKILLs the group and reaps the leader
}

void CommandCheck::run(Done done) {
  if (child_) kill_group({}, false, /*report_after=*/false);  // the previous run is abandoned
  const uint64_t id = ++run_id_;
  done_ = std::move(done);
  if (settings_.argv.empty()) return report("no command configured", false);
  io::ProcessSpec spec;
  spec.argv = settings_.argv;
  spec.stdout_path = spec.stderr_path =
      settings_.output_file.empty() ? "/dev/null" : settings_.output_file;
  if (!settings_.output_file.empty())
    output_offset_ = read_file_range(settings_.output_file, 0, 0).value_or({}).file_size;
  auto child = launcher_.launch(spec);
  if (!child.ok()) return report(child.error().message(), false);
  child_ = std::move(child).value();
  timer_->arm(settings_.timeout, guard_.wrap([this, id] {
    if (id != run_id_ || !child_) return;
    kill_group("timed out after " + format_duration(settings_.timeout) + "; process group killed",
               false, true);
  }));
  child_->async_wait(guard_.wrap([this, id](Result<io::ExitStatus> status) {
    if (id != run_id_ || !child_) return;  // a timed-out or abandoned run
    timer_->cancel();
    if (!status.ok()) return kill_group("wait: " + status.error().message(), false, true);
    // Reap what the command left behind in its group before answering.
    kill_group(status->describe(), status->success(), true);
  }));
}

void CommandCheck::kill_group(std::string outcome, bool success, bool report_after) {
  timer_->cancel();
  // The ChildProcess travels with the teardown, which outlives this run (and this check).
  std::shared_ptr<io::ChildProcess> child(std::move(child_));
  io::KillTreeOptions options;
  options.grace = settings_.kill_grace;
  options.first_signal = SIGTERM;
  auto answer = guard_.wrap([this, id = run_id_, outcome = std::move(outcome),
                             success](Result<io::KillTreeReport> killed) {
    if (id != run_id_) return;
    if (!killed.ok()) return report(outcome + "; " + killed.error().message(), false);
    report(outcome, success);
  });
  io::async_kill_tree(
      loop_, child->pgid(), options, child.get(),
      [child, answer = std::move(answer), report_after](Result<io::KillTreeReport> killed) mutable {
        if (report_after) answer(std::move(killed));
      });
}

void CommandCheck::report(std::string outcome, bool success) {
  HealthFinding f;
  f.check = name_;
  f.severity = success ? HealthFinding::kOk : HealthFinding::kWarning;
  f.evidence = "'" + command_line(settings_.argv) + "': " + outcome;
  if (!success) f.evidence += output_tail();
  if (auto done = std::move(done_)) {
    done_ = nullptr;
    done(std::move(f));
  }
}

std::string CommandCheck::output_tail() {
  if (settings_.output_file.empty()) return {};
  auto size = read_file_range(settings_.output_file, 0, 0);
  if (!size.ok() || size->file_size <= output_offset_) return {};
  const uint64_t start =
      std::max(output_offset_, size->file_size - std::min(size->file_size, kTailBytes));
  auto tail = read_file_range(settings_.output_file, start, kTailBytes);
  if (!tail.ok()) return {};
  std::string data = std::move(tail->data);
  while (!data.empty() && (data.back() == '\n' || data.back() == '\r' || data.back() == ' '))
    data.pop_back();
  const auto nl = data.rfind('\n');
  if (nl != std::string::npos) data.erase(0, nl + 1);
  return data.empty() ? std::string() : " (last output: '" + data + "')";
}

}  // namespace shardguard::agent
