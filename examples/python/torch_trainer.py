#!/usr/bin/env python3
"""torch_trainer.py: the example PyTorch (CPU) trainer for shardguard, N ranks over gloo.

A row-parallel linear layer (y = W x + b, the rows of W and b split across ranks by RANK /
WORLD_SIZE) trained with torch.optim.Adam and a LambdaLR schedule (linear warm-up, then
cosine decay to 10%) on a synthetic data set. The sample order is shuffled each epoch by a
torch.Generator, and every step adds input noise drawn from torch's global RNG (the same
draws on every rank). The ranks form a torch.distributed process group (gloo, from the
MASTER_ADDR / MASTER_PORT / RANK / WORLD_SIZE that `shardguard run` sets) and all_reduce
the loss each step for the log. Checkpoints go through shardguard.Checkpointer: weights and
Adam moments as chunks (row boxes) of the global tensors, Adam's step, the LR scheduler's
state, the loader's generator and position, and torch's RNG state. A resume reads this
rank's rows as boxes, so any world size resumes from any other.

    # alone (world size 1, no process group):
    /usr/bin/python3 examples/python/torch_trainer.py --steps 600
    # as 2 ranks under shardguard:
    shardguard run --config examples/jobs/python_torch.toml --nproc 2 -- \
        /usr/bin/python3 examples/python/torch_trainer.py --steps 3000 --sleep-ms 5

Bit-identity: the final weights are bit-identical to an uninterrupted run's for any world
size and any number of interruptions (checked for 1, 2, 3 and 7 ranks, uneven shards
included). This holds because (1) every op on the weight path is elementwise, or a
reduction over a fixed-length dimension of a per-row block (the forward sums over in_dim,
the backward over the batch): no matmul, whose BLAS blocking depends on the shard's shape;
(2) torch runs one intra-op thread (torch.set_num_threads(1)), so no reduction is split by
thread count; (3) every element takes the same kernel path whatever the partition: the
padding of BIAS_PAD for the bias, and an --in-dim that is a multiple of 32 (the default 64)
for the weight; (4) all ranks draw the same global-RNG noise, and the loss that crosses
ranks is only logged.

MASTER_PORT: every attempt's rank 0 listens on MASTER_PORT again. Measured with torch 1.13:
its store sets SO_REUSEADDR, so sockets of a killed attempt left in TIME_WAIT do not block
the rebind, and `shardguard run` relaunches only once the old attempt's processes are gone.
Rank 0 still retries a bind that fails with "address in use" for up to 10 s (a listener of
something else that is going away), and --port-spread N moves attempt A to MASTER_PORT +
(A mod N) where a port may stay taken across attempts.

Needs torch, numpy and the shardguard package (PYTHONPATH=hooks/python,
SHARDGUARD_LIB=path of libshardguard.so). Thread-safety: single-threaded.
"""

import argparse
import base64
import contextlib
import datetime
import math
import os
import sys
import time

import torch
import torch.distributed as dist

import shardguard
from shardguard import _rng  # restores another rank's RNG blob (see resume())

# Elementwise kernels run a vectorized body over the first multiple of 2 vectors (16 floats
# with AVX2, 32 with AVX-512) and a scalar loop over the rest, and a torch build may round
# the two differently (say, a fused multiply-add in one and not in the other).
# With torch 1.13 from Debian (AVX2) the two agree, but to stay partition-independent on any
# build, each shard's 1-D bias (and so its Adam moments) lives in a tensor padded to a
# multiple of BIAS_PAD, so every element of it takes the vector body; the weight does too
# when --in-dim is a multiple of 32.
BIAS_PAD = 64


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=600, help="training steps")
    p.add_argument("--rows", type=int, default=128, help="model outputs (rows split across ranks)")
    p.add_argument("--in-dim", type=int, default=64,
                   help="model inputs (a multiple of 32 keeps bit-identity robust: BIAS_PAD)")
    p.add_argument("--samples", type=int, default=2048, help="data set size")
    p.add_argument("--batch", type=int, default=32, help="batch size")
    p.add_argument("--seed", type=int, default=1234, help="seed of data, shuffle, noise and init")
    p.add_argument("--lr", type=float, default=0.01, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50, help="warm-up steps")
    p.add_argument("--noise", type=float, default=0.01, help="input noise (global torch RNG)")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="checkpoint every N steps when no agent sets the schedule (0: off)")
    p.add_argument("--checkpoint-dir", default="checkpoints",
                   help="where checkpoints go when SHARDGUARD_CHECKPOINT_DIR is unset")
    p.add_argument("--log-every", type=int, default=100, help="log the loss every N steps (0: off)")
    p.add_argument("--sleep-ms", type=float, default=0, help="pretend each step takes this long")
    p.add_argument("--port-spread", type=int, default=1,
                   help="rendezvous port = MASTER_PORT + (attempt mod this); 1: MASTER_PORT")
    a = p.parse_args(argv)
    if a.rows <= 0 or a.in_dim <= 0 or a.batch <= 0 or a.samples < a.batch or a.steps < 0:
        p.error("--rows, --in-dim and --batch must be positive, --samples >= --batch")
    return a


