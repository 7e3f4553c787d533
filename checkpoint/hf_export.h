// Consolidates a checkpoint into a Hugging Face layout: whole tensors in
// `<prefix>-00001-of-0000N.safetensors` files of at most `max_shard_size` bytes (greedy,
// in tensor name order; a larger tensor gets a file of its own) plus
// `<prefix>.safetensors.index.json`, or a single `<prefix>.safetensors` and no index when
// everything fits in one file (the transformers convention). Files are written to temp
// names created exclusively (a name already there, a planted link included, fails the
// export), fsynced and renamed; the index goes last. Pass a RootedFilesystem over the output
// directory (core/rooted_fs.h) so nothing below it is followed. Thread-safety: independent
// calls.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "core/filesystem.h"

namespace shardguard::checkpoint {

struct ExportOptions {
  std::string out_dir;
  std::string prefix = "model";
  uint64_t max_shard_size = 5'000'000'000;  // decimal 5 GB, as transformers
};

// Returns the paths written, index last.
Result<std::vector<std::string>> export_hf(Filesystem& fs, const CheckpointReader& reader,
                                           const ExportOptions& options);

}  // namespace shardguard::checkpoint
