#include "agent/cloud_identify.h"

#include <cctype>
#include <cstdlib>

#include "core/terminal_text.h"

namespace shardguard::agent {
namespace {

std::string trimmed(std::string s) {
  if (s.size() > 256) s.resize(256);
  while (!s.empty() && std::isspace(static_cast<unsigned char>(s.back()))) s.pop_back();
  size_t i = 0;
  while (i < s.size() && std::isspace(static_cast<unsigned char>(s[i]))) ++i;
  return s.substr(i);
}

bool starts_with_nocase(const std::string& s, std::string_view prefix) {
  if (s.size() < prefix.size()) return false;
  for (size_t i = 0; i < prefix.size(); ++i)
    if (std::tolower(static_cast<unsigned char>(s[i])) != prefix[i]) return false;
  return true;
}

std::string said(std::string_view key, const std::string& value) {
  return std::string(key) + " '" + escape_for_terminal(value) + "'";
}

}  // namespace

std::string dmi_default_dir() {
  const char* env = std::getenv("SHARDGUARD_DMI_DIR");
  return env != nullptr && *env != '\0' ? env : kDmiDir;
}

DmiFacts read_dmi(Filesystem& fs, std::string dir) {
  if (dir.empty()) dir = dmi_default_dir();
  DmiFacts f;
  auto read = [&](const char* name, std::string& into) {
    const std::string path = join_path(dir, name);
    // Only a regular file: never block on a FIFO planted where a container mounts DMI.
    auto kind = fs.path_kind(path);
    if (!kind.ok() || *kind != PathKind::kFile) return;
    if (auto text = fs.read_file(path); text.ok()) {
      into = trimmed(std::move(*text));
      f.found = true;
    }
  };
  read("sys_vendor", f.sys_vendor);
  read("product_name", f.product_name);
  read("bios_vendor", f.bios_vendor);
  read("chassis_asset_tag", f.chassis_asset_tag);
  read("product_uuid", f.product_uuid);
  return f;
}

CloudIdentity identify_cloud(const DmiFacts& d, const std::string& dir) {
  using C = CloudMode;
  if (d.sys_vendor == "Amazon EC2") return {C::kAws, said("sys_vendor", d.sys_vendor)};
  if (d.bios_vendor == "Amazon EC2") return {C::kAws, said("bios_vendor", d.bios_vendor)};
  if (starts_with_nocase(d.product_uuid, "ec2"))
    return {C::kAws, said("product_uuid", d.product_uuid.substr(0, 3) + "...")};
  if (d.product_name == "Google Compute Engine")
    return {C::kGcp, said("product_name", d.product_name)};
  if (d.sys_vendor == "Google") return {C::kGcp, said("sys_vendor", d.sys_vendor)};
  if (d.bios_vendor == "Google") return {C::kGcp, said("bios_vendor", d.bios_vendor)};
  if (d.chassis_asset_tag == kAzureAssetTag)
    return {C::kAzure, said("chassis_asset_tag", d.chassis_asset_tag)};
  if (!d.found) return {std::nullopt, "no DMI data in " + dir};
  std::string seen;
  for (auto [key, value] : {std::pair<const char*, const std::string*>{"sys_vendor", &d.sys_vendor},
                            {"product_name", &d.product_name},
                            {"bios_vendor", &d.bios_vendor}})
    if (!value->empty()) seen += (seen.empty() ? "" : ", ") + said(key, *value);
  return {std::nullopt, seen.empty() ? "empty DMI data in " + dir : seen};
}

std::string resolve_clouds(const std::string& clouds, bool urls_given, Filesystem& fs,
                           const std::string& dmi_dir, std::string* why) {
  if (clouds != "auto") return clouds;
  const CloudIdentity id = identify_cloud(read_dmi(fs, dmi_dir), dmi_dir.empty() ? dmi_default_dir() : dmi_dir);
  if (why != nullptr) *why = id.evidence;
  if (id.cloud == CloudMode::kAws) return "aws";
  if (id.cloud == CloudMode::kGcp) return "gcp";
  if (id.cloud == CloudMode::kAzure) return "azure";
  return urls_given ? "auto" : "none";
}

}  // namespace shardguard::agent
