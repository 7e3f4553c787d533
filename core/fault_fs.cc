#include "core/fault_fs.h"

#include <algorithm>

namespace shardguard {

class FaultInjectingFilesystem::File final : public WritableFile {
 public:
  File(FaultInjectingFilesystem& fs, std::unique_ptr<WritableFile> base, uint64_t epoch)
      : fs_(fs), base_(std::move(base)), epoch_(epoch) {}

  Status append(std::span<const std::byte> data) override {
    SG_RETURN_IF_ERROR(check("write"));
    SG_RETURN_IF_ERROR(base_->append(data));
    end_ += data.size();
    fs_.note_written(path(), end_);
    return {};
  }
  Status write_at(uint64_t offset, std::span<const std::byte> data) override {
    SG_RETURN_IF_ERROR(check("write"));
    SG_RETURN_IF_ERROR(base_->write_at(offset, data));
    fs_.note_written(path(), offset + data.size());
    return {};
  }
  Status preallocate(uint64_t size) override {
    SG_RETURN_IF_ERROR(check("preallocate"));
    return base_->preallocate(size);
  }
  Status truncate(uint64_t size) override {
    SG_RETURN_IF_ERROR(check("truncate"));
    return base_->truncate(size);
  }
  Status sync() override {
    SG_RETURN_IF_ERROR(check("fsync"));
    SG_RETURN_IF_ERROR(base_->sync());
    fs_.note_synced(path());
    return {};
  }
  Status close() override { return base_->close(); }
  const std::string& path() const override { return base_->path(); }

 private:
  Status check(const char* op) {
    {
      std::lock_guard lock(fs_.mu_);
      if (epoch_ != fs_.crash_epoch_)
        return Error(ErrorCode::kIo, std::string(op) + " '" + path() + "': file lost in crash");
    }
    return fs_.maybe_fail(std::string(op) + " '" + path() + "'");
  }

  FaultInjectingFilesystem& fs_;
  std::unique_ptr<WritableFile> base_;
  uint64_t epoch_;
  uint64_t end_ = 0;
};

// Reads through the base file, each one a read operation that an armed fault can fail.
class FaultInjectingFilesystem::ReadFile final : public RandomAccessFile {
 public:
  ReadFile(FaultInjectingFilesystem& fs, std::unique_ptr<RandomAccessFile> base)
      : fs_(fs), base_(std::move(base)) {}
  Result<size_t> read_at(uint64_t offset, std::span<std::byte> out) const override {
    SG_RETURN_IF_ERROR(
        fs_.maybe_fail_read("read '" + path() + "' at offset " + std::to_string(offset)));
    return base_->read_at(offset, out);
  }
  uint64_t size() const override { return base_->size(); }
  bool direct() const override { return base_->direct(); }
  const std::string& path() const override { return base_->path(); }

 private:
  FaultInjectingFilesystem& fs_;
  std::unique_ptr<RandomAccessFile> base_;
};

void FaultInjectingFilesystem::fail_nth_read(int n, int err, bool sticky) {
  std::lock_guard lock(mu_);
  fail_read_at_ = reads_ + n;
  fail_read_errno_ = err;
  read_sticky_ = sticky;
}

int FaultInjectingFilesystem::read_operations() const {
  std::lock_guard lock(mu_);
  return reads_;
}

Status FaultInjectingFilesystem::maybe_fail_read(const std::string& what) {
  std::lock_guard lock(mu_);
  ++reads_;
  if (fail_read_at_ != 0 && (reads_ == fail_read_at_ || (read_sticky_ && reads_ > fail_read_at_)))
    return Error::from_errno(what + " (injected)", fail_read_errno_);
  return {};
}

Result<std::unique_ptr<MappedFile>> FaultInjectingFilesystem::map_readonly(
    const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail_read("map '" + path + "'"));
  return base_.map_readonly(path);
}

Result<std::unique_ptr<RandomAccessFile>> FaultInjectingFilesystem::open_for_read(
    const std::string& path, ReadOptions options) {
  SG_RETURN_IF_ERROR(maybe_fail_read("open '" + path + "'"));
  SG_ASSIGN_OR_RETURN(auto file, base_.open_for_read(path, options));
  return std::unique_ptr<RandomAccessFile>(std::make_unique<ReadFile>(*this, std::move(file)));
}

Result<std::string> FaultInjectingFilesystem::read_file(const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail_read("read '" + path + "'"));
  return base_.read_file(path);
}

void FaultInjectingFilesystem::fail_nth_operation(int n, int err, bool sticky) {
  std::lock_guard lock(mu_);
  fail_at_ = ops_ + n;
  fail_errno_ = err;
  sticky_ = sticky;
}

void FaultInjectingFilesystem::set_lock_errno(int err) {
  std::lock_guard lock(mu_);
  lock_errno_ = err;
}

Result<LockAttempt> FaultInjectingFilesystem::try_lock_file(const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail("lock '" + path + "'"));
  int err;
  {
    std::lock_guard lock(mu_);
    err = lock_errno_;
  }
  if (err == 0) return base_.try_lock_file(path);
  if (err == ENOLCK || err == EOPNOTSUPP) return LockAttempt{LockStatus::kUnsupported, nullptr, err};
  if (err == EWOULDBLOCK) return LockAttempt{LockStatus::kHeld, nullptr, err};
  return Error::from_errno("flock '" + path + "' (injected)", err);
}

void FaultInjectingFilesystem::clear_faults() {
  std::lock_guard lock(mu_);
  fail_at_ = 0;
  fail_read_at_ = 0;
}

int FaultInjectingFilesystem::operations() const {
  std::lock_guard lock(mu_);
  return ops_;
}

