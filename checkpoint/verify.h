// Verification of a checkpoint's files against its manifest: every listed file present
// with the listed size and, on full verification, the listed checksums: the XXH3-64 of
// every block (format 2) and the XXH3-128 of the whole file, computed in one pass.
// Messages name the file relative to the checkpoint directory
// ("step-000000200/shard-00001-of-00002.safetensors: size 10 differs from manifest 12",
// "...: block at offset 4194304 (2 MiB) fails its checksum").
// Thread-safety: pure functions over the Filesystem; safe from any thread.
#pragma once

#include <cstdint>
#include <functional>
#include <string>

#include "checkpoint/block_sums.h"
#include "checkpoint/manifest.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/store.h"

namespace shardguard::checkpoint {

enum class Verify {
  kSize,      // files exist with the listed sizes (cheap: metadata only)
  kChecksum,  // also block sums and XXH3-128 over every byte (reads the whole checkpoint)
};

// Called with bytes verified so far and the total bytes to verify.
using VerifyProgress = std::function<void(uint64_t done, uint64_t total)>;

// XXH3-128 of a whole file as 32 hex digits (xxh3_128_hex), in 8 MiB steps: through a
// mapping when the file is in the page cache, else (a large file, as after an O_DIRECT save)
// with O_DIRECT reads a few steps ahead of the hash. `on_bytes(n)` is called after each step
// with the n bytes just hashed.
Result<std::string> file_xxh3_128(Filesystem& fs, const std::string& path,
                                  const std::function<void(uint64_t)>& on_bytes = {});
// The same for `key` of a store (a bucket's object by ranged GETs, a few ahead of the hash).
Result<std::string> file_xxh3_128(storage::Store& store, const std::string& key,
                                  const std::function<void(uint64_t)>& on_bytes = {});

// The same pass, also computing the XXH3-64 of each block of `block_bytes` (a valid
// checksum block size) into the result's block_xxh3.
Result<FileRecord> file_checksums(Filesystem& fs, const std::string& path, uint64_t block_bytes,
                                  const std::function<void(uint64_t)>& on_bytes = {});

// Checks `manifest` against the files in `step_dir`: the manifest's step must match the
// directory's name (when it parses as a step directory); each listed file must exist with
// its size and, with kChecksum, its checksums (files listed without any are size-checked
// only) and, for every file holding chunks, a safetensors header that parses and holds each
// of those chunks with the manifest's dtype and shape. kCorrupt naming the file (and the first bad
// block) on the first mismatch; other I/O errors as they come. On a checksum mismatch, `*failure`
// (when given) says where.
Status verify_checkpoint(Filesystem& fs, const std::string& step_dir, const Manifest& manifest,
                         Verify verify, VerifyProgress progress = {},
                         ChecksumFailure* failure = nullptr);
// The same for the step under key `prefix` of a store ("step-000000200"); a bucket's sizes
// come from one listing of the step.
Status verify_checkpoint(storage::Store& store, std::string_view prefix, const Manifest& manifest,
                         Verify verify, VerifyProgress progress = {},
                         ChecksumFailure* failure = nullptr);

}  // namespace shardguard::checkpoint
