// Checkpoints of GPU memory without stalling training for the write: device tensors are
// copied into the client's staging memory (page-locked with cudaHostRegister, once per
// mapping) by cudaMemcpyAsync on a dedicated copy stream, ordered after the work already
// queued on the training stream by an event, while the next steps run; once the copy is
// done the file image is handed to Client::save() and written as usual (in the background
// for an async client). The CUDA runtime is loaded at run time (hooks/gpu_runtime.h), so
// libshardguard keeps running where there is none: create() then says kUnsupported.
//
//   auto gpu = GpuSnapshot::create(*client);                 // once, on the training device
//   gpu->prepare(state_bytes);                               // optional: staging + pinning
//   ...                                                      //   ahead of the first save
//   if (client->should_checkpoint(step)) {
//     auto s = gpu->begin(step);
//     s.add_device_chunk("w", DType::kF32, shape, box, d_w, bytes);   // device pointers
//     s.writer.set_rank_state(...);                          // host tensors and states too
//     gpu->start(std::move(s), stream);                      // returns at once
//   }
//   gpu->fence(stream);   // before the next kernel that writes snapshotted memory
//   gpu->poll();          // once per step: starts the write when the copy is done
//   gpu->finish();        // emergency or last step: wait for the copy, save now
//
// fence() is what keeps the snapshot consistent: the training stream waits for the copy
// before it may change the bytes being copied. A model fences before its optimizer step, so
// forward and backward passes overlap the copy.
// Thread-safety: one GpuSnapshot per client, used from the training thread, like the client.
#pragma once

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/manifest.h"
#include "checkpoint/writer.h"
#include "core/result.h"
#include "hooks/client.h"

namespace shardguard::hooks {

// Device bytes that fill one placeholder of a ShardWriter.
struct DeviceSource {
  const void* device = nullptr;
  size_t bytes = 0;
};

// A save whose tensors live (partly) in device memory: add host tensors and the rank and
// global state to `writer` as usual, device tensors with add_device_*.
struct GpuSave {
  checkpoint::ShardWriter writer;
  std::vector<DeviceSource> sources;  // one per placeholder of `writer`, in order

  // `bytes` at `device` are the box `box` of tensor `name`; kInvalid when they are not
  // exactly the box's size.
  Status add_device_chunk(std::string name, checkpoint::DType dtype,
                          std::vector<uint64_t> global_shape, checkpoint::Box box,
                          const void* device, size_t bytes);
  Status add_device_tensor(std::string name, checkpoint::DType dtype, std::vector<uint64_t> shape,
                           const void* device, size_t bytes);
};

struct GpuSnapshotTiming {
  double start_seconds = 0;  // what start() cost the training thread
  double copy_seconds = 0;   // device -> host, measured by CUDA events on the copy stream
  uint64_t bytes = 0;        // device bytes copied
};

class GpuSnapshot {
 public:
  // Loads the CUDA runtime and makes the copy stream and events on the current device.
  // `client` must outlive the snapshotter. kUnsupported without a CUDA runtime.
  static Result<std::unique_ptr<GpuSnapshot>> create(Client& client);
  ~GpuSnapshot();  // waits for copies in flight; unpins the staging memory

  // Sizes the client's staging for `bytes` of tensors (Client::reserve) and page-locks it on
  // a background thread, so that the first start() finds it ready.
  Status prepare(uint64_t bytes);

  GpuSave begin(uint64_t step);
  // Waits for the client's previous save (staging is reused), lays the file image out in
  // the client's staging (pinning it when it is new), and queues the device-to-host copies
  // on the copy stream after the work queued so far on `stream` (a cudaStream_t; nullptr:
  // the legacy default stream). Returns at once. kInvalid while a snapshot is pending.
  Status start(GpuSave save, void* stream,
               std::optional<checkpoint::SaveReason> reason = std::nullopt);
  // Makes `stream` wait until the pending copies are done. OK with nothing pending.
  Status fence(void* stream);
  // True from start() until the snapshot is handed to the client.
  bool pending() const;
  // Hands a snapshot whose copies are done to Client::save(); true when it did this call.
  // The save's error, if any (a sync client writes here), is returned.
  Result<bool> poll();
  // Waits for the pending copies and hands the snapshot over (no-op without one).
  Status finish();
  // Figures of the last snapshot handed over.
  GpuSnapshotTiming last_timing() const;

  struct Impl;

 private:
  explicit GpuSnapshot(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::hooks
