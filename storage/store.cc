#include "storage/store.h"

#include "storage/dir_store.h"

namespace shardguard::storage {

StoreRef::StoreRef(Store* given, Filesystem& fs, const std::string& dir) {
  if (given == nullptr) owned_ = std::make_unique<DirectoryStore>(fs, dir);
  store_ = given != nullptr ? given : owned_.get();
}
StoreRef::~StoreRef() = default;
StoreRef::StoreRef(StoreRef&&) noexcept = default;

std::string join_key(std::string_view a, std::string_view b) {
  if (a.empty()) return std::string(b);
  if (b.empty()) return std::string(a);
  std::string out(a);
  if (out.back() != '/') out += '/';
  return out + std::string(b);
}

}  // namespace shardguard::storage
