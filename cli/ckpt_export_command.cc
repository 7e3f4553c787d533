#include "cli/ckpt_export_command.h"

#include <CLI/CLI.hpp>

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/catalog.h"
#include "checkpoint/hf_export.h"
#include "checkpoint/paths.h"
#include "checkpoint/reader.h"
#include "cli/ckpt_location.h"
#include "core/exit_codes.h"
#include "core/rooted_fs.h"
#include "core/units.h"

namespace shardguard::cli {
namespace {

using namespace shardguard::checkpoint;

struct ExportArgs {
  std::string dir, out, prefix = "model", max_size = "5GB", dtype = "keep";
  std::optional<uint64_t> step;
  std::vector<std::string> include, exclude, rename;
};

int fail(const Error& e, int code) {
  std::fprintf(stderr, "shardguard: %s\n", e.message().c_str());
  return code;
}

// Flags -> options; kInvalid names the flag.
Result<ExportOptions> options_of(const ExportArgs& a) {
  ExportOptions o;
  o.out_dir = a.out;
  o.prefix = a.prefix;
  auto limit = parse_size(a.max_size);
  if (!limit.ok()) return std::move(limit).error().context("--max-shard-size");
  o.max_shard_size = *limit;
  o.include = a.include;
  o.exclude = a.exclude;
  for (const auto& r : a.rename) {
    auto rule = parse_rename_prefix(r);
    if (!rule.ok()) return std::move(rule).error().context("--rename-prefix");
    o.rename_prefixes.push_back(*rule);
  }
  if (a.dtype == "bf16") {
    o.cast_to = DType::kBF16;
  } else if (a.dtype != "keep") {
    return Error(ErrorCode::kInvalid, "--dtype '" + a.dtype + "': use bf16 or keep");
  }
  return o;
}

// Works below `dir` only, never following a link planted there (core/rooted_fs.h).
std::unique_ptr<RootedFilesystem> rooted(const std::string& dir) {
  RootOptions root;
  root.path = dir;
  return RootedFilesystem::single(std::move(root));
}

int run_export(const ExportArgs& a) {
  auto options = options_of(a);
  if (!options.ok()) return fail(options.error(), kExitUsage);
  if (auto st = check_export_options(*options); !st.ok()) return fail(st.error(), kExitUsage);
  // Two roots: the checkpoint is read below its directory, the export written below --out
  // (created if missing); neither follows a link planted inside it.
  auto source = CkptLocation::open(a.dir);
  if (!source.ok()) return fail(source.error(), kExitUsage);
  auto reader = open_complete(source->store(), a.step);
  if (!reader.ok()) return fail(reader.error(), kExitCheckpointBad);
  // What the flags select from this checkpoint: nothing, or a name clash, is a usage error.
  if (auto plan = plan_export(reader->tensor_names(), *options); !plan.ok())
    return fail(plan.error(), kExitUsage);
  auto target = rooted(a.out);
  auto written = export_hf(*target, *reader, *options);
  if (!written.ok()) {
    // Bad bytes found while copying (a shard header that does not parse, a failed block)
    // mean the checkpoint is corrupt (3); anything else is the export failing (1): a link
    // planted in --out, a full disk.
    return fail(written.error(), written.error().code() == ErrorCode::kCorrupt
                                     ? kExitCheckpointBad
                                     : kExitFailure);
  }
  for (const auto& p : written->written) std::printf("%s\n", p.c_str());
  for (const auto& p : written->removed)
    std::fprintf(stderr, "shardguard: removed %s (an earlier export's, not this one's)\n",
                 p.c_str());
  return kExitOk;
}

}  // namespace

void add_ckpt_export_command(CLI::App& ckpt, int* exit_code) {
  auto a = std::make_shared<ExportArgs>();
  auto* exp = ckpt.add_subcommand(
      "export", "Write a Hugging Face safetensors layout (what from_pretrained loads)");
  exp->add_option("DIR", a->dir, "checkpoint directory or s3://BUCKET/PREFIX")->required();
  exp->add_option("--step", a->step, "step (default: newest complete)");
  exp->add_option("--out", a->out, "output directory")->required();
  exp->add_option("--prefix", a->prefix, "file name prefix")->capture_default_str();
  exp->add_option("--max-shard-size", a->max_size, "largest file, e.g. 5GB, 2GiB")
      ->capture_default_str();
  exp->add_option("--include", a->include,
                  "export only tensors matching this glob (repeatable; e.g. 'model.*')");
  exp->add_option("--exclude", a->exclude, "leave out tensors matching this glob (repeatable)");
  exp->add_option("--rename-prefix", a->rename,
                  "FROM=TO: replace a leading FROM in tensor names (repeatable; 'model.=' "
                  "strips 'model.')");
  exp->add_option("--dtype", a->dtype,
                  "bf16: store F16/F32/F64 tensors as BF16 (round to nearest even, as "
                  "torch's .to(torch.bfloat16)); keep: unchanged")
      ->capture_default_str();
  exp->callback([=] { *exit_code = run_export(*a); });
}

}  // namespace shardguard::cli
