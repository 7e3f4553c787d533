#include "checkpoint/writer.h"

#include <unistd.h>

#include <cerrno>

#include <boost/json.hpp>

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdlib>
#include <cstring>
#include <map>
#include <optional>
#include <thread>

#include "checkpoint/block_writer.h"
#include "checkpoint/paths.h"
#include "checkpoint/safetensors.h"
#include "storage/dir_store.h"

namespace shardguard::checkpoint {
namespace {

struct PendingTensor {
  std::string name;
  std::string key;  // inside the shard file
  DType dtype;
  std::vector<uint64_t> global_shape;
  Box box;
  std::span<const std::byte> data;
  bool placeholder = false;  // bytes copied into staging by the caller after place()
};

std::string chunk_key(const std::string& name, const Box& box,
                      const std::vector<uint64_t>& shape) {
  if (box == Box::whole(shape)) return name;
  std::string key = name + "@";
  for (size_t i = 0; i < box.offsets.size(); ++i) {
    if (i) key += ",";
    key += std::to_string(box.offsets[i]);
  }
  return key;
}

Status check_json_text(const std::string& text, const std::string& what) {
  if (text.empty()) return {};
  boost::system::error_code ec;
  (void)boost::json::parse(text, ec);
  if (ec) return Error(ErrorCode::kInvalid, what + " is not valid JSON: " + ec.message());
  return {};
}

std::string u64_list_json(const std::vector<uint64_t>& v) {
  boost::json::array a;
  for (uint64_t x : v) a.emplace_back(x);
  return boost::json::serialize(a);
}

}  // namespace

struct ShardWriter::Impl {
  std::shared_ptr<storage::Store> owned;  // the Filesystem constructor's directory
  storage::Store* store = nullptr;
  WriterOptions opt;
  std::vector<PendingTensor> tensors;
  RankState rank_state{"", "null", "null"};
  std::optional<GlobalState> global;
  std::optional<SafetensorsLayout> layout;
  const std::byte* staged = nullptr;  // the whole file image, after snapshot() or place()
  const StagingBuffer* staged_in = nullptr;

  RankFiles files() const { return RankFiles{store->location().is_bucket()}; }
  // The shard's path inside the step ("shard-...", or "a000003/shard-..." in a bucket).
  std::string shard_name() const { return files().shard(opt.rank, opt.world_size, opt.attempt); }
  std::string key(std::string_view file) const { return step_file_key(opt.step, file); }

  Status add(PendingTensor t) {
    if (t.name.empty()) return Error(ErrorCode::kInvalid, "tensor name is empty");
    if (layout) return Error(ErrorCode::kInvalid, "tensor '" + t.name + "' added after the plan");
    if (auto st = check_box_in_shape(t.box, t.global_shape); !st.ok())
      return std::move(st).error().context("tensor '" + t.name + "'");
    SG_ASSIGN_OR_RETURN(uint64_t bytes, checked_byte_size(t.box.sizes, t.dtype));
    if (!t.placeholder && bytes != t.data.size())
      return Error(ErrorCode::kInvalid, "tensor '" + t.name + "' box " + t.box.to_string() +
                                            " of " + std::string(dtype_name(t.dtype)) +
                                            " needs " + std::to_string(bytes) + " bytes, got " +
                                            std::to_string(t.data.size()));
    const bool whole = t.box == Box::whole(t.global_shape);
    if (!whole && bit_size(t.dtype) < 8)
      return Error(ErrorCode::kInvalid, "tensor '" + t.name + "': " +
                                            std::string(dtype_name(t.dtype)) +
                                            " can only be stored whole, not in chunks");
    for (const auto& other : tensors) {
      if (other.name != t.name) continue;
      if (other.dtype != t.dtype || other.global_shape != t.global_shape)
        return Error(ErrorCode::kInvalid, "tensor '" + t.name +
                                              "' added again with another dtype or shape");
      if (intersect(other.box, t.box) && t.box.volume() > 0)
        return Error(ErrorCode::kInvalid, "tensor '" + t.name + "': chunk " +
                                              t.box.to_string() + " overlaps " +
                                              other.box.to_string());
    }
    t.key = chunk_key(t.name, t.box, t.global_shape);
    tensors.push_back(std::move(t));
    return {};
  }

