// The timeline model: one pass over the records, in file order, keeping the figures of
// supervisor/timeline.h up to date. Goodput is accounted at each change of what the allocated
// GPUs were doing (`Spend`); view() adds the phase still open at `now`.
#include "supervisor/timeline.h"

#include <algorithm>

#include "supervisor/timeline_state.h"

namespace shardguard::supervisor {
using namespace timeline_detail;

AttemptView* Timeline::State::open_attempt(const TimelineRecord& r) {
  if (!attempt_open) return nullptr;
  const auto a = r.count("attempt");
  if (a && *a != attempts.back().attempt) return nullptr;  // a zombie's or older record
  return &attempts.back();
}

// Accounts [since, at) to the current spend, then spends `next` from `at`.
void Timeline::State::switch_to(int64_t at, Spend next) {
  at = std::max(at, since);
  const double secs = seconds_between(since, at);
  switch (spend) {
    case Spend::kNone:
      break;
    case Spend::kWaiting:
      acc.badput(policies::Badput::kWaiting, secs, gpus);
      break;
    case Spend::kRestart:
      acc.badput(policies::Badput::kRestart, secs, gpus);
      break;
    case Spend::kLaunching:
      pending_seconds += secs;
      break;
    case Spend::kTraining:
      acc.training(secs, gpus);
      if (attempt_open) attempts.back().training_seconds += secs;
      break;
  }
  since = at;
  spend = next;
}

// The launch -> ready time of the open attempt: training or restart, now that it is known.
void Timeline::State::resolve_pending(bool trained) {
  if (trained) {
    acc.training(pending_seconds, gpus);
    acc.badput(policies::Badput::kCheckpoint, pending_stall, gpus);
    if (attempt_open) {
      attempts.back().training_seconds += pending_seconds;
      attempts.back().checkpoint_seconds += pending_stall;
    }
  } else {
    acc.badput(policies::Badput::kRestart, pending_seconds + pending_stall, gpus);
  }
  pending_seconds = pending_stall = 0;
}

void Timeline::State::open_run(const TimelineRecord& r, uint32_t nproc) {
  close_run(runs.empty() ? r.time_unix_ms : runs.back().last_unix_ms);
  RunView run;
  run.start_unix_ms = run.last_unix_ms = r.time_unix_ms;
  run.nproc = nproc;
  runs.push_back(std::move(run));
  run_open = true;
  since = r.time_unix_ms;
  gpus = nproc;
}

// A run that ends without `finish` (its supervisor was killed) ends at its last record.
void Timeline::State::close_run(int64_t at) {
  if (!run_open) return;
  if (attempt_open) {
    close_attempt_without_end(at, Spend::kNone);
    attempts.back().end_detail = "the supervisor stopped without recording the end of this attempt";
  }
  switch_to(at, Spend::kNone);
  gpus = 0;
  run_open = false;
}

void Timeline::State::note_step(uint64_t s, const char* source) {
  step = s;
  step_source = source;
}

void Timeline::State::on_start(const TimelineRecord& r) {
  open_run(r, static_cast<uint32_t>(std::min<uint64_t>(r.count("nproc").value_or(0), UINT32_MAX)));
  runs.back().job_id = r.text("job_id");
  state = "pending";
  switch_to(r.time_unix_ms, Spend::kWaiting);
}

void Timeline::State::on_launch(const TimelineRecord& r) {
  const uint32_t nproc =
      static_cast<uint32_t>(std::min<uint64_t>(r.count("nproc").value_or(0), UINT32_MAX));
  if (!run_open) open_run(r, nproc);
  if (attempt_open) close_attempt_without_end(r.time_unix_ms, Spend::kRestart);
  switch_to(r.time_unix_ms, Spend::kLaunching);
  if (nproc != 0) gpus = nproc;
  AttemptView a;
  a.attempt = r.count("attempt").value_or(attempts.empty() ? 0 : attempts.back().attempt + 1);
  a.run = runs.size() - 1;
  a.nproc = gpus;
  // resume_step is -1 on a fresh start.
  a.resume_step = r.count("resume_step");
  a.launch_unix_ms = r.time_unix_ms;
  attempts.push_back(std::move(a));
  attempt_open = true;
  attempt_ready = false;
  pending_seconds = pending_stall = 0;
  train_at_commit = 0;
  step_at_commit.reset();
  note_step(attempts.back().resume_step.value_or(0), "resume");
  state = "launching";
}

// An attempt whose end was never recorded (its supervisor was killed, or a hand-edited
// file): it ends at `at`, its pace known up to its last commit.
void Timeline::State::close_attempt_without_end(int64_t at, Spend next) {
  switch_to(at, next);
  resolve_pending(false);
  AttemptView& a = attempts.back();
  a.end_unix_ms = at;
  a.end_class = "unknown";
  a.steps_per_second = commit_pace(a);
  attempt_open = false;
}

void Timeline::State::on_ranks_ready(const TimelineRecord& r) {
  AttemptView* a = open_attempt(r);
  if (a == nullptr || attempt_ready) return;
  switch_to(r.time_unix_ms, Spend::kTraining);
  resolve_pending(false);
  attempt_ready = true;
  a->ready_unix_ms = r.time_unix_ms;
  state = "running";
}

void Timeline::State::on_committed(const TimelineRecord& r) {
  const auto step_committed = r.count("step");
  if (!step_committed) return;  // a hand-edited line: nothing to say about which step
  CheckpointView c;
  c.step = *step_committed;
  c.time_unix_ms = r.time_unix_ms;
  c.attempt = r.count("attempt").value_or(0);
  c.seconds = std::max(0.0, r.number("seconds").value_or(0));
  c.manifest = r.text("manifest");
  c.bytes = r.count("bytes");
  ++checkpoints;
  AttemptView* a = open_attempt(r);
  if (a != nullptr) {
    ++a->checkpoints;
    c.emergency = a->emergency_at_step && c.step >= *a->emergency_at_step;
    if (spend == Spend::kTraining || spend == Spend::kLaunching) {
      // The loop stalled for the save inside the time that would count as training.
      const double span = seconds_between(since, r.time_unix_ms);
      const double stall = std::min(c.seconds, span);
      if (spend == Spend::kTraining) {
        acc.training(span - stall, gpus);
        a->training_seconds += span - stall;
        acc.badput(policies::Badput::kCheckpoint, stall, gpus);
        a->checkpoint_seconds += stall;
      } else {
        pending_seconds += span - stall;
        pending_stall += stall;
      }
      since = std::max(since, r.time_unix_ms);
    }
    train_at_commit = a->training_seconds;
    step_at_commit = c.step;
    if (!step || c.step >= *step) note_step(c.step, "checkpoint");
    if (c.emergency) {
      // The ranks exit after an emergency save: what follows is stopping.
      if (spend == Spend::kTraining || spend == Spend::kLaunching)
        switch_to(r.time_unix_ms, Spend::kRestart);
      state = "draining";
    }
  }
  last_checkpoint = std::move(c);
}

void Timeline::State::on_hang(const TimelineRecord& r) {
  AttemptView* a = open_attempt(r);
  if (a == nullptr) return;
  if (auto s = r.count("step"); s && (!step || *s >= *step)) note_step(*s, "hang");
  const double quiet = std::max(0.0, r.number("seconds_since_heartbeat").value_or(0));
  if (spend == Spend::kTraining) {
    // Nothing was computed since the rank's last heartbeat.
    switch_to(std::max(since, r.time_unix_ms - static_cast<int64_t>(quiet * 1000.0)),
              Spend::kRestart);
  } else if (spend == Spend::kLaunching) {
    switch_to(r.time_unix_ms, Spend::kRestart);
    resolve_pending(false);
  }
}

void Timeline::State::on_teardown(const TimelineRecord& r) {
  AttemptView* a = open_attempt(r);
  if (a != nullptr) {
    a->teardown_unix_ms = r.time_unix_ms;
    a->teardown_why = r.text("why");
  }
  // The launch -> teardown time of an attempt that never reported ready stays pending
  // until attempt_end says whether it trained.
  if (spend != Spend::kNone) switch_to(r.time_unix_ms, Spend::kRestart);
  state = "stopping";
}

void Timeline::State::on_attempt_end(const TimelineRecord& r) {
  AttemptView* a = open_attempt(r);
  if (a == nullptr) return;
  switch_to(r.time_unix_ms, Spend::kRestart);
  a->end_unix_ms = r.time_unix_ms;
  a->end_class = r.text("class");
  a->end_detail = r.text("detail");
  a->max_step = std::max(a->max_step, r.count("max_step").value_or(0));
  a->lost_steps = r.count("lost_steps").value_or(0);
  if (!attempt_ready) resolve_pending(a->end_class == "success" || a->checkpoints > 0);
  const uint64_t base = a->resume_step.value_or(0);
  const uint64_t ran = a->max_step > base ? a->max_step - base : 0;
  if (ran > 0 && a->training_seconds > 0) {
    a->steps_per_second = double(ran) / a->training_seconds;
    // The steps since the last commit were computed for nothing: at this attempt's pace.
    a->lost_seconds = double(a->lost_steps) * a->training_seconds / double(ran);
    acc.lose(a->lost_seconds, a->nproc);
  }
  lost_steps += a->lost_steps;
  if (a->max_step > 0 && (!step || a->max_step >= *step)) note_step(a->max_step, "attempt end");
  attempt_open = false;
  state = "stopping";
}

void Timeline::State::on_backoff(const TimelineRecord& r) {
  std::string cls = "unknown";
  for (auto it = attempts.rbegin(); it != attempts.rend(); ++it)
    if (it->end_unix_ms) {
      cls = it->end_class.empty() ? "unknown" : it->end_class;
      it->backoff_seconds = r.number("seconds");
      it->restart_reason = r.text("why");
      break;
    }
  if (shrink_pending) cls = "preempted";  // notified nodes left; the rest go on
  shrink_pending = false;
  restarts.push_back({r.time_unix_ms, cls, runs.empty() ? 0 : runs.size() - 1});
  if (spend != Spend::kNone) switch_to(r.time_unix_ms, Spend::kRestart);
  state = "backoff";
}

void Timeline::State::on_finish(const TimelineRecord& r) {
  if (runs.empty()) return;
  RunView& run = runs.back();
  run.finish_unix_ms = r.time_unix_ms;
  run.final_state = r.text("state");
  if (auto code = r.number("exit_code")) run.exit_code = static_cast<int64_t>(*code);
  run.summary = r.text("summary");
  close_run(r.time_unix_ms);
  state = run.final_state.empty() ? "finished" : run.final_state;
}

void Timeline::State::on_notice(const TimelineRecord& r, bool shortened) {
  NoticeView n;
  n.time_unix_ms = r.time_unix_ms;
  n.source = r.text("source");
  n.kind = r.text("kind");
  n.reason = r.text("reason");
  n.action = r.text("action");
  n.preemption = r.flag("preemption").value_or(false);
  n.shortened = shortened;
  n.seconds_left = r.number("seconds_left");
  push_bounded(notices, std::move(n));
}

void Timeline::State::feed(const TimelineRecord& r) {
  ++record_count;
  if (!first_ms) first_ms = r.time_unix_ms;
  last_ms = std::max(last_ms.value_or(r.time_unix_ms), r.time_unix_ms);
  if (runs.empty() && r.type != "start" && r.type != "launch") open_run(r, 0);
  // A `start` belongs to the run it opens; a run killed without `finish` ends at its last record.
  if (run_open && r.type != "start")
    runs.back().last_unix_ms = std::max(runs.back().last_unix_ms, r.time_unix_ms);
  if (opt.keep_records) records.push_back(r);
  if (is_evidence(r.type)) push_bounded(evidence, r);
  on_node_record(r);
  const std::string& t = r.type;
  if (t == "start") return on_start(r);
  if (t == "launch") return on_launch(r);
  if (t == "ranks_ready") return on_ranks_ready(r);
  if (t == "transfer_progress") {
    TransferView x;
    x.phase = r.text("phase");
    x.step = r.count("step").value_or(0);
    x.done_bytes = r.count("done_bytes").value_or(0);
    x.total_bytes = r.count("total_bytes").value_or(0);
    x.bytes_per_second = r.number("bytes_per_second").value_or(0);
    x.seconds_left = r.number("seconds_left");
    x.time_unix_ms = r.time_unix_ms;
    transfer = std::move(x);
    return;
  }
  if (transfer && (t == "checkpoint_committed" || t == "checkpoint_failed") &&
      r.count("step") == transfer->step)
    transfer.reset();
  if (transfer && (t == "attempt_end" || t == "finish" || t == "ranks_ready") &&
      (t != "ranks_ready" || transfer->phase == "resume"))
    transfer.reset();
  if (t == "checkpoint_committed") return on_committed(r);
  if (t == "hang") return on_hang(r);
  if (t == "teardown") return on_teardown(r);
  if (t == "attempt_end") return on_attempt_end(r);
  if (t == "backoff") return on_backoff(r);
  if (t == "finish") return on_finish(r);
  if (t == "notice") return on_notice(r, false);
  if (t == "deadline_shortened") return on_notice(r, true);
  if (t == "shrink") shrink_pending = true;
  if (t == "waiting_for_nodes") {
    // A job below its node count waits for nodes: that is waiting, not restarting.
    if (spend != Spend::kNone) switch_to(r.time_unix_ms, Spend::kWaiting);
    state = "waiting for nodes (" + std::to_string(r.count("nodes").value_or(0)) + " of " +
            std::to_string(r.count("min_nodes").value_or(0)) + ")";
  }
  if (t == "adopt" && !last_checkpoint) {
    // A successor's run directory: what the job had committed before it took over.
    if (auto step = r.count("last_committed")) {
      CheckpointView c;
      c.step = *step;
      c.time_unix_ms = r.time_unix_ms;
      c.attempt = r.count("attempt").value_or(0);
      last_checkpoint = std::move(c);
    }
  }
  if (t == "give_up" && !attempts.empty()) attempts.back().gave_up = r.text("why");
  if (t == "checkpoint_now" && r.text("kind") == "emergency") {
    if (AttemptView* a = open_attempt(r)) {
      a->emergency_at_step = r.count("at_step");
      if (state == "running" || state == "launching") state = "checkpointing";
    }
  }
  if (t == "node_joined" && spend == Spend::kWaiting && r.count("nodes").value_or(1) > 0 &&
      state.rfind("waiting for nodes", 0) != 0)
    switch_to(r.time_unix_ms, Spend::kRestart);  // looking for the resume checkpoint
  if (t == "node_lost" && r.count("nodes") == uint64_t{0} && spend != Spend::kNone &&
      spend != Spend::kLaunching)
    switch_to(r.time_unix_ms, Spend::kWaiting);
}

}  // namespace shardguard::supervisor