def lr_factor(a, step):
    """Multiplier of the peak LR at training step `step` (1-based): warm-up, then cosine."""
    if step <= a.warmup:
        return step / max(a.warmup, 1)
    progress = min((step - a.warmup) / max(a.steps - a.warmup, 1), 1.0)
    return 0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))


class DataSet:
    """The synthetic data set, drawn the same on every rank; the targets of the own rows
    only (computed per element in a fixed order, so they match any partition)."""

    def __init__(self, a, row0, row1):
        g = torch.Generator().manual_seed(a.seed)
        truth = torch.randn(a.rows, a.in_dim, generator=g)
        self.x = torch.randn(a.samples, a.in_dim, generator=g)
        noise = torch.randn(a.samples, a.rows, generator=g)[:, row0:row1]
        own = truth[row0:row1]
        y = torch.zeros(a.samples, row1 - row0)
        for k in range(a.in_dim):
            y += self.x[:, k:k + 1] * own[None, :, k]
        self.y = y + 0.1 * noise  # [samples, own rows]


def _generator_state(g):
    return base64.b64encode(g.get_state().numpy().tobytes()).decode()


def _set_generator_state(g, text):
    raw = bytearray(base64.b64decode(text))
    g.set_state(torch.frombuffer(raw, dtype=torch.uint8).clone())


class DataLoader:
    """Shuffles the sample order each epoch with a torch.Generator; its checkpoint state is
    the generator as it was before this epoch's shuffle plus the position in the epoch."""

    def __init__(self, a):
        self.samples, self.batch = a.samples, a.batch
        self.gen = torch.Generator().manual_seed(a.seed ^ 0x5EED)
        self.epoch, self.index = 0, 0
        self._reshuffle()

    def _reshuffle(self):
        self.epoch_start = _generator_state(self.gen)
        self.order = torch.randperm(self.samples, generator=self.gen)

    def next_batch(self):
        out, have = [], 0
        while have < self.batch:
            if self.index == self.samples:
                self.epoch += 1
                self.index = 0
                self._reshuffle()
            take = min(self.batch - have, self.samples - self.index)
            out.append(self.order[self.index:self.index + take])
            self.index += take
            have += take
        return torch.cat(out)

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index, "generator": self.epoch_start}

    def load_state_dict(self, state):
        if not 0 <= int(state["index"]) <= self.samples:
            raise ValueError("data loader position %r is outside the data set" % (state,))
        _set_generator_state(self.gen, state["generator"])
        self._reshuffle()
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


