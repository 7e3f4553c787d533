// The agent socket: how notices reach a running `shardguard run` from outside its process -
// `shardguard drain` (an operator) and the standalone `shardguard agent` (root, watching the
// cloud for every run on the node). A Unix socket at <run_dir>/agent.sock, mode 0600, that
// accepts peers of the job's uid and root only. One typed message per line:
//
//   client -> run : {"v":1,"type":"notice","source":..,"kind":..,"detail":..,
//                    "deadline_unix_ms":..,"preemption":true|false}
//   run -> client : {"v":1,"type":"ok","state":"checkpointing"} | {"v":1,"type":"error",..}
//
// Strictly parsed (unknown or repeated fields are errors); nothing received is executed.
// Thread-safety: the server runs on the loop thread; send_notice() blocks its caller.
#pragma once

#include <sys/types.h>

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "agent/notice.h"
#include "core/result.h"

namespace shardguard::io {
class EventLoop;
}

namespace shardguard::agent {

inline constexpr int kAgentChannelVersion = 1;

// <run_dir>/agent.sock.
std::string agent_socket_path(const std::string& run_dir);

std::string encode_notice_request(const Notice& notice);
Result<Notice> decode_notice_request(std::string_view line);

class AgentSocketServer {
 public:
  // `on_notice` returns the run's state after taking the notice ("checkpointing", ...), or an
  // error that goes back to the sender.
  using Handler = std::function<Result<std::string>(const Notice&)>;
  AgentSocketServer(io::EventLoop& loop, std::string path, uid_t job_uid, Handler on_notice);
  ~AgentSocketServer();

  Status start();
  void stop();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

// Sends `notice` to the run listening on `socket_path` and waits for its answer: the run's
// state, or an error naming the socket (kNotFound when no run listens there). The run
// directory (socket_path's directory) is opened without following a link, the socket must
// be a socket in it, and its listener must run as the directory's owner: a root agent is
// never led by a user's link to another run.
Result<std::string> send_notice(const std::string& socket_path, const Notice& notice,
                                std::chrono::milliseconds timeout = std::chrono::seconds(5));

}  // namespace shardguard::agent
