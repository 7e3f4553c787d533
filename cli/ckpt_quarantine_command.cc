#include "cli/ckpt_quarantine_command.h"
#include "core/host_name.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "checkpoint/lease.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "cli/ckpt_location.h"
#include "core/clock.h"
#include "core/exit_codes.h"
#include "core/rooted_fs.h"

namespace shardguard::cli {
namespace {

using namespace shardguard::checkpoint;

int fail(const Error& e) {
  std::fprintf(stderr, "shardguard: %s\n", e.message().c_str());
  return kExitFailure;
}

// An operator acting under a live run deserves a word: the run keeps going as it was.
void warn_if_leased(storage::Store& store) {
  auto lease = read_lease(store);
  if (!lease.ok() || !*lease) return;
  const WallTime now = RealClock::instance().wall_now();
  if (now - from_unix_ms((*lease)->renewed_unix_ms) > LeaseOptions{}.stale_after) return;
  std::fprintf(stderr, "shardguard: note: %s holds this location's lease\n",
               describe_holder(**lease, now).c_str());
}

std::string who() {
  const char* user = std::getenv("USER");
  return std::string("shardguard ckpt quarantine (user ") + (user ? user : "unknown") + ", host " +
         host_name() + ", pid " + std::to_string(::getpid()) + ")";
}

int run_quarantine(const std::string& dir, uint64_t step, const std::string& reason) {
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error());
  storage::Store& store = where->store();
  warn_if_leased(store);
  auto entry = quarantine_step(store, step, reason, RealClock::instance().wall_now(), who());
  if (!entry.ok()) return fail(entry.error());
  std::printf("quarantined step %llu: %s %s (reason: %s)\n",
              static_cast<unsigned long long>(step), where->bucket() ? "marked in" : "moved to",
              entry->dir.c_str(), reason.c_str());
  return kExitOk;
}

int run_unquarantine(const std::string& dir, uint64_t step) {
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error());
  storage::Store& store = where->store();
  warn_if_leased(store);
  auto entry = unquarantine_step(store, step);
  if (!entry.ok()) return fail(entry.error());
  std::printf("restored step %llu from %s to %s\n", static_cast<unsigned long long>(step),
              entry->dir.c_str(), store.describe(step_key(step)).c_str());
  return kExitOk;
}

}  // namespace

void add_ckpt_quarantine_commands(CLI::App& ckpt, int* exit_code) {
  struct Args {
    std::string dir, reason;
    uint64_t step = 0;
  };
  auto args = std::make_shared<Args>();

  auto* qc = ckpt.add_subcommand(
      "quarantine",
      "Set a step aside: never resumed, exported or listed as latest; kept by gc "
      "for --quarantine-keep as evidence");
  qc->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  qc->add_option("--step", args->step, "step to quarantine")->required();
  qc->add_option("--reason", args->reason, "why (kept in the quarantine's reason file)")
      ->required();
  qc->callback([=] { *exit_code = run_quarantine(args->dir, args->step, args->reason); });

  auto* uq = ckpt.add_subcommand(
      "unquarantine",
      "Bring the most recently quarantined copy of a step back (refused if the step was "
      "written again since)");
  uq->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  uq->add_option("--step", args->step, "step to restore")->required();
  uq->callback([=] { *exit_code = run_unquarantine(args->dir, args->step); });
}

}  // namespace shardguard::cli