class RowParallelLinear(torch.nn.Module):
    """Rows [row0, row1) of y = W x + b. forward(x [B, in]) -> [rows, B]."""

    def __init__(self, a, row0, row1):
        super().__init__()
        self.row0, self.rows = row0, row1 - row0
        # Initialised from the global RNG as the whole layer, then sliced: the same values
        # whatever the partition.
        full = torch.randn(a.rows, a.in_dim) * 0.01
        self.weight = torch.nn.Parameter(full[row0:row1].clone())
        padded = -(-max(self.rows, 1) // BIAS_PAD) * BIAS_PAD
        self.bias_store = torch.nn.Parameter(torch.zeros(padded))

    @property
    def bias(self):
        return self.bias_store[:self.rows]

    def forward(self, x):
        # Elementwise products, then a sum over in_dim: each output's arithmetic is the same
        # for any number of rows (a matmul's blocking would not be).
        return (self.weight[:, None, :] * x[None, :, :]).sum(-1) + self.bias[:, None]


def tensors_to_save(model, opt):
    """name -> (tensor, global shape, offsets) of this rank's rows."""
    out = {}
    for name, p, view in (("weight", model.weight, lambda t: t),
                          ("bias", model.bias_store, lambda t: t[:model.rows])):
        state = opt.state.get(p, {})
        out[name] = view(p.detach())
        if state:
            out["adam.%s.exp_avg" % name] = view(state["exp_avg"])
            out["adam.%s.exp_avg_sq" % name] = view(state["exp_avg_sq"])
    return out


def save(ckpt, a, model, opt, sched, loader, step, final):
    tensors = tensors_to_save(model, opt)
    chunks = {}
    for name, t in tensors.items():
        if t.dim() == 2:
            chunks[name] = ((a.rows, a.in_dim), (model.row0, 0))
        else:
            chunks[name] = ((a.rows,), (model.row0,))
    ckpt.save(step, {n: t.contiguous() for n, t in tensors.items()}, chunks=chunks,
              data_position=loader.state_dict(),
              lr_schedule={"scheduler": sched.state_dict(),
                           "adam_step": int(opt.state[model.weight]["step"].item())
                           if opt.state.get(model.weight) else 0},
              global_state={"trainer": "torch", "rows": a.rows, "in_dim": a.in_dim,
                            "samples": a.samples, "batch": a.batch, "seed": a.seed},
              reason="final" if final else None)


def resume(ckpt, a, model, opt, sched, loader):
    """Loads this rank's rows of every tensor (from a checkpoint of any world size), the Adam
    state, the scheduler, the loader and the RNG; returns the step to continue after."""
    reader = ckpt.open_resume()
    if reader is None:
        return 0
    with reader:
        def rows_of(name):
            dtype, shape = reader.info(name)
            want = (a.rows, a.in_dim) if name.endswith("weight") or ".weight." in name \
                else (a.rows,)
            if dtype != "F32" or shape != want:
                raise SystemExit("torch_trainer: checkpoint tensor %r is %s%s, not F32 %s"
                                 % (name, dtype, list(shape), list(want)))
            if not model.rows:
                return torch.zeros((0,) + want[1:])
            return reader.read(name, (model.row0,) + (0,) * (len(want) - 1),
                               (model.rows,) + want[1:], as_torch=True)

        names = set(reader.names())
        with torch.no_grad():
            model.weight.copy_(rows_of("weight"))
            model.bias_store.zero_()
            model.bias.copy_(rows_of("bias"))
        g = reader.global_state()
        sched_state = g["lr_schedule"]["scheduler"]
        adam_step = int(g["lr_schedule"]["adam_step"])
        if adam_step:
            state = {}
            for i, (name, p) in enumerate((("weight", model.weight), ("bias", model.bias_store))):
                m, v = torch.zeros_like(p), torch.zeros_like(p)
                for t, key in ((m, "exp_avg"), (v, "exp_avg_sq")):
                    full = "adam.%s.%s" % (name, key)
                    if full not in names:
                        raise SystemExit("torch_trainer: checkpoint lacks %r" % full)
                    t[:model.rows] = rows_of(full)
                state[i] = {"step": torch.tensor(float(adam_step)), "exp_avg": m,
                            "exp_avg_sq": v}
            opt.load_state_dict({"state": state,
                                 "param_groups": opt.state_dict()["param_groups"]})
        sched.load_state_dict(sched_state)
        # The LR the next optimizer step uses, recomputed from the restored epoch (not read
        # back from JSON), exactly as LambdaLR.step() would have set it.
        for group, base_lr, factor in zip(opt.param_groups, sched.base_lrs, sched.lr_lambdas):
            group["lr"] = base_lr * factor(sched.last_epoch)
        # Every rank's loader and RNG state is the same; ours, or rank 0's when this world is
        # bigger than the one that saved.
        rank = ckpt.rank if ckpt.rank < reader.world_size else 0
        rng, position, _ = reader.rank_state(rank)
        loader.load_state_dict(position)
        if not _rng.restore(rng):
            raise SystemExit("torch_trainer: the checkpoint's RNG state is not a Python one")
        return reader.step


def init_process_group(ckpt, a):
    """A gloo process group over MASTER_ADDR:MASTER_PORT (see the module doc), or None when
    no MASTER_ADDR / WORLD_SIZE is set (one rank started by hand)."""
    if "MASTER_ADDR" not in os.environ or "WORLD_SIZE" not in os.environ:
        return None
    addr = os.environ["MASTER_ADDR"]
    port = int(os.environ.get("MASTER_PORT", "29500"))
    if a.port_spread > 1:
        port += ckpt.attempt % a.port_spread
    if addr in ("127.0.0.1", "localhost", "::1"):
        os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    for attempt in range(20):
        try:
            dist.init_process_group("gloo", init_method="tcp://%s:%d" % (addr, port),
                                    rank=ckpt.rank, world_size=ckpt.world_size,
                                    timeout=datetime.timedelta(seconds=60))
            return dist.group.WORLD
        except RuntimeError as e:  # the port is still held: wait for it
            if ckpt.rank != 0 or "in use" not in str(e).lower() or attempt == 19:
                raise
            time.sleep(0.5)
    return None


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(1)  # no reduction split by thread count (see the module doc)
    ckpt = shardguard.Checkpointer(a.checkpoint_dir, every_steps=a.checkpoint_every)
    rank, world = ckpt.rank, ckpt.world_size
    if world > a.rows:
        raise SystemExit("torch_trainer: %d ranks for %d rows" % (world, a.rows))
    group = init_process_group(ckpt, a)
    row0, row1 = rank * a.rows // world, (rank + 1) * a.rows // world

    torch.manual_seed(a.seed)
    model = RowParallelLinear(a, row0, row1)
    data = DataSet(a, row0, row1)
    loader = DataLoader(a)
    opt = torch.optim.Adam(model.parameters(), lr=a.lr, betas=(0.9, 0.999), eps=1e-8,
                           foreach=False)
    # LambdaLR's epoch e is the number of optimizer steps taken: step e+1 uses factor(e+1).
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lambda e: lr_factor(a, e + 1))
    start = resume(ckpt, a, model, opt, sched, loader)
    print("torch_trainer rank %d/%d: rows [%d, %d), %s%s" % (
        rank, world, row0, row1, "resumed at step %d" % start if start else "fresh start",
        ", gloo group of %d" % world if group is not None else ""), flush=True)

    # Outside shardguard, catch SIGTERM / SIGUSR1 ourselves (Slurm, a person): see
    # numpy_trainer.py.
    with (shardguard.PreemptionGuard() if not ckpt.under_shardguard
          else contextlib.nullcontext()):
        code = train(ckpt, a, model, data, loader, opt, sched, group, start)
    ckpt.close()
    if group is not None and code == 0:
        dist.destroy_process_group()
    return code


