#include "agent/agent_channel.h"

#include <fcntl.h>
#include <spdlog/spdlog.h>
#include <sys/stat.h>
#include <unistd.h>

#include <boost/json.hpp>

#include "checkpoint/strict_json.h"
#include "core/filesystem.h"
#include "io/unix_socket_server.h"

namespace shardguard::agent {
namespace json = boost::json;
namespace {

Result<json::object> parse_object(std::string_view line) {
  if (line.size() > 64 * 1024) return Error(ErrorCode::kInvalid, "message longer than 64 KiB");
  auto v = checkpoint::parse_json_strict(line);
  if (!v.ok()) return Error(ErrorCode::kInvalid, "not JSON: " + v.error().message());
  if (!v->is_object()) return Error(ErrorCode::kInvalid, "not a JSON object");
  json::object o = std::move(v->get_object());
  const json::value* ver = o.if_contains("v");
  if (ver == nullptr || !ver->is_int64() || ver->get_int64() != kAgentChannelVersion)
    return Error(ErrorCode::kInvalid, "missing or unsupported version 'v' (this side speaks " +
                                          std::to_string(kAgentChannelVersion) + ")");
  return o;
}

Result<std::string> string_field(const json::object& o, std::string_view key) {
  const json::value* v = o.if_contains(key);
  if (v == nullptr || !v->is_string())
    return Error(ErrorCode::kInvalid, "field '" + std::string(key) + "' must be a string");
  return std::string(v->get_string());
}

std::string reply_line(std::string_view type, std::string_view key, std::string_view value) {
  json::object o{{"v", kAgentChannelVersion}, {"type", type}, {key, value}};
  return json::serialize(o);
}

}  // namespace

std::string agent_socket_path(const std::string& run_dir) { return join_path(run_dir, "agent.sock"); }

std::string encode_notice_request(const Notice& n) {
  json::object o{{"v", kAgentChannelVersion},
                 {"type", "notice"},
                 {"source", n.source},
                 {"kind", n.kind},
                 {"detail", n.detail},
                 {"deadline_unix_ms", to_unix_ms(n.deadline)},
                 {"preemption", n.is_preemption}};
  return json::serialize(o);
}

Result<Notice> decode_notice_request(std::string_view line) {
  SG_ASSIGN_OR_RETURN(json::object o, parse_object(line));
  SG_ASSIGN_OR_RETURN(std::string type, string_field(o, "type"));
  if (type != "notice") return Error(ErrorCode::kInvalid, "unknown message type '" + type + "'");
  for (const auto& kv : o) {
    const std::string_view k = kv.key();
    if (k != "v" && k != "type" && k != "source" && k != "kind" && k != "detail" &&
        k != "deadline_unix_ms" && k != "preemption")
      return Error(ErrorCode::kInvalid, "notice: unknown field '" + std::string(k) + "'");
  }
  Notice n;
  SG_ASSIGN_OR_RETURN(n.source, string_field(o, "source"));
  SG_ASSIGN_OR_RETURN(n.kind, string_field(o, "kind"));
  SG_ASSIGN_OR_RETURN(n.detail, string_field(o, "detail"));
  const json::value* d = o.if_contains("deadline_unix_ms");
  if (d == nullptr || !d->is_int64())
    return Error(ErrorCode::kInvalid, "notice: field 'deadline_unix_ms' must be an integer");
  n.deadline = from_unix_ms(d->get_int64());
  const json::value* p = o.if_contains("preemption");
  if (p == nullptr || !p->is_bool())
    return Error(ErrorCode::kInvalid, "notice: field 'preemption' must be true or false");
  n.is_preemption = p->get_bool();
  if (n.source.empty() || n.source.size() > 64 || n.kind.size() > 128 || n.detail.size() > 4096)
    return Error(ErrorCode::kInvalid, "notice: source, kind or detail empty or too long");
  return n;
}

struct AgentSocketServer::Impl {
  Handler on_notice;
  std::unique_ptr<io::UnixSocketServer> server;
};

AgentSocketServer::AgentSocketServer(io::EventLoop& loop, std::string path, uid_t job_uid,
                                     Handler on_notice)
    : impl_(std::make_unique<Impl>()) {
  impl_->on_notice = std::move(on_notice);
  io::UnixSocketServerOptions o;
  o.path = std::move(path);
  o.allowed_uid = job_uid;
  o.allow_root = true;  // the standalone agent runs as root
  o.max_line_bytes = 64 * 1024;
  Impl* p = impl_.get();
  o.on_line = [p](io::ConnectionId id, std::string line) {
    auto n = decode_notice_request(line);
    std::string reply;
    if (!n.ok()) {
      spdlog::warn("agent socket: {}", n.error().message());
      reply = reply_line("error", "message", n.error().message());
    } else {
      auto state = p->on_notice(*n);
      reply = state.ok() ? reply_line("ok", "state", *state)
                         : reply_line("error", "message", state.error().message());
    }
    (void)p->server->send(id, reply);
  };
  impl_->server = std::make_unique<io::UnixSocketServer>(loop, std::move(o));
}

AgentSocketServer::~AgentSocketServer() = default;
Status AgentSocketServer::start() { return impl_->server->start(); }
void AgentSocketServer::stop() { impl_->server->stop(); }

namespace {

// The run directory holding `socket_path`, opened without following a link there: a root
// agent must not be led by a user's symbolic link into another run's directory.
Result<int> open_run_dir(const std::string& socket_path, std::string& name) {
  const std::string dir = parent_dir(socket_path);
  name = socket_path.substr(socket_path.find_last_of('/') + 1);
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd >= 0) return fd;
  const int err = errno;
  struct stat st {};
  if ((err == ELOOP || err == ENOTDIR) && ::lstat(dir.c_str(), &st) == 0 && S_ISLNK(st.st_mode))
    return Error(ErrorCode::kInvalid,
                 "run directory '" + dir + "' is a symbolic link; not followed", ELOOP);
  return Error::from_errno("no run listens on '" + socket_path + "': open '" + dir + "'", err);
}

}  // namespace

