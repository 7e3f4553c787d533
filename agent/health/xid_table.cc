#include "agent/health/xid_table.h"

#include <algorithm>
#include <charconv>

namespace shardguard::agent {

namespace {

struct XidRow {
  int first, last;  // inclusive range
  XidClass cls;
  std::string_view meaning;
};

// Sources: NVIDIA Xid catalog (immediate-action buckets) and the k8s-device-plugin's list of
// application XIDs, as summarised in the reference section 7.1.
constexpr XidRow kTable[] = {
    {13, 13, XidClass::kApplication, "graphics engine exception"},
    {31, 31, XidClass::kApplication, "GPU memory page fault"},
    {43, 43, XidClass::kApplication, "GPU stopped processing"},
    {45, 45, XidClass::kApplication, "preemptive cleanup after an earlier error"},
    {46, 46, XidClass::kFatal, "GPU timeout"},
    {48, 48, XidClass::kFatal, "double-bit ECC error"},
    {62, 62, XidClass::kFatal, "internal micro-controller halt"},
    {63, 63, XidClass::kIgnore, "row remap / page retirement recorded (reset to apply)"},
    {64, 64, XidClass::kFatal, "row remap / page retirement failure"},
    {68, 68, XidClass::kApplication, "video processor exception"},
    {74, 74, XidClass::kFatal, "NVLink error"},
    {79, 79, XidClass::kFatal, "GPU has fallen off the bus"},
    {92, 92, XidClass::kIgnore, "high single-bit ECC error rate"},
    {94, 94, XidClass::kApplication, "contained ECC error"},
    {95, 95, XidClass::kFatal, "uncontained ECC error"},
    {109, 109, XidClass::kFatal, "context-switch timeout"},
    {119, 119, XidClass::kFatal, "GSP RPC timeout"},
    {120, 120, XidClass::kFatal, "GSP error"},
    {136, 136, XidClass::kFatal, "NVLink link training failed"},
    {140, 140, XidClass::kFatal, "unrecoverable ECC error escape"},
    {143, 143, XidClass::kFatal, "GPU initialization error"},
    {144, 150, XidClass::kFatal, "NVLink5 error"},
    {154, 154, XidClass::kIgnore, "GPU recovery action changed"},
};

const XidRow* find_row(int xid) {
  for (const XidRow& row : kTable) {
    if (xid >= row.first && xid <= row.last) return &row;
  }
  return nullptr;
}

bool contains(const std::vector<int>& v, int x) {
  return std::find(v.begin(), v.end(), x) != v.end();
}

std::string_view trim_left(std::string_view s) {
  while (!s.empty() && (s.front() == ' ' || s.front() == '\t')) s.remove_prefix(1);
  return s;
}

}  // namespace

std::string_view xid_class_name(XidClass c) {
  switch (c) {
    case XidClass::kFatal:
      return "fatal";
    case XidClass::kApplication:
      return "application";
    case XidClass::kIgnore:
      return "ignore";
    case XidClass::kUnknown:
      return "unknown";
  }
  return "unknown";
}

std::optional<XidEvent> parse_xid_line(std::string_view line) {
  constexpr std::string_view kMarker = "NVRM: Xid";
  const auto at = line.find(kMarker);
  if (at == std::string_view::npos) return std::nullopt;
  std::string_view rest = trim_left(line.substr(at + kMarker.size()));
  XidEvent ev;
  if (!rest.empty() && rest.front() == '(') {
    const auto close = rest.find(')');
    if (close == std::string_view::npos) return std::nullopt;
    ev.device = std::string(rest.substr(1, close - 1));
    rest = rest.substr(close + 1);
  }
  if (rest.empty() || rest.front() != ':') return std::nullopt;
  rest = trim_left(rest.substr(1));
  const auto [end, ec] = std::from_chars(rest.data(), rest.data() + rest.size(), ev.xid);
  if (ec != std::errc() || ev.xid <= 0) return std::nullopt;
  rest = rest.substr(static_cast<size_t>(end - rest.data()));
  if (!rest.empty() && rest.front() == ',') rest.remove_prefix(1);
  rest = trim_left(rest);
  while (!rest.empty() && (rest.back() == '\n' || rest.back() == '\r' || rest.back() == ' '))
    rest.remove_suffix(1);
  ev.details = std::string(rest);
  return ev;
}

XidClass classify_xid(int xid, const std::vector<int>& extra_fatal,
                      const std::vector<int>& extra_ignored) {
  if (contains(extra_ignored, xid)) return XidClass::kIgnore;
  if (contains(extra_fatal, xid)) return XidClass::kFatal;
  const XidRow* row = find_row(xid);
  return row != nullptr ? row->cls : XidClass::kUnknown;
}

std::string_view xid_meaning(int xid) {
  const XidRow* row = find_row(xid);
  return row != nullptr ? row->meaning : std::string_view();
}

}  // namespace shardguard::agent
