#include "checkpoint/dir_identity.h"

#include <boost/json.hpp>
#include <chrono>
#include <cstdio>
#include <random>

#include "checkpoint/catalog.h"
#include "checkpoint/json_fields.h"
#include "checkpoint/paths.h"
#include "storage/dir_store.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace {

namespace json = boost::json;

constexpr std::string_view kFormat = "shardguard-job";
constexpr int kVersion = 1;
constexpr size_t kMaxJobIdBytes = 128;
// Earlier owners kept in the record; enough for an audit trail, bounded so it cannot grow.
constexpr size_t kMaxChanges = 32;

struct Change {
  std::string from, to;
  int64_t unix_ms = 0;
};

struct JobRecord {
  std::string job_id;
  int64_t created_unix_ms = 0;
  std::vector<Change> changes;  // oldest first
};

std::string q(const std::string& s) { return "'" + s + "'"; }

Result<JobRecord> parse_record(std::string_view text) {
  SG_ASSIGN_OR_RETURN(json::value root, parse_json_strict(text));
  SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
  SG_ASSIGN_OR_RETURN(std::string format, f.string("format"));
  SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
  if (format != kFormat || version != kVersion)
    return Error(ErrorCode::kCorrupt,
                 "format '" + format + "' version " + std::to_string(version) + " is not ours");
  JobRecord r;
  SG_ASSIGN_OR_RETURN(r.job_id, f.string("job_id"));
  if (auto st = check_job_id(r.job_id); !st.ok())
    return Error(ErrorCode::kCorrupt, "job_id: " + st.error().message());
  SG_ASSIGN_OR_RETURN(r.created_unix_ms, f.i64("created_unix_ms"));
  SG_ASSIGN_OR_RETURN(auto changes, f.array("changes"));
  for (size_t i = 0; i < changes->size(); ++i) {
    SG_ASSIGN_OR_RETURN(auto c,
                        JsonFields::of((*changes)[i], "changes[" + std::to_string(i) + "]"));
    Change ch;
    SG_ASSIGN_OR_RETURN(ch.from, c.string("from"));
    SG_ASSIGN_OR_RETURN(ch.to, c.string("to"));
    SG_ASSIGN_OR_RETURN(ch.unix_ms, c.i64("unix_ms"));
    SG_RETURN_IF_ERROR(c.finish());
    r.changes.push_back(std::move(ch));
  }
  SG_RETURN_IF_ERROR(f.finish());
  return r;
}

std::string record_json(const JobRecord& r) {
  json::object o;
  o["format"] = kFormat;
  o["version"] = kVersion;
  o["job_id"] = r.job_id;
  o["created_unix_ms"] = r.created_unix_ms;
  json::array changes;
  for (const auto& c : r.changes)
    changes.emplace_back(json::object{{"from", c.from}, {"to", c.to}, {"unix_ms", c.unix_ms}});
  o["changes"] = std::move(changes);
  return json::serialize(o) + "\n";
}

Result<std::optional<JobRecord>> load(storage::Store& store) {
  const std::string path = store.describe(meta_key(kJobIdentityName));
  auto text = store.read(meta_key(kJobIdentityName));
  if (!text.ok()) {
    if (text.error().code() == ErrorCode::kNotFound) return std::optional<JobRecord>();
    return std::move(text).error();
  }
  auto r = parse_record(*text);
  if (!r.ok()) return std::move(r).error().context(path);
  return std::optional<JobRecord>(std::move(r).value());
}

}  // namespace

std::string_view job_id_source_name(JobIdSource source) {
  switch (source) {
    case JobIdSource::kAdopted:
      return "adopted";
    case JobIdSource::kFromCheckpoint:
      return "from_checkpoint";
    case JobIdSource::kMatched:
      return "matched";
    case JobIdSource::kStored:
      return "stored";
    case JobIdSource::kGenerated:
      return "generated";
    case JobIdSource::kTakenOver:
      return "taken_over";
  }
  return "adopted";
}

Status check_job_id(std::string_view id) {
  if (id.empty()) return Error(ErrorCode::kInvalid, "job id is empty");
  if (id.size() > kMaxJobIdBytes)
    return Error(ErrorCode::kInvalid,
                 "job id is longer than " + std::to_string(kMaxJobIdBytes) + " bytes");
  for (unsigned char c : id)
    if (c < 0x21 || c == 0x7f || c == '/')
      return Error(ErrorCode::kInvalid,
                   "job id " + q(std::string(id)) + " has a space, control character or '/'");
  return {};
}

