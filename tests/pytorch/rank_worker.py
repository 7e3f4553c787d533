#!/usr/bin/env python3
"""One rank of test_ranks.py's scenarios, started by the test with SHARDGUARD_RANK /
SHARDGUARD_WORLD_SIZE / MASTER_ADDR / MASTER_PORT set (no supervisor: plain checkpoints).

usage: rank_worker.py SCENARIO CHECKPOINT_DIR [ARG]
  save-replicated     every rank saves the same state (DDP); ARG: split_bytes
  load                loads the newest checkpoint and prints a digest of each tensor (JSON)
  mismatch            rank 1 saves another shape than rank 0
  rank0-only          only rank 0 calls save(); ARG: arrival_timeout seconds
  rank0-only-loop     a training loop with `if ckpt.should_checkpoint(step) and rank == 0`
  late-rank           rank 1 calls save() 6 s after rank 0 (a legit slow rank)
  late-rank-no-dist   the same without torch.distributed (the library's wait only)
  sharded-tensor      torch.distributed._shard ShardedTensor saved by each rank's shards
  load-sharded-tensor loads it into a ShardedTensor of this world (a template) and whole
Prints one JSON line "RESULT {...}" on success; errors go to stderr.
"""

import datetime
import hashlib
import json
import os
import sys
import time

import torch
import torch.distributed as dist

import shardguard

SCENARIO, DIR = sys.argv[1], sys.argv[2]
ARG = sys.argv[3] if len(sys.argv) > 3 else None


def result(**kw):
    print("RESULT " + json.dumps(kw), flush=True)


def init():
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", timeout=datetime.timedelta(seconds=60))


def replicated_state():
    g = torch.Generator().manual_seed(4)
    return {"model": {"big.weight": torch.randn(300, 40, generator=g),  # 48000 bytes
                      "small.bias": torch.randn(7, generator=g),
                      "scalar": torch.tensor(3.5)},
            "optim": {"state": {0: {"step": torch.tensor(9.0),
                                    "exp_avg": torch.randn(300, 40, generator=g)}},
                      "param_groups": [{"lr": 0.001, "betas": (0.9, 0.999), "params": [0]}]},
            "step": 9}


def digest(t):
    return hashlib.sha256(t.contiguous().reshape(-1).view(torch.uint8).numpy().tobytes()
                          ).hexdigest()[:16]


def flat(prefix, x, out):
    if isinstance(x, torch.Tensor):
        out[prefix] = [digest(x), str(x.dtype), list(x.shape)]
    elif isinstance(x, dict):
        for k, v in x.items():
            flat("%s.%s" % (prefix, k) if prefix else str(k), v, out)
    elif isinstance(x, (list, tuple)):
        for i, v in enumerate(x):
            flat("%s.%d" % (prefix, i), v, out)
    else:
        out[prefix] = x
    return out


def sharded_spec(world):
    from torch.distributed._shard.sharding_spec import ChunkShardingSpec
    return ChunkShardingSpec(dim=0, placements=["rank:%d/cpu" % r for r in range(world)])


def full_sharded_value():
    return torch.arange(11 * 6, dtype=torch.float32).reshape(11, 6) * 0.5


def main():
    if SCENARIO == "late-rank-no-dist":
        ckpt = shardguard.Checkpointer(DIR)
        if ckpt.rank == 1:
            time.sleep(7)
        ckpt.save(1, {"w": shardguard.Chunk(torch.ones(2) * ckpt.rank, (4,), (2 * ckpt.rank,))})
        ckpt.close()
        return result(rank=ckpt.rank)
    if SCENARIO in ("sharded-tensor", "load-sharded-tensor"):
        import torch_compat
        torch_compat.install()
    init()
    rank, world = dist.get_rank(), dist.get_world_size()
    if SCENARIO == "save-replicated":
        ckpt = shardguard.Checkpointer(DIR, split_bytes=int(ARG))
        ckpt.save(9, replicated_state())
    elif SCENARIO == "load":
        ckpt = shardguard.Checkpointer(DIR)
        r = ckpt.load()
        result(rank=rank, state=flat("", r.state, {}), expected=flat("", replicated_state(), {}))
    elif SCENARIO == "mismatch":
        ckpt = shardguard.Checkpointer(DIR)
        state = replicated_state()
        if rank == 1:
            state["model"]["small.bias"] = torch.zeros(8)
        try:
            ckpt.save(9, state)
        except shardguard.SaveRefused as e:
            result(rank=rank, refused=str(e))
    elif SCENARIO == "rank0-only":
        ckpt = shardguard.Checkpointer(DIR, arrival_timeout=float(ARG))
        store = dist.distributed_c10d._get_default_store()
        if rank == 0:
            start = time.monotonic()
            try:
                ckpt.save(9, replicated_state())
            except shardguard.SaveRefused as e:
                result(rank=rank, refused=str(e), after=time.monotonic() - start)
            store.set("test/done", "1")
        else:
            store.wait(["test/done"], datetime.timedelta(seconds=60))  # "the next collective"
            result(rank=rank)
    elif SCENARIO == "rank0-only-loop":
        ckpt = shardguard.Checkpointer(DIR, every_steps=3, arrival_timeout=60)
        store = dist.distributed_c10d._get_default_store()
        start = time.monotonic()
        for step in range(1, 6):
            ckpt.heartbeat(step)
            if ckpt.should_checkpoint(step) and rank == 0:  # the mistake under test
                try:
                    ckpt.save(step, replicated_state())
                except shardguard.SaveRefused as e:
                    result(rank=rank, refused=str(e), after=time.monotonic() - start)
                    store.set("test/done", "1")
                    break
            if rank == 1 and step == 4:
                store.wait(["test/done"], datetime.timedelta(seconds=60))  # "the next collective"
                result(rank=rank)
                break
    elif SCENARIO == "late-rank":
        ckpt = shardguard.Checkpointer(DIR)
        if rank == 1:
            time.sleep(7)
        ckpt.save(9, replicated_state())
        result(rank=rank)
    elif SCENARIO == "sharded-tensor":
        from torch.distributed._shard import sharded_tensor
        st = sharded_tensor.zeros(sharded_spec(world), 11, 6)
        for shard in st.local_shards():
            r0 = shard.metadata.shard_offsets[0]
            shard.tensor.copy_(full_sharded_value()[r0:r0 + shard.tensor.shape[0]])
        ckpt = shardguard.Checkpointer(DIR)
        ckpt.save(3, {"model": {"emb.weight": st}, "step": 3})
    elif SCENARIO == "load-sharded-tensor":
        from torch.distributed._shard import sharded_tensor
        st = sharded_tensor.zeros(sharded_spec(world), 11, 6)
        ckpt = shardguard.Checkpointer(DIR)
        r = ckpt.load(template={"model": {"emb.weight": st}})
        whole = shardguard.Checkpointer(DIR).load().state["model"]["emb.weight"]
        ok = r.state["model"]["emb.weight"] is st
        for shard in st.local_shards():
            r0 = shard.metadata.shard_offsets[0]
            ok = ok and torch.equal(shard.tensor, full_sharded_value()[r0:r0 + shard.tensor.shape[0]])
        result(rank=rank, in_place=ok, whole=torch.equal(whole, full_sharded_value()),
               rows=[list(s.metadata.shard_offsets) for s in st.local_shards()])
    else:
        sys.exit("unknown scenario %s" % SCENARIO)
    ckpt.close()
    dist.destroy_process_group()
    if SCENARIO in ("save-replicated", "sharded-tensor"):
        result(rank=rank)


if __name__ == "__main__":
    main()
