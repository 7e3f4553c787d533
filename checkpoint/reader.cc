#include "checkpoint/reader.h"

#include <xxhash.h>

#include <algorithm>
#include <cstring>
#include <map>
#include <mutex>
#include <unordered_map>

#include "checkpoint/hf_index.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"

namespace shardguard::checkpoint {
namespace {

// One mapped shard whose header has been checked against the manifest. Immutable.
struct Shard {
  std::unique_ptr<MappedFile> file;
  SafetensorsHeader header;
  std::unordered_map<std::string, const TensorEntry*> by_key;  // into header.tensors

  const std::byte* data_of(const TensorEntry& e) const {
    return file->bytes().data() + header.file_offset(e);
  }
};

// A chunk of tensor `name`, as listed under its file.
struct ChunkRef {
  const std::string* name;
  const TensorRecord* tensor;
  const ChunkRecord* chunk;
};

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string dims(std::span<const uint64_t> shape) {
  std::string out = "[";
  for (size_t i = 0; i < shape.size(); ++i) out += (i ? "," : "") + std::to_string(shape[i]);
  return out + "]";
}

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
}

// The chunk's key must hold exactly the chunk: the manifest's dtype, the box's sizes.
Status check_chunk(const Shard& shard, const std::string& path, const ChunkRef& ref) {
  auto it = shard.by_key.find(ref.chunk->key);
  const std::string what = path + ": tensor " + quoted(*ref.name);
  if (it == shard.by_key.end())
    return Error(ErrorCode::kCorrupt, what + ": key " + quoted(ref.chunk->key) + " not in file");
  const TensorEntry& e = *it->second;
  if (e.dtype != ref.tensor->dtype)
    return Error(ErrorCode::kCorrupt, what + ": dtype " + std::string(dtype_name(e.dtype)) +
                                          " in file, manifest says " +
                                          std::string(dtype_name(ref.tensor->dtype)));
  if (e.shape != ref.chunk->box.sizes)
    return Error(ErrorCode::kCorrupt,
                 what + ": shape " + dims(e.shape) + " in file, manifest's chunk " +
                     ref.chunk->box.to_string() + " needs " + dims(ref.chunk->box.sizes));
  return {};
}

// Boxes of `shape` in row-major order, each at most `block_bytes` (but at least one row of
// the innermost dimension that fits), calling `fn(box)` until it fails.
template <typename Fn>
Status for_each_block(const std::vector<uint64_t>& shape, uint64_t element_bytes,
                      uint64_t block_bytes, Fn&& fn) {
  const size_t n = shape.size();
  if (n == 0) return fn(Box{});
  // Find the outermost dimension d whose trailing slab (shape[d+1..]) fits in a block.
  size_t d = n - 1;
  uint64_t inner = element_bytes;
  while (d > 0 && inner * shape[d] <= block_bytes) {
    inner *= shape[d];
    --d;
  }
  const uint64_t rows = std::max<uint64_t>(1, block_bytes / inner);
  std::vector<uint64_t> idx(d, 0);
  uint64_t start = 0;
  for (;;) {
    Box box = Box::whole(shape);
    for (size_t k = 0; k < d; ++k) {
      box.offsets[k] = idx[k];
      box.sizes[k] = 1;
    }
    box.offsets[d] = start;
    box.sizes[d] = std::min(rows, shape[d] - start);
    SG_RETURN_IF_ERROR(fn(box));
    start += box.sizes[d];
    if (start < shape[d]) continue;
    start = 0;
    size_t k = d;
    while (k > 0) {
      --k;
      if (++idx[k] < shape[k]) break;
      idx[k] = 0;
      if (k == 0) return {};
    }
    if (d == 0) return {};
  }
}

}  // namespace

struct CheckpointReader::Impl {
  Filesystem* fs;
  std::string dir;
  Manifest manifest;
  std::map<std::string, std::vector<ChunkRef>, std::less<>> chunks_by_file;

  mutable std::mutex mu;
  mutable std::map<std::string, std::shared_ptr<const Shard>, std::less<>> shards;  // by mu

