// Consolidates a checkpoint into a Hugging Face layout: whole tensors in
// `<prefix>-00001-of-0000N.safetensors` files of at most `max_shard_size` bytes (greedy,
// in tensor name order; a larger tensor gets a file of its own) plus
// `<prefix>.safetensors.index.json`, or a single `<prefix>.safetensors` and no index when
// everything fits in one file (the transformers convention). Files are written to temp
// names created exclusively (a name already there, a planted link included, fails the
// export), fsynced and renamed; the index goes last. Pass a RootedFilesystem over the output
// directory (core/rooted_fs.h) so nothing below it is followed.
//
// What `from_pretrained` loads is usually a part of the training state under other names:
// `include` / `exclude` select tensors by glob (fnmatch(3): `*` also matches dots),
// `rename_prefixes` turns "model.fc1.weight" into "fc1.weight", and `cast_to` stores
// floating tensors as BF16 rounded to nearest even, exactly as torch's
// `tensor.to(torch.bfloat16)` (F64 goes through F32 first, as torch does; NaN becomes the
// canonical 0x7FC0 of torch's scalar conversion; its AVX2 kernel writes 0xFFFF, also a NaN).
// Thread-safety: independent calls.
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "checkpoint/dtype.h"
#include "checkpoint/reader.h"
#include "core/filesystem.h"

namespace shardguard::checkpoint {

struct ExportOptions {
  std::string out_dir;
  std::string prefix = "model";
  uint64_t max_shard_size = 5'000'000'000;  // decimal 5 GB, as transformers
  std::vector<std::string> include{};       // globs; empty: every tensor
  std::vector<std::string> exclude{};       // globs, applied after include
  // (from, to): a name starting with `from` gets `to` instead; the first matching rule wins.
  std::vector<std::pair<std::string, std::string>> rename_prefixes{};
  // F16, F32 and F64 tensors are stored as this dtype (only BF16 is supported); others keep
  // theirs.
  std::optional<DType> cast_to{};
};

// One tensor of an export: its name in the checkpoint and in the export.
struct ExportName {
  std::string source;
  std::string target;
  bool operator==(const ExportName&) const = default;
};

// kInvalid when the options alone are wrong (prefix not a plain name part, zero max shard
// size, a cast other than to BF16): a usage error, found before anything is read or written.
Status check_export_options(const ExportOptions& options);

// The tensors `options` selects from `names`, renamed, in target-name order. kInvalid when
// nothing is selected (naming the globs), when two tensors get the same name, or a name
// becomes empty.
Result<std::vector<ExportName>> plan_export(const std::vector<std::string>& names,
                                            const ExportOptions& options);

// Parses "FROM=TO" (TO may be empty: strip FROM); kInvalid without '=' or with empty FROM.
Result<std::pair<std::string, std::string>> parse_rename_prefix(std::string_view text);

// Converts packed little-endian `from` elements (F16, F32 or F64) to BF16 words in `out`
// (2 bytes per element), rounding to nearest even like torch. kInvalid for another dtype
// or a size mismatch.
Status cast_to_bf16(DType from, std::span<const std::byte> in, std::span<std::byte> out);

// What an export did: the paths written (index last), and the files of an earlier export
// with the same prefix that it removed from the output directory.
struct ExportWritten {
  std::vector<std::string> written;
  std::vector<std::string> removed;
};

// Whether `name` is a file an export with `prefix` owns: `<prefix>.safetensors`,
// `<prefix>-NNNNN-of-NNNNN.safetensors` or `<prefix>.safetensors.index.json`.
bool is_export_file(const std::string& name, const std::string& prefix);

// Writes the export, then removes the files with the export's names that it did not write
// (an earlier export of another step or shard count: left there, a loader would read its
// index or mix its shards in); other files in the directory (config.json, a tokenizer) stay.
// Fails with check_export_options' and plan_export's kInvalid first; after that, kCorrupt is
// a bad checkpoint and anything else the output.
Result<ExportWritten> export_hf(Filesystem& fs, const CheckpointReader& reader,
                                const ExportOptions& options);

}  // namespace shardguard::checkpoint
