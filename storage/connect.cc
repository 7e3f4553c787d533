#include "storage/connect.h"
#include "core/host_name.h"

#include <unistd.h>

#include <random>

#include "storage/curl_transport.h"
#include "storage/dir_store.h"
#include "storage/s3/credentials.h"
#include "storage/s3/s3_client.h"
#include "storage/s3/s3_store.h"

namespace shardguard::storage {
namespace {

class DirectoryConnection final : public Connection {
 public:
  DirectoryConnection(Filesystem& fs, const std::string& dir) : store_(fs, dir) {}
  Store& store() override { return store_; }
  const s3::S3Options* s3_options() const override { return nullptr; }
  std::string credentials_source() const override { return ""; }

 private:
  DirectoryStore store_;
};

class BucketConnection final : public Connection {
 public:
  Store& store() override { return *store_; }
  const s3::S3Options* s3_options() const override { return &options_; }
  std::string credentials_source() const override { return credentials_->source(); }

  s3::S3Options options_;
  std::unique_ptr<CurlTransport> http_;
  std::unique_ptr<s3::CredentialsProvider> credentials_;
  std::unique_ptr<s3::S3Client> client_;
  std::unique_ptr<S3Store> store_;
};

std::optional<std::string> system_getenv(std::string_view name) {
  const char* v = ::getenv(std::string(name).c_str());
  if (v == nullptr) return std::nullopt;
  return std::string(v);
}

}  // namespace

Result<std::unique_ptr<Connection>> connect(const Location& location, ConnectOptions o) {
  if (!location.is_bucket())
    return std::unique_ptr<Connection>(std::make_unique<DirectoryConnection>(
        o.fs != nullptr ? *o.fs : PosixFilesystem::instance(), location.path));
  Clock& clock = o.clock != nullptr ? *o.clock : RealClock::instance();
  auto getenv = o.getenv ? o.getenv : system_getenv;
  auto c = std::make_unique<BucketConnection>();
  CurlOptions curl;
  curl.verify_tls = o.s3.tls_verify;
  curl.ca_file = o.s3.ca_file;
  SG_ASSIGN_OR_RETURN(c->http_, CurlTransport::create(curl));
  auto sources = s3::CredentialSources::system(*c->http_);
  sources.getenv = getenv;
  sources.clock = &clock;
  sources.warn = o.warn;
  SG_ASSIGN_OR_RETURN(auto region, s3::resolve_region(sources));
  SG_ASSIGN_OR_RETURN(c->options_, s3::resolve_s3_options(o.s3, getenv, region));
  auto credentials = s3::resolve_credentials(sources);
  if (!credentials.ok())
    return std::move(credentials).error().context("credentials for " + location.str());
  c->credentials_ = std::move(*credentials);
  SG_ASSIGN_OR_RETURN(c->client_,
                      s3::S3Client::create({*c->http_, *c->credentials_, clock, {}, {}}, c->options_));
  c->store_ = std::make_unique<S3Store>(*c->client_, location);
  return std::unique_ptr<Connection>(std::move(c));
}

std::shared_ptr<Store> shared_store(std::shared_ptr<Connection> connection) {
  Store* s = &connection->store();
  return std::shared_ptr<Store>(std::move(connection), s);
}

Status probe(Connection& connection) {
  Store& store = connection.store();
  S3Store* bucket = store.as_bucket();
  if (bucket == nullptr) return {};
  const Location& loc = store.location();
  const std::string where = "checkpoint location " + loc.str();
  if (auto st = bucket->client().head_bucket(loc.bucket); !st.ok())
    return std::move(st).error().context(where);
  std::random_device rd;
  const std::string key = ".shardguard/probe-" + host_name("host") + "-" +
                          std::to_string(::getpid()) + "-" + std::to_string(rd());
  if (auto st = store.put(key, "probe", PutCondition::if_absent()); !st.ok())
    return std::move(st).error().context(where + ": a conditional create (If-None-Match: *)");
  auto again = store.put(key, "probe again", PutCondition::if_absent());
  const bool refused = !again.ok() && again.error().code() == ErrorCode::kExists;
  auto removed = store.remove(key);
  if (!refused) {
    if (!again.ok()) return std::move(again).error().context(where);
    return Error(ErrorCode::kUnsupported,
                 where + ": the server at " + bucket->client().options().endpoint +
                     " ignores If-None-Match: * (a second create of one key was accepted), so a "
                     "commit could overwrite another writer's; shardguard refuses such a bucket");
  }
  if (!removed.ok()) return std::move(removed).error().context(where + ": deleting the probe");
  return {};
}

}  // namespace shardguard::storage