  Impl(Filesystem& f, std::string d, Manifest m)
      : fs(&f), dir(std::move(d)), manifest(std::move(m)) {
    for (const auto& [name, t] : manifest.tensors)
      for (const auto& c : t.chunks) chunks_by_file[c.file].push_back({&name, &t, &c});
  }

  Result<std::shared_ptr<const Shard>> shard(const std::string& file) const {
    std::lock_guard lock(mu);
    if (auto it = shards.find(file); it != shards.end()) return it->second;
    SG_ASSIGN_OR_RETURN(auto loaded, load(file));
    shards.emplace(file, loaded);
    return loaded;
  }

  Result<std::shared_ptr<const Shard>> load(const std::string& file) const {
    const std::string path = join_path(dir, file);
    const FileRecord* rec = manifest.find_file(file);
    if (rec == nullptr)
      return Error(ErrorCode::kCorrupt, path + ": not among the manifest's files");
    auto shard = std::make_shared<Shard>();
    SG_ASSIGN_OR_RETURN(shard->file, fs->map_readonly(path));
    const auto bytes = shard->file->bytes();
    if (bytes.size() != rec->size)
      return Error(ErrorCode::kCorrupt, path + ": file is " + std::to_string(bytes.size()) +
                                            " bytes, manifest lists " + std::to_string(rec->size));
    SG_ASSIGN_OR_RETURN(shard->header, parse_safetensors(bytes, path));
    for (const TensorEntry& e : shard->header.tensors) shard->by_key.emplace(e.name, &e);
    if (auto it = chunks_by_file.find(file); it != chunks_by_file.end())
      for (const ChunkRef& ref : it->second) SG_RETURN_IF_ERROR(check_chunk(*shard, path, ref));
    return std::shared_ptr<const Shard>(std::move(shard));
  }

  Result<const TensorRecord*> find(std::string_view name) const {
    auto it = manifest.tensors.find(std::string(name));
    if (it == manifest.tensors.end())
      return Error(ErrorCode::kNotFound, dir + ": no tensor " + quoted(name));
    return &it->second;
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

Result<CheckpointReader> CheckpointReader::open(Filesystem& fs, const std::string& path) {
  std::string dir = without_trailing_slash(path);
  const std::string base = base_name(dir);
  if (base == kManifestName || base == kHfIndexName) dir = parent_dir(dir);
  std::string manifest_path = join_path(dir, std::string(kManifestName));
  SG_ASSIGN_OR_RETURN(bool has_manifest, fs.exists(manifest_path));
  if (has_manifest && base != kHfIndexName) {
    SG_ASSIGN_OR_RETURN(std::string text, fs.read_file(manifest_path));
    SG_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(text, manifest_path));
    return from_manifest(fs, std::move(dir), std::move(manifest));
  }
  auto hf = manifest_from_hf_dir(fs, dir);
  if (!hf.ok()) {
    if (hf.error().code() != ErrorCode::kNotFound) return std::move(hf).error();
    return Error(ErrorCode::kNotFound, path + ": no " + std::string(kManifestName) +
                                           " (not a committed checkpoint) and no " +
                                           std::string(kHfIndexName) + " or model.safetensors");
  }
  return from_manifest(fs, std::move(dir), std::move(hf).value());
}

CheckpointReader CheckpointReader::from_manifest(Filesystem& fs, std::string dir,
                                                 Manifest manifest) {
  return CheckpointReader(std::make_unique<Impl>(fs, std::move(dir), std::move(manifest)));
}

const Manifest& CheckpointReader::manifest() const { return impl_->manifest; }
const std::string& CheckpointReader::dir() const { return impl_->dir; }

std::vector<std::string> CheckpointReader::tensor_names() const {
  std::vector<std::string> names;
  names.reserve(impl_->manifest.tensors.size());
  for (const auto& [name, t] : impl_->manifest.tensors) names.push_back(name);
  return names;
}

const TensorRecord* CheckpointReader::tensor(std::string_view name) const {
  auto found = impl_->find(name);
  return found.ok() ? *found : nullptr;
}

Status CheckpointReader::read(std::string_view name, const Box& box,
                              std::span<std::byte> out) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  const std::string what = "tensor " + quoted(name);
  if (auto st = check_box_in_shape(box, t->shape); !st.ok())
    return std::move(st).error().context(what);
  SG_ASSIGN_OR_RETURN(uint64_t need, checked_byte_size(box.sizes, t->dtype));
  if (out.size() != need)
    return Error(ErrorCode::kInvalid, what + ": box " + box.to_string() + " needs " +
                                          std::to_string(need) + " bytes, buffer has " +
                                          std::to_string(out.size()));
  const uint32_t bits = bit_size(t->dtype);
  const bool sub_byte = bits % 8 != 0;
  if (sub_byte && (box != Box::whole(t->shape) || t->chunks.size() != 1))
    return Error(ErrorCode::kUnsupported, what + ": " + std::string(dtype_name(t->dtype)) +
                                              " tensors can only be read whole from one chunk");
  for (const ChunkRecord& c : t->chunks) {
    auto region = intersect(c.box, box);
    if (!region || region->volume() == 0) continue;
    auto shard = impl_->shard(c.file);
    if (!shard.ok()) return std::move(shard).error().context(what);
    const TensorEntry& e = *(*shard)->by_key.at(c.key);
    if (sub_byte) {
      std::memcpy(out.data(), (*shard)->data_of(e), e.byte_size());
    } else {
      copy_region((*shard)->data_of(e), c.box, out.data(), box, *region, bits / 8);
    }
  }
  return {};
}

