// Internal to the C ABI (hooks/c_api*.cc): the structs behind the opaque handles of
// shardguard.h and the boundary helper that turns errors and exceptions into an sg_status
// plus the thread-local message. Thread-safety: as documented in shardguard.h.
#pragma once

#include <signal.h>

#include <exception>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include "checkpoint/reader.h"
#include "checkpoint/writer.h"
#include "core/result.h"
#include "hooks/client.h"
#include "hooks/gpu_snapshot.h"
#include "hooks/include/shardguard.h"

struct sg_client {
  std::unique_ptr<shardguard::hooks::Client> client;
  // The client's own handler for its checkpoint signal, captured right after it installed
  // it, so that a host that catches the signal itself can forward it (notify_signal).
  std::optional<struct sigaction> signal_action;
  // sg_client_resume_manifest's answer, computed once (outside shardguard it lists the
  // checkpoint directory) and kept so that the pointer stays valid.
  mutable std::mutex resume_mu;
  mutable std::optional<std::string> resume_manifest;
  // GPU snapshots (gpu_c_api.cc), made on first use; destroyed before the client.
  std::unique_ptr<shardguard::hooks::GpuSnapshot> gpu;
};

struct sg_reader {
  explicit sg_reader(shardguard::checkpoint::CheckpointReader r);
  shardguard::checkpoint::CheckpointReader reader;
  std::vector<std::string> names;             // sorted
  std::map<std::string, std::string> dtypes;  // name -> NUL-terminated dtype name
  // The first checksum failure's file, once asked for (sg_reader_checksum_failure): the
  // reader keeps only the first failure, so this never changes after it is set.
  mutable std::mutex failure_mu;
  mutable std::unique_ptr<std::string> failure_file;
};

// The rank and global state are kept here as well as in the ShardWriter (which only takes
// them whole), so that the calls setting their parts (sg_writer_set_rank_state,
// sg_writer_set_rank_tree, ...) compose in any order.
struct sg_writer {
  explicit sg_writer(shardguard::checkpoint::ShardWriter w) : writer(std::move(w)) {}
  shardguard::checkpoint::ShardWriter writer;
  shardguard::checkpoint::RankState rank_state{"", "null", "null"};
  std::optional<shardguard::checkpoint::GlobalState> global;
  // Device memory of the placeholders added by sg_writer_add_device_* (gpu_c_api.cc).
  std::vector<shardguard::hooks::DeviceSource> device{};
};

namespace shardguard::hooks::capi {

// Checks that `text` is one JSON value; kInvalid naming `what` otherwise.
Status check_json(const char* text, const std::string& what);

// Records `error` as this thread's last error and returns its status code.
sg_status fail(const Error& error);
sg_status fail(ErrorCode code, std::string message);
sg_status from_status(const Status& status);

// Runs `fn` (returning sg_status) and maps any escaping exception to SG_ERR_INTERNAL.
template <typename Fn>
sg_status boundary(const char* what, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (const std::bad_alloc&) {
    return fail(ErrorCode::kInternal, std::string(what) + ": out of memory");
  } catch (const std::exception& e) {
    return fail(ErrorCode::kInternal, std::string(what) + ": " + e.what());
  } catch (...) {
    return fail(ErrorCode::kInternal, std::string(what) + ": unknown exception");
  }
}

// The same for calls that return a value: `fallback` when `fn` throws.
template <typename T, typename Fn>
T boundary_value(T fallback, Fn&& fn) noexcept {
  try {
    return fn();
  } catch (...) {
    return fallback;
  }
}

}  // namespace shardguard::hooks::capi
