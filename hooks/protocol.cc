#include "hooks/protocol.h"

#include <boost/json.hpp>

#include "checkpoint/strict_json.h"
#include "core/overload.h"
#include "hooks/scalars_json.h"

#include <set>

namespace shardguard::hooks {
namespace json = boost::json;
namespace {

std::string line(json::object o) { return json::serialize(o) + "\n"; }

json::object base(std::string_view type) {
  return json::object{{"v", kProtocolVersion}, {"type", type}};
}

// Reads the fields of one message strictly: each must be there with its type, and no other
// field may be present.
class Reader {
 public:
  Reader(const json::object& o, std::string_view type) : o_(o), type_(type) {}

  Result<uint64_t> u64(std::string_view key) {
    SG_ASSIGN_OR_RETURN(auto v, get(key));
    if (v->is_uint64()) return v->get_uint64();
    if (v->is_int64() && v->get_int64() >= 0) return static_cast<uint64_t>(v->get_int64());
    return wrong(key, "a non-negative integer");
  }
  Result<int64_t> i64(std::string_view key) {
    SG_ASSIGN_OR_RETURN(auto v, get(key));
    if (v->is_int64()) return v->get_int64();
    if (v->is_uint64() && v->get_uint64() <= INT64_MAX) return static_cast<int64_t>(v->get_uint64());
    return wrong(key, "an integer");
  }
  Result<std::string> str(std::string_view key) {
    SG_ASSIGN_OR_RETURN(auto v, get(key));
    if (!v->is_string()) return wrong(key, "a string");
    return std::string(v->get_string());
  }
  Result<bool> boolean(std::string_view key) {
    SG_ASSIGN_OR_RETURN(auto v, get(key));
    if (!v->is_bool()) return wrong(key, "true or false");
    return v->get_bool();
  }
  Result<uint32_t> u32(std::string_view key) {
    SG_ASSIGN_OR_RETURN(uint64_t v, u64(key));
    if (v > UINT32_MAX) return wrong(key, "a 32-bit integer");
    return static_cast<uint32_t>(v);
  }
  // nullptr when the field is absent.
  const json::value* optional(std::string_view key) {
    auto it = o_.find(key);
    if (it == o_.end()) return nullptr;
    seen_.emplace(key);
    return &it->value();
  }
  Status finish() const {
    for (const auto& kv : o_) {
      std::string_view k = kv.key();
      if (k != "v" && k != "type" && !seen_.contains(std::string(k)))
        return Error(ErrorCode::kInvalid,
                     std::string(type_) + ": unknown field '" + std::string(k) + "'");
    }
    return {};
  }

 private:
  Result<const json::value*> get(std::string_view key) {
    auto it = o_.find(key);
    if (it == o_.end())
      return Error(ErrorCode::kInvalid,
                   std::string(type_) + ": missing field '" + std::string(key) + "'");
    seen_.emplace(key);
    return &it->value();
  }
  Error wrong(std::string_view key, std::string_view what) const {
    return Error(ErrorCode::kInvalid, std::string(type_) + ": field '" + std::string(key) +
                                          "' must be " + std::string(what));
  }

