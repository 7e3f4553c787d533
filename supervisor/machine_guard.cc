// The AttemptMachine's divergence guard. Ranks send their loss and gradient norm with their
// heartbeats (windows of steps, core/scalar_window.h); policies::DivergenceGuard applies the
// [guard] rules. An anomaly on any rank tears the attempt down without saving, sets aside every
// checkpoint at or after the first step of the anomaly's window (it is evidence, kept for
// quarantine_keep), and relaunches from the newest checkpoint before it, telling the ranks to
// skip [guard] skip_batches data batches past the resume position (SHARDGUARD_SKIP_BATCHES).
// Another anomaly before a checkpoint commits past the last one rolls back further: the
// checkpoint the last rollback resumed from is set aside too. After [guard] rollbacks
// rollbacks the next anomaly gives up (exit 76) with the history.
#include <algorithm>

#include "core/exit_codes.h"
#include "supervisor/attempt_machine.h"
#include "supervisor/attempt_machine_impl.h"

namespace shardguard::supervisor {

void AttemptMachine::Impl::check_scalars(Now now, uint32_t rank, const StepScalars& scalars) {
  if (scalars.empty() || !attempt || attempt->tearing_down || attempt->divergence) return;
  if (auto anomaly = guard.observe(rank, scalars)) diverged(now, *anomaly);
}

void AttemptMachine::Impl::diverged(Now now, const policies::Anomaly& an) {
  AttemptState& a = *attempt;
  GuardState& g = guard_state;
  a.divergence = an;
  const std::string what = an.describe(cfg.guard.spike_factor);
  uint64_t from = an.suspect_from;
  g.gave_up = g.rollbacks >= cfg.guard.rollbacks;
  // The attempt resumed from the checkpoint the last rollback chose and went bad again: that
  // checkpoint is suspect too, so the next one goes further back. When giving up, only what
  // came after the anomaly is set aside: the checkpoint before it stays for a person to judge
  // (a run resumes from it once the data is fixed).
  const bool again = g.rolled_back && a.resume_step == g.rollback_to;
  if (again && a.resume_step && !g.gave_up) from = std::min(from, *a.resume_step);
  g.suspect_from = from;
  g.last_anomaly_step = std::max(g.last_anomaly_step, an.seen_step);
  g.history.push_back("attempt " + std::to_string(a.epoch) + ": " + what);
  const std::string action = g.gave_up ? "give_up" : again ? "roll_back_further" : "roll_back";
  EventFields f{{"attempt", a.epoch},          {"rank", uint64_t{an.rank}},
                {"scalar", an.scalar},         {"rule", an.rule},
                {"step", an.first_step},       {"seen_step", an.seen_step},
                {"quarantine_from", from},     {"action", action},
                {"rollbacks", uint64_t{g.rollbacks}}, {"what", what}};
  if (an.rule == "spike") {
    f.push_back({"value", an.value});
    f.push_back({"median", an.median});
  }
  record("divergence", std::move(f));
  hook("divergence", {{"rank", std::to_string(an.rank)},
                      {"step", std::to_string(an.first_step)},
                      {"what", what},
                      {"action", action}});
  out.push_back(command::QuarantineFrom{from, "divergence guard: " + what});
  if (!g.gave_up) {
    ++g.rollbacks;
    g.skip_from = from;
    g.choosing = true;
  }
  begin_teardown(now, "divergence guard: " + what);
}

bool AttemptMachine::Impl::guard_committed(const event::Committed& e) {
  GuardState& g = guard_state;
  if (attempt && attempt->epoch == e.epoch && attempt->divergence) {
    // A save that was under way when the guard stopped the attempt.
    if (e.step < g.suspect_from) return false;
    out.push_back(command::Quarantine{e.step, e.manifest,
                                      "divergence guard: committed after the anomaly at step " +
                                          std::to_string(g.suspect_from)});
    return true;
  }
  if (g.rollbacks > 0 && e.step > g.last_anomaly_step) {
    record("guard_recovered", {{"attempt", e.epoch}, {"step", e.step},
                               {"anomaly_step", g.last_anomaly_step},
                               {"rollbacks", uint64_t{g.rollbacks}}});
    g = GuardState{};
  }
  return false;
}

uint64_t AttemptMachine::Impl::guard_resume_found(Epoch epoch, std::optional<uint64_t> step) {
  GuardState& g = guard_state;
  if (g.choosing) {
    g.choosing = false;
    g.skip_from.reset();
    g.rolled_back = true;
    g.rollback_to = step;
    record("guard_rollback", {{"attempt", epoch},
                              {"to_step", step ? int64_t(*step) : int64_t{-1}},
                              {"suspect_from", g.suspect_from},
                              {"skip_batches", cfg.guard.skip_batches}});
  }
  return g.rolled_back && step == g.rollback_to ? cfg.guard.skip_batches : 0;
}

void AttemptMachine::Impl::guard_attempt_ended(Now now, const AttemptState& ended,
                                               const std::string& detail) {
  GuardState& g = guard_state;
  if (!g.gave_up)
    return relaunch_after(now, policies::ExitClass::kDivergence, "", detail, ended);
  std::string history;
  for (const auto& line : g.history) history += (history.empty() ? "" : "; ") + line;
  const std::string why = "divergence: " + std::to_string(g.history.size()) +
                          " anomalies, " + std::to_string(g.rollbacks) +
                          " rollback(s) did not get past them (" + history +
                          "); the checkpoints set aside are listed by shardguard ckpt ls; fix "
                          "the data or the model, then run again (it resumes from the newest "
                          "checkpoint left)";
  record("give_up", {{"attempt", ended.epoch}, {"class", std::string("divergence")}, {"why", why}});
  hook("give_up", {{"class", "divergence"}, {"reason", why}, {"detail", detail}});
  finish(now, command::FinalState::kFailed, kExitGaveUp, why);
}

}  // namespace shardguard::supervisor
