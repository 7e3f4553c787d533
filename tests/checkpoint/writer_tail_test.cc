// Finding: a checkpoint directory on an s3fs mount failed every save with "shard has 692224
// bytes, sidecar says 688696 (CORRUPT)": the writer padded its last O_DIRECT block to 4 KiB and
// truncated the file back, and s3fs ignores a shrinking ftruncate made before the first fsync.
// The writer no longer pads: whole blocks go O_DIRECT, the unaligned tail through the page
// cache, and nothing is ever truncated. Checked on a filesystem that ignores truncate (as s3fs
// does) and one that refuses it, for sizes on and off the 4 KiB and block boundaries.
#include <catch2/catch.hpp>

#include "checkpoint/catalog.h"
#include "checkpoint/commit.h"
#include "checkpoint/writer.h"
#include "tests/support/temp_dir.h"

namespace shardguard::checkpoint {
namespace {

// A filesystem over the real one whose files ignore (or refuse) truncate, counting the calls.
class NoTruncateFs final : public Filesystem {
 public:
  explicit NoTruncateFs(bool refuse) : refuse_(refuse) {}
  int truncates() const { return truncates_; }

  Result<std::unique_ptr<WritableFile>> open_for_write(const std::string& path,
                                                       OpenOptions options) override {
    SG_ASSIGN_OR_RETURN(auto file, base().open_for_write(path, options));
    return std::unique_ptr<WritableFile>(std::make_unique<File>(*this, std::move(file)));
  }
  Result<std::unique_ptr<MappedFile>> map_readonly(const std::string& p) override {
    return base().map_readonly(p);
  }
  Result<std::unique_ptr<RandomAccessFile>> open_for_read(const std::string& p,
                                                          ReadOptions o) override {
    return base().open_for_read(p, o);
  }
  Result<std::string> read_file(const std::string& p) override { return base().read_file(p); }
  Status rename(const std::string& a, const std::string& b) override { return base().rename(a, b); }
  Status rename_noreplace(const std::string& a, const std::string& b) override {
    return base().rename_noreplace(a, b);
  }
  Status sync_dir(const std::string& d) override { return base().sync_dir(d); }
  Result<std::vector<DirEntry>> list(const std::string& d) override { return base().list(d); }
  Status remove(const std::string& p) override { return base().remove(p); }
  Status remove_all(const std::string& p) override { return base().remove_all(p); }
  Status create_dirs(const std::string& p) override { return base().create_dirs(p); }
  Result<uint64_t> file_size(const std::string& p) override { return base().file_size(p); }
  Result<bool> exists(const std::string& p) override { return base().exists(p); }
  Result<uint64_t> free_space(const std::string& p) override { return base().free_space(p); }

 private:
  class File final : public WritableFile {
   public:
    File(NoTruncateFs& fs, std::unique_ptr<WritableFile> f) : fs_(fs), f_(std::move(f)) {}
    Status append(std::span<const std::byte> d) override { return f_->append(d); }
    Status write_at(uint64_t o, std::span<const std::byte> d) override { return f_->write_at(o, d); }
    Status preallocate(uint64_t) override { return {}; }  // s3fs: no fallocate either
    Status truncate(uint64_t) override {
      ++fs_.truncates_;
      if (fs_.refuse_) return Error(ErrorCode::kIo, "truncate: not supported here");
      return {};  // ignored, as s3fs ignores it before the first fsync
    }
    Status sync() override { return f_->sync(); }
    Status close() override { return f_->close(); }
    const std::string& path() const override { return f_->path(); }

   private:
    NoTruncateFs& fs_;
    std::unique_ptr<WritableFile> f_;
  };

  static Filesystem& base() { return PosixFilesystem::instance(); }
  bool refuse_;
  int truncates_ = 0;
};

TEST_CASE("a shard is written to its exact size without any truncate", "[checkpoint]") {
  const bool refuse = GENERATE(false, true);
  // Tensor bytes: a 4 KiB multiple, just off it, a block and a bit, less than a page.
  const size_t floats = GENERATE(size_t{4096}, size_t{4096 + 3}, size_t{(64 << 10) / 4 + 1},
                                 size_t{5});
  INFO("truncate " << (refuse ? "refused" : "ignored") << ", " << floats << " floats");
  testing::TempDir dir;
  NoTruncateFs fs(refuse);
  std::vector<float> w(floats);
  for (size_t i = 0; i < w.size(); ++i) w[i] = static_cast<float>(i) * 0.5f;
  WriterOptions o;
  o.checkpoint_dir = dir.path();
  o.step = 7;
  o.block_size = 64 << 10;
  o.io_threads = 2;
  o.direct_io = true;
  ShardWriter writer(fs, o);
  REQUIRE(writer.add_tensor("w", DType::kF32, {floats}, std::as_bytes(std::span(w))).ok());
  writer.set_global_state({7, "null", "null"});
  auto sidecar = writer.finish();
  REQUIRE(sidecar.ok());
  CHECK(fs.truncates() == 0);
  CommitOptions c;
  c.checkpoint_dir = dir.path();
  c.step = 7;
  c.world_size = 1;
  auto m = try_commit_checkpoint(fs, RealClock::instance(), c);
  INFO((m.ok() ? std::string() : m.error().message()));
  REQUIRE(m.ok());
  auto entry = inspect_checkpoint(fs, dir.path() + "/step-000000007", 7, Verify::kChecksum);
  CHECK(entry.state == CheckpointState::kComplete);
  CHECK(entry.reason.empty());
}

}  // namespace
}  // namespace shardguard::checkpoint
