// The shared secret that authenticates every connection between the coordinator and the node
// supervisors of one job (DESIGN.md 6b). It is read from an owner-only file, so that another
// user on a node cannot read it and join the job; Kubernetes Secret volumes mount such a file
// through a chain of symlinks (`key -> ..data/key`, `..data -> ..2024_01_01_xx`), which is
// followed, and the final regular file is checked.
//
// A valid secret file: a regular file (after symlinks), mode 0400 or 0600, owned by the
// running uid or by root, holding at least 32 bytes after one trailing newline ("\n" or
// "\r\n") is stripped, reached only through directories (as given and after links) that
// are owned by the running uid or root and that nobody else can write, unless sticky. `shardguard
// secret generate FILE` writes one (64 hex characters).
//
// Thread-safety: plain values and functions with no shared state.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

#include "core/result.h"

namespace shardguard::net {

inline constexpr size_t kMinSecretBytes = 32;
inline constexpr size_t kMaxSecretBytes = 64 * 1024;  // a bigger file is a mistake, not a key
inline constexpr const char* kSecretFileEnv = "SHARDGUARD_SECRET_FILE";

// The secret's bytes, wiped from memory when the object goes away. Move-only, so the bytes
// are not copied around by accident.
class Secret {
 public:
  // kInvalid, naming `origin`, when `bytes` is shorter than kMinSecretBytes.
  static Result<Secret> from_bytes(std::string bytes, std::string_view origin = "secret");
  Secret(Secret&& other) noexcept;
  Secret& operator=(Secret&& other) noexcept;
  Secret(const Secret&) = delete;
  Secret& operator=(const Secret&) = delete;
  ~Secret();

  std::span<const uint8_t> bytes() const {
    return {reinterpret_cast<const uint8_t*>(bytes_.data()), bytes_.size()};
  }

 private:
  explicit Secret(std::string bytes) : bytes_(std::move(bytes)) {}
  std::string bytes_;
};

// Reads and checks the secret file at `path` (symlinks followed). Errors name the file (and
// where its symlinks led) and what is wrong: missing (kNotFound), not a regular file, mode
// not 0400/0600, wrong owner, too short or too long (kInvalid), unreadable (kIo).
Result<Secret> load_secret_file(const std::string& path);

// The secret file to use: `flag` when not empty, else $SHARDGUARD_SECRET_FILE; kNotFound
// saying how to give one when neither is set.
Result<std::string> resolve_secret_path(std::string_view flag);

// resolve_secret_path(flag), then load_secret_file().
Result<Secret> load_secret(std::string_view flag);

// Creates `path` (never overwriting: O_EXCL) with mode 0600 holding 32 CSPRNG bytes as 64
// lowercase hex characters and a newline, fsynced. kIo naming the path when it exists.
Status generate_secret_file(const std::string& path);

}  // namespace shardguard::net