  Status plan() {
    if (layout) return {};
    std::vector<PlannedTensor> planned;
    std::string chunks = "{";
    bool first = true;
    for (const auto& t : tensors) {
      planned.push_back({t.key, t.dtype, t.box.sizes});
      if (t.key == t.name) continue;
      if (!first) chunks += ",";
      first = false;
      std::string entry;
      entry += "{\"tensor\":" + boost::json::serialize(boost::json::value(t.name));
      entry += ",\"shape\":" + u64_list_json(t.global_shape);
      entry += ",\"offsets\":" + u64_list_json(t.box.offsets) + "}";
      chunks += boost::json::serialize(boost::json::value(t.key)) + ":" + entry;
    }
    chunks += "}";
    std::map<std::string, std::string> metadata = {
        {"format", "shardguard"},
        {"shardguard.job_id", opt.job_id},
        {"shardguard.step", std::to_string(opt.step)},
        {"shardguard.rank", std::to_string(opt.rank)},
        {"shardguard.world_size", std::to_string(opt.world_size)},
    };
    if (!first) metadata["shardguard.chunks"] = chunks;
    auto planned_layout = plan_safetensors(std::move(planned), std::move(metadata),
                                           kDirectIoAlignment);
    if (!planned_layout.ok())
      return std::move(planned_layout).error().context(shard_name());
    layout = std::move(*planned_layout);
    return {};
  }

  bool has_placeholders() const {
    return std::any_of(tensors.begin(), tensors.end(),
                       [](const PendingTensor& t) { return t.placeholder; });
  }

  // The file image as segments in offset order: header, then each tensor's bytes (those of
  // placeholders left out).
  std::vector<Segment> segments() const {
    if (staged != nullptr) return {Segment{0, std::span(staged, layout->file_size)}};
    std::map<std::string_view, const PendingTensor*> by_key;
    for (const auto& t : tensors) by_key[t.key] = &t;
    std::vector<Segment> out;
    out.push_back({0, std::span<const std::byte>(layout->header_bytes)});
    for (const auto& e : layout->header.tensors) {
      const PendingTensor& t = *by_key.at(e.name);
      if (e.byte_size() == 0 || t.placeholder) continue;
      out.push_back({layout->header.file_offset(e), t.data});
    }
    return out;
  }

  // Copies what the caller gave (header, tensors with data) into `staging`.
  Result<std::byte*> stage(StagingBuffer& staging) {
    SG_RETURN_IF_ERROR(plan());
    SG_ASSIGN_OR_RETURN(std::byte * dst, staging.reserve(layout->file_size));
    auto segs = segments();
    copy_image(segs, dst, opt.io_threads);
    staged = dst;
    staged_in = &staging;
    return dst;
  }

  Status check_fencing() {
    SG_ASSIGN_OR_RETURN(auto committed, store->stat(manifest_key(opt.step)));
    if (committed)
      return Error(ErrorCode::kFenced, "step " + std::to_string(opt.step) +
                                           " is already committed ('" +
                                           store->describe(manifest_key(opt.step)) +
                                           "'); a committed step is never rewritten");
    // A bucket's attempts write under keys of their own: a newer one's files are elsewhere,
    // and its commit (or the lease) fences this one.
    if (files().per_attempt) return {};
    const std::string own_key = key(files().sidecar(opt.rank, opt.attempt));
    const std::string own = store->describe(own_key);
    SG_ASSIGN_OR_RETURN(auto has_sidecar, store->stat(own_key));
    if (has_sidecar) {
      auto text = store->read(own_key);
      if (text.ok()) {
        auto old = parse_sidecar(*text, own);
        if (old.ok() && old->attempt > opt.attempt)
          return Error(ErrorCode::kFenced, "'" + own + "' belongs to attempt " +
                                               std::to_string(old->attempt) +
                                               ", newer than this writer's " +
                                               std::to_string(opt.attempt));
      }
    }
    return {};
  }

