// The agent side of the control protocol: accepts the local ranks on the Unix socket,
// parses their messages strictly (a bad line gets an `error` reply, the connection stays;
// an over-long line closes it), keeps each rank's last step and heartbeat time, and sends
// `schedule`, `checkpoint_now`, `abort_save` and `stop` to every rank or to one.
//
// Identity: one connection per rank. A hello is admitted by an injected policy (the
// supervisor binds it to a process it launched, its epoch and its job; tests whose own
// process is the client accept all); a hello for a rank that already has a live connection is
// refused (an error reply; that connection then speaks for no rank), so nobody can take over
// a rank's broadcasts.
// Thread-safety: loop thread only (callbacks run there too); post() from other threads.
#pragma once

#include <sys/types.h>

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "core/clock.h"
#include "core/result.h"
#include "hooks/protocol.h"

namespace shardguard::io {
class EventLoop;
}

namespace shardguard::hooks {

struct RankStatus {
  uint32_t rank = 0;
  int64_t pid = 0;
  uint64_t attempt = 0;
  uint64_t step = 0;               // last heartbeat's step
  SteadyTime last_heartbeat{};     // default: none yet
  bool connected = false;
  std::optional<uint64_t> saving;  // step of a checkpoint_begin not yet finished
};

struct ControlEvents {
  std::function<void(const RankStatus&)> on_hello;
  // With the loss / grad_norm windows the heartbeat carried (empty when the job reports none).
  std::function<void(const RankStatus&, const StepScalars&)> on_heartbeat;
  std::function<void(uint32_t rank, uint64_t step)> on_checkpoint_begin;
  // The rank's part of `step` is durable (shard and sidecar published).
  std::function<void(uint32_t rank, uint64_t step)> on_written;
  std::function<void(uint32_t rank, const Progress&)> on_progress;
  std::function<void(uint32_t rank, uint64_t step, const std::string& manifest)> on_committed;
  std::function<void(uint32_t rank, uint64_t step, const std::string& error)> on_failed;
  std::function<void(uint32_t rank, uint64_t step)> on_passed;
  std::function<void(uint32_t rank, const ResumeFailed&)> on_resume_failed;
  // The rank received `name` (SIGTERM) from outside and keeps training until told what to do.
  std::function<void(uint32_t rank, const std::string& name)> on_signal;
  std::function<void(uint32_t rank)> on_disconnect;  // after hello only
  std::function<void(const std::string& problem)> on_protocol_error;
};

// Decides whether `hello` may speak for its rank on a connection from `peer_pid` (the peer's
// pid from SO_PEERCRED, when the platform gives one). A refusal is answered with an error.
using AdmitPolicy = std::function<Status(const Hello& hello, std::optional<pid_t> peer_pid)>;

struct ControlServerOptions {
  std::string socket_path;
  std::optional<uid_t> allowed_uid;  // nullopt: this process's uid
  ControlEvents events;
  AdmitPolicy admit;  // empty: every hello is admitted
  // Connections open at once (the supervisor passes 2 x ranks + 8); more are refused.
  size_t max_connections = 1024;
};

class ControlServer {
 public:
  ControlServer(io::EventLoop& loop, Clock& clock, ControlServerOptions options);
  ~ControlServer();

  Status start();
  void stop();
  // Sends to every rank that said hello; returns how many.
  size_t send_all(const AgentMessage& message);
  // Sends to one rank; kNotFound when it has no connection.
  Status send_to(uint32_t rank, const AgentMessage& message);
  // Closes every rank's connection and forgets them (a new epoch begins).
  void reset_ranks();
  // Sent to each rank right after its hello, and to all now.
  void set_schedule(const Schedule& schedule);
  const std::map<uint32_t, RankStatus>& ranks() const;
  // Highest step any rank reported (0 before the first heartbeat).
  uint64_t max_step() const;
  size_t protocol_errors() const;
  const std::string& socket_path() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace shardguard::hooks
