#include "core/logging.h"

#include <spdlog/pattern_formatter.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>
#include <cstdlib>

namespace shardguard {
namespace {

// %j: the message, escaped for a JSON string.
class JsonMessageFlag final : public spdlog::custom_flag_formatter {
 public:
  void format(const spdlog::details::log_msg& msg, const std::tm&,
              spdlog::memory_buf_t& dest) override {
    std::string escaped = json_escape(std::string_view(msg.payload.data(), msg.payload.size()));
    dest.append(escaped.data(), escaped.data() + escaped.size());
  }
  std::unique_ptr<custom_flag_formatter> clone() const override {
    return std::make_unique<JsonMessageFlag>();
  }
};

Result<spdlog::level::level_enum> parse_level(std::string_view text) {
  for (int l = spdlog::level::trace; l <= spdlog::level::off; ++l) {
    auto level = static_cast<spdlog::level::level_enum>(l);
    auto name = spdlog::level::to_string_view(level);
    if (text == std::string_view(name.data(), name.size())) return level;
  }
  if (text == "warn") return spdlog::level::warn;
  return Error(ErrorCode::kInvalid,
               "invalid log level '" + std::string(text) +
                   "' (use trace, debug, info, warn, error, critical or off)");
}

}  // namespace

Result<LogFormat> parse_log_format(std::string_view text) {
  if (text == "text") return LogFormat::kText;
  if (text == "json") return LogFormat::kJson;
  return Error(ErrorCode::kInvalid,
               "invalid log format '" + std::string(text) + "' (use text or json)");
}

std::string json_escape(std::string_view text) {
  std::string out;
  out.reserve(text.size() + 8);
  for (char c : text) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\r': out += "\\r"; break;
      case '\t': out += "\\t"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20) {
          char buf[8];
          std::snprintf(buf, sizeof buf, "\\u%04x", static_cast<unsigned char>(c));
          out += buf;
        } else {
          out += c;
        }
    }
  }
  return out;
}

Status setup_logging(LogOptions options) {
  if (const char* env = std::getenv("SHARDGUARD_LOG_FORMAT"); env != nullptr && *env) {
    auto f = parse_log_format(env);
    if (!f.ok()) return f.error().context("SHARDGUARD_LOG_FORMAT");
    options.format = *f;
  }
  if (const char* env = std::getenv("SHARDGUARD_LOG_LEVEL"); env != nullptr && *env) {
    if (!parse_level(env).ok()) return parse_level(env).error().context("SHARDGUARD_LOG_LEVEL");
    options.level = env;
  }
  SG_ASSIGN_OR_RETURN(auto level, parse_level(options.level));

  spdlog::drop("shardguard");
  auto logger = spdlog::stderr_logger_mt("shardguard");
  if (options.format == LogFormat::kJson) {
    auto formatter = std::make_unique<spdlog::pattern_formatter>();
    formatter->add_flag<JsonMessageFlag>('j').set_pattern(
        R"({"time":"%Y-%m-%dT%H:%M:%S.%e%z","level":"%l","pid":%P,"msg":"%j"})");
    logger->set_formatter(std::move(formatter));
  } else {
    logger->set_pattern("%Y-%m-%d %H:%M:%S.%e %^%-5l%$ [%P] %v");
  }
  logger->set_level(level);
  spdlog::set_default_logger(logger);
  return {};
}

}  // namespace shardguard
