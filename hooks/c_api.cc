// C ABI: version, errors and the client (shardguard.h). Reader and writer calls live in
// c_api_reader.cc and c_api_writer.cc.
#include <signal.h>

#include <algorithm>
#include <chrono>
#include <cstring>
#include <string>

#include "hooks/c_api_internal.h"

using namespace shardguard;
using shardguard::hooks::capi::boundary;
using shardguard::hooks::capi::boundary_value;
using shardguard::hooks::capi::fail;

namespace shardguard::hooks::capi {
namespace {
thread_local std::string t_last_error;
}  // namespace

sg_status fail(const Error& error) {
  t_last_error = error.message();
  switch (error.code()) {
    case ErrorCode::kIo: return SG_ERR_IO;
    case ErrorCode::kNoSpace: return SG_ERR_NO_SPACE;
    case ErrorCode::kNotFound: return SG_ERR_NOT_FOUND;
    case ErrorCode::kInvalid: return SG_ERR_INVALID;
    case ErrorCode::kCorrupt: return SG_ERR_CORRUPT;
    case ErrorCode::kTimeout: return SG_ERR_TIMEOUT;
    case ErrorCode::kCancelled: return SG_ERR_CANCELLED;
    case ErrorCode::kFenced: return SG_ERR_FENCED;
    case ErrorCode::kExists: return SG_ERR_FENCED;  // another writer committed it first
    case ErrorCode::kUnsupported: return SG_ERR_UNSUPPORTED;
    case ErrorCode::kInternal: return SG_ERR_INTERNAL;
  }
  return SG_ERR_INTERNAL;
}

sg_status fail(ErrorCode code, std::string message) {
  return fail(Error(code, std::move(message)));
}

sg_status from_status(const Status& status) { return status.ok() ? SG_OK : fail(status.error()); }

const char* last_error() { return t_last_error.c_str(); }

}  // namespace shardguard::hooks::capi

// The header's exit codes are core/exit_codes.h's.
static_assert(SG_EXIT_AFTER_EMERGENCY == shardguard::kJobExitAfterEmergency);
static_assert(SG_EXIT_RESUME_FAILED == shardguard::kJobExitResumeFailed);

namespace {

const hooks::ClientOptions* options_of(const sg_client* c) {
  return (c != nullptr && c->client) ? &c->client->options() : nullptr;
}

}  // namespace

