// Reads a job's TOML file into JobConfig (supervisor/job_config.h). Strict: unknown keys and
// sections, wrong types, bad durations and out-of-range numbers are kInvalid errors that
// name the file, line and key ("job.toml:7: checkpoint.every: invalid duration '5 min': ...");
// every problem found is reported, one per line, in file order. Keys left out keep the
// struct's defaults. [hooks] and [agent] are accepted and skipped (parsed elsewhere).
//
// Thread-safety: pure functions (load_job_config reads the file), safe to call concurrently.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"
#include "supervisor/job_config.h"

namespace shardguard::supervisor {

// Reads and parses the file at `path`; messages name `path`. A missing or unreadable file is
// an error from the OS (kNotFound / kIo).
Result<JobConfig> load_job_config(const std::string& path);

// Parses TOML text; `source_name` stands for the file in messages. TOML syntax errors read
// "<source>:<line>:<column>: <what>".
Result<JobConfig> parse_job_config(std::string_view toml_text, std::string_view source_name);

}  // namespace shardguard::supervisor
