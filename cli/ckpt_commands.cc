#include "cli/ckpt_commands.h"

#include <unistd.h>

#include <CLI/CLI.hpp>
#include <boost/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <optional>

#include "checkpoint/catalog.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "checkpoint/reader.h"
#include "checkpoint/retention.h"
#include "cli/ckpt_export_command.h"
#include "cli/ckpt_location.h"
#include "cli/ckpt_quarantine_command.h"
#include "core/clock.h"
#include "core/exit_codes.h"
#include "core/rooted_fs.h"
#include "core/terminal_text.h"
#include "core/units.h"

namespace shardguard::cli {
namespace {

using namespace shardguard::checkpoint;
namespace json = boost::json;

// Messages quote names read from the checkpoint (tensors, files, reasons): shown escaped,
// like everything else printed here that came from a file.
int fail(const Error& e, int code = kExitFailure) {
  std::fprintf(stderr, "shardguard: %s\n", escape_for_terminal(e.message()).c_str());
  return code;
}

// Text from a manifest, sidecar or reason file, for the terminal.
std::string shown(std::string_view text) { return escape_for_terminal(text); }

std::string age_of(const CatalogEntry& e) {
  if (!e.manifest) return "-";
  const int64_t now = to_unix_ms(RealClock::instance().wall_now());
  const int64_t ms = std::max<int64_t>(0, now - e.manifest->created_unix_ms);
  return format_duration(std::chrono::milliseconds(ms));
}

std::string quarantine_age(const QuarantineEntry& q) {
  const int64_t now = to_unix_ms(RealClock::instance().wall_now());
  return format_duration(std::chrono::milliseconds(std::max<int64_t>(0, now - q.quarantined_unix_ms)));
}

// Quarantined steps below the table: never resumed, but shown with why they were set aside.
void print_quarantined(const std::vector<QuarantineEntry>& quarantined) {
  if (quarantined.empty()) return;
  std::printf("\nQUARANTINED (oldest first; never resumed or exported)\n");
  std::printf("%-12s %10s %12s %s\n", "STEP", "AGE", "BYTES", "REASON");
  for (const auto& q : quarantined) {
    std::string reason = q.problem.empty() ? q.reason : "(" + q.problem + ")";
    if (!q.who.empty()) reason += "  [by " + q.who + "]";
    std::printf("%-12llu %10s %12s %s\n", static_cast<unsigned long long>(q.step),
                quarantine_age(q).c_str(), format_size(q.bytes).c_str(), shown(reason).c_str());
  }
}

int run_ls(const std::string& dir, bool as_json, bool full) {
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error(), kExitUsage);
  storage::Store& store = where->store();
  auto entries = list_checkpoints(store, full ? Verify::kChecksum : Verify::kSize);
  if (!entries.ok()) return fail(entries.error());
  auto quarantined = list_quarantined(store);
  if (!quarantined.ok()) return fail(quarantined.error());
  if (as_json) {
    json::array out;
    for (const auto& e : *entries) {
      json::object o{{"step", e.step},
                     {"state", checkpoint_state_name(e.state)},
                     {"dir", e.dir},
                     {"problem", e.reason}};
      if (e.manifest) {
        o["world_size"] = e.manifest->world_size;
        o["bytes"] = e.manifest->total_bytes();
        o["created_unix_ms"] = e.manifest->created_unix_ms;
        o["reason"] = save_reason_name(e.manifest->reason);
        o["attempt"] = e.manifest->attempt;
      }
      out.emplace_back(std::move(o));
    }
    for (const auto& q : *quarantined)
      out.emplace_back(json::object{{"step", q.step},
                                    {"state", "quarantined"},
                                    {"dir", q.dir},
                                    {"problem", q.problem},
                                    {"quarantine_reason", q.reason},
                                    {"quarantined_by", q.who},
                                    {"quarantined_unix_ms", q.quarantined_unix_ms},
                                    {"bytes", q.bytes}});
    std::printf("%s\n", json::serialize(out).c_str());
    return kExitOk;
  }
  std::printf("%-12s %-10s %5s %12s %10s %-9s %s\n", "STEP", "STATE", "WORLD", "BYTES", "AGE",
              "REASON", "PROBLEM");
  for (const auto& e : *entries) {
    std::string world = e.manifest ? std::to_string(e.manifest->world_size) : "-";
    std::string bytes = e.manifest ? format_size(e.manifest->total_bytes()) : "-";
    std::string reason = e.manifest ? std::string(save_reason_name(e.manifest->reason)) : "-";
    std::printf("%-12llu %-10s %5s %12s %10s %-9s %s\n", static_cast<unsigned long long>(e.step),
                std::string(checkpoint_state_name(e.state)).c_str(), world.c_str(), bytes.c_str(),
                age_of(e).c_str(), reason.c_str(), shown(e.reason).c_str());
  }
  print_quarantined(*quarantined);
  return kExitOk;
}

// A one-line progress bar on a terminal; nothing when stderr is a file or pipe.
VerifyProgress progress_bar() {
  if (!::isatty(STDERR_FILENO)) return {};
  return [last = -1](uint64_t done, uint64_t total) mutable {
    int pct = total == 0 ? 100 : static_cast<int>(done * 100 / total);
    if (pct == last) return;
    last = pct;
    std::string bar(pct / 4, '#');
    bar.resize(25, ' ');
    std::fprintf(stderr, "\rverifying [%s] %3d%% %s", bar.c_str(), pct, format_size(done).c_str());
    if (done >= total) std::fputc('\n', stderr);
  };
}

int run_verify(const std::string& dir, std::optional<uint64_t> step, bool full) {
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error(), kExitUsage);
  storage::Store& store = where->store();
  // Pick by manifest alone, then verify with progress.
  auto entry = pick_step(store, step, Verify::kSize);
  if (!entry.ok()) return fail(entry.error(), kExitCheckpointBad);
  if (entry->state != CheckpointState::kComplete) {
    std::fprintf(
        stderr, "shardguard: step %llu is %s: %s\n", static_cast<unsigned long long>(entry->step),
        std::string(checkpoint_state_name(entry->state)).c_str(), shown(entry->reason).c_str());
    return kExitCheckpointBad;
  }
  if (full) {
    auto st = verify_checkpoint(store, step_key(entry->step), *entry->manifest,
                                Verify::kChecksum, progress_bar());
    if (!st.ok()) {
      std::fprintf(stderr, "shardguard: step %llu is corrupt: %s\n",
                   static_cast<unsigned long long>(entry->step),
                   shown(st.error().message()).c_str());
      return kExitCheckpointBad;
    }
  }
  // Format 2 files carry block sums, which --full checks beside the whole-file sums.
  bool blocks = false;
  for (const auto& f : entry->manifest->files) blocks = blocks || f.has_block_sums();
  const char* what = !full    ? "sizes"
                     : blocks ? "sizes and checksums of every block and file"
                              : "sizes and checksums";
  std::printf("step %llu: complete, %zu files, %s verified (%s)\n",
              static_cast<unsigned long long>(entry->step), entry->manifest->files.size(),
              format_size(entry->manifest->total_bytes()).c_str(), what);
  return kExitOk;
}

