// A bucket's quarantine: marks instead of renames (see checkpoint/quarantine.h). The Store
// entry points also serve a directory, by its renames.
#include <algorithm>
#include <map>
#include <tuple>

#include "checkpoint/manifest.h"
#include "checkpoint/paths.h"
#include "checkpoint/quarantine.h"
#include "checkpoint/quarantine_record.h"
#include "checkpoint/retention.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

using namespace quarantine_detail;

// The attempts of `step` that have files: "step-N/a000003/..." prefixes.
Result<std::vector<uint64_t>> attempts_present(storage::Store& store, uint64_t step) {
  SG_ASSIGN_OR_RETURN(storage::Listing listing, store.list(step_key(step)));
  std::vector<uint64_t> out;
  for (const auto& p : listing.prefixes)
    if (auto a = parse_attempt_dir_name(p.substr(p.rfind('/') + 1))) out.push_back(*a);
  std::sort(out.begin(), out.end());
  return out;
}

// Every mark's name, parsed, with its key: one listing of quarantine/.
Result<std::vector<std::pair<QuarantineName, std::string>>> mark_names(storage::Store& store) {
  SG_ASSIGN_OR_RETURN(storage::Listing listing, store.list(kQuarantineDirName));
  std::vector<std::pair<QuarantineName, std::string>> out;
  for (const auto& o : listing.objects)
    if (auto name = parse_quarantine_marker_name(o.key.substr(o.key.rfind('/') + 1)))
      out.emplace_back(*name, o.key);
  std::sort(out.begin(), out.end(), [](const auto& a, const auto& b) {
    return std::tie(a.first.unix_ms, a.first.seq, a.first.step) <
           std::tie(b.first.unix_ms, b.first.seq, b.first.step);
  });
  return out;
}

QuarantineEntry read_mark(storage::Store& store, const QuarantineName& name,
                          const std::string& key) {
  QuarantineEntry e;
  e.step = name.step;
  e.dir = store.describe(key);
  e.key = key;
  e.quarantined_unix_ms = name.unix_ms;
  auto text = store.read(key);
  if (!text.ok()) {
    e.problem = text.error().message();
    return e;
  }
  if (auto st = parse_reason(*text, e.dir, e); !st.ok()) e.problem = st.error().message();
  return e;
}

Result<QuarantineEntry> mark_step(storage::Store& store, uint64_t step, const std::string& reason,
                                  WallTime now, const std::string& who) {
  const std::string what = "quarantine step " + std::to_string(step);
  QuarantineEntry e;
  e.step = step;
  e.reason = reason;
  e.who = who.empty() ? default_who() : who;
  e.quarantined_unix_ms = to_unix_ms(now);
  auto text = store.read(manifest_key(step));
  if (text.ok()) {
    SG_ASSIGN_OR_RETURN(Manifest m, parse_manifest(*text, store.describe(manifest_key(step))));
    e.manifest = std::move(*text);
    e.attempts = {m.attempt};
  } else if (text.error().code() == ErrorCode::kNotFound) {
    SG_ASSIGN_OR_RETURN(e.attempts, attempts_present(store, step));
    if (e.attempts.empty())
      return Error(ErrorCode::kNotFound,
                   what + ": no " + q(store.describe(step_key(step))) + " in the bucket");
  } else {
    return std::move(text).error().context(what);
  }
  QuarantineName name{step, e.quarantined_unix_ms, 1};
  for (;;) {
    e.key = quarantine_marker_key(name);
    e.dir = store.describe(e.key);
    auto put = store.put(e.key, reason_json(e, /*bucket=*/true), storage::PutCondition::if_absent());
    if (put.ok()) break;
    if (put.error().code() != ErrorCode::kExists) return std::move(put).error().context(what);
    if (++name.seq > kMaxSeq)
      return Error(ErrorCode::kInternal, what + ": too many marks named like " + q(e.dir));
  }
  // The mark is the commit point; the manifest goes after it, freeing the step's number.
  SG_RETURN_IF_ERROR(store.remove(manifest_key(step)));
  SG_RETURN_IF_ERROR(store.remove(step_file_key(step, kHfIndexName)));
  return e;
}

}  // namespace