Status FaultInjectingFilesystem::maybe_fail(const std::string& what, bool frees_space) {
  std::lock_guard lock(mu_);
  ++ops_;
  // A full disk never stops a file from being removed.
  if (frees_space && (fail_errno_ == ENOSPC || fail_errno_ == EDQUOT)) return {};
  if (fail_at_ != 0 && (ops_ == fail_at_ || (sticky_ && ops_ > fail_at_)))
    return Error::from_errno(what + " (injected)", fail_errno_);
  return {};
}

void FaultInjectingFilesystem::note_written(const std::string& path, uint64_t end) {
  std::lock_guard lock(mu_);
  files_.try_emplace(path);
  (void)end;
}

void FaultInjectingFilesystem::note_synced(const std::string& path) {
  auto size = base_.file_size(path);
  std::lock_guard lock(mu_);
  auto& st = files_[path];
  st.synced_size = size.ok() ? *size : 0;
  st.synced_ever = true;
}

Result<std::unique_ptr<WritableFile>> FaultInjectingFilesystem::open_for_write(
    const std::string& path, OpenOptions options) {
  SG_RETURN_IF_ERROR(maybe_fail("open '" + path + "'"));
  SG_ASSIGN_OR_RETURN(bool existed, base_.exists(path));
  SG_ASSIGN_OR_RETURN(auto file, base_.open_for_write(path, options));
  std::lock_guard lock(mu_);
  files_[path] = FileState{};  // O_TRUNC or new: nothing of it is durable yet
  if (!existed) pending_.push_back({PendingDirOp::kCreate, "", path});
  return std::unique_ptr<WritableFile>(
      std::make_unique<File>(*this, std::move(file), crash_epoch_));
}

Status FaultInjectingFilesystem::rename(const std::string& from, const std::string& to) {
  SG_RETURN_IF_ERROR(maybe_fail("rename '" + from + "' -> '" + to + "'"));
  SG_RETURN_IF_ERROR(base_.rename(from, to));
  std::lock_guard lock(mu_);
  if (auto it = files_.find(from); it != files_.end()) {
    files_[to] = it->second;
    files_.erase(from);
  }
  pending_.push_back({PendingDirOp::kRename, from, to});
  return {};
}

Status FaultInjectingFilesystem::rename_noreplace(const std::string& from, const std::string& to) {
  SG_RETURN_IF_ERROR(maybe_fail("rename '" + from + "' -> '" + to + "'"));
  SG_RETURN_IF_ERROR(base_.rename_noreplace(from, to));
  std::lock_guard lock(mu_);
  if (auto it = files_.find(from); it != files_.end()) {
    files_[to] = it->second;
    files_.erase(from);
  }
  pending_.push_back({PendingDirOp::kRename, from, to});
  return {};
}

Status FaultInjectingFilesystem::sync_dir(const std::string& dir) {
  SG_RETURN_IF_ERROR(maybe_fail("fsync directory '" + dir + "'"));
  SG_RETURN_IF_ERROR(base_.sync_dir(dir));
  std::lock_guard lock(mu_);
  // Entries of this directory are now durable. A rename across directories needs both
  // synced in real life; the model keeps it simple: the target's directory decides.
  std::erase_if(pending_, [&](const PendingDirOp& op) { return parent_dir(op.to) == dir; });
  return {};
}

Status FaultInjectingFilesystem::remove(const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail("remove '" + path + "'", /*frees_space=*/true));
  SG_RETURN_IF_ERROR(base_.remove(path));
  std::lock_guard lock(mu_);
  files_.erase(path);
  return {};
}

Status FaultInjectingFilesystem::remove_all(const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail("remove '" + path + "'", /*frees_space=*/true));
  SG_RETURN_IF_ERROR(base_.remove_all(path));
  std::lock_guard lock(mu_);
  std::erase_if(files_, [&](const auto& kv) {
    return kv.first == path || kv.first.starts_with(path + "/");
  });
  return {};
}

Status FaultInjectingFilesystem::create_dirs(const std::string& path) {
  SG_RETURN_IF_ERROR(maybe_fail("create directory '" + path + "'"));
  return base_.create_dirs(path);
}

Status FaultInjectingFilesystem::simulate_crash() {
  std::vector<PendingDirOp> pending;
  std::map<std::string, FileState> files;
  {
    std::lock_guard lock(mu_);
    pending.swap(pending_);
    files.swap(files_);
    ++crash_epoch_;
    fail_at_ = 0;
  }
  // Unsynced data first, while names still match what we tracked.
  for (const auto& [path, st] : files) {
    auto exists = base_.exists(path);
    if (!exists.ok() || !*exists) continue;
    auto size = base_.file_size(path);
    if (size.ok() && *size > st.synced_size) {
      SG_ASSIGN_OR_RETURN(auto data, base_.read_file(path));
      data.resize(st.synced_size);
      SG_ASSIGN_OR_RETURN(auto f, base_.open_for_write(path, {}));
      SG_RETURN_IF_ERROR(f->append(std::as_bytes(std::span(data.data(), data.size()))));
      SG_RETURN_IF_ERROR(f->sync());
      SG_RETURN_IF_ERROR(f->close());
    }
  }
  // Then roll back directory changes, newest first.
  for (auto it = pending.rbegin(); it != pending.rend(); ++it) {
    auto target_exists = base_.exists(it->to);
    if (!target_exists.ok() || !*target_exists) continue;
    if (it->kind == PendingDirOp::kCreate) {
      SG_RETURN_IF_ERROR(base_.remove(it->to));
    } else {
      SG_RETURN_IF_ERROR(base_.rename(it->to, it->from));
    }
  }
  return {};
}

}  // namespace shardguard