int run_inspect(const std::string& dir, std::optional<uint64_t> step, bool hash,
                bool as_json) {
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error(), kExitUsage);
  auto reader = open_complete(where->store(), step);
  if (!reader.ok()) return fail(reader.error(), kExitCheckpointBad);
  const Manifest& m = reader->manifest();
  if (hash) {
    for (const auto& name : reader->tensor_names()) {
      auto h = reader->tensor_xxh3_64(name);
      if (!h.ok()) return fail(h.error(), kExitCheckpointBad);
      std::printf("%s %016llx\n", shown(name).c_str(), static_cast<unsigned long long>(*h));
    }
    return kExitOk;
  }
  if (as_json) {
    // JSON still, but nothing in it (a tensor name, the user's state) drives a terminal.
    std::string text = manifest_to_json(m);
    if (::isatty(STDOUT_FILENO)) text = escape_json_for_terminal(text);
    std::fputs(text.c_str(), stdout);
    return kExitOk;
  }
  std::printf("step %llu  job %s  attempt %llu  reason %s  world size %u  %s\n",
              static_cast<unsigned long long>(m.step), shown(m.job_id).c_str(),
              static_cast<unsigned long long>(m.attempt),
              std::string(save_reason_name(m.reason)).c_str(), m.world_size,
              format_size(m.total_bytes()).c_str());
  std::printf("global: step %llu  lr_schedule %s  user %s\n",
              static_cast<unsigned long long>(m.global.step), shown(m.global.lr_schedule).c_str(),
              shown(m.global.user).c_str());
  std::printf("\nTENSORS\n");
  for (const auto& [name, t] : m.tensors) {
    std::string shape = "[";
    for (size_t i = 0; i < t.shape.size(); ++i) shape += (i ? "," : "") + std::to_string(t.shape[i]);
    shape += "]";
    std::printf("  %-40s %-8s %-20s %zu chunk(s)\n", shown(name).c_str(),
                std::string(dtype_name(t.dtype)).c_str(), shape.c_str(), t.chunks.size());
    for (const auto& c : t.chunks)
      std::printf("      %s  %s  key %s\n", c.box.to_string().c_str(), shown(c.file).c_str(),
                  shown(c.key).c_str());
  }
  std::printf("\nRANKS\n");
  for (size_t r = 0; r < m.ranks.size(); ++r)
    std::printf("  %zu: rng %zu bytes  data_position %s  user %s\n", r, m.ranks[r].rng.size(),
                shown(m.ranks[r].data_position).c_str(), shown(m.ranks[r].user).c_str());
  return kExitOk;
}

