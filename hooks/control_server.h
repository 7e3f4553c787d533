// The agent side of the control protocol: accepts the local ranks on the Unix socket,
// parses their messages strictly (a bad line gets an `error` reply, the connection stays;
// an over-long line closes it), keeps each rank's last step and heartbeat time, and sends
// `schedule`, `checkpoint_now` and `stop` to every rank.
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
  std::function<void(const RankStatus&)> on_heartbeat;
  std::function<void(uint32_t rank, uint64_t step)> on_checkpoint_begin;
  std::function<void(uint32_t rank, uint64_t step, const std::string& manifest)> on_committed;
  std::function<void(uint32_t rank, uint64_t step, const std::string& error)> on_failed;
  std::function<void(uint32_t rank)> on_disconnect;  // after hello only
  std::function<void(const std::string& problem)> on_protocol_error;
};

struct ControlServerOptions {
  std::string socket_path;
  std::optional<uid_t> allowed_uid;  // nullopt: this process's uid
  ControlEvents events;
};

class ControlServer {
 public:
  ControlServer(io::EventLoop& loop, Clock& clock, ControlServerOptions options);
  ~ControlServer();

  Status start();
  void stop();
  // Sends to every rank that said hello; returns how many.
  size_t send_all(const AgentMessage& message);
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
