// NCCL communicator set-up for sg_trainer_cuda through files in the checkpoint directory
// (shared by every rank of a job, since rank 0 commits from it).
//
// Rank 0 makes the unique id (ncclGetUniqueId); the others must get exactly that id and
// never one left behind by an earlier attempt. The attempt number in the file names is not
// enough on its own: it repeats when a job is started again with another run directory (or
// a supervisor that counts from 0 again) over the same checkpoint directory, and a
// crashed rank 0 leaves its files behind. So the hand-over is a handshake on a per-process
// nonce:
//
//   rank r > 0: writes `.nccl-req-<attempt>-<r>` = a fresh random nonce (temp + rename),
//               then polls `.nccl-id-<attempt>-<r>` until it holds that nonce + the id.
//   rank 0:     answers every request it sees (a new nonce) with `.nccl-id-<attempt>-<r>`
//               = nonce + id (temp + rename) while it waits in ncclCommInitRank, which
//               returns once every rank has joined; then it removes this attempt's files.
//
// A stale answer carries another process's nonce and is ignored; a stale request is
// answered with a nonce nobody waits for, then superseded by the live rank's own request.
// With one rank there is no file at all.
// Thread-safety: call once per process, from the training thread.
#pragma once

#include <nccl.h>

#include <chrono>
#include <cstdint>
#include <string>

namespace shardguard::example {

struct RendezvousOptions {
  std::string dir;  // the checkpoint directory
  uint64_t attempt = 0;
  uint32_t rank = 0, world_size = 1;
  // How long a rank > 0 waits for rank 0's answer before giving up (exit non-zero).
  std::chrono::seconds timeout{300};
};

// The communicator of all ranks on the current CUDA device. Exits non-zero on failure.
ncclComm_t nccl_connect(const RendezvousOptions& o);

}  // namespace shardguard::example
