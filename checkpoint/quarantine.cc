#include "checkpoint/quarantine.h"
#include "core/host_name.h"

#include <unistd.h>

#include <algorithm>
#include <boost/json.hpp>
#include <tuple>

#include "checkpoint/json_fields.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine_record.h"
#include "checkpoint/strict_json.h"

namespace shardguard::checkpoint {
namespace quarantine_detail {

namespace json = boost::json;

constexpr std::string_view kReasonFormat = "shardguard-quarantine";
constexpr int kReasonVersion = 1;

std::string q(const std::string& s) { return "'" + s + "'"; }

std::string default_who() {
  return "pid " + std::to_string(::getpid()) + " on host " + host_name();
}

// ISO 8601 UTC with milliseconds, for people reading the reason file.
std::string iso_time(int64_t unix_ms) {
  // The directory name carries the same instant; reuse its formatting.
  std::string name = quarantine_dir_name({0, unix_ms, 1});
  std::string t = name.substr(name.find('-', 5) + 1);  // YYYYMMDDTHHMMSS.mmmZ
  return t.substr(0, 4) + "-" + t.substr(4, 2) + "-" + t.substr(6, 2) + "T" + t.substr(9, 2) + ":" +
         t.substr(11, 2) + ":" + t.substr(13);
}

// A bucket's mark adds the attempts it sets aside and the manifest it took (e.attempts,
// e.manifest); a directory's reason file has neither.
std::string reason_json(const QuarantineEntry& e, bool bucket) {
  json::object o;
  o["format"] = kReasonFormat;
  o["version"] = kReasonVersion;
  o["step"] = e.step;
  o["reason"] = e.reason;
  o["quarantined_unix_ms"] = e.quarantined_unix_ms;
  o["time"] = iso_time(e.quarantined_unix_ms);
  o["who"] = e.who;
  if (bucket) {
    json::array attempts;
    for (uint64_t a : e.attempts) attempts.emplace_back(a);
    o["attempts"] = std::move(attempts);
    o["manifest"] = e.manifest ? json::value(*e.manifest) : json::value(nullptr);
  }
  return json::serialize(o) + "\n";
}

// Fills reason and who (and a mark's attempts and manifest) from `text`; strict, like every
// record we write.
Status parse_reason(std::string_view text, const std::string& path, QuarantineEntry& e) {
  auto parsed = [&]() -> Status {
    SG_ASSIGN_OR_RETURN(json::value root, parse_json_strict(text));
    SG_ASSIGN_OR_RETURN(auto f, JsonFields::of(root, ""));
    SG_ASSIGN_OR_RETURN(std::string format, f.string("format"));
    SG_ASSIGN_OR_RETURN(uint64_t version, f.u64("version"));
    if (format != kReasonFormat || version != kReasonVersion)
      return Error(ErrorCode::kCorrupt,
                   "format '" + format + "' version " + std::to_string(version) + " is not ours");
    SG_ASSIGN_OR_RETURN(uint64_t step, f.u64("step"));
    if (step != e.step)
      return Error(ErrorCode::kCorrupt, "step " + std::to_string(step) +
                                            " differs from the directory's " +
                                            std::to_string(e.step));
    SG_ASSIGN_OR_RETURN(e.reason, f.string("reason"));
    SG_ASSIGN_OR_RETURN(int64_t ms, f.i64("quarantined_unix_ms"));
    (void)ms;  // the name's time is the one that counts (it is what gc reads)
    SG_ASSIGN_OR_RETURN(std::string time, f.string("time"));
    SG_ASSIGN_OR_RETURN(e.who, f.string("who"));
    if (const json::value* attempts = f.optional("attempts")) {
      if (!attempts->is_array()) return Error(ErrorCode::kCorrupt, "attempts: expected an array");
      for (const json::value& a : attempts->get_array()) {
        SG_ASSIGN_OR_RETURN(uint64_t n, json_u64(a, "attempts[]"));
        e.attempts.push_back(n);
      }
    }
    if (const json::value* manifest = f.optional("manifest")) {
      if (manifest->is_string())
        e.manifest = std::string(manifest->get_string());
      else if (!manifest->is_null())
        return Error(ErrorCode::kCorrupt, "manifest: expected a string or null");
    }
    return f.finish();
  }();
  if (!parsed.ok()) return std::move(parsed).error().context(path);
  return {};
}

}  // namespace quarantine_detail

namespace {

using namespace quarantine_detail;

Status read_reason(Filesystem& fs, QuarantineEntry& e) {
  const std::string path = join_path(e.dir, std::string(kQuarantineReasonName));
  SG_ASSIGN_OR_RETURN(std::string text, fs.read_file(path));
  return parse_reason(text, path, e);
}

Status sync_both(Filesystem& fs, const std::string& a, const std::string& b) {
  SG_RETURN_IF_ERROR(fs.sync_dir(a));
  return fs.sync_dir(b);
}

}  // namespace

Result<QuarantineEntry> quarantine_step(Filesystem& fs, const std::string& checkpoint_dir,
                                        uint64_t step, const std::string& reason, WallTime now,
                                        const std::string& who) {
  const std::string src = join_path(checkpoint_dir, step_dir_name(step));
  SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(src));
  if (kind == PathKind::kMissing)
    return Error(ErrorCode::kNotFound,
                 "quarantine step " + std::to_string(step) + ": no " + q(src));
  if (kind != PathKind::kDirectory)
    return Error(ErrorCode::kInvalid,
                 "quarantine step " + std::to_string(step) + ": " + q(src) +
                     (kind == PathKind::kSymlink ? " is a symbolic link (never followed)"
                                                 : " is not a directory"));
  const std::string root = quarantine_root(checkpoint_dir);
  SG_RETURN_IF_ERROR(fs.create_dirs(root));
  SG_RETURN_IF_ERROR(fs.sync_dir(checkpoint_dir));

