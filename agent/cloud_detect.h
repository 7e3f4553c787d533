// Cloud detection by the network: probes the AWS, GCP and Azure metadata services in
// parallel with short timeouts and says which notice sources to enable. `auto` identifies
// the cloud from DMI data instead (agent/cloud_identify.h) and probes only a service whose
// URL was set by hand (an emulator, a proxy). Each probe asks
// for something only that provider answers in its own way: AWS an IMDSv2 token (PUT),
// GCP instance/id with the Metadata-Flavor: Google response header, Azure compute/name with
// Metadata: true (which also gives the VM name Scheduled Events are matched against).
//
// Thread-safety: call on the loop thread; `done` runs there.
#pragma once

#include <functional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "io/http_client.h"

namespace shardguard::agent {

enum class CloudMode { kAuto, kAws, kGcp, kAzure, kNone };

// "auto", "aws", "gcp", "azure", "none" (case-sensitive). kInvalid names the text.
Result<CloudMode> parse_cloud_mode(std::string_view text);
// "AWS", "GCP", "Azure", "auto", "none".
std::string_view cloud_mode_name(CloudMode mode);

struct CloudDetectOptions {
  std::string aws_base_url = "http://169.254.169.254";
  std::string gcp_base_url = "http://169.254.169.254";
  std::string azure_base_url = "http://169.254.169.254";
  Duration timeout = std::chrono::milliseconds(300);  // per probe; probes run in parallel
  // Which services to probe (a cloud not probed says no, with a note).
  bool probe_aws = true, probe_gcp = true, probe_azure = true;
};

struct CloudDetection {
  bool aws = false;
  bool gcp = false;
  bool azure = false;
  std::string azure_vm_name;       // from the Azure probe, when it answered
  std::vector<std::string> notes;  // why each probe said no, for the start-up log
  bool any() const { return aws || gcp || azure; }
};

// Probes the services asked for (at least one); `done` runs once, after the last probe
// answered or timed out
// (about options.timeout), never inside detect_clouds(). `http` must outlive the probes.
void detect_clouds(io::HttpClient& http, const CloudDetectOptions& options,
                   std::function<void(CloudDetection)> done);

}  // namespace shardguard::agent
