#include "core/result.h"

#include <cerrno>
#include <cstring>

namespace shardguard {

std::string_view error_code_name(ErrorCode code) {
  switch (code) {
    case ErrorCode::kIo: return "io";
    case ErrorCode::kNoSpace: return "no_space";
    case ErrorCode::kNotFound: return "not_found";
    case ErrorCode::kInvalid: return "invalid";
    case ErrorCode::kCorrupt: return "corrupt";
    case ErrorCode::kTimeout: return "timeout";
    case ErrorCode::kCancelled: return "cancelled";
    case ErrorCode::kFenced: return "fenced";
    case ErrorCode::kExists: return "exists";
    case ErrorCode::kUnsupported: return "unsupported";
    case ErrorCode::kInternal: return "internal";
  }
  return "unknown";
}

Error Error::from_errno(std::string_view what, int err) {
  ErrorCode code = ErrorCode::kIo;
  if (err == ENOSPC || err == EDQUOT) code = ErrorCode::kNoSpace;
  if (err == ENOENT) code = ErrorCode::kNotFound;
  if (err == EEXIST) code = ErrorCode::kExists;
  std::string message(what);
  message += ": ";
  message += std::strerror(err);
  return Error(code, std::move(message), err);
}

Error Error::context(std::string_view prefix) const& {
  Error copy = *this;
  return std::move(copy).context(prefix);
}

Error Error::context(std::string_view prefix) && {
  std::string message(prefix);
  message += ": ";
  message += message_;
  message_ = std::move(message);
  return std::move(*this);
}

}  // namespace shardguard
