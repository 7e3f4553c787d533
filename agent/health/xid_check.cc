#include "agent/health/xid_check.h"

#include <spdlog/spdlog.h>

#include "agent/health/xid_table.h"
#include "core/time_formats.h"

namespace shardguard::agent {

namespace {

constexpr size_t kMaxDetails = 160;

// "GPU PCI:0000:10:1c: Xid 79 (GPU has fallen off the bus; <details>) seen at <time>".
std::string describe(const XidEvent& ev, XidClass cls, WallTime seen) {
  std::string out = "GPU " + (ev.device.empty() ? std::string("?") : ev.device) + ": Xid " +
                    std::to_string(ev.xid) + " (";
  std::string_view meaning = xid_meaning(ev.xid);
  out += meaning.empty() ? std::string("unknown XID") : std::string(meaning);
  if (cls == XidClass::kApplication) out += ", application error";
  if (!ev.details.empty()) {
    out += "; ";
    out += ev.details.size() > kMaxDetails ? ev.details.substr(0, kMaxDetails) + "..." : ev.details;
  }
  out += ") seen at " + format_rfc3339(seen);
  return out;
}

HealthFinding::Severity severity_of(XidClass cls) {
  switch (cls) {
    case XidClass::kFatal:
      return HealthFinding::kFatal;
    case XidClass::kUnknown:
      return HealthFinding::kWarning;
    case XidClass::kApplication:
    case XidClass::kIgnore:
      return HealthFinding::kOk;
  }
  return HealthFinding::kWarning;
}

}  // namespace

XidCheck::XidCheck(XidCheckConfig config, std::unique_ptr<KernelLogReader> reader,
                   const Clock& clock)
    : config_(std::move(config)), reader_(std::move(reader)), clock_(clock) {}

void XidCheck::run(Done done) {
  auto lines = reader_->read_new();
  if (!lines.ok()) {  // no privilege, no log, or a read error: says nothing about the GPUs
    return done(not_available_finding("xid", "kernel log: " + lines.error().message()));
  }
  FindingBuilder out("xid");
  const WallTime now = clock_.wall_now();
  for (const std::string& line : *lines) {
    auto ev = parse_xid_line(line);
    if (!ev) continue;
    const XidClass cls = classify_xid(ev->xid, config_.extra_fatal, config_.extra_ignored);
    std::string text = describe(*ev, cls, now);
    if (cls == XidClass::kApplication || cls == XidClass::kIgnore)
      spdlog::info("health: xid ({}): {}", xid_class_name(cls), text);
    out.add(severity_of(cls), std::move(text));
  }
  done(out.finish());
}

}  // namespace shardguard::agent
