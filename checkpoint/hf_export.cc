#include "checkpoint/hf_export.h"

#include <unistd.h>

#include <boost/json.hpp>

#include <cerrno>
#include <cstdio>

#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"

namespace shardguard::checkpoint {
namespace {

struct Group {
  std::vector<std::string> names;
  uint64_t bytes = 0;
};

std::string numbered(const std::string& prefix, size_t i, size_t n) {
  char buf[48];
  std::snprintf(buf, sizeof buf, "-%05zu-of-%05zu.safetensors", i + 1, n);
  return prefix + buf;
}

Status write_one(Filesystem& fs, const CheckpointReader& reader, const Group& group,
                 const std::string& path) {
  std::vector<PlannedTensor> planned;
  for (const auto& name : group.names) {
    const TensorRecord* t = reader.tensor(name);
    planned.push_back({name, t->dtype, t->shape});
  }
  SG_ASSIGN_OR_RETURN(auto layout, plan_safetensors(std::move(planned), {{"format", "pt"}}));
  const std::string tmp = temp_name(path.substr(path.find_last_of('/') + 1), 0, ::getpid());
  const std::string tmp_path = join_path(parent_dir(path), tmp);
  auto write = [&]() -> Status {
    // Exclusive: a name planted in --out (a link to a file elsewhere) fails the export
    // instead of being written through.
    SG_ASSIGN_OR_RETURN(auto file, fs.open_for_write(tmp_path, {.exclusive = true}));
    SG_RETURN_IF_ERROR(file->preallocate(layout.file_size));
    SG_RETURN_IF_ERROR(file->append(layout.header_bytes));
    // The layout orders tensors by dtype then name; write them in that order.
    for (const auto& e : layout.header.tensors) {
      SG_ASSIGN_OR_RETURN(auto bytes, reader.read_whole(e.name));
      SG_RETURN_IF_ERROR(file->append(bytes));
    }
    SG_RETURN_IF_ERROR(file->sync());
    SG_RETURN_IF_ERROR(file->close());
    return fs.rename(tmp_path, path);
  };
  if (auto st = write(); !st.ok()) {
    // Only a temp file this call created is removed, never one it found there.
    if (st.error().sys_errno() != EEXIST) (void)fs.remove(tmp_path);
    return st;
  }
  return {};
}

}  // namespace

Result<std::vector<std::string>> export_hf(Filesystem& fs, const CheckpointReader& reader,
                                           const ExportOptions& options) {
  if (options.prefix.empty() || options.prefix.find('/') != std::string::npos)
    return Error(ErrorCode::kInvalid, "export prefix '" + options.prefix +
                                          "' must be a plain file name part");
  if (options.max_shard_size == 0)
    return Error(ErrorCode::kInvalid, "max shard size must be positive");
  std::vector<Group> groups;
  uint64_t total = 0;
  for (const auto& name : reader.tensor_names()) {  // sorted by name
    const TensorRecord* t = reader.tensor(name);
    SG_ASSIGN_OR_RETURN(uint64_t bytes, checked_byte_size(t->shape, t->dtype));
    total += bytes;
    if (groups.empty() || (groups.back().bytes + bytes > options.max_shard_size &&
                           !groups.back().names.empty()))
      groups.emplace_back();
    groups.back().names.push_back(name);
    groups.back().bytes += bytes;
  }
  if (groups.empty()) groups.emplace_back();
  SG_RETURN_IF_ERROR(fs.create_dirs(options.out_dir));

  std::vector<std::string> written;
  boost::json::object weight_map;
  for (size_t i = 0; i < groups.size(); ++i) {
    const std::string file = groups.size() == 1 ? options.prefix + ".safetensors"
                                                : numbered(options.prefix, i, groups.size());
    const std::string path = join_path(options.out_dir, file);
    if (auto st = write_one(fs, reader, groups[i], path); !st.ok())
      return std::move(st).error().context("export '" + path + "'");
    written.push_back(path);
    for (const auto& name : groups[i].names) weight_map[name] = file;
  }
  if (groups.size() > 1) {
    // transformers writes the index with indent=2 and sorted keys; keys here are sorted.
    std::string index = "{\n  \"metadata\": {\n    \"total_size\": " + std::to_string(total) +
                        "\n  },\n  \"weight_map\": {\n";
    size_t k = 0;
    for (const auto& kv : weight_map) {
      index += "    " + boost::json::serialize(boost::json::value(kv.key())) + ": " +
               boost::json::serialize(kv.value()) + (++k < weight_map.size() ? ",\n" : "\n");
    }
    index += "  }\n}\n";
    const std::string path =
        join_path(options.out_dir, options.prefix + ".safetensors.index.json");
    SG_RETURN_IF_ERROR(atomic_write_file(fs, path, index));
    written.push_back(path);
  }
  SG_RETURN_IF_ERROR(fs.sync_dir(options.out_dir));
  return written;
}

}  // namespace shardguard::checkpoint
