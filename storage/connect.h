// Everything a process needs to reach a checkpoint location, built once and shared by its
// threads: for a directory, its Store over a filesystem; for a bucket, the libcurl transport,
// the credentials (found as every AWS tool finds them: storage/s3/credentials.h), the S3
// client and the bucket's Store. Only `main`s and the job-side client's default build one;
// components are handed the Store.
//
// probe() checks a bucket the way a save will use it, for `run` at start and --check-config:
// the bucket exists, the keys are accepted, the server's clock agrees, a conditional create
// works and a second one of the same key is refused (a server that ignores If-None-Match
// cannot hold a commit point safely), and the probe object can be deleted.
// Thread-safety: the Store may be used from any thread; the Connection is immutable.
#pragma once

#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "core/clock.h"
#include "core/filesystem.h"
#include "core/result.h"
#include "storage/location.h"
#include "storage/s3/s3_options.h"
#include "storage/store.h"

namespace shardguard::storage {

struct ConnectOptions {
  Filesystem* fs = nullptr;  // a directory's; nullptr: PosixFilesystem
  s3::S3Options s3;          // a bucket's, as configured (resolved here)
  // The environment (AWS_*, credentials); nullptr: ::getenv.
  std::function<std::optional<std::string>(std::string_view)> getenv;
  Clock* clock = nullptr;  // nullptr: RealClock
  // Told of a credentials refresh that failed while the cached ones were still good.
  std::function<void(std::string_view)> warn;
};

class Connection {
 public:
  virtual ~Connection() = default;
  virtual Store& store() = 0;
  // The bucket's resolved options (endpoint and region filled in); nullptr for a directory.
  virtual const s3::S3Options* s3_options() const = 0;
  // Where a bucket's credentials come from ("environment", "profile 'x' in ..."); never a
  // secret. Empty for a directory.
  virtual std::string credentials_source() const = 0;
};

// Reaches `location`. kInvalid names a bad setting; kNotFound when no credentials are found
// (listing what was tried). Nothing is sent to a bucket yet (see probe()).
Result<std::unique_ptr<Connection>> connect(const Location& location, ConnectOptions options);

// The Store of a connection as a shared pointer that keeps the connection alive.
std::shared_ptr<Store> shared_store(std::shared_ptr<Connection> connection);

// The checks described above; a directory passes at once. Errors name the location and the
// server's answer.
Status probe(Connection& connection);

}  // namespace shardguard::storage
