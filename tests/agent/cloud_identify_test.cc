// Which cloud a machine is, from DMI files in a directory (real files, as /sys/class/dmi/id
// holds them): each cloud by what it writes there, no cloud for anything else, and what
// "auto" resolves to.
#include "agent/cloud_identify.h"

#include <sys/stat.h>

#include <catch2/catch.hpp>
#include <fstream>

#include "tests/support/temp_dir.h"

using namespace shardguard;
using namespace shardguard::agent;

namespace {

void put(const std::string& dir, const std::string& name, const std::string& text) {
  std::ofstream(dir + "/" + name) << text;
}

Filesystem& fs() { return PosixFilesystem::instance(); }

}  // namespace

TEST_CASE("cloud identify: each cloud by its DMI data", "[unit]") {
  shardguard::testing::TempDir dir;
  struct Row {
    const char* file;
    const char* text;
    std::optional<CloudMode> cloud;
    const char* evidence;
  };
  auto row = GENERATE(values<Row>({
      {"sys_vendor", "Amazon EC2\n", CloudMode::kAws, "sys_vendor 'Amazon EC2'"},
      {"bios_vendor", "Amazon EC2", CloudMode::kAws, "bios_vendor 'Amazon EC2'"},
      {"product_uuid", "EC2E1916-9099-7CAF-FD21-012345ABCDEF\n", CloudMode::kAws,
       "product_uuid 'EC2...'"},
      {"product_name", "Google Compute Engine\n", CloudMode::kGcp,
       "product_name 'Google Compute Engine'"},
      {"sys_vendor", "Google\n", CloudMode::kGcp, "sys_vendor 'Google'"},
      {"chassis_asset_tag", "7783-7084-3265-9085-8269-3286-77\n", CloudMode::kAzure,
       "chassis_asset_tag '7783-7084-3265-9085-8269-3286-77'"},
      {"sys_vendor", "QEMU\n", std::nullopt, "sys_vendor 'QEMU'"},
      // Hyper-V on premises looks like this too: without Azure's asset tag it is not Azure.
      {"sys_vendor", "Microsoft Corporation\n", std::nullopt, "sys_vendor 'Microsoft Corporation'"},
      {"sys_vendor", "Amazon EC2 (not)\n", std::nullopt, "sys_vendor 'Amazon EC2 (not)'"},
  }));
  put(dir.path(), row.file, row.text);
  const CloudIdentity id = identify_cloud(read_dmi(fs(), dir.path()), dir.path());
  INFO(row.file << " " << row.text);
  CHECK(id.cloud == row.cloud);
  CHECK(id.evidence == row.evidence);
}

TEST_CASE("cloud identify: no DMI data, odd files, and what auto resolves to", "[unit]") {
  shardguard::testing::TempDir dir;
  const std::string missing = dir / "none";
  auto none = identify_cloud(read_dmi(fs(), missing), missing);
  CHECK_FALSE(none.cloud);
  CHECK(none.evidence == "no DMI data in " + missing);
  // A FIFO where a file should be is not read (it would block), and bytes a terminal would
  // act on are shown, not passed on.
  REQUIRE(::mkfifo((dir / "sys_vendor").c_str(), 0600) == 0);
  put(dir.path(), "product_name", "evil\x1b]0;title\x07\n");
  auto odd = identify_cloud(read_dmi(fs(), dir.path()), dir.path());
  CHECK_FALSE(odd.cloud);
  CHECK(odd.evidence.find('\x1b') == std::string::npos);
  CHECK_THAT(odd.evidence, Catch::StartsWith("product_name 'evil"));

  std::string why;
  CHECK(resolve_clouds("auto", false, fs(), missing, &why) == "none");
  CHECK(why == "no DMI data in " + missing);
  CHECK(resolve_clouds("auto", true, fs(), missing, &why) == "auto");  // a URL given: probed
  CHECK(resolve_clouds("gcp", false, fs(), missing, &why) == "gcp");
  shardguard::testing::TempDir aws;
  put(aws.path(), "sys_vendor", "Amazon EC2\n");
  CHECK(resolve_clouds("auto", false, fs(), aws.path(), &why) == "aws");
  CHECK(why == "sys_vendor 'Amazon EC2'");
  // $SHARDGUARD_DMI_DIR when no directory is given.
  ::setenv("SHARDGUARD_DMI_DIR", aws.path().c_str(), 1);
  CHECK(resolve_clouds("auto", false, fs(), "", &why) == "aws");
  ::setenv("SHARDGUARD_DMI_DIR", missing.c_str(), 1);
  CHECK(resolve_clouds("auto", false, fs(), "", &why) == "none");
}
