#include "hooks/gpu_snapshot.h"

#include <spdlog/spdlog.h>

#include <chrono>
#include <thread>

#include "hooks/gpu_runtime.h"

namespace shardguard::hooks {

Status GpuSave::add_device_chunk(std::string name, checkpoint::DType dtype,
                                 std::vector<uint64_t> global_shape, checkpoint::Box box,
                                 const void* device, size_t bytes) {
  SG_ASSIGN_OR_RETURN(uint64_t need, checkpoint::checked_byte_size(box.sizes, dtype));
  if (need != bytes)
    return Error(ErrorCode::kInvalid, "device tensor '" + name + "' box " + box.to_string() +
                                          " needs " + std::to_string(need) + " bytes, got " +
                                          std::to_string(bytes));
  if (device == nullptr && bytes != 0)
    return Error(ErrorCode::kInvalid, "device tensor '" + name + "': NULL device pointer");
  SG_RETURN_IF_ERROR(
      writer.add_placeholder(std::move(name), dtype, std::move(global_shape), std::move(box)));
  sources.push_back({device, bytes});
  return {};
}

Status GpuSave::add_device_tensor(std::string name, checkpoint::DType dtype,
                                  std::vector<uint64_t> shape, const void* device, size_t bytes) {
  checkpoint::Box box = checkpoint::Box::whole(shape);
  return add_device_chunk(std::move(name), dtype, std::move(shape), std::move(box), device, bytes);
}

struct GpuSnapshot::Impl {
  Client* client;
  std::shared_ptr<const CudaRuntime> rt;
  cuda::Stream copy_stream = nullptr;
  cuda::Event queued = nullptr;      // the training stream's work before the snapshot
  cuda::Event copy_begin = nullptr;  // timing events on the copy stream
  cuda::Event copy_done = nullptr;
  // The staging mapping that is page-locked now (by the owner thread, or the pinning thread
  // before start() joins it).
  std::byte* pinned = nullptr;
  size_t pinned_size = 0;
  std::thread pinning;
  Status pinning_result;

  std::optional<checkpoint::ShardWriter> writer;  // the pending snapshot
  std::optional<checkpoint::SaveReason> reason;
  bool copies_queued = false;  // copy_done has been recorded and fence() must honour it
  GpuSnapshotTiming timing, last;

  const CudaApi& api() const { return rt->api(); }

  // Unpins a mapping about to be unmapped (the staging's release hook).
  void on_release(std::byte* p, size_t) {
    if (p != pinned) return;
    if (auto st = rt->check(api().host_unregister(p), "cudaHostUnregister"); !st.ok())
      spdlog::warn("shardguard gpu snapshot: {}", st.error().message());
    pinned = nullptr;
    pinned_size = 0;
  }

  Status pin(std::byte* p, size_t n) {
    const cuda::Error e = api().host_register(p, n, cuda::kHostRegisterDefault);
    if (e != cuda::kSuccess && e != cuda::kErrorHostMemoryAlreadyRegistered)
      return rt->check(e, "cudaHostRegister of the staging memory");
    pinned = p;
    pinned_size = n;
    return {};
  }

  void join_pinning() {
    if (pinning.joinable()) pinning.join();
  }

  // The current staging mapping, page-locked.
  Status ensure_pinned() {
    join_pinning();
    if (!pinning_result.ok()) {
      spdlog::warn("shardguard gpu snapshot: {}", pinning_result.error().message());
      pinning_result = {};
    }
    auto& s = client->staging();
    if (s.data() == pinned && s.capacity() == pinned_size) return {};
    if (pinned != nullptr) on_release(pinned, pinned_size);
    return pin(s.data(), s.capacity());
  }

