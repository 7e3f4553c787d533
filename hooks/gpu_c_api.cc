// C ABI: GPU snapshots (shardguard.h, "GPU snapshots") over hooks/gpu_snapshot.h. The
// snapshotter is made on a client's first device call.
#include <memory>
#include <string>
#include <vector>

#include "hooks/c_api_internal.h"

using namespace shardguard;
using shardguard::checkpoint::Box;
using shardguard::hooks::capi::boundary;
using shardguard::hooks::capi::fail;
using shardguard::hooks::capi::from_status;

namespace {

std::vector<uint64_t> dims(const uint64_t* p, size_t n) {
  return p != nullptr ? std::vector<uint64_t>(p, p + n) : std::vector<uint64_t>();
}

Result<hooks::GpuSnapshot*> gpu_of(sg_client* c, const char* call) {
  if (c == nullptr || !c->client)
    return Error(ErrorCode::kInvalid, std::string(call) + ": NULL client");
  if (!c->gpu) {
    SG_ASSIGN_OR_RETURN(c->gpu, hooks::GpuSnapshot::create(*c->client));
  }
  return c->gpu.get();
}

// add_device_tensor and add_device_chunk: `box` empty for a whole tensor.
sg_status add_device(sg_writer* w, const char* name, const char* dtype, size_t ndim,
                     const uint64_t* shape, std::optional<Box> box, const void* device,
                     size_t size) {
  if (w == nullptr || name == nullptr || dtype == nullptr || (ndim > 0 && shape == nullptr))
    return fail(ErrorCode::kInvalid, "add device tensor: NULL writer, name, dtype or shape");
  auto dt = checkpoint::parse_dtype(dtype);
  if (!dt.ok()) return fail(std::move(dt).error().context(std::string("tensor '") + name + "'"));
  std::vector<uint64_t> global = dims(shape, ndim);
  Box b = box ? std::move(*box) : Box::whole(global);
  hooks::GpuSave save{std::move(w->writer), std::move(w->device)};
  Status st = save.add_device_chunk(name, *dt, std::move(global), std::move(b), device, size);
  w->writer = std::move(save.writer);
  w->device = std::move(save.sources);
  return from_status(st);
}

}  // namespace

extern "C" {

sg_status sg_client_device_prepare(sg_client* client, uint64_t bytes) {
  return boundary("sg_client_device_prepare", [&]() -> sg_status {
    auto gpu = gpu_of(client, "sg_client_device_prepare");
    if (!gpu.ok()) return fail(gpu.error());
    return from_status((*gpu)->prepare(bytes));
  });
}

sg_status sg_writer_add_device_tensor(sg_writer* w, const char* name, const char* dtype,
                                      size_t ndim, const uint64_t* shape, const void* device_ptr,
                                      size_t size) {
  return boundary("sg_writer_add_device_tensor", [&]() -> sg_status {
    return add_device(w, name, dtype, ndim, shape, std::nullopt, device_ptr, size);
  });
}

sg_status sg_writer_add_device_chunk(sg_writer* w, const char* name, const char* dtype, size_t ndim,
                                     const uint64_t* global_shape, const uint64_t* offsets,
                                     const uint64_t* sizes, const void* device_ptr, size_t size) {
  return boundary("sg_writer_add_device_chunk", [&]() -> sg_status {
    if (ndim > 0 && (offsets == nullptr || sizes == nullptr))
      return fail(ErrorCode::kInvalid, "add device chunk: offsets or sizes is NULL");
    return add_device(w, name, dtype, ndim, global_shape,
                      Box{dims(offsets, ndim), dims(sizes, ndim)}, device_ptr, size);
  });
}

sg_status sg_client_snapshot_device(sg_client* client, sg_writer* writer, const char* reason,
                                    void* cuda_stream) {
  std::unique_ptr<sg_writer> owned(writer);  // consumed whatever happens
  return boundary("sg_client_snapshot_device", [&]() -> sg_status {
    if (!owned) return fail(ErrorCode::kInvalid, "sg_client_snapshot_device: NULL writer");
    auto gpu = gpu_of(client, "sg_client_snapshot_device");
    if (!gpu.ok()) return fail(gpu.error());
    std::optional<checkpoint::SaveReason> why;
    if (reason != nullptr) {
      auto parsed = checkpoint::parse_save_reason(reason);
      if (!parsed.ok()) return fail(parsed.error());
      why = *parsed;
    }
    hooks::GpuSave save{std::move(owned->writer), std::move(owned->device)};
    return from_status((*gpu)->start(std::move(save), cuda_stream, why));
  });
}

sg_status sg_client_device_fence(sg_client* client, void* cuda_stream) {
  return boundary("sg_client_device_fence", [&]() -> sg_status {
    if (client == nullptr || !client->client)
      return fail(ErrorCode::kInvalid, "sg_client_device_fence: NULL client");
    if (!client->gpu) return SG_OK;  // nothing was ever snapshotted
    return from_status(client->gpu->fence(cuda_stream));
  });
}

sg_status sg_client_device_poll(sg_client* client, int* started) {
  return boundary("sg_client_device_poll", [&]() -> sg_status {
    if (started != nullptr) *started = 0;
    if (client == nullptr || !client->client)
      return fail(ErrorCode::kInvalid, "sg_client_device_poll: NULL client");
    if (!client->gpu) return SG_OK;
    auto done = client->gpu->poll();
    if (!done.ok()) return fail(done.error());
    if (started != nullptr) *started = *done ? 1 : 0;
    return SG_OK;
  });
}

sg_status sg_client_device_finish(sg_client* client) {
  return boundary("sg_client_device_finish", [&]() -> sg_status {
    if (client == nullptr || !client->client)
      return fail(ErrorCode::kInvalid, "sg_client_device_finish: NULL client");
    if (!client->gpu) return SG_OK;
    return from_status(client->gpu->finish());
  });
}

}  // extern "C"
