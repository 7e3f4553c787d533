// A fake CUDA runtime (libsg_fake_cudart.so) for the GPU snapshot tests on machines without a
// GPU: "device" memory is host memory; every stream is a thread running its queue in order;
// events complete when the stream reaches them; cudaStreamWaitEvent makes a stream wait for
// an event as recorded at the time of the call; cudaMemcpyAsync sleeps
// SG_FAKE_CUDA_COPY_DELAY_MS (read at the call) before it copies, so tests can watch the
// copy run beside the caller; cudaHostRegister keeps a table that tests read through
// fake_cuda_registered_bytes(). Only what hooks/gpu_runtime.h binds, plus cudaLaunchHostFunc
// and cudaStreamSynchronize for the tests' "kernels".
#include <chrono>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <functional>
#include <map>
#include <mutex>
#include <string>
#include <thread>

namespace {

using Clock = std::chrono::steady_clock;

struct Stream {
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::function<void()>> queue;
  bool busy = false;
  bool stop = false;
  std::thread worker{[this] { run(); }};

  void run() {
    std::unique_lock lock(mu);
    for (;;) {
      cv.wait(lock, [&] { return stop || !queue.empty(); });
      if (queue.empty()) return;
      auto op = std::move(queue.front());
      queue.pop_front();
      busy = true;
      lock.unlock();
      op();
      lock.lock();
      busy = false;
      cv.notify_all();
    }
  }
  void push(std::function<void()> op) {
    std::lock_guard lock(mu);
    queue.push_back(std::move(op));
    cv.notify_all();
  }
  void drain() {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return queue.empty() && !busy; });
  }
  ~Stream() {
    {
      std::lock_guard lock(mu);
      stop = true;
      cv.notify_all();
    }
    worker.join();
  }
};

struct Event {
  std::mutex mu;
  std::condition_variable cv;
  uint64_t recorded = 0, completed = 0;
  Clock::time_point at{};

  void wait_for(uint64_t gen) {
    std::unique_lock lock(mu);
    cv.wait(lock, [&] { return completed >= gen; });
  }
};

Stream& legacy_stream() {
  static Stream s;
  return s;
}
Stream& of(void* s) { return s == nullptr ? legacy_stream() : *static_cast<Stream*>(s); }

std::mutex g_mu;
std::map<const void*, size_t> g_registered;  // by g_mu

}  // namespace

extern "C" {

int cudaStreamCreateWithFlags(void** s, unsigned) {
  *s = new Stream;
  return 0;
}
int cudaStreamDestroy(void* s) {
  delete static_cast<Stream*>(s);
  return 0;
}
int cudaStreamSynchronize(void* s) {
  of(s).drain();
  return 0;
}
int cudaEventCreateWithFlags(void** e, unsigned) {
  *e = new Event;
  return 0;
}
int cudaEventDestroy(void* e) {
  delete static_cast<Event*>(e);
  return 0;
}
int cudaEventRecord(void* ev, void* s) {
  auto* e = static_cast<Event*>(ev);
  uint64_t gen;
  {
    std::lock_guard lock(e->mu);
    gen = ++e->recorded;
  }
  of(s).push([e, gen] {
    std::lock_guard lock(e->mu);
    e->completed = gen;
    e->at = Clock::now();
    e->cv.notify_all();
  });
  return 0;
}
int cudaEventQuery(void* ev) {
  auto* e = static_cast<Event*>(ev);
  std::lock_guard lock(e->mu);
  return e->completed >= e->recorded ? 0 : 600;  // cudaErrorNotReady
}
int cudaEventSynchronize(void* ev) {
  auto* e = static_cast<Event*>(ev);
  uint64_t gen;
  {
    std::lock_guard lock(e->mu);
    gen = e->recorded;
  }
  e->wait_for(gen);
  return 0;
}
int cudaEventElapsedTime(float* ms, void* a, void* b) {
  auto* ea = static_cast<Event*>(a);
  auto* eb = static_cast<Event*>(b);
  std::scoped_lock lock(ea->mu, eb->mu);
  *ms = std::chrono::duration<float, std::milli>(eb->at - ea->at).count();
  return 0;
}
int cudaStreamWaitEvent(void* s, void* ev, unsigned) {
  auto* e = static_cast<Event*>(ev);
  uint64_t gen;
  {
    std::lock_guard lock(e->mu);
    gen = e->recorded;
  }
  of(s).push([e, gen] { e->wait_for(gen); });
  return 0;
}
int cudaMemcpyAsync(void* dst, const void* src, size_t n, int kind, void* s) {
  if (kind != 2) return 21;  // cudaErrorInvalidMemcpyDirection: only device-to-host here
  const char* d = std::getenv("SG_FAKE_CUDA_COPY_DELAY_MS");
  const int delay_ms = d != nullptr ? std::atoi(d) : 0;
  of(s).push([=] {
    std::this_thread::sleep_for(std::chrono::milliseconds(delay_ms));
    std::memcpy(dst, src, n);
  });
  return 0;
}
int cudaLaunchHostFunc(void* s, void (*fn)(void*), void* data) {
  of(s).push([fn, data] { fn(data); });
  return 0;
}
int cudaHostRegister(void* p, size_t n, unsigned) {
  std::lock_guard lock(g_mu);
  if (g_registered.count(p) != 0) return 712;  // cudaErrorHostMemoryAlreadyRegistered
  g_registered[p] = n;
  return 0;
}
int cudaHostUnregister(void* p) {
  std::lock_guard lock(g_mu);
  return g_registered.erase(p) == 1 ? 0 : 713;  // cudaErrorHostMemoryNotRegistered
}
const char* cudaGetErrorString(int e) {
  static thread_local std::string text;
  text = "fake CUDA error " + std::to_string(e);
  return text.c_str();
}

// For the tests: the size registered at `p` (0: none).
size_t fake_cuda_registered_bytes(const void* p) {
  std::lock_guard lock(g_mu);
  auto it = g_registered.find(p);
  return it == g_registered.end() ? 0 : it->second;
}

}  // extern "C"
