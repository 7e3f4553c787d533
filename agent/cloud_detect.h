// `auto` cloud detection at agent start-up: probes the AWS, GCP and Azure metadata services
// in parallel with short timeouts and says which notice sources to enable. Each probe asks
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

struct CloudDetectOptions {
  std::string aws_base_url = "http://169.254.169.254";
  std::string gcp_base_url = "http://169.254.169.254";
  std::string azure_base_url = "http://169.254.169.254";
  Duration timeout = std::chrono::milliseconds(300);  // per probe; probes run in parallel
};

struct CloudDetection {
  bool aws = false;
  bool gcp = false;
  bool azure = false;
  std::string azure_vm_name;       // from the Azure probe, when it answered
  std::vector<std::string> notes;  // why each probe said no, for the start-up log
  bool any() const { return aws || gcp || azure; }
};

// Probes all three services; `done` runs once, after the last probe answered or timed out
// (about options.timeout), never inside detect_clouds(). `http` must outlive the probes.
void detect_clouds(io::HttpClient& http, const CloudDetectOptions& options,
                   std::function<void(CloudDetection)> done);

}  // namespace shardguard::agent
