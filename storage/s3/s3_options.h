// How to reach an S3-compatible server: the `[storage]` section of a job's config, the
// SHARDGUARD_S3_* variables the supervisor hands its ranks, and the AWS variables every AWS
// tool reads (AWS_ENDPOINT_URL_S3, AWS_ENDPOINT_URL, AWS_REGION, AWS_DEFAULT_REGION).
//
//   endpoint         AWS_ENDPOINT_URL_S3 or AWS_ENDPOINT_URL when set, else the AWS regional
//                    endpoint of `region` (https://s3.REGION.amazonaws.com)
//   region           AWS_REGION, AWS_DEFAULT_REGION, the profile's region, else us-east-1
//   addressing       path | virtual (default: virtual on amazonaws.com, path elsewhere)
//   part_size        bytes per part of a multipart upload (5 MiB..5 GiB)
//   read_size        bytes per ranged GET of a load (2 MiB: on Ceph RGW twice as fast as 4
//                    or 16 MiB, docs/perf.md; AWS S3 advises 8-16 MiB), 1 MiB..64 MiB
//   max_inflight     the host memory a rank's transfers may hold at once; parallel parts
//                    are max_inflight / part_size, parallel reads max_inflight / read_size
//                    (at most 16)
//   request_timeout  one request
//   stall_timeout    a transfer that moves less than 64 KiB/s for this long (10s), while
//                    none of the rank's others moves more, fails
//   retries          after the first try, on 500, 503 SlowDown, resets and timeouts
//   tls_verify       on; plain http is accepted for loopback endpoints only, unless
//                    allow_http says so
// Thread-safety: plain values.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/result.h"

namespace shardguard::storage::s3 {

enum class Addressing { kAuto, kPath, kVirtual };

struct S3Options {
  std::string endpoint;  // empty: resolved (see above)
  std::string region;    // empty: resolved
  Addressing addressing = Addressing::kAuto;
  uint64_t part_size = 16ull << 20;
  uint64_t read_size = 2ull << 20;
  uint64_t max_inflight = 256ull << 20;
  Duration request_timeout = std::chrono::seconds(120);
  // A transfer slower than this for stall_time is cut off (a stalled upload on one rank
  // fails that save within seconds, not at request_timeout).
  uint64_t stall_bytes_per_second = 64 * 1024;
  Duration stall_time = std::chrono::seconds(10);
  int retries = 6;
  bool tls_verify = true;
  bool allow_http = false;  // plain http to a host that is not loopback
  std::string ca_file;
};

inline constexpr uint64_t kMinPartSize = 5ull << 20;  // S3: every part but the last
inline constexpr uint64_t kMaxPartSize = 5ull << 30;

// Fills endpoint and region from the environment (`getenv`) and the profile's region where
// they are empty, checks every value, and refuses plain http to anything but loopback unless
// allow_http. kInvalid names the setting (`where` says which file or variable set it).
Result<S3Options> resolve_s3_options(S3Options options,
                                     const std::function<std::optional<std::string>(
                                         std::string_view)>& getenv,
                                     const std::optional<std::string>& profile_region,
                                     std::string_view where = "[storage]");

// The endpoint's parts.
struct Endpoint {
  bool https = true;
  std::string host;  // no brackets for IPv6
  uint16_t port = 0;  // 0: the scheme's default
  // "host[:port]" as the Host header carries it (IPv6 in brackets).
  std::string authority() const;
  bool loopback() const;
};
// kInvalid for anything but http(s)://host[:port][/] (no path, query, user or password).
Result<Endpoint> parse_endpoint(std::string_view url);

// Path-style addressing for this endpoint and bucket (kAuto resolved).
bool use_path_style(const S3Options& options, const Endpoint& endpoint, std::string_view bucket);

// Parallel transfers of one rank: max_inflight / part_size, at least 1, at most 64.
int parallel_parts(const S3Options& options);
// How a rank reads a checkpoint back: ranged GETs of read_size, this many at once
// (max_inflight / read_size, 1..16).
int parallel_reads(const S3Options& options);
inline constexpr uint64_t kMinReadSize = 1ull << 20, kMaxReadSize = 64ull << 20;

// The variables a rank gets from its supervisor (SHARDGUARD_S3_*), and back: those set
// replace `base`'s values.
std::vector<std::pair<std::string, std::string>> s3_options_env(const S3Options& options);
Result<S3Options> s3_options_from_env(
    const std::function<std::optional<std::string>(std::string_view)>& getenv,
    S3Options base = {});

}  // namespace shardguard::storage::s3
