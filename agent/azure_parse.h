// Azure Scheduled Events documents -> Notices, and the StartRequests acknowledgement body.
// Document: {"DocumentIncarnation": n, "Events": [{"EventId", "EventType", "ResourceType",
// "Resources": [...], "EventStatus", "NotBefore": "<RFC 1123>" or "", ...}]}.
// Pure functions, thread-safe.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "agent/notice.h"
#include "core/result.h"

namespace shardguard::agent {

struct AzureEvent {
  std::string id;
  std::string type;        // Preempt, Terminate, Reboot, Redeploy, Freeze
  std::string status;      // Scheduled, Started
  std::string not_before;  // RFC 1123; empty once Started
  std::string description;
  std::vector<std::string> resources;  // VM names the event applies to
};

struct AzureDocument {
  int64_t incarnation = 0;
  std::vector<AzureEvent> events;
  int malformed_events = 0;  // elements skipped for lacking EventId/EventType/Resources
};

// kCorrupt when the body is not JSON or has no "Events" array; odd elements are skipped
// and counted.
Result<AzureDocument> parse_azure_document(std::string_view body);

// The notice `event` means for VM `vm_name` (compared ignoring ASCII case), or nullopt when
// the event is for other VMs or of an unknown type. kCorrupt for an unparseable NotBefore.
// Deadline: NotBefore, or `now` when it is empty (Started) or already past.
Result<std::optional<Notice>> azure_notice(const AzureEvent& event, std::string_view vm_name,
                                           WallTime now);

// {"StartRequests":[{"EventId":"<id>"}, ...]}.
std::string azure_start_requests(const std::vector<std::string>& event_ids);

}  // namespace shardguard::agent
