#include "checkpoint/json_fields.h"

namespace shardguard::checkpoint {

Result<uint64_t> json_u64(const boost::json::value& v, const std::string& where) {
  if (v.is_uint64()) return v.get_uint64();
  if (v.is_int64() && v.get_int64() >= 0) return static_cast<uint64_t>(v.get_int64());
  return Error(ErrorCode::kCorrupt, where + ": expected a non-negative integer");
}

Result<JsonFields> JsonFields::of(const boost::json::value& v, std::string where) {
  if (!v.is_object())
    return Error(ErrorCode::kCorrupt, (where.empty() ? "document" : where) +
                                          ": expected a JSON object");
  return JsonFields(&v.get_object(), std::move(where));
}

std::string JsonFields::path(std::string_view key) const {
  return where_.empty() ? std::string(key) : where_ + "." + std::string(key);
}

Error JsonFields::wrong(std::string_view key, std::string_view expected) const {
  return Error(ErrorCode::kCorrupt, path(key) + ": expected " + std::string(expected));
}

Result<const boost::json::value*> JsonFields::any(std::string_view key) {
  auto it = obj_->find(key);
  if (it == obj_->end()) return Error(ErrorCode::kCorrupt, path(key) + ": missing");
  read_.emplace(key);
  return &it->value();
}

const boost::json::value* JsonFields::optional(std::string_view key) {
  auto it = obj_->find(key);
  if (it == obj_->end()) return nullptr;
  read_.emplace(key);
  return &it->value();
}

Result<std::string> JsonFields::string(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, any(key));
  if (!v->is_string()) return wrong(key, "a string");
  return std::string(v->get_string());
}

Result<uint64_t> JsonFields::u64(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, any(key));
  return json_u64(*v, path(key));
}

Result<int64_t> JsonFields::i64(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, any(key));
  if (v->is_int64()) return v->get_int64();
  if (v->is_uint64() && v->get_uint64() <= INT64_MAX) return static_cast<int64_t>(v->get_uint64());
  return wrong(key, "an integer");
}

Result<const boost::json::array*> JsonFields::array(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, any(key));
  if (!v->is_array()) return wrong(key, "an array");
  return &v->get_array();
}

Result<const boost::json::object*> JsonFields::object(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto v, any(key));
  if (!v->is_object()) return wrong(key, "an object");
  return &v->get_object();
}

Result<std::vector<uint64_t>> JsonFields::u64_list(std::string_view key) {
  SG_ASSIGN_OR_RETURN(auto arr, array(key));
  std::vector<uint64_t> out;
  out.reserve(arr->size());
  for (size_t i = 0; i < arr->size(); ++i) {
    SG_ASSIGN_OR_RETURN(uint64_t x, json_u64((*arr)[i], path(key) + "[" + std::to_string(i) + "]"));
    out.push_back(x);
  }
  return out;
}

Status JsonFields::finish() const {
  for (const auto& kv : *obj_) {
    if (!read_.contains(std::string_view(kv.key())))
      return Error(ErrorCode::kCorrupt, path(kv.key()) + ": unknown field");
  }
  return {};
}

}  // namespace shardguard::checkpoint