Result<std::string> send_notice(const std::string& socket_path, const Notice& notice,
                                std::chrono::milliseconds timeout) {
  std::string name;
  SG_ASSIGN_OR_RETURN(int dir_fd, open_run_dir(socket_path, name));
  struct Closer {
    int fd;
    ~Closer() {
      if (fd >= 0) ::close(fd);
    }
  } dir{dir_fd}, sock{-1};
  // The socket itself, pinned by a descriptor (a link is opened as the link, and refused):
  // connecting through /proc/self/fd/N then reaches this very inode, so nothing can be
  // swapped in between the check and the connect.
  sock.fd = ::openat(dir_fd, name.c_str(), O_PATH | O_NOFOLLOW | O_CLOEXEC);
  if (sock.fd < 0) return Error::from_errno("no run listens on '" + socket_path + "'", errno);
  struct stat dir_st {
  }, sock_st{};
  if (::fstat(dir_fd, &dir_st) != 0 || ::fstat(sock.fd, &sock_st) != 0)
    return Error::from_errno("stat '" + socket_path + "'", errno);
  if (!S_ISSOCK(sock_st.st_mode))
    return Error(ErrorCode::kInvalid,
                 "'" + socket_path + "' is " +
                     (S_ISLNK(sock_st.st_mode) ? "a symbolic link" : "not a socket") +
                     "; not followed");
  // A run's socket belongs to the run directory's owner (a root job's socket, hard-linked
  // into a user's directory, is not that run's).
  if (sock_st.st_uid != dir_st.st_uid)
    return Error(ErrorCode::kInvalid, "'" + socket_path + "' belongs to uid " +
                                          std::to_string(sock_st.st_uid) +
                                          ", not to the run directory's owner (uid " +
                                          std::to_string(dir_st.st_uid) + "); refused");
  auto client = io::UnixSocketClient::connect("/proc/self/fd/" + std::to_string(sock.fd));
  if (!client.ok())
    return std::move(client).error().context("no run listens on '" + socket_path + "'");
  SG_RETURN_IF_ERROR(client->send_line(encode_notice_request(notice)));
  auto line = client->read_line(timeout);
  if (!line.ok()) return std::move(line).error().context("'" + socket_path + "'");
  SG_ASSIGN_OR_RETURN(json::object o, parse_object(*line));
  SG_ASSIGN_OR_RETURN(std::string type, string_field(o, "type"));
  if (type == "ok") return string_field(o, "state");
  SG_ASSIGN_OR_RETURN(std::string message, string_field(o, "message"));
  return Error(ErrorCode::kInvalid, "the run refused the notice: " + message);
}

}  // namespace shardguard::agent