extern "C" {

int sg_api_version(void) { return SHARDGUARD_API_VERSION; }

const char* sg_last_error(void) { return hooks::capi::last_error(); }

const char* sg_status_name(sg_status status) {
  switch (status) {
    case SG_OK: return "SG_OK";
    case SG_ERR_IO: return "SG_ERR_IO";
    case SG_ERR_NO_SPACE: return "SG_ERR_NO_SPACE";
    case SG_ERR_NOT_FOUND: return "SG_ERR_NOT_FOUND";
    case SG_ERR_INVALID: return "SG_ERR_INVALID";
    case SG_ERR_CORRUPT: return "SG_ERR_CORRUPT";
    case SG_ERR_TIMEOUT: return "SG_ERR_TIMEOUT";
    case SG_ERR_CANCELLED: return "SG_ERR_CANCELLED";
    case SG_ERR_FENCED: return "SG_ERR_FENCED";
    case SG_ERR_UNSUPPORTED: return "SG_ERR_UNSUPPORTED";
    case SG_ERR_INTERNAL: return "SG_ERR_INTERNAL";
  }
  return "SG_ERR_UNKNOWN";
}

sg_status sg_client_from_env(const char* checkpoint_dir, uint64_t every_steps, int async_save,
                             sg_client** out) {
  return boundary("sg_client_from_env", [&]() -> sg_status {
    if (out == nullptr) return fail(ErrorCode::kInvalid, "sg_client_from_env: out is NULL");
    *out = nullptr;
    hooks::ClientOptions defaults;
    if (checkpoint_dir != nullptr) defaults.checkpoint_dir = checkpoint_dir;
    defaults.every_steps = every_steps;
    defaults.async = async_save != 0;
    auto client = hooks::Client::from_env(std::move(defaults));
    if (!client.ok()) return fail(client.error());
    auto handle = std::make_unique<sg_client>();
    handle->client = std::move(*client);
    if (const int sig = handle->client->options().checkpoint_signal; sig != 0) {
      struct sigaction current {};
      if (::sigaction(sig, nullptr, &current) == 0) handle->signal_action = current;
    }
    *out = handle.release();
    return SG_OK;
  });
}

void sg_client_free(sg_client* client) {
  boundary("sg_client_free", [&] {
    if (client != nullptr && client->gpu) (void)client->gpu->finish();  // a pending snapshot
    if (client != nullptr && client->client) (void)client->client->wait();
    delete client;
    return SG_OK;
  });
}

uint32_t sg_client_rank(const sg_client* c) { return options_of(c) ? options_of(c)->rank : 0; }
uint32_t sg_client_world_size(const sg_client* c) {
  return options_of(c) ? options_of(c)->world_size : 0;
}
uint32_t sg_client_local_rank(const sg_client* c) {
  return options_of(c) ? options_of(c)->local_rank : 0;
}
uint64_t sg_client_attempt(const sg_client* c) {
  return options_of(c) ? options_of(c)->attempt : 0;
}
const char* sg_client_job_id(const sg_client* c) {
  return options_of(c) ? options_of(c)->job_id.c_str() : "";
}
const char* sg_client_checkpoint_dir(const sg_client* c) {
  return options_of(c) ? options_of(c)->checkpoint_dir.c_str() : "";
}
int sg_client_under_shardguard(const sg_client* c) {
  return options_of(c) && options_of(c)->under_shardguard ? 1 : 0;
}

void sg_client_heartbeat(sg_client* c, uint64_t step) {
  boundary("sg_client_heartbeat", [&] {
    if (options_of(c)) c->client->heartbeat(step);
    return SG_OK;
  });
}

sg_status sg_client_report_scalar(sg_client* c, const char* name, uint64_t step, double value) {
  return boundary("sg_client_report_scalar", [&]() -> sg_status {
    if (!options_of(c)) return fail(ErrorCode::kInvalid, "sg_client_report_scalar: no client");
    if (name == nullptr) return fail(ErrorCode::kInvalid, "sg_client_report_scalar: no name");
    if (auto st = c->client->report_scalar(name, step, value); !st.ok()) return fail(st.error());
    return SG_OK;
  });
}

int sg_client_should_checkpoint(sg_client* c, uint64_t step) {
  return boundary_value(
      0, [&] { return options_of(c) && c->client->should_checkpoint(step) ? 1 : 0; });
}

int sg_client_should_exit(const sg_client* c) {
  return boundary_value(0, [&] { return options_of(c) && c->client->should_exit() ? 1 : 0; });
}

int sg_client_emergency(const sg_client* c, int64_t* deadline_unix_ms, uint64_t* at_step,
                        char* reason, size_t reason_size) {
  return boundary_value(0, [&] {
    if (!options_of(c)) return 0;
    auto e = c->client->emergency();
    if (!e) return 0;
    if (deadline_unix_ms != nullptr) *deadline_unix_ms = to_unix_ms(e->deadline);
    if (at_step != nullptr) *at_step = e->at_step;
    if (reason != nullptr && reason_size > 0) {
      const size_t n = std::min(reason_size - 1, e->reason.size());
      std::memcpy(reason, e->reason.data(), n);
      reason[n] = '\0';
    }
    return 1;
  });
}

uint64_t sg_client_last_committed_step(const sg_client* c) {
  return boundary_value<uint64_t>(
      0, [&] { return options_of(c) ? c->client->last_committed_step() : uint64_t{0}; });
}

// No allocation, no lock: a Python signal handler may call this from the signal's context.
sg_status sg_client_notify_signal(sg_client* c) {
  if (c == nullptr || !c->signal_action) return SG_ERR_INVALID;
  const struct sigaction& a = *c->signal_action;
  if ((a.sa_flags & SA_SIGINFO) != 0 || a.sa_handler == SIG_DFL || a.sa_handler == SIG_IGN)
    return SG_ERR_UNSUPPORTED;
  a.sa_handler(c->client->options().checkpoint_signal);
  return SG_OK;
}

const char* sg_client_resume_manifest(const sg_client* c) {
  return boundary_value<const char*>("", [&]() -> const char* {
    if (!options_of(c)) return "";
    std::lock_guard lock(c->resume_mu);
    if (!c->resume_manifest) c->resume_manifest = c->client->resume_manifest().value_or("");
    return c->resume_manifest->c_str();
  });
}

uint64_t sg_client_commit_timeout_ms(const sg_client* c) {
  if (!options_of(c)) return 0;
  return static_cast<uint64_t>(
      std::chrono::duration_cast<std::chrono::milliseconds>(options_of(c)->commit_timeout).count());
}

sg_status sg_client_report_resume_failure(sg_client* c, const sg_reader* reader,
                                          const char* message) {
  return boundary("sg_client_report_resume_failure", [&]() -> sg_status {
    if (!options_of(c)) return fail(ErrorCode::kInvalid, "sg_client_report_resume_failure: no client");
    std::optional<checkpoint::ChecksumFailure> where;
    if (reader != nullptr) where = reader->reader.checksum_failure();
    std::string text = message != nullptr ? message : "";
    if (text.empty() && where)
      text = where->offset ? checkpoint::block_failure_message(where->file, *where->offset,
                                                               where->block_bytes)
                           : where->file + ": fails its checksum";
    if (text.empty()) text = "the resume checkpoint could not be read";
    const Error error(ErrorCode::kCorrupt, text);
    if (where) {
      c->client->report_resume_failure(error, *where);
    } else {
      c->client->report_resume_failure(error);
    }
    return SG_OK;
  });
}

sg_status sg_client_restore_signal(sg_client* c) {
  return boundary("sg_client_restore_signal", [&]() -> sg_status {
    if (!options_of(c)) return fail(ErrorCode::kInvalid, "sg_client_restore_signal: no client");
    if (c->client->handles_sigterm()) {
      if (auto st = c->client->restore_signal_handlers(); !st.ok()) return fail(st.error());
    }
    if (!c->signal_action) return SG_OK;  // the client handles no checkpoint signal
    const int sig = c->client->options().checkpoint_signal;
    if (::sigaction(sig, &*c->signal_action, nullptr) != 0)
      return fail(Error::from_errno("restore handler of signal " + std::to_string(sig), errno));
    return SG_OK;
  });
}

// No allocation, no lock: a Python signal handler may call this from the signal's context.
sg_status sg_client_notify_sigterm(sg_client* c) {
  if (c == nullptr || !c->client) return SG_ERR_INVALID;
  if (!c->client->handles_sigterm()) return SG_ERR_UNSUPPORTED;
  hooks::Client::notify_sigterm();
  return SG_OK;
}

}  // extern "C"
