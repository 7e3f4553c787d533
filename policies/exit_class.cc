#include "policies/exit_class.h"

#include <algorithm>

#include "policies/signal_names.h"

namespace shardguard::policies {
namespace {

bool clean(const RankExit& e) { return !e.signaled && e.code == 0; }

std::string describe_rank(const RankExit& e) {
  std::string s = "rank " + std::to_string(e.rank);
  if (!e.signaled) return s + " exited with code " + std::to_string(e.code);
  s += " killed by signal " + std::to_string(e.signal);
  const std::string_view name = signal_name(e.signal);
  if (!name.empty()) (s += " (") += std::string(name) + ")";
  return s;
}

std::string describe_ranks(const std::vector<RankExit>& exits) {
  if (exits.empty()) return "no rank ended on its own";
  const auto failing =
      std::find_if(exits.begin(), exits.end(), [](const RankExit& e) { return !clean(e); });
  if (failing == exits.end()) {
    if (exits.size() == 1) return describe_rank(exits.front());
    return "all " + std::to_string(exits.size()) + " ranks exited with code 0";
  }
  std::string s = describe_rank(*failing);
  const size_t others = exits.size() - 1;
  if (others == 1) s += " (1 other rank ended too)";
  if (others > 1) s += " (" + std::to_string(others) + " other ranks ended too)";
  return s;
}

}  // namespace

std::string_view exit_class_name(ExitClass c) {
  switch (c) {
    case ExitClass::kSuccess:
      return "success";
    case ExitClass::kPreempted:
      return "preempted";
    case ExitClass::kInfrastructure:
      return "infrastructure";
    case ExitClass::kHang:
      return "hang";
    case ExitClass::kCrash:
      return "crash";
    case ExitClass::kNoProgress:
      return "no_progress";
    case ExitClass::kNoSpace:
      return "no_space";
    case ExitClass::kResumeFailed:
      return "resume_failed";
    case ExitClass::kResize:
      return "resize";
    case ExitClass::kDivergence:
      return "divergence";
  }
  return "unknown";
}

ExitClass classify_exit(const ExitContext& context) {
  if (context.node_unhealthy) return ExitClass::kInfrastructure;
  if (context.notice_active) return ExitClass::kPreempted;
  if (context.diverged) return ExitClass::kDivergence;
  if (context.resize) return ExitClass::kResize;
  if (context.resume_failed) return ExitClass::kResumeFailed;
  if (context.save_out_of_space) return ExitClass::kNoSpace;
  if (context.hang_detected) return ExitClass::kHang;
  if (context.node_lost) return ExitClass::kInfrastructure;
  const auto& codes = context.preemption_exit_codes;
  for (const RankExit& e : context.exits) {
    if (!e.signaled && std::find(codes.begin(), codes.end(), e.code) != codes.end())
      return ExitClass::kPreempted;
  }
  if (!context.exits.empty() && std::all_of(context.exits.begin(), context.exits.end(), clean))
    return ExitClass::kSuccess;
  return ExitClass::kCrash;
}

std::string describe_exit(const ExitContext& context) {
  std::string s = describe_ranks(context.exits);
  if (context.node_unhealthy) s += "; node unhealthy";
  if (context.notice_active) s += "; preemption notice active";
  if (context.hang_detected) s += "; heartbeat stale (hang)";
  if (context.node_lost) s += "; a node was lost";
  if (context.save_out_of_space) s += "; a save failed: disk full";
  if (context.resume_failed) s += "; the resume checkpoint failed verification";
  if (context.resize) s += "; stopped to resize the job";
  if (context.diverged) s += "; stopped by the divergence guard";
  if (context.torn_down_by_us) s += "; remaining ranks torn down by shardguard";
  return s;
}

}  // namespace shardguard::policies
