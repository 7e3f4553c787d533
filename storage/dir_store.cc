#include "storage/dir_store.h"

#include <functional>

namespace shardguard::storage {
namespace {

// One object written as a temp file next to its key: parts by write_at (O_DIRECT for whole
// aligned parts where the filesystem takes it), fsync at finish(), rename at publish().
class DirectoryUpload final : public Upload {
 public:
  DirectoryUpload(Filesystem& fs, std::string temp, std::string final_path,
                  std::unique_ptr<WritableFile> file, Interrupt interrupt)
      : fs_(fs),
        temp_(std::move(temp)),
        final_(std::move(final_path)),
        file_(std::move(file)),
        interrupt_(std::move(interrupt)) {}
  ~DirectoryUpload() override { abort(); }

  Status write_part(uint64_t offset, std::span<const std::byte> data) override {
    if (interrupt_)
      if (auto why = interrupt_()) return Error(ErrorCode::kCancelled, "'" + final_ + "': " + *why);
    return file_->write_at(offset, data);
  }

  Status finish() override {
    SG_RETURN_IF_ERROR(file_->sync());
    return file_->close();
  }

  Status publish() override {
    SG_RETURN_IF_ERROR(fs_.rename(temp_, final_));
    published_ = true;
    return fs_.sync_dir(parent_dir(final_));
  }

  void abort() override {
    if (published_ || aborted_) return;
    aborted_ = true;
    (void)file_->close();
    (void)fs_.remove(temp_);
  }

 private:
  Filesystem& fs_;
  std::string temp_;
  std::string final_;
  std::unique_ptr<WritableFile> file_;
  Interrupt interrupt_;
  bool published_ = false;
  bool aborted_ = false;
};

}  // namespace

DirectoryStore::DirectoryStore(Filesystem& fs, std::string dir)
    : fs_(fs), location_(Location::directory(std::move(dir))) {}

std::string DirectoryStore::path(std::string_view key) const {
  return key.empty() ? location_.path : join_path(location_.path, std::string(key));
}

Result<std::string> DirectoryStore::read(std::string_view key, uint64_t max_bytes) {
  const std::string p = path(key);
  SG_ASSIGN_OR_RETURN(uint64_t size, fs_.file_size(p));
  if (size > max_bytes)
    return Error(ErrorCode::kCorrupt, "'" + p + "' has " + std::to_string(size) +
                                          " bytes, more than the " + std::to_string(max_bytes) +
                                          " such a record may have");
  return fs_.read_file(p);
}

Result<std::optional<ObjectInfo>> DirectoryStore::stat(std::string_view key) {
  auto size = fs_.file_size(path(key));
  if (!size.ok()) {
    if (size.error().code() == ErrorCode::kNotFound) return std::optional<ObjectInfo>();
    return std::move(size).error();
  }
  return std::optional<ObjectInfo>(ObjectInfo{std::string(key), *size, ""});
}

Result<std::unique_ptr<RandomAccessFile>> DirectoryStore::open_read(
    std::string_view key, ReadOptions options, std::optional<uint64_t> /*known_size*/) {
  return fs_.open_for_read(path(key), options);
}

Result<std::unique_ptr<MappedFile>> DirectoryStore::map(std::string_view key) {
  return fs_.map_readonly(path(key));
}

Result<Listing> DirectoryStore::list(std::string_view prefix) {
  const std::string dir = path(prefix);
  Listing out;
  SG_ASSIGN_OR_RETURN(bool present, fs_.exists(dir));
  if (!present) return out;
  SG_ASSIGN_OR_RETURN(auto entries, fs_.list(dir));
  for (const DirEntry& e : entries) {
    const std::string key = join_key(prefix, e.name);
    if (e.is_symlink) {
      out.links.push_back(key);
    } else if (e.is_dir) {
      out.prefixes.push_back(key);
    } else {
      auto size = fs_.file_size(join_path(dir, e.name));
      // Gone since the listing (a temp file renamed away): not there.
      if (!size.ok() && size.error().code() == ErrorCode::kNotFound) continue;
      if (!size.ok()) return std::move(size).error();
      out.objects.push_back({key, *size, ""});
    }
  }
  return out;
}

Result<std::vector<ObjectInfo>> DirectoryStore::list_all(std::string_view prefix) {
  std::vector<ObjectInfo> out;
  std::function<Status(const std::string&, int)> walk = [&](const std::string& p,
                                                            int depth) -> Status {
    if (depth > 32) return Error(ErrorCode::kInvalid, "'" + path(p) + "': nested too deep");
    SG_ASSIGN_OR_RETURN(Listing l, list(p));
    for (auto& o : l.objects) out.push_back(std::move(o));
    for (const auto& sub : l.prefixes) SG_RETURN_IF_ERROR(walk(sub, depth + 1));
    return {};
  };
  SG_RETURN_IF_ERROR(walk(std::string(prefix), 0));
  return out;
}

Result<std::string> DirectoryStore::put(std::string_view key, std::string_view data,
                                        PutCondition condition) {
  const std::string p = path(key);
  SG_RETURN_IF_ERROR(fs_.create_dirs(parent_dir(p)));
  switch (condition.kind) {
    case PutCondition::Kind::kNone:
      SG_RETURN_IF_ERROR(atomic_write_file(fs_, p, data));
      break;
    case PutCondition::Kind::kIfAbsent:
      SG_RETURN_IF_ERROR(atomic_create_file(fs_, p, data));
      break;
    case PutCondition::Kind::kIfMatch:
      return Error(ErrorCode::kUnsupported,
                   "'" + p + "': a directory's records are guarded by its lock, not by versions");
  }
  return std::string();
}

Result<std::unique_ptr<Upload>> DirectoryStore::begin_upload(std::string_view key,
                                                             const UploadOptions& options) {
  const std::string final_path = path(key);
  const std::string temp = options.temp_key.empty() ? final_path + ".tmp" : path(options.temp_key);
  SG_RETURN_IF_ERROR(fs_.create_dirs(parent_dir(final_path)));
  SG_ASSIGN_OR_RETURN(auto file, fs_.open_for_write(temp, {.direct = options.direct_io}));
  if (auto st = file->preallocate(options.size); !st.ok()) {
    (void)file->close();
    (void)fs_.remove(temp);
    return std::move(st).error();
  }
  return std::unique_ptr<Upload>(
      std::make_unique<DirectoryUpload>(fs_, temp, final_path, std::move(file), options.interrupt));
}

Status DirectoryStore::remove(std::string_view key) {
  auto st = fs_.remove(path(key));
  if (!st.ok() && st.error().code() == ErrorCode::kNotFound) return {};
  return st;
}

Status DirectoryStore::remove_many(std::span<const std::string> keys) {
  for (const auto& k : keys) SG_RETURN_IF_ERROR(remove(k));
  return {};
}

}  // namespace shardguard::storage
