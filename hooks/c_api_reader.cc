// C ABI: resuming (shardguard.h, "resume"): open a checkpoint, list its tensors, read any
// box of any tensor, and the saved rank and global state.
#include <cstring>
#include <string>
#include <vector>

#include "hooks/c_api_internal.h"

using namespace shardguard;
using shardguard::checkpoint::Box;
using shardguard::checkpoint::CheckpointReader;
using shardguard::hooks::capi::boundary;
using shardguard::hooks::capi::boundary_value;
using shardguard::hooks::capi::fail;
using shardguard::hooks::capi::from_status;

sg_reader::sg_reader(CheckpointReader r) : reader(std::move(r)) {
  names = reader.tensor_names();
  for (const auto& name : names)
    dtypes.emplace(name, std::string(checkpoint::dtype_name(reader.tensor(name)->dtype)));
}

namespace {

sg_status wrap(Result<CheckpointReader> r, sg_reader** out) {
  if (!r.ok()) return fail(r.error());
  *out = new sg_reader(std::move(*r));
  return SG_OK;
}

const checkpoint::RankState* rank_state(const sg_reader* r, uint32_t rank) {
  return r != nullptr ? &r->reader.rank_state(rank) : nullptr;
}

// The box a spec names, checked against the tensor; `where` names the call.
Result<Box> box_of(const CheckpointReader& reader, const char* name, size_t ndim,
                   const uint64_t* offsets, const uint64_t* sizes, const char* where) {
  const auto* t = reader.tensor(name);
  if (t == nullptr)
    return Error(ErrorCode::kNotFound, std::string("no tensor '") + name + "' in the checkpoint");
  if (offsets == nullptr && sizes == nullptr) return Box::whole(t->shape);
  if (offsets == nullptr || sizes == nullptr)
    return Error(ErrorCode::kInvalid,
                 std::string(where) + ": give both offsets and sizes, or neither");
  Box box;
  box.offsets.assign(offsets, offsets + ndim);
  box.sizes.assign(sizes, sizes + ndim);
  return box;
}

}  // namespace

