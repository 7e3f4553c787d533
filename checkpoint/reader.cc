#include "checkpoint/reader.h"

#include <algorithm>
#include <cstring>

#include "checkpoint/block_sums_xxh3.h"
#include "checkpoint/hf_index.h"
#include "checkpoint/paths.h"
#include "checkpoint/shard_reader.h"
#include "storage/connect.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

std::string quoted(std::string_view s) { return "'" + std::string(s) + "'"; }

std::string base_name(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

std::string without_trailing_slash(std::string path) {
  while (path.size() > 1 && path.back() == '/') path.pop_back();
  return path;
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
  std::shared_ptr<storage::Store> owned;  // a directory opened through a Filesystem
  std::string dir;
  Manifest manifest;
  ReaderOptions options;
  ShardSet shards;  // refers to `manifest` and the store: declared after them

  static ReaderOptions normalised(ReaderOptions o) {
    o.io_threads = std::max(1, o.io_threads);
    o.request_bytes = std::max<size_t>(
        kDirectReadAlignment, o.request_bytes / kDirectReadAlignment * kDirectReadAlignment);
    return o;
  }

  // Files under `prefix` of `store`; `d` is what dir() says (the step's path or URL).
  Impl(std::shared_ptr<storage::Store> own, storage::Store& store, std::string prefix,
       std::string d, Manifest m, const ReaderOptions& o)
      : owned(std::move(own)),
        dir(std::move(d)),
        manifest(std::move(m)),
        options(normalised(o)),
        shards(store, std::move(prefix), base_name(dir), manifest, options) {}

  Result<const TensorRecord*> find(std::string_view name) const {
    auto it = manifest.tensors.find(std::string(name));
    if (it == manifest.tensors.end())
      return Error(ErrorCode::kNotFound, dir + ": no tensor " + quoted(name));
    return &it->second;
  }

  // Checks one read and adds its long runs to `requests` (tagged `tag`); copies its short
  // runs from the mapping now.
  Status gather(const TensorRead& r, size_t tag, std::vector<ReadRequest>& requests) const {
    const std::string_view name = r.name;
    const Box& box = r.box;
    const std::span<std::byte> out = r.out;
    SG_ASSIGN_OR_RETURN(const TensorRecord* t, find(name));
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
      auto shard = shards.get(c.file);
      if (!shard.ok()) return std::move(shard).error().context(what);
      const Shard& s = **shard;
      const TensorEntry& e = *s.by_key.at(c.key);
      const uint64_t base = s.header.file_offset(e);
      Status copied;
      if (sub_byte) {
        if (e.byte_size() >= options.min_pread_bytes) {
          requests.push_back({&s, base, out.data(), e.byte_size(), tag});
        } else {
          copied = shards.check_mapped(s, base, e.byte_size());
          if (copied.ok()) std::memcpy(out.data(), *shards.mapped(s) + base, e.byte_size());
        }
      } else {
        size_t inner = 0;
        const uint64_t run = run_bytes_of(c.box, box, *region, bits / 8, &inner);
        if (run >= options.min_pread_bytes) {
          for_each_run(c.box, box, *region, inner, bits / 8, [&](uint64_t src, uint64_t dst) {
            requests.push_back({&s, base + src, out.data() + dst, run, tag});
          });
        } else {
          copied = shards.copy_region_checked(s, base, c.box, out.data(), box, *region, bits / 8);
        }
      }
      if (!copied.ok()) return std::move(copied).error().context(what);
    }
    return {};
  }
};

CheckpointReader::CheckpointReader(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
CheckpointReader::~CheckpointReader() = default;
CheckpointReader::CheckpointReader(CheckpointReader&&) noexcept = default;
CheckpointReader& CheckpointReader::operator=(CheckpointReader&&) noexcept = default;

Result<CheckpointReader> CheckpointReader::open(Filesystem& fs, const std::string& path) {
  return open(fs, path, ReaderOptions{});
}

Result<CheckpointReader> CheckpointReader::open(Filesystem& fs, const std::string& path,
                                                const ReaderOptions& options) {
  std::string dir = without_trailing_slash(path);
  const std::string base = base_name(dir);
  if (base == kManifestName || base == kHfIndexName) dir = parent_dir(dir);
  std::string manifest_path = join_path(dir, std::string(kManifestName));
  SG_ASSIGN_OR_RETURN(bool has_manifest, fs.exists(manifest_path));
  if (has_manifest && base != kHfIndexName) {
    SG_ASSIGN_OR_RETURN(std::string text, fs.read_file(manifest_path));
    SG_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(text, manifest_path));
    return from_manifest(fs, std::move(dir), std::move(manifest), options);
  }
  auto hf = manifest_from_hf_dir(fs, dir);
  if (!hf.ok()) {
    if (hf.error().code() != ErrorCode::kNotFound) return std::move(hf).error();
    return Error(ErrorCode::kNotFound, path + ": no " + std::string(kManifestName) +
                                           " (not a committed checkpoint) and no " +
                                           std::string(kHfIndexName) + " or model.safetensors");
  }
  return from_manifest(fs, std::move(dir), std::move(hf).value(), options);
}

