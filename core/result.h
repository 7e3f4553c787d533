// Errors as values: Result<T> holds a T or an Error that names what failed and why.
//
// Every module boundary returns Result; exceptions from libraries (toml++, Boost.JSON,
// Boost.Process) are caught in adapters and turned into an Error. Messages name the
// thing: "rename 'a' -> 'b': No space left on device". Context is prepended per layer
// with Error::context(). Thread-safety: plain values, no shared state.
#pragma once

#include <cassert>
#include <string>
#include <string_view>
#include <type_traits>
#include <utility>
#include <variant>

namespace shardguard {

// Broad classes callers branch on; the message carries the detail.
enum class ErrorCode {
  kIo,           // an OS call failed (errno_ holds the value)
  kNoSpace,      // ENOSPC / EDQUOT: the disk is full
  kNotFound,     // a file, key or tensor does not exist
  kInvalid,      // bad input from a user (config, flag, argument)
  kCorrupt,      // bad bytes on storage (shard, manifest, sidecar)
  kTimeout,      // a deadline passed
  kCancelled,    // the operation was stopped on purpose
  kFenced,       // written by an older attempt than the directory's owner
  kExists,       // a create-if-absent lost: the file or key exists (another writer was first)
  kUnsupported,  // valid but not implemented by this build (e.g. no CUDA)
  kInternal,     // a bug: an invariant did not hold
};

std::string_view error_code_name(ErrorCode code);

class Error {
 public:
  Error(ErrorCode code, std::string message, int sys_errno = 0)
      : code_(code), message_(std::move(message)), errno_(sys_errno) {}

  // From an errno value: "what: strerror(err)"; ENOSPC/EDQUOT map to kNoSpace,
  // ENOENT to kNotFound, everything else to kIo.
  static Error from_errno(std::string_view what, int err);

  ErrorCode code() const { return code_; }
  const std::string& message() const { return message_; }
  int sys_errno() const { return errno_; }

  // Returns a copy whose message reads "prefix: <old message>".
  Error context(std::string_view prefix) const&;
  Error context(std::string_view prefix) &&;

 private:
  ErrorCode code_;
  std::string message_;
  int errno_;
};

template <typename T>
class [[nodiscard]] Result {
 public:
  Result(T value) : v_(std::move(value)) {}  // NOLINT: implicit by design
  Result(Error error) : v_(std::move(error)) {}  // NOLINT: implicit by design
  template <typename U, typename = std::enable_if_t<std::is_constructible_v<T, U&&> &&
                                                    !std::is_same_v<std::decay_t<U>, Error> &&
                                                    !std::is_same_v<std::decay_t<U>, Result>>>
  Result(U&& value) : v_(T(std::forward<U>(value))) {}  // NOLINT: implicit by design

  bool ok() const { return v_.index() == 0; }
  explicit operator bool() const { return ok(); }

  T& value() & { assert(ok()); return std::get<0>(v_); }
  const T& value() const& { assert(ok()); return std::get<0>(v_); }
  T&& value() && { assert(ok()); return std::get<0>(std::move(v_)); }
  T value_or(T fallback) const& { return ok() ? std::get<0>(v_) : std::move(fallback); }

  const Error& error() const& { assert(!ok()); return std::get<1>(v_); }
  Error&& error() && { assert(!ok()); return std::get<1>(std::move(v_)); }

  T& operator*() & { return value(); }
  const T& operator*() const& { return value(); }
  T* operator->() { return &value(); }
  const T* operator->() const { return &value(); }

 private:
  std::variant<T, Error> v_;
};

template <>
class [[nodiscard]] Result<void> {
 public:
  Result() = default;
  Result(Error error) : error_(std::move(error)), ok_(false) {}  // NOLINT: implicit by design

  bool ok() const { return ok_; }
  explicit operator bool() const { return ok_; }
  void value() const { assert(ok_); }
  const Error& error() const& { assert(!ok_); return error_; }
  Error&& error() && { assert(!ok_); return std::move(error_); }

 private:
  Error error_{ErrorCode::kInternal, ""};
  bool ok_ = true;
};

using Status = Result<void>;

inline Status ok_status() { return {}; }

}  // namespace shardguard

// Propagates the error of a Result<...> expression; the value, if any, is discarded.
#define SG_RETURN_IF_ERROR(expr)                        \
  do {                                                  \
    auto sg_status_ = (expr);                           \
    if (!sg_status_.ok()) return std::move(sg_status_).error(); \
  } while (0)

#define SG_CONCAT_INNER_(a, b) a##b
#define SG_CONCAT_(a, b) SG_CONCAT_INNER_(a, b)

// `SG_ASSIGN_OR_RETURN(auto x, f());` binds the value or returns the error.
#define SG_ASSIGN_OR_RETURN(lhs, expr) \
  SG_ASSIGN_OR_RETURN_IMPL_(SG_CONCAT_(sg_result_, __LINE__), lhs, expr)
#define SG_ASSIGN_OR_RETURN_IMPL_(tmp, lhs, expr) \
  auto tmp = (expr);                              \
  if (!tmp.ok()) return std::move(tmp).error();   \
  lhs = std::move(tmp).value()