def train(ckpt, a, model, data, loader, opt, sched, group, start):
    """Steps start+1 .. --steps; the exit code (0, or 75 after an emergency checkpoint)."""
    rank = ckpt.rank
    for step in range(start + 1, a.steps + 1):
        batch = loader.next_batch()
        xb = data.x[batch] + a.noise * torch.randn(a.batch, a.in_dim)
        yb = data.y[batch].t()
        err = model(xb) - yb
        loss = (err * err).sum() / a.batch
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        sched.step()
        total = loss.detach().clone()
        if group is not None:
            dist.all_reduce(total)  # for the log only: it never feeds back
        # The rank's own loss feeds the divergence guard (a NaN rolls the run back).
        ckpt.heartbeat(step, loss=loss.detach())
        if a.log_every and step % a.log_every == 0 and rank == 0:
            print("torch_trainer: step %d loss %.6f lr %.6f" % (
                step, total.item() / a.rows, opt.param_groups[0]["lr"]), flush=True)
        last = step == a.steps
        if last or ckpt.should_checkpoint(step):
            save(ckpt, a, model, opt, sched, loader, step, last)
        if ckpt.should_exit():
            print("torch_trainer rank %d: stopping after the emergency checkpoint of step %d"
                  % (rank, ckpt.last_committed_step), flush=True)
            return shardguard.EXIT_AFTER_EMERGENCY
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000.0)
    print("torch_trainer rank %d: done at step %d" % (rank, a.steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