  const json::object& o_;
  std::string_view type_;
  std::set<std::string> seen_;
};

// Parses the envelope: a JSON object with "v" == 1 and a string "type".
Result<std::pair<json::object, std::string>> envelope(std::string_view text) {
  if (!text.empty() && text.back() == '\n') text.remove_suffix(1);
  if (text.size() > kMaxLineBytes)
    return Error(ErrorCode::kInvalid, "line of " + std::to_string(text.size()) +
                                          " bytes exceeds the limit of " +
                                          std::to_string(kMaxLineBytes));
  // Strict: a repeated key must not let two readers see two different messages.
  auto parsed = checkpoint::parse_json_strict(text);
  if (!parsed.ok()) return Error(ErrorCode::kInvalid, "not JSON: " + parsed.error().message());
  json::value v = std::move(*parsed);
  if (!v.is_object()) return Error(ErrorCode::kInvalid, "not a JSON object");
  auto& o = v.get_object();
  auto ver = o.find("v");
  if (ver == o.end() || !ver->value().is_int64())
    return Error(ErrorCode::kInvalid, "missing protocol version 'v'");
  if (ver->value().get_int64() != kProtocolVersion)
    return Error(ErrorCode::kInvalid, "protocol version " +
                                          std::to_string(ver->value().get_int64()) +
                                          " not supported (this side speaks " +
                                          std::to_string(kProtocolVersion) + ")");
  auto type = o.find("type");
  if (type == o.end() || !type->value().is_string())
    return Error(ErrorCode::kInvalid, "missing message 'type'");
  std::string t(type->value().get_string());
  return std::pair{std::move(o), std::move(t)};
}

template <typename T, typename F>
Result<T> finish(Reader& r, F&& build) {
  auto value = build();
  if (!value.ok()) return value;
  SG_RETURN_IF_ERROR(r.finish());
  return value;
}

Result<RequestKind> parse_kind(std::string_view s) {
  if (s == "emergency") return RequestKind::kEmergency;
  if (s == "periodic") return RequestKind::kPeriodic;
  if (s == "advisory") return RequestKind::kAdvisory;
  return Error(ErrorCode::kInvalid,
               "checkpoint_now: field 'kind' must be emergency, periodic or advisory");
}

}  // namespace

std::string_view request_kind_name(RequestKind kind) {
  switch (kind) {
    case RequestKind::kEmergency: return "emergency";
    case RequestKind::kPeriodic: return "periodic";
    case RequestKind::kAdvisory: return "advisory";
  }
  return "unknown";
}

std::string_view transfer_phase_name(TransferPhase phase) {
  return phase == TransferPhase::kSave ? "save" : "resume";
}

std::string_view message_type(const JobMessage& m) {
  return std::visit(Overload{[](const Hello&) { return "hello"; },
                             [](const Heartbeat&) { return "heartbeat"; },
                             [](const CheckpointBegin&) { return "checkpoint_begin"; },
                             [](const CheckpointWritten&) { return "checkpoint_written"; },
                             [](const CheckpointCommitted&) { return "checkpoint_committed"; },
                             [](const CheckpointFailed&) { return "checkpoint_failed"; },
                             [](const Passed&) { return "passed"; },
                             [](const ResumeFailed&) { return "resume_failed"; },
                             [](const SignalReceived&) { return "signal"; },
                             [](const Progress&) { return "progress"; }},
                    m);
}

std::string_view message_type(const AgentMessage& m) {
  return std::visit(Overload{[](const Schedule&) { return "schedule"; },
                             [](const CheckpointNow&) { return "checkpoint_now"; },
                             [](const AbortSave&) { return "abort_save"; },
                             [](const AllWritten&) { return "all_written"; },
                             [](const Committed&) { return "committed"; },
                             [](const Stop&) { return "stop"; },
                             [](const ErrorReply&) { return "error"; }},
                    m);
}

std::string encode(const JobMessage& m) {
  json::object o = base(message_type(m));
  std::visit(Overload{[&](const Hello& h) {
                        o["rank"] = h.rank;
                        o["world_size"] = h.world_size;
                        o["pid"] = h.pid;
                        o["job_id"] = h.job_id;
                        o["attempt"] = h.attempt;
                      },
                      [&](const Heartbeat& h) {
                        o["step"] = h.step;
                        if (!h.scalars.empty()) o["scalars"] = encode_scalars(h.scalars);
                      },
                      [&](const CheckpointBegin& c) { o["step"] = c.step; },
                      [&](const CheckpointWritten& c) { o["step"] = c.step; },
                      [&](const CheckpointCommitted& c) {
                        o["step"] = c.step;
                        o["manifest"] = c.manifest;
                      },
                      [&](const CheckpointFailed& c) {
                        o["step"] = c.step;
                        o["error"] = c.error;
                        o["no_space"] = c.no_space;
                      },
                      [&](const Passed& p) { o["step"] = p.step; },
                      [&](const ResumeFailed& r) {
                        o["manifest"] = r.manifest;
                        o["file"] = r.file;
                        o["offset"] = r.offset;
                        o["error"] = r.error;
                      },
                      [&](const SignalReceived& s) { o["name"] = s.name; },
                      [&](const Progress& p) {
                        o["phase"] = transfer_phase_name(p.phase);
                        o["step"] = p.step;
                        o["done"] = p.done;
                        o["total"] = p.total;
                      }},
             m);
  return line(std::move(o));
}

std::string encode(const AgentMessage& m) {
  json::object o = base(message_type(m));
  std::visit(Overload{[&](const Schedule& s) {
                        o["every_steps"] = s.every_steps;
                        o["every_ms"] = s.every_ms;
                      },
                      [&](const CheckpointNow& c) {
                        o["deadline_unix_ms"] = c.deadline_unix_ms;
                        o["kind"] = request_kind_name(c.kind);
                        o["reason"] = c.reason;
                        o["at_step"] = c.at_step;
                      },
                      [&](const AbortSave& a) {
                        o["step"] = a.step;
                        o["reason"] = a.reason;
                      },
                      [&](const AllWritten& a) { o["step"] = a.step; },
                      [&](const Committed& c) {
                        o["step"] = c.step;
                        o["manifest"] = c.manifest;
                      },
                      [&](const Stop& s) { o["deadline_unix_ms"] = s.deadline_unix_ms; },
                      [&](const ErrorReply& e) { o["message"] = e.message; }},
             m);
  return line(std::move(o));
}

Result<JobMessage> decode_job_message(std::string_view text) {
  SG_ASSIGN_OR_RETURN(auto env, envelope(text));
  auto& [o, type] = env;
  Reader r(o, type);
  auto wrap = [](auto result) -> Result<JobMessage> {
    if (!result.ok()) return std::move(result).error();
    return JobMessage(std::move(result).value());
  };
  if (type == "hello")
    return wrap(finish<Hello>(r, [&]() -> Result<Hello> {
      Hello h;
      SG_ASSIGN_OR_RETURN(h.rank, r.u32("rank"));
      SG_ASSIGN_OR_RETURN(h.world_size, r.u32("world_size"));
      SG_ASSIGN_OR_RETURN(h.pid, r.i64("pid"));
      SG_ASSIGN_OR_RETURN(h.job_id, r.str("job_id"));
      SG_ASSIGN_OR_RETURN(h.attempt, r.u64("attempt"));
      if (h.world_size == 0 || h.rank >= h.world_size)
        return Error(ErrorCode::kInvalid, "hello: rank outside the world size");
      return h;
    }));
  if (type == "heartbeat")
    return wrap(finish<Heartbeat>(r, [&]() -> Result<Heartbeat> {
      Heartbeat h;
      SG_ASSIGN_OR_RETURN(h.step, r.u64("step"));
      if (const json::value* s = r.optional("scalars")) {
        SG_ASSIGN_OR_RETURN(h.scalars, decode_scalars(*s, "heartbeat"));
      }
      return h;
    }));
  if (type == "checkpoint_begin")
    return wrap(finish<CheckpointBegin>(r, [&]() -> Result<CheckpointBegin> {
      SG_ASSIGN_OR_RETURN(uint64_t step, r.u64("step"));
      return CheckpointBegin{step};
    }));
  if (type == "checkpoint_written")
    return wrap(finish<CheckpointWritten>(r, [&]() -> Result<CheckpointWritten> {
      SG_ASSIGN_OR_RETURN(uint64_t step, r.u64("step"));
      return CheckpointWritten{step};
    }));
  if (type == "checkpoint_committed")
    return wrap(finish<CheckpointCommitted>(r, [&]() -> Result<CheckpointCommitted> {
      CheckpointCommitted c;
      SG_ASSIGN_OR_RETURN(c.step, r.u64("step"));
      SG_ASSIGN_OR_RETURN(c.manifest, r.str("manifest"));
      return c;
    }));
  if (type == "checkpoint_failed")
    return wrap(finish<CheckpointFailed>(r, [&]() -> Result<CheckpointFailed> {
      CheckpointFailed c;
      SG_ASSIGN_OR_RETURN(c.step, r.u64("step"));
      SG_ASSIGN_OR_RETURN(c.error, r.str("error"));
      SG_ASSIGN_OR_RETURN(c.no_space, r.boolean("no_space"));
      return c;
    }));
  if (type == "passed")
    return wrap(finish<Passed>(r, [&]() -> Result<Passed> {
      SG_ASSIGN_OR_RETURN(uint64_t step, r.u64("step"));
      return Passed{step};
    }));
  if (type == "resume_failed")
    return wrap(finish<ResumeFailed>(r, [&]() -> Result<ResumeFailed> {
      ResumeFailed f;
      SG_ASSIGN_OR_RETURN(f.manifest, r.str("manifest"));
      SG_ASSIGN_OR_RETURN(f.file, r.str("file"));
      SG_ASSIGN_OR_RETURN(f.offset, r.u64("offset"));
      SG_ASSIGN_OR_RETURN(f.error, r.str("error"));
      return f;
    }));
  if (type == "signal")
    return wrap(finish<SignalReceived>(r, [&]() -> Result<SignalReceived> {
      SignalReceived s;
      SG_ASSIGN_OR_RETURN(s.name, r.str("name"));
      if (s.name != "SIGTERM" && s.name != "SIGINT")
        return Error(ErrorCode::kInvalid, "signal: field 'name' must be SIGTERM or SIGINT");
      return s;
    }));
  if (type == "progress")
    return wrap(finish<Progress>(r, [&]() -> Result<Progress> {
      Progress p;
      SG_ASSIGN_OR_RETURN(std::string phase, r.str("phase"));
      if (phase == "save") p.phase = TransferPhase::kSave;
      else if (phase == "resume") p.phase = TransferPhase::kResume;
      else return Error(ErrorCode::kInvalid, "progress: field 'phase' must be save or resume");
      SG_ASSIGN_OR_RETURN(p.step, r.u64("step"));
      SG_ASSIGN_OR_RETURN(p.done, r.u64("done"));
      SG_ASSIGN_OR_RETURN(p.total, r.u64("total"));
      return p;
    }));
  return Error(ErrorCode::kInvalid, "unknown message type '" + type + "'");
}

Result<AgentMessage> decode_agent_message(std::string_view text) {
  SG_ASSIGN_OR_RETURN(auto env, envelope(text));
  auto& [o, type] = env;
  Reader r(o, type);
  auto wrap = [](auto result) -> Result<AgentMessage> {
    if (!result.ok()) return std::move(result).error();
    return AgentMessage(std::move(result).value());
  };
  if (type == "schedule")
    return wrap(finish<Schedule>(r, [&]() -> Result<Schedule> {
      Schedule s;
      SG_ASSIGN_OR_RETURN(s.every_steps, r.u64("every_steps"));
      SG_ASSIGN_OR_RETURN(s.every_ms, r.i64("every_ms"));
      return s;
    }));
  if (type == "checkpoint_now")
    return wrap(finish<CheckpointNow>(r, [&]() -> Result<CheckpointNow> {
      CheckpointNow c;
      SG_ASSIGN_OR_RETURN(c.deadline_unix_ms, r.i64("deadline_unix_ms"));
      SG_ASSIGN_OR_RETURN(std::string kind, r.str("kind"));
      SG_ASSIGN_OR_RETURN(c.kind, parse_kind(kind));
      SG_ASSIGN_OR_RETURN(c.reason, r.str("reason"));
      SG_ASSIGN_OR_RETURN(c.at_step, r.u64("at_step"));
      return c;
    }));
  if (type == "abort_save")
    return wrap(finish<AbortSave>(r, [&]() -> Result<AbortSave> {
      AbortSave a;
      SG_ASSIGN_OR_RETURN(a.step, r.u64("step"));
      SG_ASSIGN_OR_RETURN(a.reason, r.str("reason"));
      return a;
    }));
  if (type == "all_written")
    return wrap(finish<AllWritten>(r, [&]() -> Result<AllWritten> {
      SG_ASSIGN_OR_RETURN(uint64_t step, r.u64("step"));
      return AllWritten{step};
    }));
  if (type == "committed")
    return wrap(finish<Committed>(r, [&]() -> Result<Committed> {
      Committed c;
      SG_ASSIGN_OR_RETURN(c.step, r.u64("step"));
      SG_ASSIGN_OR_RETURN(c.manifest, r.str("manifest"));
      return c;
    }));
  if (type == "stop")
    return wrap(finish<Stop>(r, [&]() -> Result<Stop> {
      SG_ASSIGN_OR_RETURN(int64_t d, r.i64("deadline_unix_ms"));
      return Stop{d};
    }));
  if (type == "error")
    return wrap(finish<ErrorReply>(r, [&]() -> Result<ErrorReply> {
      SG_ASSIGN_OR_RETURN(auto m, r.str("message"));
      return ErrorReply{m};
    }));
  return Error(ErrorCode::kInvalid, "unknown message type '" + type + "'");
}

}  // namespace shardguard::hooks
