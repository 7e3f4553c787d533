// A bucket mounted with FUSE and given as a checkpoint directory is refused at start, with a
// message that points to s3:// (storage/bucket_mount.h): the mount is found from
// /proc/self/mountinfo (a table of lines as the kernel writes them), and end to end with a real
// s3fs mount of a bucket of the RGW fixture, `shardguard run` exits 78 naming it.
#include <sys/mount.h>

#include <catch2/catch.hpp>
#include <filesystem>
#include <fstream>
#include <thread>

#include "storage/bucket_mount.h"
#include "tests/run/run_fixture.h"
#include "tests/storage/s3_rig.h"

namespace shardguard::storage {
namespace {

constexpr const char* kMountinfo =
    "22 1 254:0 / / rw,relatime shared:1 - ext4 /dev/vda rw\n"
    "30 22 0:26 / /mnt/ckpt rw,nosuid,nodev,relatime shared:12 - fuse.s3fs s3fs "
    "rw,user_id=0,group_id=0\n"
    "31 22 0:27 / /mnt/with\\040space rw shared:13 - fuse.goofys my-bucket rw\n"
    "32 22 0:28 / /data rw shared:14 - nfs4 server:/export rw\n"
    "33 32 0:29 / /data/sub rw shared:15 - fuse.mountpoint-s3 mountpoint-s3 rw\n";

TEST_CASE("the mount of a path and whether it is a bucket's", "[unit]") {
  auto m = mount_of("/mnt/ckpt/runs/a", kMountinfo);
  REQUIRE(m.has_value());
  CHECK(m->mount_point == "/mnt/ckpt");
  CHECK(m->fs_type == "fuse.s3fs");
  CHECK(is_bucket_mount(m->fs_type));
  auto spaced = mount_of("/mnt/with space/x", kMountinfo);
  REQUIRE(spaced.has_value());
  CHECK(spaced->fs_type == "fuse.goofys");
  CHECK(mount_of("/mnt/ckptx", kMountinfo)->fs_type == "ext4");  // not under /mnt/ckpt
  CHECK(mount_of("/data/x", kMountinfo)->fs_type == "nfs4");
  CHECK_FALSE(is_bucket_mount("nfs4"));
  CHECK(mount_of("/data/sub/y", kMountinfo)->fs_type == "fuse.mountpoint-s3");  // the deepest
  CHECK_FALSE(mount_of("relative", "garbage without fields").has_value());
  CHECK_FALSE(mount_of("/x", "").has_value());
}

TEST_CASE("shardguard run refuses a checkpoint directory on an s3fs mount", "[integration]") {
  SG_REQUIRE_RGW();
  if (!std::filesystem::exists("/usr/bin/s3fs") || !std::filesystem::exists("/dev/fuse")) {
    WARN("SKIPPED: no s3fs or /dev/fuse (Debian package s3fs)");
    return;
  }
  testing::S3Rig& rig = *testing::S3Rig::shared();
  const std::string bucket = rig.new_bucket("fuse");
  testing::RunDirs d;
  const std::string mnt = d.tmp / "mnt";
  std::filesystem::create_directories(mnt);
  const std::string passwd = d.tmp / "passwd";
  std::ofstream(passwd) << rig.cluster().access_key() << ":" << rig.cluster().secret_key() << "\n";
  std::filesystem::permissions(passwd, std::filesystem::perms::owner_read |
                                           std::filesystem::perms::owner_write);
  auto mounted = testing::run_command("/usr/bin/s3fs " + bucket + " " + mnt + " -o passwd_file=" +
                                      passwd + " -o url=" + rig.cluster().endpoint() +
                                      " -o use_path_request_style");
  if (mounted.exit_code != 0) {
    WARN("SKIPPED: s3fs could not mount: " << mounted.err);
    return;
  }
  struct Unmount {
    std::string at;
    ~Unmount() { ::umount2(at.c_str(), MNT_DETACH); }
  } unmount{mnt};
  // The mount is live before the run looks (s3fs daemonizes first).
  for (int i = 0; i < 100; ++i) {
    auto m = storage::mount_of(mnt + "/", testing::slurp("/proc/self/mountinfo"));
    if (m && m->fs_type == "fuse.s3fs") break;
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  std::ofstream(d.config()) << "[job]\ncheckpoint_dir = \"" << mnt << "/ckpt\"\nrun_dir = \""
                            << d.run() << "\"\n";
  auto r = testing::run_command(testing::shardguard_bin() + " run --config " + d.config() +
                                " -- " + testing::trainer_bin() + " --steps 10");
  INFO(r.out << r.err);
  CHECK(r.exit_code == 78);
  CHECK_THAT(r.err, Catch::Contains("FUSE mount of a bucket (fuse.s3fs"));
  CHECK_THAT(r.err, Catch::Contains("s3://BUCKET/PREFIX"));
}

}  // namespace
}  // namespace shardguard::storage
