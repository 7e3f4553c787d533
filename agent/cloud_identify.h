// Which cloud is this machine? Told from the machine's own SMBIOS/DMI data, without the
// network, as cloud-init's ds-identify does: a preemption-aware supervisor watches the right
// cloud's notices by default, and a machine that is no cloud's sends no metadata probe at
// all (a laptop, a bare-metal cluster, a test machine reach nothing but what they ask for).
//
//   AWS     sys_vendor or bios_vendor "Amazon EC2" (Nitro), or a product_uuid that starts
//           with "ec2" (Xen instances)
//   GCP     product_name "Google Compute Engine", or sys_vendor / bios_vendor "Google"
//   Azure   chassis_asset_tag "7783-7084-3265-9085-8269-3286-77" (every Azure VM's)
//
// The files are read from /sys/class/dmi/id, or from $SHARDGUARD_DMI_DIR when set (a
// container that mounts the host's). Pure but for read_dmi().
#pragma once

#include <optional>
#include <string>

#include "core/filesystem.h"
#include "agent/cloud_detect.h"

namespace shardguard::agent {

inline constexpr const char* kDmiDir = "/sys/class/dmi/id";
inline constexpr const char* kAzureAssetTag = "7783-7084-3265-9085-8269-3286-77";

struct DmiFacts {
  std::string sys_vendor, product_name, bios_vendor, chassis_asset_tag, product_uuid;
  bool found = false;  // any of the files could be read
};

// $SHARDGUARD_DMI_DIR, else kDmiDir.
std::string dmi_default_dir();

// Reads the DMI files (each trimmed, at most 256 bytes; a missing or unreadable one is
// empty: product_uuid is root's only). `dir` empty: $SHARDGUARD_DMI_DIR or kDmiDir.
DmiFacts read_dmi(Filesystem& fs, std::string dir = "");

struct CloudIdentity {
  std::optional<CloudMode> cloud;  // kAws, kGcp or kAzure; nullopt: none of the three
  // What said so, for the log and --check-config: "sys_vendor 'Amazon EC2'", or why not
  // ("sys_vendor 'QEMU', product_name 'Standard PC'", "no DMI data in /sys/class/dmi/id").
  std::string evidence;
};

CloudIdentity identify_cloud(const DmiFacts& dmi, const std::string& dir = dmi_default_dir());

// What [agent] clouds = "auto" means on this machine: "aws", "gcp" or "azure" when its DMI
// data names one, "auto" still when it names none but a metadata URL was set by hand (that
// service is probed), else "none". Other settings are returned as they are. `why` gets the
// evidence ("sys_vendor 'Amazon EC2'") when the setting was "auto".
std::string resolve_clouds(const std::string& clouds, bool urls_given, Filesystem& fs,
                           const std::string& dmi_dir, std::string* why);

}  // namespace shardguard::agent
