// A loopback HTTP/1.1 server that plays the AWS (IMDSv2), GCP and Azure metadata services
// from a script, for integration tests and the end-to-end demo (also as the standalone
// `sg_metadata_emulator --port P --scenario FILE`). It serves in its own threads, one per
// connection, so slow and hanging answers do not block others, and records every request
// (method, target, headers, body) so tests can assert on what the agent sent.
//
// Time in a script is milliseconds since the emulator started. Bodies may hold placeholders
// that expand to the wall time at which their entry became active plus N seconds:
// ${rfc3339:+N} (AWS spot), ${rfc1123:+N} (Azure NotBefore), ${awstime:+N} (AWS scheduled
// events), ${unix_ms:+N}; N may be negative.
//
// AWS also serves an EC2 instance role (EmulatorScenario::aws_role) as IMDSv2 does, token
// required: GET kAwsRolesPath lists the role's name, GET kAwsRolesPath + NAME answers its
// credentials {"Code": "Success", "LastUpdated", "Type": "AWS-HMAC", "AccessKeyId",
// "SecretAccessKey", "Token", "Expiration"}, Expiration a set time after each answer, and
// with `rotate` new keys on every fetch. Without a role both answer 404, as before.
//
// Thread-safety: all public methods may be called from any thread.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "core/result.h"

namespace shardguard::testing {

inline constexpr char kAwsSpotPath[] = "/latest/meta-data/spot/instance-action";
inline constexpr char kAwsRebalancePath[] = "/latest/meta-data/events/recommendations/rebalance";
inline constexpr char kAwsScheduledPath[] = "/latest/meta-data/events/maintenance/scheduled";
inline constexpr char kGcpPreemptedPath[] = "/computeMetadata/v1/instance/preempted";
inline constexpr char kGcpMaintenancePath[] = "/computeMetadata/v1/instance/maintenance-event";
inline constexpr char kAzureEventsPath[] = "/metadata/scheduledevents";
inline constexpr char kAwsRolesPath[] = "/latest/meta-data/iam/security-credentials/";

// From `at_ms` on (until a later entry), a GET of the path answers `status` + `body`.
struct TimedAnswer {
  int64_t at_ms = 0;
  int status = 200;
  std::string body;
};

// Overrides the normal answer of matching requests: a 503 burst, a 429, a malformed body,
// a slow or a missing answer.
struct EmulatorFault {
  std::string method;       // empty: any method
  std::string path_prefix;  // matched against the path (no query)
  int64_t from_ms = 0;
  int64_t until_ms = -1;  // -1: forever
  int count = -1;         // only the first `count` matching requests; -1: all
  int status = 0;         // 0: the normal answer (use with delay_ms)
  std::string body;
  int64_t delay_ms = 0;  // answer this late
  bool hang = false;     // never answer; the client has to time out
  bool close = false;    // close the connection without answering
};

// An Azure scheduled event shown from at_ms to until_ms. `event_json` is the event object
// as Azure sends it (EventId, EventType, Resources, EventStatus, NotBefore, ...). Once the
// agent POSTs StartRequests for it, it shows as Started with an empty NotBefore.
struct AzureEventScript {
  int64_t at_ms = 0;
  int64_t until_ms = -1;
  std::string event_json;
};

// The EC2 instance role: its name at kAwsRolesPath, its credentials at kAwsRolesPath + name.
struct AwsInstanceRole {
  std::string name;  // empty: no role attached (both paths answer 404)
  std::string access_key_id = "ASIAEMULATOREXAMPLE";
  std::string secret_access_key = "emulated/secret+access/key";
  std::string token = "emulated-session-token";
  int64_t expires_after_s = 21600;  // each answer's Expiration: its own time plus this
  bool rotate = false;              // each fetch N (1, 2, ...) appends N to the three values above
  std::string code = "Success";     // anything else: an error document with this Code, no keys
};

struct EmulatorScenario {
  bool aws = true, gcp = true, azure = true;  // a disabled cloud answers 404
  bool imdsv2_required = true;                // GETs without a valid token get 401
  int64_t aws_token_lifetime_ms = -1;         // >= 0: tokens die this early (forces 401s)
  std::string azure_vm_name = "sg-test-vm";
  std::vector<AzureEventScript> azure_events;
  std::map<std::string, std::vector<TimedAnswer>> timelines;  // path -> answers
  std::vector<EmulatorFault> faults;                          // the first matching fault wins
  int64_t gcp_max_wait_ms = 300'000;                          // a hanging GET without timeout_sec
  AwsInstanceRole aws_role;                                   // no name: no role (404)
};

// Parses a scenario file; errors (kInvalid) name the field. Format, all keys optional:
// {"clouds": ["aws","gcp","azure"], "imdsv2_required": true, "aws_token_lifetime_ms": 500,
//  "azure_vm_name": "vm", "timelines": {"<path>": [{"at_ms":0,"status":200,"body":"..."|
//  "json":{...}}]}, "azure_events": [{"at_ms":0,"until_ms":-1,"event":{...}}],
//  "faults": [{"method":"GET","path":"/latest","from_ms":0,"until_ms":-1,"count":-1,
//              "status":503,"body":"","delay_ms":0,"hang":false,"close":false}],
//  "aws_role": {"name":"sg-role","access_key_id":"ASIA...","secret_access_key":"...",
//               "token":"...","expires_after_s":21600,"rotate":false,"code":"Success"}}
Result<EmulatorScenario> parse_emulator_scenario(std::string_view json);

struct RecordedRequest {
  int64_t at_ms = 0;
  std::string method;
  std::string target;  // path and query
  std::string path;
  std::vector<std::pair<std::string, std::string>> headers;
  std::string body;
  int status = 0;  // 0: no answer (yet, or hang/close)
  // First value of header `name`, ignoring ASCII case.
  std::optional<std::string> header(std::string_view name) const;
};

class MetadataEmulator {
 public:
  // Listens on 127.0.0.1:`port` (0: a free port) and starts serving.
  static Result<std::unique_ptr<MetadataEmulator>> start(EmulatorScenario scenario,
                                                         uint16_t port = 0);
  ~MetadataEmulator();
  MetadataEmulator(const MetadataEmulator&) = delete;
  MetadataEmulator& operator=(const MetadataEmulator&) = delete;

  uint16_t port() const;
  std::string base_url() const;  // "http://127.0.0.1:PORT"
  // Milliseconds since start: the clock of the script's at_ms/from_ms/until_ms.
  int64_t now_ms() const;
  // Every request so far, recorded on arrival (status filled in once answered).
  std::vector<RecordedRequest> requests() const;
  // Requests with this method and path (no query).
  size_t count(std::string_view method, std::string_view path) const;
  // Polls the recorded requests until `pred` holds or `timeout` passes; returns pred's value.
  bool wait_for(const std::function<bool(const std::vector<RecordedRequest>&)>& pred,
                std::chrono::milliseconds timeout) const;
  // Called (from a server thread) after each request is answered; must be thread-safe.
  void set_on_request(std::function<void(const RecordedRequest&)> hook);
  // Stops accepting, ends hanging answers, joins the threads. Idempotent.
  void stop();

  struct Impl;

 private:
  explicit MetadataEmulator(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::testing
