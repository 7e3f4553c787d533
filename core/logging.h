// Logging set-up: spdlog to stderr, as text or as JSON lines, with the level from config
// and overridable by SHARDGUARD_LOG_LEVEL / SHARDGUARD_LOG_FORMAT. Call once from main()
// before starting threads; afterwards log with spdlog::info(...) etc.
#pragma once

#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard {

enum class LogFormat { kText, kJson };

struct LogOptions {
  LogFormat format = LogFormat::kText;
  std::string level = "info";  // trace, debug, info, warn, error, critical, off
};

// Applies `options`, then the environment overrides. An unknown level or format is an
// error naming the value (and the variable, when it came from the environment).
Status setup_logging(LogOptions options);

Result<LogFormat> parse_log_format(std::string_view text);

// Escapes `text` for use inside a JSON string literal (no surrounding quotes).
std::string json_escape(std::string_view text);

}  // namespace shardguard
