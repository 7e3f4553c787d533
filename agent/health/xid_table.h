// NVIDIA XIDs: parsing the driver's kernel-log line and classifying the number with the
// table of docs/reference (preemption-protocols.md section 7.1: NVIDIA's Xid catalog
// "immediate action" buckets plus the k8s-device-plugin's application list).
//   fatal:       the GPU or node needs a reset/reboot (46, 48, 62, 64, 74, 79, 95, 109, ...)
//   application: the job's fault, the GPU stays healthy (13, 31, 43, 45, 68, 94)
//   ignore:      informational (63, 92, 154)
//   unknown:     not in the table; treated as a warning
// Pure functions, thread-safe.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace shardguard::agent {

enum class XidClass { kFatal, kApplication, kIgnore, kUnknown };

std::string_view xid_class_name(XidClass c);  // "fatal", "application", "ignore", "unknown"

struct XidEvent {
  std::string device;  // what the driver printed in parentheses: "PCI:0000:10:1c"
  int xid = 0;
  std::string details;  // the rest of the line: "pid=1234, name=python, ..."
};

// Parses "... NVRM: Xid (PCI:0000:10:1c): 63, pid=..., name=..., <text>" anywhere in
// `line` (kmsg record, dmesg or syslog line). nullopt when the line is not an XID report.
std::optional<XidEvent> parse_xid_line(std::string_view line);

// The class of `xid`: the extra lists (from the settings) win over the built-in table,
// ignored over fatal.
XidClass classify_xid(int xid, const std::vector<int>& extra_fatal = {},
                      const std::vector<int>& extra_ignored = {});

// A short meaning for known XIDs ("GPU has fallen off the bus"); empty when unknown.
std::string_view xid_meaning(int xid);

}  // namespace shardguard::agent