  Status hand_over() {
    timing.copy_seconds = 0;
    float ms = 0;
    if (api().event_elapsed_time(&ms, copy_begin, copy_done) == cuda::kSuccess)
      timing.copy_seconds = ms / 1e3;
    last = timing;
    copies_queued = false;
    checkpoint::ShardWriter w = std::move(*writer);
    writer.reset();
    // Placed in the client's staging already: the client's snapshot copies nothing.
    return client->save(std::move(w), reason);
  }
};

GpuSnapshot::GpuSnapshot(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

Result<std::unique_ptr<GpuSnapshot>> GpuSnapshot::create(Client& client) {
  SG_ASSIGN_OR_RETURN(auto rt, CudaRuntime::load());
  auto impl = std::make_unique<Impl>();
  impl->client = &client;
  impl->rt = rt;
  const CudaApi& a = rt->api();
  SG_RETURN_IF_ERROR(
      rt->check(a.stream_create_with_flags(&impl->copy_stream, cuda::kStreamNonBlocking),
                "cudaStreamCreateWithFlags (copy stream)"));
  std::unique_ptr<GpuSnapshot> g(new GpuSnapshot(std::move(impl)));
  Impl& m = *g->impl_;
  SG_RETURN_IF_ERROR(rt->check(a.event_create_with_flags(&m.queued, cuda::kEventDisableTiming),
                               "cudaEventCreateWithFlags"));
  SG_RETURN_IF_ERROR(rt->check(a.event_create_with_flags(&m.copy_begin, cuda::kEventDefault),
                               "cudaEventCreateWithFlags"));
  SG_RETURN_IF_ERROR(rt->check(a.event_create_with_flags(&m.copy_done, cuda::kEventDefault),
                               "cudaEventCreateWithFlags"));
  client.staging().set_release_hook([p = &m](std::byte* b, size_t n) { p->on_release(b, n); });
  return g;
}

GpuSnapshot::~GpuSnapshot() {
  Impl& m = *impl_;
  m.join_pinning();
  if (m.copies_queued) (void)m.api().event_synchronize(m.copy_done);
  if (m.writer)
    spdlog::warn("shardguard gpu snapshot: the snapshot of step {} was never handed over",
                 m.writer->options().step);
  m.client->staging().set_release_hook({});
  if (m.pinned != nullptr) m.on_release(m.pinned, m.pinned_size);
  for (cuda::Event e : {m.queued, m.copy_begin, m.copy_done})
    if (e != nullptr) (void)m.api().event_destroy(e);
  if (m.copy_stream != nullptr) (void)m.api().stream_destroy(m.copy_stream);
}

Status GpuSnapshot::prepare(uint64_t bytes) {
  Impl& m = *impl_;
  m.join_pinning();
  SG_RETURN_IF_ERROR(m.client->reserve(bytes));
  auto& s = m.client->staging();
  if (s.data() == m.pinned && s.capacity() == m.pinned_size) return {};
  if (m.pinned != nullptr) m.on_release(m.pinned, m.pinned_size);
  // Pinning faults in and locks every page; beside the staging's own population threads.
  m.pinning = std::thread([&m, p = s.data(), n = s.capacity()] { m.pinning_result = m.pin(p, n); });
  return {};
}

GpuSave GpuSnapshot::begin(uint64_t step) { return GpuSave{impl_->client->begin_save(step), {}}; }

Status GpuSnapshot::start(GpuSave save, void* stream,
                          std::optional<checkpoint::SaveReason> reason) {
  Impl& m = *impl_;
  const auto t0 = std::chrono::steady_clock::now();
  if (m.writer)
    return Error(ErrorCode::kInvalid,
                 "gpu snapshot of step " + std::to_string(save.writer.options().step) +
                     ": the snapshot of step " + std::to_string(m.writer->options().step) +
                     " is still pending (poll() or finish() first)");
  m.join_pinning();  // placing may replace the mapping the pinning thread works on
  // The staging is reused: the previous write must be done with it.
  if (auto previous = m.client->wait(); !previous.ok())
    spdlog::warn("shardguard client: previous save failed: {}", previous.error().message());
  auto slots = save.writer.place(m.client->staging());
  if (!slots.ok()) return std::move(slots).error();
  if (slots->size() != save.sources.size())
    return Error(ErrorCode::kInvalid, "gpu snapshot: " + std::to_string(save.sources.size()) +
                                          " device sources for " + std::to_string(slots->size()) +
                                          " placeholders");
  SG_RETURN_IF_ERROR(m.ensure_pinned());
  const CudaApi& a = m.api();
  SG_RETURN_IF_ERROR(m.rt->check(a.event_record(m.queued, stream), "cudaEventRecord"));
  SG_RETURN_IF_ERROR(
      m.rt->check(a.stream_wait_event(m.copy_stream, m.queued, 0), "cudaStreamWaitEvent"));
  SG_RETURN_IF_ERROR(m.rt->check(a.event_record(m.copy_begin, m.copy_stream), "cudaEventRecord"));
  uint64_t bytes = 0;
  for (size_t i = 0; i < slots->size(); ++i) {
    const auto& slot = (*slots)[i];
    if (slot.empty()) continue;
    SG_RETURN_IF_ERROR(m.rt->check(a.memcpy_async(slot.data(), save.sources[i].device, slot.size(),
                                                  cuda::kMemcpyDeviceToHost, m.copy_stream),
                                   "cudaMemcpyAsync (device to staging)"));
    bytes += slot.size();
  }
  SG_RETURN_IF_ERROR(m.rt->check(a.event_record(m.copy_done, m.copy_stream), "cudaEventRecord"));
  m.copies_queued = true;
  m.writer.emplace(std::move(save.writer));
  m.reason = reason;
  m.timing = {};
  m.timing.bytes = bytes;
  m.timing.start_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return {};
}

Status GpuSnapshot::fence(void* stream) {
  Impl& m = *impl_;
  if (!m.copies_queued) return {};
  return m.rt->check(m.api().stream_wait_event(stream, m.copy_done, 0), "cudaStreamWaitEvent");
}

bool GpuSnapshot::pending() const { return impl_->writer.has_value(); }

Result<bool> GpuSnapshot::poll() {
  Impl& m = *impl_;
  if (!m.writer) return false;
  const cuda::Error e = m.api().event_query(m.copy_done);
  if (e == cuda::kErrorNotReady) return false;
  if (e != cuda::kSuccess) {
    m.writer.reset();
    m.copies_queued = false;
    return m.rt->check(e, "cudaEventQuery (snapshot copy)");
  }
  SG_RETURN_IF_ERROR(m.hand_over());
  return true;
}

Status GpuSnapshot::finish() {
  Impl& m = *impl_;
  if (!m.writer) return {};
  const cuda::Error e = m.api().event_synchronize(m.copy_done);
  if (e != cuda::kSuccess) {
    m.writer.reset();
    m.copies_queued = false;
    return m.rt->check(e, "cudaEventSynchronize (snapshot copy)");
  }
  return m.hand_over();
}

GpuSnapshotTiming GpuSnapshot::last_timing() const { return impl_->last; }

}  // namespace shardguard::hooks
