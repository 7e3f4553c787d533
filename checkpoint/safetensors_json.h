// Internal to checkpoint/safetensors*.cc: the safetensors header's JSON read in one pass,
// straight into TensorEntry and metadata values, with no JSON document in between. A
// legal header may be 100 MB of tensor entries; a document tree of it (and a key set per
// object for duplicate detection) cost about 7x its size and 10 s. This costs the entries
// themselves plus a 4-byte index per tensor for duplicate names.
// Thread-safety: pure functions.
#pragma once

#include <string>
#include <string_view>

#include "checkpoint/safetensors.h"
#include "core/result.h"

namespace shardguard::checkpoint::detail {

// More is refused as corrupt. Both are far beyond any real shard (numpy's long-standing
// limit is 32 dimensions; metadata is a handful of strings) and bound what a header can make
// the reader hold: a dimension is 2 bytes of JSON but 8 in memory.
inline constexpr size_t kMaxDims = 32;
inline constexpr size_t kMaxMetadataEntries = 65536;

// `name` quoted for messages: control bytes escaped, cut after 200 bytes.
std::string quoted(std::string_view name);
// kCorrupt "<file>: <what>".
Error corrupt(std::string_view file, std::string_view what);
Error corrupt_tensor(std::string_view file, std::string_view name, std::string_view what);

// Parses `text` (valid UTF-8, the header's JSON) into out.tensors (in header order) and
// out.metadata, with the rules of the strict parser (checkpoint/strict_json.h): one JSON
// document, nesting up to 128, no repeated key in any object. Offsets and sizes are the
// caller's to check. kCorrupt naming `file` (and the tensor) on the first problem.
Status parse_header_json(std::string_view text, std::string_view file, SafetensorsHeader& out);

}  // namespace shardguard::checkpoint::detail