  Sidecar make_sidecar(FileChecksums sums) const {
    Sidecar s;
    s.job_id = opt.job_id;
    s.step = opt.step;
    s.attempt = opt.attempt;
    s.rank = opt.rank;
    s.world_size = opt.world_size;
    s.file.path = shard_name();
    s.file.size = layout->file_size;
    s.file.xxh3_128 = std::move(sums.xxh3_128);
    s.file.rank = opt.rank;
    s.file.block_bytes = sums.block_bytes;
    s.file.block_xxh3 = std::move(sums.block_xxh3);
    for (const auto& t : tensors) {
      auto& rec = s.tensors[t.name];
      rec.dtype = t.dtype;
      rec.shape = t.global_shape;
      rec.chunks.push_back({shard_name(), t.key, t.box});
    }
    s.state = rank_state;
    s.global = global;
    return s;
  }
};

ShardWriter::ShardWriter(Filesystem& fs, WriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->owned = std::make_shared<storage::DirectoryStore>(fs, options.checkpoint_dir);
  impl_->store = impl_->owned.get();
  impl_->opt = std::move(options);
}

ShardWriter::ShardWriter(storage::Store& store, WriterOptions options)
    : impl_(std::make_unique<Impl>()) {
  impl_->store = &store;
  impl_->opt = std::move(options);
}
ShardWriter::~ShardWriter() = default;
ShardWriter::ShardWriter(ShardWriter&&) noexcept = default;
ShardWriter& ShardWriter::operator=(ShardWriter&&) noexcept = default;

const WriterOptions& ShardWriter::options() const { return impl_->opt; }

Status ShardWriter::add_tensor(std::string name, DType dtype, std::vector<uint64_t> shape,
                               std::span<const std::byte> data) {
  Box box = Box::whole(shape);
  return impl_->add({std::move(name), "", dtype, std::move(shape), std::move(box), data});
}

Status ShardWriter::add_chunk(std::string name, DType dtype, std::vector<uint64_t> global_shape,
                              Box box, std::span<const std::byte> data) {
  return impl_->add(
      {std::move(name), "", dtype, std::move(global_shape), std::move(box), data});
}

Status ShardWriter::add_placeholder(std::string name, DType dtype,
                                    std::vector<uint64_t> global_shape, Box box) {
  return impl_->add(
      {std::move(name), "", dtype, std::move(global_shape), std::move(box), {}, true});
}

void ShardWriter::set_rank_state(RankState state) { impl_->rank_state = std::move(state); }
void ShardWriter::set_global_state(GlobalState state) { impl_->global = std::move(state); }

Result<uint64_t> ShardWriter::planned_file_size() {
  SG_RETURN_IF_ERROR(impl_->plan());
  return impl_->layout->file_size;
}

Result<uint64_t> ShardWriter::snapshot(StagingBuffer& staging) {
  Impl& m = *impl_;
  if (m.staged != nullptr && m.staged_in == &staging && m.staged == staging.data()) return 0;
  if (m.has_placeholders())
    return Error(ErrorCode::kInvalid,
                 "snapshot of step " + std::to_string(m.opt.step) +
                     ": placeholder tensors must be placed (place()) and filled first");
  SG_RETURN_IF_ERROR(m.stage(staging));
  return m.layout->file_size;
}

Result<std::vector<std::span<std::byte>>> ShardWriter::place(StagingBuffer& staging) {
  Impl& m = *impl_;
  SG_ASSIGN_OR_RETURN(std::byte * dst, m.stage(staging));
  std::map<std::string_view, const TensorEntry*> by_key;
  for (const auto& e : m.layout->header.tensors) by_key[e.name] = &e;
  std::vector<std::span<std::byte>> slots;
  for (const auto& t : m.tensors) {
    if (!t.placeholder) continue;
    const TensorEntry& e = *by_key.at(t.key);
    slots.emplace_back(dst + m.layout->header.file_offset(e), e.byte_size());
  }
  return slots;
}

Result<Sidecar> ShardWriter::finish() {
  Impl& m = *impl_;
  const auto& opt = m.opt;
  if (opt.world_size == 0 || opt.rank >= opt.world_size)
    return Error(ErrorCode::kInvalid, "rank " + std::to_string(opt.rank) +
                                          " outside world size " +
                                          std::to_string(opt.world_size));
  if (opt.rank == 0 && !m.global)
    return Error(ErrorCode::kInvalid, "rank 0 must set the global state before finish()");
  if (opt.rank != 0 && m.global)
    return Error(ErrorCode::kInvalid, "only rank 0 sets the global state");
  if (!valid_checksum_block_bytes(opt.checksum_block_bytes))
    return Error(ErrorCode::kInvalid, "checksum block size " +
                                          std::to_string(opt.checksum_block_bytes) +
                                          " is not a power of two from 4 KiB to 64 MiB");
  SG_RETURN_IF_ERROR(check_json_text(m.rank_state.data_position, "data loader position"));
  SG_RETURN_IF_ERROR(check_json_text(m.rank_state.user, "rank user state"));
  if (m.global) {
    SG_RETURN_IF_ERROR(check_json_text(m.global->lr_schedule, "LR schedule"));
    SG_RETURN_IF_ERROR(check_json_text(m.global->user, "global user state"));
  }
  SG_RETURN_IF_ERROR(m.plan());
  if (m.staged == nullptr && m.has_placeholders())
    return Error(ErrorCode::kInvalid, "step " + std::to_string(opt.step) +
                                          ": placeholder tensors were never placed in staging");

  storage::Store& store = *m.store;
  if (auto* dir = store.as_directory()) {
    // The step directory's entry is durable before anything is written into it.
    SG_RETURN_IF_ERROR(dir->fs().create_dirs(dir->path(step_key(opt.step))));
    SG_RETURN_IF_ERROR(dir->fs().sync_dir(dir->dir()));
  }
  SG_RETURN_IF_ERROR(m.check_fencing());

  const std::string shard_key = m.key(m.shard_name());
  const BlockWriteOptions block_options{opt.io_threads, opt.block_size, opt.direct_io,
                                        opt.checksum_block_bytes, opt.on_written};
  storage::UploadOptions upload_options;
  upload_options.size = m.layout->file_size;
  upload_options.part_bytes = image_part_bytes(block_options);
  upload_options.direct_io = opt.direct_io;
  upload_options.temp_key = m.key(temp_name(m.shard_name(), opt.attempt, ::getpid()));
  upload_options.interrupt = opt.interrupt;
  SG_ASSIGN_OR_RETURN(auto upload, store.begin_upload(shard_key, upload_options));
  auto segs = m.segments();
  SG_ASSIGN_OR_RETURN(FileChecksums checksums,
                      write_image(*upload, segs, m.layout->file_size, block_options));
  // Last look before publishing: a committer may have sealed the step meanwhile.
  if (auto st = m.check_fencing(); !st.ok()) {
    upload->abort();
    return std::move(st).error();
  }
  if (auto st = upload->publish(); !st.ok()) {
    upload->abort();
    (void)store.remove(shard_key);
    return std::move(st).error();
  }
  Sidecar sidecar = m.make_sidecar(std::move(checksums));
  const std::string sidecar_key = m.key(m.files().sidecar(opt.rank, opt.attempt));
  // The shard is durable and visible before the sidecar that points at it appears. In a
  // bucket the sidecar's key is this attempt's own: never written twice when attempts are
  // numbered.
  const bool once = m.files().per_attempt && m.opt.attempts_numbered;
  auto published = store.put(sidecar_key, sidecar_to_json(sidecar),
                             once ? storage::PutCondition::if_absent() : storage::PutCondition::none());
  if (!published.ok()) {
    // A failed save leaves nothing of this rank: no orphan shard (on a full disk it is the
    // space to give back), and no sidecar whose durability is unknown.
    if (published.error().code() != ErrorCode::kExists) (void)store.remove(sidecar_key);
    (void)store.remove(shard_key);
    return std::move(published).error();
  }
  return sidecar;
}

struct AsyncShardWriter::Impl {
  StagingBuffer staging;
  std::thread thread;
  std::optional<ShardWriter> writer;
  std::optional<Result<Sidecar>> result;
  std::atomic<bool> done{false};
  bool started = false;

  void join() {
    if (thread.joinable()) thread.join();
  }
};

AsyncShardWriter::AsyncShardWriter() : impl_(std::make_unique<Impl>()) {}
AsyncShardWriter::~AsyncShardWriter() { impl_->join(); }

Result<double> AsyncShardWriter::start(ShardWriter writer) {
  impl_->join();
  const auto t0 = std::chrono::steady_clock::now();
  impl_->writer.emplace(std::move(writer));
  auto copied = impl_->writer->snapshot(impl_->staging);
  if (!copied.ok()) {
    impl_->writer.reset();
    return std::move(copied).error();
  }
  const double stall =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  impl_->result.reset();
  impl_->done = false;
  impl_->started = true;
  impl_->thread = std::thread([this] {
    impl_->result.emplace(impl_->writer->finish());
    impl_->done = true;
  });
  return stall;
}

bool AsyncShardWriter::busy() const {
  return impl_->started && !impl_->done.load();
}

Result<Sidecar> AsyncShardWriter::wait() {
  if (!impl_->started) return Error(ErrorCode::kInvalid, "no asynchronous save was started");
  impl_->join();
  impl_->started = false;
  impl_->writer.reset();
  return std::move(*impl_->result);
}

}  // namespace shardguard::checkpoint
