// Reading one table of a TOML job config strictly: each getter looks a key up, remembers it as
// known and checks its type and range (durations have ceilings); every problem is collected
// with file:line and key, and finish() reports the keys nobody asked for. Internal to
// job_config_toml*.cc (it includes toml++). Thread-safety: one reader.
#pragma once

#include <toml++/toml.h>

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <set>
#include <string>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include "core/clock.h"
#include "core/result.h"
#include "core/units.h"

namespace shardguard::supervisor::config_detail {

constexpr int64_t kMaxU32 = std::numeric_limits<uint32_t>::max();
constexpr int64_t kMaxI64 = std::numeric_limits<int64_t>::max();

inline std::string_view type_name(const toml::node& node) {
  switch (node.type()) {
    case toml::node_type::table:
      return "table";
    case toml::node_type::array:
      return "array";
    case toml::node_type::string:
      return "string";
    case toml::node_type::integer:
      return "integer";
    case toml::node_type::floating_point:
      return "float";
    case toml::node_type::boolean:
      return "boolean";
    case toml::node_type::date:
      return "date";
    case toml::node_type::time:
      return "time";
    case toml::node_type::date_time:
      return "date-time";
    default:
      return "nothing";
  }
}

// Every problem found, so one run of --check-config lists them all.
class Problems {
 public:
  explicit Problems(std::string_view source) : source_(source) {}

  void add(const toml::source_region& where, std::string_view key, std::string_view what) {
    std::string text = source_ + ":" + std::to_string(where.begin.line) + ": ";
    ((text += key) += ": ") += what;
    issues_.push_back({where.begin.line, where.begin.column, std::move(text)});
  }

  Status status() {
    if (issues_.empty()) return ok_status();
    std::stable_sort(issues_.begin(), issues_.end(), [](const Issue& a, const Issue& b) {
      return std::tie(a.line, a.column) < std::tie(b.line, b.column);
    });
    std::string message;
    for (const Issue& i : issues_) (message += message.empty() ? "" : "\n") += i.text;
    return Error(ErrorCode::kInvalid, std::move(message));
  }

 private:
  struct Issue {
    uint32_t line, column;
    std::string text;
  };
  std::string source_;
  std::vector<Issue> issues_;
};

// The longest a duration key may be, and how the message spells it.
struct DurationCeiling {
  Duration value;
  std::string_view text;
};
constexpr Duration days(int64_t n) { return std::chrono::hours(24 * n); }
constexpr DurationCeiling kHour{std::chrono::hours(1), "1h"};
constexpr DurationCeiling kDay{days(1), "1d"};
constexpr DurationCeiling kWeek{days(7), "7d"};
constexpr DurationCeiling kMonth{days(31), "31d"};
constexpr DurationCeiling kYear{days(366), "366d"};
constexpr DurationCeiling kDecade{days(3653), "3653d"};

inline std::string range_text(int64_t v, int64_t lo, int64_t hi) {
  const std::string got = ", got " + std::to_string(v);
  if (hi < kMaxU32)
    return "must be between " + std::to_string(lo) + " and " + std::to_string(hi) + got;
  if (v > hi) return "must be at most " + std::to_string(hi) + got;
  if (lo == 0) return "must not be negative" + got;
  return "must be at least " + std::to_string(lo) + got;
}

// One table being read: each getter looks a key up, remembers it as known and stores a
// valid value in `out` (leaving the default otherwise); finish() reports the keys nobody
// asked for.
class Section {
 public:
  Section(const toml::table* table, std::string path, Problems& problems)
      : table_(table), path_(std::move(path)), problems_(problems) {}

  const toml::node* get(std::string_view key) {
    known_.insert(std::string(key));
    return table_ ? table_->get(key) : nullptr;
  }
  std::string key_path(std::string_view key) const {
    return path_.empty() ? std::string(key) : path_ + "." + std::string(key);
  }
  void bad(const toml::node& node, std::string_view key, std::string_view what) {
    problems_.add(node.source(), key_path(key), what);
  }
  bool expect(const toml::node& node, std::string_view key, bool ok, std::string_view wanted) {
    if (!ok)
      bad(node, key,
          std::string("expected ") + std::string(wanted) + ", got " + std::string(type_name(node)));
    return ok;
  }

  void string(std::string_view key, std::string& out) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a string")) return;
    if (n->as_string()->get().empty()) return bad(*n, key, "must not be empty");
    out = n->as_string()->get();
  }

  template <typename Int>
  void integer(std::string_view key, Int& out, int64_t lo, int64_t hi) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_integer(), "an integer")) return;
    const int64_t v = n->as_integer()->get();
    if (v < lo || v > hi) return bad(*n, key, range_text(v, lo, hi));
    out = static_cast<Int>(v);
  }

  void real(std::string_view key, double& out, double lo, double hi, std::string_view range) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_number(), "a number")) return;
    const double v = n->is_integer() ? static_cast<double>(n->as_integer()->get())
                                     : n->as_floating_point()->get();
    if (!(v >= lo && v <= hi)) return bad(*n, key, std::string(range) + ", got " + toml_text(*n));
    out = v;
  }

  // Returns the node it read (for cross-key checks), or null. Every duration has a ceiling
  // (`max`): a deadline is now plus one of them, and "106000d" overflowed it.
  const toml::node* duration(std::string_view key, Duration& out, bool positive,
                             const DurationCeiling& max) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a duration string like \"30s\"")) return nullptr;
    auto parsed = parse_duration(n->as_string()->get());
    if (!parsed.ok()) return bad(*n, key, parsed.error().message()), nullptr;
    if (positive && parsed.value() <= Duration::zero())
      return bad(*n, key, "must be greater than 0"), nullptr;
    if (parsed.value() > max.value)
      return bad(*n, key, "must be at most " + std::string(max.text) + ", got " + toml_text(*n)),
             nullptr;
    out = parsed.value();
    return n;
  }

  template <typename E>
  void choice(std::string_view key, E& out,
              std::initializer_list<std::pair<std::string_view, E>> options) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_string(), "a string")) return;
    std::string names;
    for (const auto& [name, value] : options) {
      if (n->as_string()->get() == name) return void(out = value);
      (names += names.empty() ? "\"" : ", \"") += std::string(name) + "\"";
    }
    bad(*n, key, "expected one of " + names + ", got " + toml_text(*n));
  }

  // A sub-table (null when absent or not a table, the latter reported).
  const toml::table* table(std::string_view key) {
    const toml::node* n = get(key);
    if (!n || !expect(*n, key, n->is_table(), "a table")) return nullptr;
    return n->as_table();
  }

  void finish() {
    if (!table_) return;
    for (const auto& [key, node] : *table_) {
      if (known_.count(std::string(key.str())) != 0) continue;
      problems_.add(key.source(), key_path(key.str()),
                    node.is_table() ? "unknown section" : "unknown key");
    }
  }

  static std::string toml_text(const toml::node& n) {
    if (n.is_string()) return "\"" + n.as_string()->get() + "\"";
    if (n.is_integer()) return std::to_string(n.as_integer()->get());
    if (n.is_floating_point()) return std::to_string(n.as_floating_point()->get());
    return std::string(type_name(n));
  }

 private:
  const toml::table* table_;
  std::string path_;
  Problems& problems_;
  std::set<std::string> known_;
};

}  // namespace shardguard::supervisor::config_detail
