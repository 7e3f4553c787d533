#include "cli/checkpoint_location.h"

#include "storage/bucket_mount.h"
#include "storage/s3/s3_options.h"

namespace shardguard::cli {

std::string OpenedLocation::describe() const {
  if (!bucket()) return location.str();
  const storage::s3::S3Options& o = *connection->s3_options();
  std::string addressing = "auto";
  if (auto ep = storage::s3::parse_endpoint(o.endpoint); ep.ok())
    addressing = storage::s3::use_path_style(o, *ep, location.bucket) ? "path-style"
                                                                        : "virtual-host";
  return location.str() + " (endpoint " + o.endpoint + ", region " + o.region + ", " + addressing +
         " requests, credentials from " + connection->credentials_source() + ")";
}

Result<OpenedLocation> open_location(const std::string& text, const storage::s3::S3Options& s3,
                                     Filesystem& fs, bool probe) {
  SG_ASSIGN_OR_RETURN(storage::Location location, storage::Location::parse(text));
  if (!location.is_bucket()) SG_RETURN_IF_ERROR(storage::refuse_bucket_mount(location.path));
  storage::ConnectOptions options;
  options.fs = &fs;
  options.s3 = s3;
  SG_ASSIGN_OR_RETURN(auto connection, storage::connect(location, std::move(options)));
  if (probe) SG_RETURN_IF_ERROR(storage::probe(*connection));
  return OpenedLocation{std::move(location), std::move(connection)};
}

}  // namespace shardguard::cli
