// What a remote node may say about the job (issue 26, N4). Every node holds the job's secret,
// so the handshake proves membership, not which node is talking: a holder of the secret had
// reported steps for other nodes' ranks (9 M steps a report passed the jump check, so the
// emergency step became unreachable) and claimed commits. The coordinator therefore takes
// from a node only what concerns that node's own ranks of the running attempt: a rank-level
// event for another node's rank is refused, a heartbeat is cut down to the node's ranks, and
// a commit counts only from the node that holds rank 0 (the coordinator then reads it back,
// supervisor.cc). Events of other attempts pass: the decision core ignores them anyway.
//
// Thread-safety: loop thread only (the read-back runs on the worker, its result comes back to
// the loop).
#pragma once

#include <deque>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>

#include "core/log_limiter.h"
#include "core/worker.h"
#include "storage/store.h"
#include "supervisor/attempt_machine.h"
#include "supervisor/event_fields.h"
#include "supervisor/machine_events.h"

namespace shardguard::supervisor {

// A claimed commit of `step` by attempt `epoch` of job `job_id`, read back from `store`: the
// Committed event (manifest and size from storage) when the checkpoint is complete and was
// written by that attempt of that job, else why not. Blocking I/O: run it on a worker. The
// node runner believes its rank 0's claim this way, the coordinator a node's.
Result<event::Committed> read_back_commit(storage::Store& store, Epoch epoch, uint64_t step,
                                          const std::string& job_id);

// nullopt: `event` (trimmed in place) may be fed to the machine; else why it is refused.
std::optional<std::string> check_node_claim(const AttemptMachine& machine, NodeId node,
                                            Event& event);

// Remote nodes' events on their way to the decision core: checked by check_node_claim, and a
// claimed commit read back from the checkpoint location (complete, of that attempt and this
// job) before it counts, as a node reads back its rank 0's claim. Events that arrive while a
// read-back runs wait behind it, in order, so that nothing a node said after its commit
// (its ranks' exits) overtakes it; notices and health findings do not wait.
class RemoteNodeEvents {
 public:
  using Feed = std::function<void(Event)>;
  using Record = std::function<void(std::string_view, const EventFields&)>;
  // `job_id` is read at each commit (the job's id is settled at start).
  RemoteNodeEvents(Worker& worker, storage::Store& store, const std::string& job_id,
                   const AttemptMachine& machine, Clock& clock, TimerFactory& timers, Feed feed,
                   Record record);
  ~RemoteNodeEvents();

  void on_event(NodeId node, Event event);

 private:
  void handle(NodeId node, Event event);
  void read_back(NodeId node, const event::Committed& claimed);
  void drain();

  Worker& worker_;
  storage::Store& store_;
  const std::string& job_id_;
  const AttemptMachine& machine_;
  Feed feed_;
  Record record_;
  LogLimiter log_;
  bool reading_back_ = false;
  std::deque<std::pair<NodeId, Event>> waiting_;
  std::shared_ptr<bool> alive_ = std::make_shared<bool>(true);
};

}  // namespace shardguard::supervisor