int run_gc(const std::string& dir, uint32_t keep_last, uint64_t keep_every, bool dry_run,
           const std::vector<uint64_t>& protect, const std::string& quarantine_keep_text) {
  auto quarantine_keep = parse_duration(quarantine_keep_text);
  if (!quarantine_keep.ok())
    return fail(quarantine_keep.error().context("--quarantine-keep"), kExitUsage);
  auto where = CkptLocation::open(dir);
  if (!where.ok()) return fail(where.error(), kExitUsage);
  storage::Store& store = where->store();
  auto entries = list_checkpoints(store, Verify::kSize);
  if (!entries.ok()) return fail(entries.error());
  auto quarantined = list_quarantined(store);
  if (!quarantined.ok()) return fail(quarantined.error());
  RetentionPolicy policy{keep_last, keep_every, {protect.begin(), protect.end()}};
  auto plan = plan_retention(*entries, policy);
  if (!where->bucket())
    if (auto st = keep_symlinked_steps(where->fs(), plan); !st.ok()) return fail(st.error());
  for (const auto& d : plan)
    std::printf("%-12llu %s\n", static_cast<unsigned long long>(d.entry.step),
                shown(d.why).c_str());
  const auto expired =
      plan_quarantine_gc(*quarantined, RealClock::instance().wall_now(), *quarantine_keep);
  for (const auto& q : *quarantined) {
    const bool expires = std::any_of(expired.begin(), expired.end(),
                                     [&](const Removal& r) { return r.dir == q.dir; });
    std::printf("%-12llu %s: quarantined %s ago (%s)\n", static_cast<unsigned long long>(q.step),
                expires ? "remove" : "keep", quarantine_age(q).c_str(),
                expires ? ("older than --quarantine-keep " + quarantine_keep_text).c_str()
                        : ("kept for --quarantine-keep " + quarantine_keep_text).c_str());
  }
  if (dry_run) return kExitOk;
  auto removed = apply_retention(store, plan);
  if (!removed.ok()) return fail(removed.error());
  size_t freed_quarantined = 0;
  for (const auto& r : expired) {
    if (auto st = apply_removal(store, r); !st.ok()) return fail(st.error());
    ++freed_quarantined;
  }
  // A bucket's unfinished multipart uploads in the steps kept complete (left by a writer that
  // died or an older attempt): nothing writes a committed step again.
  size_t aborted = 0;
  if (where->bucket())
    for (const auto& d : plan) {
      if (d.remove || d.entry.state != CheckpointState::kComplete) continue;
      auto n = store.abort_uploads(step_key(d.entry.step) + "/");
      if (!n.ok()) return fail(n.error());
      aborted += *n;
    }
  std::printf("removed %zu checkpoint(s) and %zu quarantined step(s)", *removed,
              freed_quarantined);
  if (where->bucket()) std::printf("; aborted %zu unfinished upload(s)", aborted);
  std::printf("\n");
  return kExitOk;
}

}  // namespace