  QuarantineName name{step, to_unix_ms(now), 1};
  std::string dst = join_path(root, quarantine_dir_name(name));
  for (;;) {
    SG_ASSIGN_OR_RETURN(PathKind taken, fs.path_kind(dst));
    if (taken == PathKind::kMissing) break;
    if (++name.seq > kMaxSeq)
      return Error(ErrorCode::kInternal, "quarantine step " + std::to_string(step) +
                                             ": too many entries named like " + q(dst));
    dst = join_path(root, quarantine_dir_name(name));
  }

  QuarantineEntry entry;
  entry.step = step;
  entry.dir = dst;
  entry.quarantined_unix_ms = name.unix_ms;
  entry.reason = reason;
  entry.who = who.empty() ? default_who() : who;
  // The reason travels inside the directory, so the rename alone is the commit point.
  const std::string reason_path = join_path(src, std::string(kQuarantineReasonName));
  SG_RETURN_IF_ERROR(atomic_write_file(fs, reason_path, reason_json(entry, /*bucket=*/false)));
  if (auto st = fs.rename(src, dst); !st.ok()) {
    (void)fs.remove(reason_path);
    return std::move(st).error().context("quarantine step " + std::to_string(step));
  }
  SG_RETURN_IF_ERROR(sync_both(fs, root, checkpoint_dir));
  return entry;
}

Result<std::vector<QuarantineEntry>> list_quarantined(Filesystem& fs,
                                                      const std::string& checkpoint_dir) {
  std::vector<QuarantineEntry> out;
  const std::string root = quarantine_root(checkpoint_dir);
  SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(root));
  if (kind == PathKind::kMissing) return out;
  if (kind != PathKind::kDirectory)
    return Error(ErrorCode::kInvalid, q(root) + " is not a directory");
  SG_ASSIGN_OR_RETURN(auto entries, fs.list(root));
  std::vector<std::pair<QuarantineName, QuarantineEntry>> found;
  for (const DirEntry& d : entries) {
    auto name = parse_quarantine_dir_name(d.name);
    if (!name || !d.is_dir || d.is_symlink) continue;
    QuarantineEntry e;
    e.step = name->step;
    e.dir = join_path(root, d.name);
    e.quarantined_unix_ms = name->unix_ms;
    if (auto st = read_reason(fs, e); !st.ok()) e.problem = st.error().message();
    SG_ASSIGN_OR_RETURN(e.bytes, tree_bytes(fs, e.dir));
    found.emplace_back(*name, std::move(e));
  }
  std::sort(found.begin(), found.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.unix_ms, a.first.seq, a.first.step) <
           std::tie(b.first.unix_ms, b.first.seq, b.first.step);
  });
  for (auto& [name, e] : found) out.push_back(std::move(e));
  return out;
}

Status unquarantine(Filesystem& fs, const std::string& checkpoint_dir,
                    const QuarantineEntry& entry) {
  const std::string what = "unquarantine step " + std::to_string(entry.step);
  const std::string dst = join_path(checkpoint_dir, step_dir_name(entry.step));
  SG_ASSIGN_OR_RETURN(PathKind there, fs.path_kind(dst));
  if (there != PathKind::kMissing)
    return Error(ErrorCode::kInvalid,
                 what + ": refused, " + q(dst) +
                     " exists (the step was written again after it was quarantined); a step "
                     "directory is never replaced");
  SG_ASSIGN_OR_RETURN(PathKind kind, fs.path_kind(entry.dir));
  if (kind != PathKind::kDirectory)
    return Error(ErrorCode::kNotFound, what + ": " + q(entry.dir) + " is not a directory");
  SG_RETURN_IF_ERROR(fs.rename(entry.dir, dst));
  SG_RETURN_IF_ERROR(sync_both(fs, checkpoint_dir, quarantine_root(checkpoint_dir)));
  const std::string reason_path = join_path(dst, std::string(kQuarantineReasonName));
  SG_ASSIGN_OR_RETURN(bool has_reason, fs.exists(reason_path));
  if (has_reason) {
    SG_RETURN_IF_ERROR(fs.remove(reason_path));
    SG_RETURN_IF_ERROR(fs.sync_dir(dst));
  }
  return {};
}

Result<QuarantineEntry> unquarantine_step(Filesystem& fs, const std::string& checkpoint_dir,
                                          uint64_t step) {
  SG_ASSIGN_OR_RETURN(auto all, list_quarantined(fs, checkpoint_dir));
  // Oldest first: the last match is the most recent copy.
  auto it = std::find_if(all.rbegin(), all.rend(),
                         [&](const QuarantineEntry& e) { return e.step == step; });
  if (it == all.rend())
    return Error(ErrorCode::kNotFound, "unquarantine step " + std::to_string(step) +
                                           ": no quarantined copy in " +
                                           q(quarantine_root(checkpoint_dir)));
  SG_RETURN_IF_ERROR(unquarantine(fs, checkpoint_dir, *it));
  return *it;
}

}  // namespace shardguard::checkpoint