Result<std::set<uint64_t>> quarantined_attempts(storage::Store& store, uint64_t step) {
  std::set<uint64_t> out;
  if (store.as_directory() != nullptr) return out;
  SG_ASSIGN_OR_RETURN(auto names, mark_names(store));
  for (const auto& [name, key] : names) {
    if (name.step != step) continue;
    QuarantineEntry e = read_mark(store, name, key);
    out.insert(e.attempts.begin(), e.attempts.end());
  }
  return out;
}

Result<QuarantineEntry> quarantine_step(storage::Store& store, uint64_t step,
                                        const std::string& reason, WallTime now,
                                        const std::string& who) {
  if (auto* dir = store.as_directory())
    return quarantine_step(dir->fs(), dir->dir(), step, reason, now, who);
  return mark_step(store, step, reason, now, who);
}

Result<std::vector<QuarantineEntry>> list_quarantined(storage::Store& store) {
  if (auto* dir = store.as_directory()) return list_quarantined(dir->fs(), dir->dir());
  SG_ASSIGN_OR_RETURN(auto names, mark_names(store));
  std::vector<QuarantineEntry> out;
  for (const auto& [name, key] : names) {
    QuarantineEntry e = read_mark(store, name, key);
    for (uint64_t a : e.attempts) {
      auto objects = store.list_all(step_file_key(e.step, attempt_dir_name(a)));
      if (objects.ok())
        for (const auto& o : *objects) e.bytes += o.size;
    }
    out.push_back(std::move(e));
  }
  return out;
}

Status unquarantine(storage::Store& store, const QuarantineEntry& entry) {
  if (auto* dir = store.as_directory()) return unquarantine(dir->fs(), dir->dir(), entry);
  const std::string what = "unquarantine step " + std::to_string(entry.step);
  if (entry.manifest) {
    auto put = store.put(manifest_key(entry.step), *entry.manifest,
                         storage::PutCondition::if_absent());
    if (!put.ok() && put.error().code() == ErrorCode::kExists)
      return Error(ErrorCode::kInvalid,
                   what + ": refused, " + q(store.describe(manifest_key(entry.step))) +
                       " exists (the step was written again after it was quarantined); a "
                       "committed step is never replaced");
    if (!put.ok()) return std::move(put).error().context(what);
  }
  return store.remove(entry.key);
}

Result<QuarantineEntry> unquarantine_step(storage::Store& store, uint64_t step) {
  if (auto* dir = store.as_directory()) return unquarantine_step(dir->fs(), dir->dir(), step);
  SG_ASSIGN_OR_RETURN(auto all, list_quarantined(store));
  // Oldest first: the last match is the most recent mark.
  auto it = std::find_if(all.rbegin(), all.rend(),
                         [&](const QuarantineEntry& e) { return e.step == step; });
  if (it == all.rend())
    return Error(ErrorCode::kNotFound, "unquarantine step " + std::to_string(step) +
                                           ": no quarantine mark in " +
                                           q(store.describe(std::string(kQuarantineDirName))));
  if (!it->problem.empty())
    return Error(ErrorCode::kCorrupt, "unquarantine step " + std::to_string(step) + ": " +
                                          it->problem);
  SG_RETURN_IF_ERROR(unquarantine(store, *it));
  return *it;
}

Status remove_quarantined(storage::Store& store, const QuarantineEntry& entry) {
  if (auto* dir = store.as_directory()) return remove_checkpoint_dir(dir->fs(), entry.dir);
  // The files first, the mark last: a crash in between leaves a mark whose files are gone,
  // which gc finds again; never files with no mark (they would read as a save in progress).
  std::vector<std::string> keys;
  for (uint64_t a : entry.attempts) {
    SG_ASSIGN_OR_RETURN(auto objects, store.list_all(step_file_key(entry.step,
                                                                    attempt_dir_name(a))));
    for (auto& o : objects) keys.push_back(std::move(o.key));
  }
  SG_RETURN_IF_ERROR(store.remove_many(keys));
  return store.remove(entry.key);
}

}  // namespace shardguard::checkpoint
