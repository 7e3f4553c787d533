// Strict reading of a JSON object with Boost.JSON: every field must be present with the
// right type, and fields nobody asked for are an error (finish()). Errors are kCorrupt and
// name the path of the field ("tensors.w.chunks[2].offsets"). Internal to checkpoint/*.cc.
#pragma once

#include <boost/json.hpp>

#include <cstdint>
#include <set>
#include <string>
#include <vector>

#include "core/result.h"

namespace shardguard::checkpoint {

class JsonFields {
 public:
  // `where` is the path of this object used in messages ("" for the root).
  static Result<JsonFields> of(const boost::json::value& v, std::string where);

  Result<const boost::json::value*> any(std::string_view key);
  Result<std::string> string(std::string_view key);
  Result<uint64_t> u64(std::string_view key);
  Result<int64_t> i64(std::string_view key);
  Result<const boost::json::array*> array(std::string_view key);
  Result<const boost::json::object*> object(std::string_view key);
  Result<std::vector<uint64_t>> u64_list(std::string_view key);
  bool has(std::string_view key) const { return obj_->contains(key); }
  // An optional field: its value (marked as read), or nullptr when absent. New fields of a
  // released format are read this way, so that records written without them still parse.
  const boost::json::value* optional(std::string_view key);
  // Fails if the object has a field that was never read.
  Status finish() const;

  std::string path(std::string_view key) const;
  const std::string& where() const { return where_; }

 private:
  JsonFields(const boost::json::object* obj, std::string where)
      : obj_(obj), where_(std::move(where)) {}
  Error wrong(std::string_view key, std::string_view expected) const;

  const boost::json::object* obj_;
  std::string where_;
  std::set<std::string, std::less<>> read_;
};

Result<uint64_t> json_u64(const boost::json::value& v, const std::string& where);

}  // namespace shardguard::checkpoint
