#!/usr/bin/python3
"""The PyTorch peers of bench/ckpt_bench.py, each run in its own process(es) so that their
memory is given back between measurements. Prints one JSON line.

  torch_peers.py torch-save DIR BYTES        torch.save + fsync of the whole state by one
                                             process, then torch.load after the file was
                                             evicted from the page cache
  torch_peers.py dcp DIR BYTES WORLD         PyTorch distributed checkpoint (DCP) over gloo
                                             with WORLD processes: each saves its rows of
                                             every tensor (FileSystemWriter, one file per rank,
                                             files fsynced), then loads them back cold

The state is the bench's: 16 float32 tensors of [rows, 4096] (BYTES in all), split by rows
across ranks; under DCP each tensor is a ShardedTensor whose local shard is this rank's rows
(as FSDP / ZeRO state is), so every rank writes and reads its own bytes (a plain tensor
would be treated as replicated and written by rank 0 alone). Times are CLOCK_MONOTONIC from just before the first rank starts to
just after the last one ends, past a barrier on either side. Debian's torch 1.13 needs
tests/support/torch_compat.py (the shared import fix) to import DCP on Python 3.11.
"""
import json
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
# The one copy of torch 1.13's import fix, shared with the tests.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "tests", "support"))

TENSORS = 16
COLS = 4096


def rows_for(nbytes):
    return max(1, nbytes // TENSORS // COLS // 4)


def make_state(torch, rows, rank, world):
    """Random bits, as fio and sg_bench_ckpt write (this VM's disk writes compressible data
    faster, so a regular state would flatter whoever writes it)."""
    r0, r1 = rank * rows // world, (rank + 1) * rows // world
    state = {}
    for t in range(TENSORS):
        g = torch.Generator().manual_seed(t * 1000003 + rank)
        bits = torch.randint(-2**31, 2**31 - 1, ((r1 - r0) * COLS,), dtype=torch.int32, generator=g)
        state[f"layer{t}"] = bits.view(torch.float32).reshape(r1 - r0, COLS)
    return state


def same_bits(torch, a, b):
    """Bit-for-bit (random bits hold NaNs, which compare unequal as floats)."""
    return torch.equal(a.view(torch.int32), b.view(torch.int32))


def sharded(local, rows, rank, world):
    """`local` (this rank's rows) as a ShardedTensor of [rows, COLS] split by rows."""
    from torch.distributed._shard.sharded_tensor import Shard, init_from_local_shards
    from torch.distributed._shard.metadata import ShardMetadata
    r0 = rank * rows // world
    md = ShardMetadata(shard_offsets=[r0, 0], shard_sizes=list(local.shape),
                       placement=f"rank:{rank}/cpu")
    return init_from_local_shards([Shard(local, md)], [rows, COLS])


def evict(directory):
    for root, _, files in os.walk(directory):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def torch_save(directory, nbytes):
    import torch
    state = make_state(torch, rows_for(nbytes), 0, 1)
    total = sum(v.numel() * 4 for v in state.values())
    path = os.path.join(directory, "torch.pt")
    t0 = time.monotonic_ns()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    save_s = (time.monotonic_ns() - t0) / 1e9
    evict(directory)
    t0 = time.monotonic_ns()
    loaded = torch.load(path)
    load_s = (time.monotonic_ns() - t0) / 1e9
    ok = all(same_bits(torch, loaded[k], v) for k, v in state.items())
    os.remove(path)
    return {"cmd": "torch-save", "bytes": total, "save_seconds": save_s, "load_cold_seconds": load_s,
            "verified": ok}


def _dcp_rank(rank, world, directory, nbytes, out_path):
    import torch
    import torch.distributed as dist
    import torch_compat
    dcp = torch_compat.import_dcp()
    dist.init_process_group("gloo", init_method="file://" + os.path.join(directory, "rdzv"),
                            rank=rank, world_size=world)
    rows = rows_for(nbytes)
    local = make_state(torch, rows, rank, world)
    state = {k: sharded(v, rows, rank, world) for k, v in local.items()}
    ckpt = os.path.join(directory, "dcp")
    dist.barrier()
    t0 = time.monotonic_ns()
    dcp.save_state_dict(state, dcp.FileSystemWriter(ckpt, single_file_per_rank=True,
                                                    sync_files=True))
    dist.barrier()
    t1 = time.monotonic_ns()
    if rank == 0:
        evict(ckpt)
    back = {k: torch.empty_like(v) for k, v in local.items()}
    target = {k: sharded(v, rows, rank, world) for k, v in back.items()}
    dist.barrier()
    t2 = time.monotonic_ns()
    dcp.load_state_dict(target, dcp.FileSystemReader(ckpt))
    dist.barrier()
    t3 = time.monotonic_ns()
    ok = all(same_bits(torch, back[k], v) for k, v in local.items())
    with open(out_path, "w") as f:
        json.dump({"rank": rank, "bytes": sum(v.numel() * 4 for v in local.values()),
                   "save": [t0, t1], "load": [t2, t3], "verified": ok}, f)
    dist.destroy_process_group()


def dcp_bench(directory, nbytes, world):
    import multiprocessing as mp
    ctx = mp.get_context("spawn")
    outs = [os.path.join(directory, f"rank{r}.json") for r in range(world)]
    procs = [ctx.Process(target=_dcp_rank, args=(r, world, directory, nbytes, outs[r]))
             for r in range(world)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(600)
        if p.exitcode != 0:
            raise SystemExit(f"dcp rank exited {p.exitcode}")
    res = [json.load(open(o)) for o in outs]
    total = sum(r["bytes"] for r in res)
    save_s = (max(r["save"][1] for r in res) - min(r["save"][0] for r in res)) / 1e9
    load_s = (max(r["load"][1] for r in res) - min(r["load"][0] for r in res)) / 1e9
    return {"cmd": "dcp", "world": world, "bytes": total, "save_seconds": save_s,
            "load_cold_seconds": load_s, "verified": all(r["verified"] for r in res)}


def main():
    a = sys.argv[1:]
    if len(a) == 3 and a[0] == "torch-save":
        print(json.dumps(torch_save(a[1], int(a[2]))))
    elif len(a) == 4 and a[0] == "dcp":
        print(json.dumps(dcp_bench(a[1], int(a[2]), int(a[3]))))
    else:
        sys.exit(__doc__)


if __name__ == "__main__":
    main()
