// Where checkpoints live: a directory or an S3-compatible bucket and prefix. One typed value
// travels from the command line (`--checkpoint-dir`, `[job] checkpoint_dir`,
// `SHARDGUARD_CHECKPOINT_DIR`, the clients' constructors) to the ranks, instead of a string
// every layer re-derives; the names under it are made in checkpoint/layout.h.
//
//   /data/ckpt, ckpt, ./ckpt      a directory (kept as given, not made absolute)
//   s3://bucket                   a bucket's root
//   s3://bucket/runs/llama        a prefix in a bucket (no leading or trailing '/')
//
// Thread-safety: plain values.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard::storage {

inline constexpr std::string_view kS3Scheme = "s3://";

struct Location {
  enum class Kind { kDirectory, kBucket };
  Kind kind = Kind::kDirectory;
  std::string path;    // kDirectory
  std::string bucket;  // kBucket: a DNS-compatible bucket name
  std::string prefix;  // kBucket: "" or "a/b"

  // A path, or s3://BUCKET[/PREFIX]. kInvalid names the text and what is wrong: an empty
  // text, a bucket name S3 refuses, a prefix with empty, "." or ".." components, control
  // characters, or another scheme ("gs://", "file://").
  static Result<Location> parse(std::string_view text);
  static Location directory(std::string path);

  bool is_bucket() const { return kind == Kind::kBucket; }
  // The text it was parsed from, normalised: the path, or "s3://bucket/prefix".
  std::string str() const;
  // The key under the location as a user reads it: "dir/step-000000100/manifest.json" or
  // "s3://bucket/prefix/step-000000100/manifest.json".
  std::string describe(std::string_view key) const;
  // The bucket's object key of `key` under the prefix ("prefix/key"); kBucket only.
  std::string object_key(std::string_view key) const;

  bool operator==(const Location&) const = default;
};

// True when `text` names a bucket (starts with "s3://").
bool is_bucket_url(std::string_view text);

// When `full` is `location.describe(key)` for some key, that key (a manifest path given as
// SHARDGUARD_RESUME_MANIFEST, say); kInvalid when it lies outside the location.
Result<std::string> key_within(const Location& location, std::string_view full);

}  // namespace shardguard::storage
