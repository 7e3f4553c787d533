// Hugging Face compatibility: the `model.safetensors.index.json` written beside a checkpoint
// whose tensors are all whole, and a read-only Manifest view of a Hugging Face safetensors
// directory, so the reader and resharding work the same on both.
//
// Index format (transformers): {"metadata": {"total_size": N}, "weight_map": {name: file}},
// rendered like Python's json.dumps(indent=2, sort_keys=True) plus a newline.
// Thread-safety: pure functions; manifest_from_hf_dir only reads through the Filesystem.
#pragma once

#include <string>

#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"

namespace shardguard::checkpoint {

// True when every tensor is one chunk covering its whole shape under its own name as key,
// i.e. a plain safetensors loader finds each tensor complete in one file.
bool every_tensor_whole(const Manifest& manifest);

// The index JSON text for `manifest` (meaningful only when every_tensor_whole()). The
// weight_map maps each tensor to its chunk's file; total_size sums tensor byte sizes.
std::string hf_index_json(const Manifest& manifest);

// A synthetic Manifest for a Hugging Face directory: model.safetensors.index.json and the
// shards it names, or a single model.safetensors. One whole chunk per tensor, files with
// their sizes and no checksum, world size 1, step 0. kNotFound when neither file exists;
// kCorrupt (naming the file) for a bad index, a bad shard header or a tensor missing from
// the file the index names.
Result<Manifest> manifest_from_hf_dir(Filesystem& fs, const std::string& dir);

}  // namespace shardguard::checkpoint
