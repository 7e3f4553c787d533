// Spot preemptions of the simulated fleet: per cloud, the notice lead before the machine goes
// (AWS 120 s, GCP and Azure 30 s) and the rate at which machines are taken, as a Poisson rate
// from published figures, an optional bathtub hazard over the VM's lifetime, or replayed traces
// in the shape of skypilot's spot-traces (sim/spot_trace.h). Pure; plain values.
//
// Published rates, converted with hazard = -ln(1 - p) / period:
//   GCP preemptible VMs: "generally 5% to 15% per day" per instance (Google's documentation);
//   AWS Spot Instance Advisor "frequency of interruption" buckets per month: <5%, 5-10%,
//   10-15%, 15-20%, >20% (GPU instance types often sit in the upper buckets). A bucket is taken
//   at its midpoint, >20% at 25%.
#pragma once

#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/result.h"
#include "sim/spot_trace.h"

namespace shardguard::sim {

enum class Cloud { kNone, kAws, kGcp, kAzure };
std::string_view cloud_name(Cloud cloud);
// The notice a machine gets before it is taken: AWS 120 s, GCP 30 s, Azure 30 s (none: 0).
double default_notice_seconds(Cloud cloud);

// The monthly interruption probability an AWS advisor bucket stands for ("<5%" -> 0.025, ...).
Result<double> aws_bucket_probability(std::string_view bucket);
// Constant hazard (per second) for probability `p` of a preemption within `period` seconds.
double hazard_from_probability(double p, double period_seconds);

// The bathtub form Kadupitiya, Jadhao and Sharma fitted to ~1,500 GCP preemptible VM lifetimes
// ("Modeling the temporally constrained preemptions of transient cloud VMs", HPDC 2020):
// CDF F(t) = A (1 - e^(-t/tau1) + e^((t - b)/tau2)) for t < b, and every VM left is stopped at b
// (GCP's 24 h limit). The defaults have that shape (many early preemptions, a quiet middle,
// a rise before 24 h); they are illustrative, not the paper's fitted values: set your own.
struct Bathtub {
  double a = 0.45;
  double tau1 = 3600;
  double tau2 = 2880;
  double b = 86400;
  double cdf(double t) const;
  // The lifetime at CDF value u in (0, 1) (b when u is past F just before b).
  double inverse(double u) const;
};

enum class TraceKind {
  kPreemption,    // one series per node slot: 1 = the machine in that slot is preempted
  kAvailability,  // one series: how many machines can be held at each tick
};

struct PreemptionModel {
  Cloud cloud = Cloud::kGcp;
  double notice = 30;                                    // seconds of notice
  double hazard = hazard_from_probability(0.05, 86400);  // per node, per second (Poisson)
  std::optional<Bathtub> bathtub;                        // replaces the Poisson rate when set
  std::vector<SpotTrace> traces;                         // replaces both when not empty
  TraceKind trace_kind = TraceKind::kPreemption;
  bool trace_random_offset = true;  // each slot starts at a random tick of its trace
};

// Samples how long a new VM lives until it is preempted (Poisson or bathtub), from u in (0,1).
double sample_lifetime(const PreemptionModel& model, double u);

}  // namespace shardguard::sim