CheckpointReader CheckpointReader::from_manifest(Filesystem& fs, std::string dir, Manifest manifest,
                                                 const ReaderOptions& options) {
  auto store = std::make_shared<storage::DirectoryStore>(fs, dir);
  storage::Store& s = *store;
  return CheckpointReader(std::make_unique<Impl>(std::move(store), s, "", std::move(dir),
                                                 std::move(manifest), options));
}

CheckpointReader CheckpointReader::from_manifest(storage::Store& store, uint64_t step,
                                                 Manifest manifest, const ReaderOptions& options) {
  return CheckpointReader(std::make_unique<Impl>(nullptr, store, step_key(step),
                                                 store.describe(step_key(step)),
                                                 std::move(manifest), options));
}

Result<CheckpointReader> CheckpointReader::open(std::shared_ptr<storage::Store> store,
                                                uint64_t step, const ReaderOptions& options) {
  if (auto* dir = store->as_directory()) return open(dir->fs(), dir->path(step_key(step)), options);
  const std::string key = manifest_key(step);
  SG_ASSIGN_OR_RETURN(std::string text, store->read(key));
  SG_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(text, store->describe(key)));
  storage::Store& s = *store;
  return CheckpointReader(std::make_unique<Impl>(std::move(store), s, step_key(step),
                                                 s.describe(step_key(step)), std::move(manifest),
                                                 options));
}

Result<CheckpointReader> CheckpointReader::open_path_or_url(Filesystem& fs, const std::string& path,
                                                            const ReaderOptions& options) {
  if (!storage::is_bucket_url(path)) return open(fs, path, options);
  std::string url = without_trailing_slash(path);
  if (base_name(url) == kManifestName) url = url.substr(0, url.rfind('/'));
  const auto slash = url.rfind('/');
  const auto step = parse_step_dir_name(url.substr(slash + 1));
  if (slash == std::string::npos || !step)
    return Error(ErrorCode::kInvalid, "'" + path +
                                          "' is not a step of a bucket "
                                          "(s3://BUCKET/PREFIX/step-NNNNNNNNN[/manifest.json])");
  SG_ASSIGN_OR_RETURN(storage::Location loc, storage::Location::parse(url.substr(0, slash)));
  storage::ConnectOptions c;
  SG_ASSIGN_OR_RETURN(c.s3, storage::s3::s3_options_from_env([](std::string_view name) {
                        const char* v = ::getenv(std::string(name).c_str());
                        return v ? std::optional<std::string>(v) : std::nullopt;
                      }));
  SG_ASSIGN_OR_RETURN(auto conn, storage::connect(loc, std::move(c)));
  return open(storage::shared_store(std::move(conn)), *step, options);
}

Result<CheckpointReader> CheckpointReader::open(storage::Store& store, uint64_t step,
                                                const ReaderOptions& options) {
  if (auto* dir = store.as_directory()) return open(dir->fs(), dir->path(step_key(step)), options);
  const std::string key = manifest_key(step);
  SG_ASSIGN_OR_RETURN(std::string text, store.read(key));
  SG_ASSIGN_OR_RETURN(Manifest manifest, parse_manifest(text, store.describe(key)));
  return from_manifest(store, step, std::move(manifest), options);
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
  const TensorRead one{name, box, out};
  return read_many({&one, 1});
}

Status CheckpointReader::read_many(std::span<const TensorRead> reads) const {
  // Long runs are gathered and read together at the end, so that the reads of all chunks
  // (often in different files, of different tensors) run in parallel; short runs are copied
  // from the mapping now. Shards stay in the cache as long as the reader lives, so plain
  // pointers to them do.
  std::vector<ReadRequest> requests;
  const auto& on_read = impl_->options.on_read;
  for (size_t i = 0; i < reads.size(); ++i) {
    const size_t before = requests.size();
    SG_RETURN_IF_ERROR(impl_->gather(reads[i], i, requests));
    if (on_read && requests.size() == before) on_read(reads[i].out.size());  // copied already
  }
  std::function<void(size_t)> done;
  if (on_read) done = [&](size_t i) { on_read(reads[i].out.size()); };
  return impl_->shards.execute_all(
      requests, [&](size_t i) { return "tensor " + quoted(reads[i].name); }, done);
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
    auto shard = impl_->shards.get(c.file);
    if (!shard.ok()) return std::move(shard).error().context("tensor " + quoted(name));
    const TensorEntry& e = *(*shard)->by_key.at(c.key);
    const uint64_t at = (*shard)->header.file_offset(e);
    if (auto st = impl_->shards.check_mapped(**shard, at, e.byte_size()); !st.ok())
      return std::move(st).error().context("tensor " + quoted(name));
    SG_ASSIGN_OR_RETURN(const std::byte* file, impl_->shards.mapped(**shard));
    return XXH3_64bits(file + at, e.byte_size());
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
  for (const FileRecord& f : impl_->manifest.files) SG_RETURN_IF_ERROR(impl_->shards.get(f.path));
  return {};
}

std::optional<ChecksumFailure> CheckpointReader::checksum_failure() const {
  return impl_->shards.failure();
}

}  // namespace shardguard::checkpoint