extern "C" {

sg_status sg_client_open_resume(const sg_client* client, sg_reader** out) {
  return boundary("sg_client_open_resume", [&]() -> sg_status {
    if (client == nullptr || !client->client || out == nullptr)
      return fail(ErrorCode::kInvalid, "sg_client_open_resume: NULL argument");
    *out = nullptr;
    return wrap(client->client->open_resume(), out);
  });
}

sg_status sg_reader_open(const char* path, sg_reader** out) {
  return boundary("sg_reader_open", [&]() -> sg_status {
    if (path == nullptr || out == nullptr)
      return fail(ErrorCode::kInvalid, "sg_reader_open: NULL argument");
    *out = nullptr;
    return wrap(CheckpointReader::open_path_or_url(PosixFilesystem::instance(), path), out);
  });
}

void sg_reader_free(sg_reader* reader) { delete reader; }

uint64_t sg_reader_step(const sg_reader* r) { return r ? r->reader.manifest().step : 0; }
uint32_t sg_reader_world_size(const sg_reader* r) {
  return r ? r->reader.manifest().world_size : 0;
}
const char* sg_reader_job_id(const sg_reader* r) {
  return r ? r->reader.manifest().job_id.c_str() : "";
}
size_t sg_reader_tensor_count(const sg_reader* r) { return r ? r->names.size() : 0; }
const char* sg_reader_tensor_name(const sg_reader* r, size_t index) {
  return (r != nullptr && index < r->names.size()) ? r->names[index].c_str() : nullptr;
}

sg_status sg_reader_tensor_info(const sg_reader* r, const char* name, const char** dtype,
                                size_t* ndim, const uint64_t** shape) {
  return boundary("sg_reader_tensor_info", [&]() -> sg_status {
    if (r == nullptr || name == nullptr)
      return fail(ErrorCode::kInvalid, "sg_reader_tensor_info: NULL argument");
    const auto* t = r->reader.tensor(name);
    if (t == nullptr)
      return fail(ErrorCode::kNotFound, std::string("no tensor '") + name + "' in the checkpoint");
    if (dtype != nullptr) *dtype = r->dtypes.at(name).c_str();
    if (ndim != nullptr) *ndim = t->shape.size();
    if (shape != nullptr) *shape = t->shape.data();
    return SG_OK;
  });
}

sg_status sg_reader_read(const sg_reader* r, const char* name, size_t ndim, const uint64_t* offsets,
                         const uint64_t* sizes, void* out, size_t out_size) {
  return boundary("sg_reader_read", [&]() -> sg_status {
    if (r == nullptr || name == nullptr || (out == nullptr && out_size != 0))
      return fail(ErrorCode::kInvalid, "sg_reader_read: NULL argument");
    auto box = box_of(r->reader, name, ndim, offsets, sizes, "sg_reader_read");
    if (!box.ok()) return fail(box.error());
    auto* bytes = static_cast<std::byte*>(out);
    return from_status(r->reader.read(name, *box, std::span<std::byte>(bytes, out_size)));
  });
}

sg_status sg_reader_read_many(const sg_reader* r, const sg_read_spec* reads, size_t count) {
  return boundary("sg_reader_read_many", [&]() -> sg_status {
    if (r == nullptr || (reads == nullptr && count != 0))
      return fail(ErrorCode::kInvalid, "sg_reader_read_many: NULL argument");
    std::vector<CheckpointReader::TensorRead> many;
    many.reserve(count);
    for (size_t i = 0; i < count; ++i) {
      const sg_read_spec& s = reads[i];
      if (s.name == nullptr || (s.out == nullptr && s.out_size != 0))
        return fail(ErrorCode::kInvalid,
                    "sg_reader_read_many: NULL name or out in spec " + std::to_string(i));
      auto box = box_of(r->reader, s.name, s.ndim, s.offsets, s.sizes, "sg_reader_read_many");
      if (!box.ok()) return fail(box.error());
      many.push_back({s.name, std::move(box).value(),
                      std::span<std::byte>(static_cast<std::byte*>(s.out), s.out_size)});
    }
    return from_status(r->reader.read_many(many));
  });
}

sg_status sg_reader_rank_rng(const sg_reader* r, uint32_t rank, const void** data, size_t* size) {
  return boundary("sg_reader_rank_rng", [&]() -> sg_status {
    if (r == nullptr || data == nullptr || size == nullptr)
      return fail(ErrorCode::kInvalid, "sg_reader_rank_rng: NULL argument");
    const std::string& rng = rank_state(r, rank)->rng;
    *data = rng.data();
    *size = rng.size();
    return SG_OK;
  });
}

// Empty JSON text (never set) reads as "null", as the header promises.
const char* sg_reader_rank_data_position(const sg_reader* r, uint32_t rank) {
  return boundary_value<const char*>("null", [&] {
    const auto* s = rank_state(r, rank);
    return (s == nullptr || s->data_position.empty()) ? "null" : s->data_position.c_str();
  });
}

const char* sg_reader_rank_user(const sg_reader* r, uint32_t rank) {
  return boundary_value<const char*>("null", [&] {
    const auto* s = rank_state(r, rank);
    return (s == nullptr || s->user.empty()) ? "null" : s->user.c_str();
  });
}

uint64_t sg_reader_global_step(const sg_reader* r) { return r ? r->reader.global().step : 0; }

const char* sg_reader_global_lr_schedule(const sg_reader* r) {
  if (r == nullptr || r->reader.global().lr_schedule.empty()) return "null";
  return r->reader.global().lr_schedule.c_str();
}

const char* sg_reader_global_user(const sg_reader* r) {
  if (r == nullptr || r->reader.global().user.empty()) return "null";
  return r->reader.global().user.c_str();
}

const char* sg_reader_global_tree(const sg_reader* r) {
  if (r == nullptr || r->reader.global().tree.empty()) return "null";
  return r->reader.global().tree.c_str();
}

const char* sg_reader_rank_tree(const sg_reader* r, uint32_t rank) {
  return boundary_value<const char*>("null", [&] {
    const auto* s = rank_state(r, rank);
    return (s == nullptr || s->tree.empty()) ? "null" : s->tree.c_str();
  });
}

int sg_reader_checksum_failure(const sg_reader* r, const char** file, uint64_t* offset,
                               int* has_offset) {
  return boundary_value(0, [&] {
    if (r == nullptr) return 0;
    auto failure = r->reader.checksum_failure();
    if (!failure) return 0;
    // Kept in the handle: the pointer handed out stays valid while the reader lives.
    {
      std::lock_guard lock(r->failure_mu);
      if (!r->failure_file) r->failure_file = std::make_unique<std::string>(failure->file);
    }
    if (file != nullptr) *file = r->failure_file->c_str();
    if (offset != nullptr) *offset = failure->offset.value_or(0);
    if (has_offset != nullptr) *has_offset = failure->offset ? 1 : 0;
    return 1;
  });
}

}  // extern "C"
