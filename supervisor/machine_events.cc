#include "supervisor/machine_events.h"

#include "core/overload.h"

namespace shardguard::supervisor {

std::string_view checkpoint_kind_name(CheckpointKind kind) {
  switch (kind) {
    case CheckpointKind::kEmergency: return "emergency";
    case CheckpointKind::kPeriodic: return "periodic";
    case CheckpointKind::kAdvisory: return "advisory";
  }
  return "unknown";
}

std::string_view timer_name(TimerId id) {
  switch (id) {
    case TimerId::kBackoff: return "backoff";
    case TimerId::kDeadline: return "deadline";
    case TimerId::kDrain: return "drain";
    case TimerId::kHealth: return "health";
    case TimerId::kPeriodic: return "periodic";
    case TimerId::kJoinWindow: return "join_window";
    case TimerId::kRendezvous: return "rendezvous";
    case TimerId::kStopTimeout: return "stop_timeout";
    case TimerId::kRejoin: return "rejoin";
  }
  return "unknown";
}

namespace command {
std::string_view final_state_name(FinalState state) {
  switch (state) {
    case FinalState::kSucceeded: return "succeeded";
    case FinalState::kFailed: return "failed";
    case FinalState::kPreempted: return "preempted";
  }
  return "unknown";
}
}  // namespace command

std::string_view event_name(const Event& e) {
  return std::visit(
      Overload{[](const event::NodeJoined&) { return "node_joined"; },
               [](const event::NodeLost&) { return "node_lost"; },
               [](const event::ResumeFound&) { return "resume_found"; },
               [](const event::NodeLaunched&) { return "node_launched"; },
               [](const event::LaunchFailed&) { return "launch_failed"; },
               [](const event::RankHello&) { return "rank_hello"; },
               [](const event::Heartbeats&) { return "heartbeats"; },
               [](const event::SaveBegan&) { return "save_began"; },
               [](const event::ShardWritten&) { return "shard_written"; },
               [](const event::Committed&) { return "committed"; },
               [](const event::SaveFailed&) { return "save_failed"; },
               [](const event::Passed&) { return "passed"; },
               [](const event::ResumeFailed&) { return "resume_failed"; },
               [](const event::RankExited&) { return "rank_exited"; },
               [](const event::NodeStopped&) { return "node_stopped"; },
               [](const event::Notice&) { return "notice"; },
               [](const event::NodeUnhealthy&) { return "node_unhealthy"; },
               [](const event::TimerFired&) { return "timer_fired"; },
               [](const event::Abort&) { return "abort"; }},
      e);
}

std::string_view command_name(const Command& c) {
  return std::visit(Overload{[](const command::FindResume&) { return "find_resume"; },
                             [](const command::Launch&) { return "launch"; },
                             [](const command::TearDown&) { return "tear_down"; },
                             [](const command::CheckpointNow&) { return "checkpoint_now"; },
                             [](const command::AbortSave&) { return "abort_save"; },
                             [](const command::AllWritten&) { return "all_written"; },
                             [](const command::SaveCommitted&) { return "save_committed"; },
                             [](const command::ArmTimer&) { return "arm_timer"; },
                             [](const command::CancelTimer&) { return "cancel_timer"; },
                             [](const command::Record&) { return "record"; },
                             [](const command::Hook&) { return "hook"; },
                             [](const command::AckNotice&) { return "ack_notice"; },
                             [](const command::Release&) { return "release"; },
                             [](const command::Quarantine&) { return "quarantine"; },
                             [](const command::QuarantineFrom&) { return "quarantine_from"; },
                             [](const command::CollectHangReport&) { return "collect_hang_report"; },
                             [](const command::Finish&) { return "finish"; }},
                    c);
}

}  // namespace shardguard::supervisor
