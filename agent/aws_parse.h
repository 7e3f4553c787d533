// AWS IMDS notice bodies -> Notices: spot/instance-action, events/recommendations/rebalance
// and events/maintenance/scheduled. A body that does not have the documented shape is an
// error (no information), never a notice. Pure functions, thread-safe.
#pragma once

#include <string_view>
#include <vector>

#include "agent/notice.h"
#include "core/result.h"

namespace shardguard::agent {

// 200 body {"action": "terminate|stop|hibernate", "time": "<RFC 3339>"} -> a
// "spot-interruption" preemption notice, deadline = time (or `now` if already past).
Result<Notice> parse_aws_spot_action(std::string_view body, WallTime now);

// 200 body {"noticeTime": "<RFC 3339>"} -> an advisory "rebalance" notice with deadline
// now + horizon (a rebalance carries no deadline; a spot interruption gives >= 2 min).
Result<Notice> parse_aws_rebalance(std::string_view body, WallTime now, Duration horizon);

// 200 body: JSON array of {"Code", "EventId", "NotBefore", "State", ...} with times like
// "21 Jan 2019 09:00:43 GMT". Active events become "maintenance" notices (deadline =
// NotBefore); "system-maintenance" is advisory, the other codes stop or reboot the machine.
// Canceled and completed events are skipped; malformed elements make the whole body an error.
Result<std::vector<Notice>> parse_aws_scheduled_events(std::string_view body, WallTime now);

}  // namespace shardguard::agent