Result<std::vector<std::byte>> CheckpointReader::read_whole(std::string_view name) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  SG_ASSIGN_OR_RETURN(uint64_t size, checked_byte_size(t->shape, t->dtype));
  std::vector<std::byte> out(size);
  SG_RETURN_IF_ERROR(read(name, Box::whole(t->shape), out));
  return out;
}

const RankState& CheckpointReader::rank_state(uint32_t rank) const {
  static const RankState kNone{"", "null", "null"};
  const auto& ranks = impl_->manifest.ranks;
  return rank < ranks.size() ? ranks[rank] : kNone;
}

const GlobalState& CheckpointReader::global() const { return impl_->manifest.global; }

Result<uint64_t> CheckpointReader::tensor_xxh3_64(std::string_view name,
                                                  uint64_t block_bytes) const {
  SG_ASSIGN_OR_RETURN(const TensorRecord* t, impl_->find(name));
  // A tensor stored whole is hashed straight from the mapping, without a copy.
  if (t->chunks.size() == 1 && t->chunks.front().box == Box::whole(t->shape)) {
    const ChunkRecord& c = t->chunks.front();
    auto shard = impl_->shard(c.file);
    if (!shard.ok()) return std::move(shard).error().context("tensor " + quoted(name));
    const TensorEntry& e = *(*shard)->by_key.at(c.key);
    return XXH3_64bits((*shard)->data_of(e), e.byte_size());
  }
  const uint32_t bits = bit_size(t->dtype);
  if (bits % 8 != 0)
    return Error(
        ErrorCode::kUnsupported,
        "tensor " + quoted(name) + ": " + std::string(dtype_name(t->dtype)) + " split into chunks");
  std::unique_ptr<XXH3_state_t, decltype(&XXH3_freeState)> state(XXH3_createState(),
                                                                 &XXH3_freeState);
  if (!state) return Error(ErrorCode::kInternal, "XXH3_createState failed");
  XXH3_64bits_reset(state.get());
  if (Box::whole(t->shape).volume() == 0) return XXH3_64bits_digest(state.get());
  std::vector<std::byte> buffer;
  SG_RETURN_IF_ERROR(for_each_block(t->shape, bits / 8, block_bytes, [&](const Box& box) -> Status {
    buffer.resize(box.volume() * (bits / 8));
    SG_RETURN_IF_ERROR(read(name, box, buffer));
    XXH3_64bits_update(state.get(), buffer.data(), buffer.size());
    return ok_status();
  }));
  return XXH3_64bits_digest(state.get());
}

Status CheckpointReader::open_all_shards() const {
  for (const FileRecord& f : impl_->manifest.files) SG_RETURN_IF_ERROR(impl_->shard(f.path));
  return {};
}

}  // namespace shardguard::checkpoint
