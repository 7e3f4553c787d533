#include "agent/cloud_detect.h"

#include <memory>

namespace shardguard::agent {

namespace {

struct Probe {
  CloudDetection result;
  int pending = 3;
  std::function<void(CloudDetection)> done;

  void finish() {
    if (--pending == 0) done(std::move(result));
  }
};

// "aws: <why>" for the notes.
std::string why_not(std::string_view cloud, const Result<io::HttpResponse>& r) {
  return std::string(cloud) + ": " +
         (r.ok() ? "HTTP " + std::to_string(r->status) : r.error().message());
}

}  // namespace

Result<CloudMode> parse_cloud_mode(std::string_view text) {
  if (text == "auto") return CloudMode::kAuto;
  if (text == "aws") return CloudMode::kAws;
  if (text == "gcp") return CloudMode::kGcp;
  if (text == "azure") return CloudMode::kAzure;
  if (text == "none") return CloudMode::kNone;
  return Error(ErrorCode::kInvalid,
               "cloud '" + std::string(text) + "': expected auto, aws, gcp, azure or none");
}

std::string_view cloud_mode_name(CloudMode mode) {
  switch (mode) {
    case CloudMode::kAws: return "AWS";
    case CloudMode::kGcp: return "GCP";
    case CloudMode::kAzure: return "Azure";
    case CloudMode::kAuto: return "auto";
    case CloudMode::kNone: return "none";
  }
  return "?";
}

void detect_clouds(io::HttpClient& http, const CloudDetectOptions& options,
                   std::function<void(CloudDetection)> done) {
  auto probe = std::make_shared<Probe>();
  probe->done = std::move(done);
  probe->pending = int{options.probe_aws} + int{options.probe_gcp} + int{options.probe_azure};

  if (options.probe_aws) {
    io::HttpRequest aws;
    aws.method = "PUT";
    aws.url = options.aws_base_url + "/latest/api/token";
    aws.headers.add("X-aws-ec2-metadata-token-ttl-seconds", "60");
    aws.timeout = options.timeout;
    aws.max_body_bytes = 4096;
    http.request(std::move(aws), [probe](Result<io::HttpResponse> r) {
      if (r.ok() && r->status == 200 && !r->body.empty()) {
        probe->result.aws = true;
      } else {
        probe->result.notes.push_back(why_not("aws", r));
      }
      probe->finish();
    });
  }

  if (options.probe_gcp) {
    io::HttpRequest gcp;
    gcp.url = options.gcp_base_url + "/computeMetadata/v1/instance/id";
    gcp.headers.add("Metadata-Flavor", "Google");
    gcp.timeout = options.timeout;
    gcp.max_body_bytes = 4096;
    http.request(std::move(gcp), [probe](Result<io::HttpResponse> r) {
      if (r.ok() && r->status == 200 && r->headers.get("Metadata-Flavor") == "Google") {
        probe->result.gcp = true;
      } else {
        probe->result.notes.push_back(why_not("gcp", r));
      }
      probe->finish();
    });
  }

  if (options.probe_azure) {
    io::HttpRequest azure;
    azure.url = options.azure_base_url +
                "/metadata/instance/compute/name?api-version=2021-02-01&format=text";
    azure.headers.add("Metadata", "true");
    azure.timeout = options.timeout;
    azure.max_body_bytes = 4096;
    http.request(std::move(azure), [probe](Result<io::HttpResponse> r) {
      if (r.ok() && r->status == 200 && !r->body.empty()) {
        probe->result.azure = true;
        std::string name = r->body;
        while (!name.empty() &&
               (name.back() == '\n' || name.back() == '\r' || name.back() == ' ')) {
          name.pop_back();
        }
        probe->result.azure_vm_name = name;
      } else {
        probe->result.notes.push_back(why_not("azure", r));
      }
      probe->finish();
    });
  }
}

}  // namespace shardguard::agent