std::string generate_job_id(WallTime now) {
  using namespace std::chrono;
  const auto secs = floor<seconds>(now);
  const auto day = floor<days>(secs);
  const year_month_day ymd{day};
  const hh_mm_ss hms{secs - day};
  std::random_device rd;
  char buf[64];
  std::snprintf(buf, sizeof buf, "job-%04d%02u%02u-%02lld%02lld%02lld-%08x",
                static_cast<int>(ymd.year()), static_cast<unsigned>(ymd.month()),
                static_cast<unsigned>(ymd.day()), static_cast<long long>(hms.hours().count()),
                static_cast<long long>(hms.minutes().count()),
                static_cast<long long>(hms.seconds().count()), static_cast<unsigned>(rd()));
  return buf;
}

Result<std::optional<std::string>> stored_job_id(storage::Store& store) {
  SG_ASSIGN_OR_RETURN(auto record, load(store));
  if (!record) return std::optional<std::string>();
  return std::optional<std::string>(record->job_id);
}

Result<std::optional<std::string>> stored_job_id(Filesystem& fs,
                                                 const std::string& checkpoint_dir) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return stored_job_id(store);
}

Result<ResolvedJobId> decide_job_id(storage::Store& store,
                                    const std::optional<std::string>& explicit_id, bool take_over,
                                    WallTime now) {
  if (explicit_id) SG_RETURN_IF_ERROR(check_job_id(*explicit_id));
  SG_ASSIGN_OR_RETURN(auto stored, stored_job_id(store));
  if (!explicit_id) {
    if (stored) return ResolvedJobId{*stored, JobIdSource::kAdopted, ""};
    auto latest = latest_complete(store, Verify::kSize);
    if (latest.ok() && latest->manifest && check_job_id(latest->manifest->job_id).ok())
      return ResolvedJobId{latest->manifest->job_id, JobIdSource::kFromCheckpoint, ""};
    return ResolvedJobId{generate_job_id(now), JobIdSource::kGenerated, ""};
  }
  if (!stored) return ResolvedJobId{*explicit_id, JobIdSource::kStored, ""};
  if (*stored == *explicit_id) return ResolvedJobId{*explicit_id, JobIdSource::kMatched, ""};
  if (take_over) return ResolvedJobId{*explicit_id, JobIdSource::kTakenOver, *stored};
  const bool bucket = store.location().is_bucket();
  return Error(ErrorCode::kInvalid,
               std::string(bucket ? "checkpoint location " : "checkpoint directory ") +
                   q(store.location().str()) + " belongs to job " + q(*stored) + " (" +
                   q(store.describe(meta_key(kJobIdentityName))) + "), not " + q(*explicit_id) +
                   ": run with job id " + q(*stored) + ", use another checkpoint " +
                   (bucket ? "location" : "directory") +
                   ", or take it over on purpose with --resume-from-job");
}

Result<ResolvedJobId> decide_job_id(Filesystem& fs, const std::string& checkpoint_dir,
                                    const std::optional<std::string>& explicit_id, bool take_over,
                                    WallTime now) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return decide_job_id(store, explicit_id, take_over, now);
}

Result<ResolvedJobId> resolve_job_id(Filesystem& fs, const std::string& checkpoint_dir,
                                     const std::optional<std::string>& explicit_id, bool take_over,
                                     WallTime now) {
  storage::DirectoryStore store(fs, checkpoint_dir);
  return resolve_job_id(store, explicit_id, take_over, now);
}

Result<ResolvedJobId> resolve_job_id(storage::Store& store,
                                     const std::optional<std::string>& explicit_id, bool take_over,
                                     WallTime now) {
  SG_ASSIGN_OR_RETURN(ResolvedJobId decided, decide_job_id(store, explicit_id, take_over, now));
  if (decided.source == JobIdSource::kAdopted || decided.source == JobIdSource::kMatched)
    return decided;
  JobRecord record;
  if (decided.source == JobIdSource::kTakenOver) {
    SG_ASSIGN_OR_RETURN(auto old, load(store));
    if (old) record = std::move(*old);
    record.changes.push_back({decided.previous_job_id, decided.job_id, to_unix_ms(now)});
    if (record.changes.size() > kMaxChanges)
      record.changes.erase(record.changes.begin(),
                           record.changes.end() - static_cast<std::ptrdiff_t>(kMaxChanges));
  } else {
    record.created_unix_ms = to_unix_ms(now);
  }
  record.job_id = decided.job_id;
  SG_RETURN_IF_ERROR(store.put(meta_key(kJobIdentityName), record_json(record)));
  return decided;
}

}  // namespace shardguard::checkpoint
