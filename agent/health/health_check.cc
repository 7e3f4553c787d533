#include "agent/health/health_check.h"

namespace shardguard::agent {

std::string_view severity_name(HealthFinding::Severity severity) {
  switch (severity) {
    case HealthFinding::kOk:
      return "ok";
    case HealthFinding::kWarning:
      return "warning";
    case HealthFinding::kFatal:
      return "fatal";
  }
  return "unknown";
}

void FindingBuilder::add(HealthFinding::Severity severity, std::string evidence) {
  if (severity > worst_) worst_ = severity;
  items_.emplace_back(severity, std::move(evidence));
}

HealthFinding FindingBuilder::finish(std::string ok_evidence) const {
  HealthFinding f;
  f.check = check_;
  f.severity = worst_;
  for (const auto& [severity, evidence] : items_) {
    if (severity != worst_ || evidence.empty()) continue;
    if (!f.evidence.empty()) f.evidence += "; ";
    f.evidence += evidence;
  }
  if (f.evidence.empty()) f.evidence = std::move(ok_evidence);
  return f;
}

HealthFinding not_available_finding(std::string check, std::string why) {
  HealthFinding f;
  f.check = std::move(check);
  f.evidence = "not available: " + std::move(why);
  f.not_available = true;
  return f;
}

}  // namespace shardguard::agent