void add_ckpt_commands(CLI::App& app, int* exit_code) {
  auto* ckpt = app.add_subcommand("ckpt", "List, verify, inspect, clean up and export checkpoints");
  ckpt->require_subcommand(1);

  struct Args {
    std::string dir;
    std::optional<uint64_t> step;
    bool full = false, as_json = false, hash = false, dry_run = false;
    uint32_t keep_last = 3;
    uint64_t keep_every = 0;
    std::vector<uint64_t> protect;
    std::string quarantine_keep = "7d";
  };
  auto args = std::make_shared<Args>();

  auto* ls = ckpt->add_subcommand("ls", "List checkpoints, newest first, with their state");
  ls->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  ls->add_flag("--json", args->as_json, "JSON output");
  ls->add_flag("--full", args->full, "verify checksums, not just sizes");
  ls->callback([=] { *exit_code = run_ls(args->dir, args->as_json, args->full); });

  auto* verify = ckpt->add_subcommand("verify", "Exit 0 only if the checkpoint is complete and verified");
  verify->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  verify->add_option("--step", args->step, "step to verify (default: newest complete)");
  verify->add_flag("--full", args->full, "verify XXH3-128 checksums of every byte");
  verify->callback([=] { *exit_code = run_verify(args->dir, args->step, args->full); });

  auto* inspect = ckpt->add_subcommand("inspect", "Show tensors, chunks and state");
  inspect->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  inspect->add_option("--step", args->step, "step (default: newest complete)");
  inspect->add_flag("--hash", args->hash,
                    "print 'name xxh3-64' of each tensor's assembled global bytes");
  inspect->add_flag("--json", args->as_json, "print the manifest");
  inspect->callback(
      [=] { *exit_code = run_inspect(args->dir, args->step, args->hash, args->as_json); });

  auto* gc = ckpt->add_subcommand("gc", "Delete old checkpoints by retention policy");
  gc->add_option("DIR", args->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  gc->add_option("--keep-last", args->keep_last,
                 "newest complete checkpoints to keep (0: keep every complete one)")
      ->required();
  gc->add_option("--keep-every", args->keep_every, "also keep steps divisible by N");
  gc->add_option("--protect", args->protect, "steps never to delete");
  gc->add_option("--quarantine-keep", args->quarantine_keep,
                 "free quarantined steps set aside longer ago than this")
      ->capture_default_str();
  gc->add_flag("--dry-run", args->dry_run, "only print the decisions");
  gc->callback([=] {
    *exit_code = run_gc(args->dir, args->keep_last, args->keep_every, args->dry_run, args->protect,
                        args->quarantine_keep);
  });

  add_ckpt_quarantine_commands(*ckpt, exit_code);

  add_ckpt_export_command(*ckpt, exit_code);
}

}  // namespace shardguard::cli
