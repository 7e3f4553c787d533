// Strict JSON for on-storage headers (safetensors, and any checkpoint file that must mean
// one thing to every reader): UTF-8 validation, a parser that rejects duplicate keys, and
// string escaping that matches serde_json's compact output.
//
// Boost.JSON's own parser keeps the last of duplicate keys silently; a header where two
// readers can see different tensors is exactly what a polyglot attack needs, so refuse it.
// Internal to checkpoint/ (sg_checkpoint links Boost.JSON privately).
// Thread-safety: pure functions; safe from any thread.
#pragma once

#include <boost/json/value.hpp>
#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard::checkpoint {

// True if `bytes` is well-formed UTF-8: no overlong forms, surrogates, or code points
// past U+10FFFF (the rules of Rust's str::from_utf8).
bool is_valid_utf8(std::string_view bytes);

// Parses exactly one JSON document (JSON whitespace around it allowed, nesting up to 128
// like serde_json). kCorrupt if the text is not JSON or any object repeats a key; the
// message says which, without context (callers prepend the file).
Result<boost::json::value> parse_json_strict(std::string_view text);

// Appends `text` as a JSON string literal: `"` and `\` escaped, control characters as \n,
// \t, ... or \u00XX (lower-case hex), everything else verbatim (text must be UTF-8).
void append_json_string(std::string& out, std::string_view text);

}  // namespace shardguard::checkpoint
