#!/usr/bin/env python3
"""numpy_trainer.py: the example numpy trainer for shardguard (the Python twin of sg_trainer).

A multi-output linear regression y = W x whose rows are split across ranks by RANK /
WORLD_SIZE, trained with Adam (linear warm-up, then cosine decay to 10%) on a synthetic data
set that a loader shuffles each epoch with a numpy Generator (PCG64). Checkpoints go through
shardguard.Checkpointer: periodic (the schedule shardguard sets, else --checkpoint-every),
emergency (a notice: save, then exit 75), and final (the last step). A resume reads this
rank's rows of every tensor as a box, so it works from a checkpoint of any world size.

    # alone (world size 1; checkpoints in --checkpoint-dir, resumes from the newest):
    /usr/bin/python3 examples/python/numpy_trainer.py --steps 600
    # as 3 ranks under shardguard:
    shardguard run --config examples/jobs/python_numpy.toml --nproc 3 -- \
        /usr/bin/python3 examples/python/numpy_trainer.py --steps 3000 --sleep-ms 5

Bit-identity: every weight element is updated by a fixed sequence of float32 IEEE operations
(elementwise numpy ufuncs, accumulations in a fixed order written out as Python loops; no
BLAS matmul and no numpy reduction on the weight path, because those may block or vectorize
differently for a different shard shape). So a row's arithmetic does not depend on which
rank owns it or how many rows sit beside it, and the final weights are bit-identical for any
world size and any number of interruptions. The loss printed is for reading only.

Needs numpy and the shardguard package (PYTHONPATH=hooks/python, SHARDGUARD_LIB=path of
libshardguard.so). Thread-safety: single-threaded.
"""

import argparse
import contextlib
import math
import sys
import time

import numpy as np

import shardguard

F32 = np.float32
BETA1, BETA2, EPS = F32(0.9), F32(0.999), F32(1e-8)
ONE = F32(1.0)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                formatter_class=argparse.ArgumentDefaultsHelpFormatter)
    p.add_argument("--steps", type=int, default=600, help="training steps")
    p.add_argument("--rows", type=int, default=256, help="model outputs (rows split across ranks)")
    p.add_argument("--in-dim", type=int, default=64, help="model inputs")
    p.add_argument("--samples", type=int, default=4096, help="data set size")
    p.add_argument("--batch", type=int, default=32, help="batch size")
    p.add_argument("--seed", type=int, default=1234, help="seed of data, shuffle and init")
    p.add_argument("--lr", type=float, default=0.01, help="peak learning rate")
    p.add_argument("--warmup", type=int, default=50, help="warm-up steps")
    p.add_argument("--checkpoint-every", type=int, default=100,
                   help="checkpoint every N steps when no agent sets the schedule (0: off)")
    p.add_argument("--checkpoint-dir", default="checkpoints",
                   help="where checkpoints go when SHARDGUARD_CHECKPOINT_DIR is unset")
    p.add_argument("--log-every", type=int, default=100, help="log the loss every N steps (0: off)")
    p.add_argument("--sleep-ms", type=float, default=0, help="pretend each step takes this long")
    a = p.parse_args(argv)
    if a.rows <= 0 or a.in_dim <= 0 or a.batch <= 0 or a.samples < a.batch or a.steps < 0:
        p.error("--rows, --in-dim and --batch must be positive, --samples >= --batch")
    return a


def learning_rate(a, step):
    """Warm-up then cosine to 10% at --steps (1-based step), as a float32."""
    if step <= a.warmup:
        return F32(a.lr * step / max(a.warmup, 1))
    progress = min((step - a.warmup) / max(a.steps - a.warmup, 1), 1.0)
    return F32(a.lr * (0.1 + 0.9 * 0.5 * (1.0 + math.cos(math.pi * progress))))


class DataSet:
    """The synthetic data set: every rank draws the same stream; it keeps the targets of its
    own rows only (computed per element in a fixed order, so they match any partition)."""

    def __init__(self, a, row0, row1):
        gen = np.random.Generator(np.random.PCG64(a.seed))
        truth = gen.standard_normal((a.rows, a.in_dim), dtype=F32)
        self.x = gen.standard_normal((a.samples, a.in_dim), dtype=F32)
        noise = gen.standard_normal((a.samples, a.rows), dtype=F32)[:, row0:row1]
        y = np.zeros((a.samples, row1 - row0), dtype=F32)
        own = truth[row0:row1]
        for k in range(a.in_dim):
            y += self.x[:, k:k + 1] * own[None, :, k]
        self.y = y + F32(0.1) * noise  # [samples, own rows]


def _ints_to_text(value):
    """PCG64 states hold 128-bit integers: JSON numbers that big do not survive every
    parser, so they travel as decimal strings."""
    if isinstance(value, dict):
        return {k: _ints_to_text(v) for k, v in value.items()}
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return value


def _text_to_ints(value):
    if isinstance(value, dict):
        return {k: _text_to_ints(v) for k, v in value.items()}
    if isinstance(value, str) and value.lstrip("-").isdigit():
        return int(value)
    return value


class DataLoader:
    """Shuffles the sample order each epoch with a numpy Generator. Its state for a
    checkpoint is the Generator as it was before this epoch's shuffle plus the position in
    the epoch, so a resume rebuilds the same order and continues mid-epoch."""

    def __init__(self, a):
        self.samples, self.batch = a.samples, a.batch
        self.gen = np.random.Generator(np.random.PCG64(a.seed ^ 0x5EED))
        self.epoch, self.index = 0, 0
        self._reshuffle()

    def _reshuffle(self):
        self.epoch_start = self.gen.bit_generator.state
        self.order = self.gen.permutation(self.samples)

    def next_batch(self):
        out = np.empty(self.batch, dtype=np.int64)
        for i in range(self.batch):
            if self.index == self.samples:
                self.epoch += 1
                self.index = 0
                self._reshuffle()
            out[i] = self.order[self.index]
            self.index += 1
        return out

    def state_dict(self):
        return {"epoch": self.epoch, "index": self.index,
                "rng": _ints_to_text(self.epoch_start)}

    def load_state_dict(self, state):
        if not 0 <= int(state["index"]) <= self.samples:
            raise ValueError("data loader position %r is outside the data set" % (state,))
        self.gen.bit_generator.state = _text_to_ints(state["rng"])
        self._reshuffle()
        self.epoch, self.index = int(state["epoch"]), int(state["index"])


class Shard:
    """This rank's rows of W and their Adam moments (float32)."""

    NAMES = ("weight", "adam.exp_avg", "adam.exp_avg_sq")

    def __init__(self, a, row0, row1):
        self.row0, self.rows = row0, row1 - row0
        shape = (self.rows, a.in_dim)
        self.tensors = {n: np.zeros(shape, dtype=F32) for n in self.NAMES}

    def train_step(self, a, data, batch, step):
        """One Adam step on the owned rows; returns their summed squared error."""
        w, m, v = (self.tensors[n] for n in self.NAMES)
        xb = data.x[batch]            # [B, in]
        yb = data.y[batch].T          # [rows, B]
        pred = np.zeros((self.rows, len(batch)), dtype=F32)
        for k in range(a.in_dim):     # pred[r, b] = sum_k w[r, k] x[b, k], k in order
            pred += w[:, k:k + 1] * xb[None, :, k]
        err = pred - yb
        grad = np.zeros_like(w)
        for b in range(len(batch)):   # grad[r, k] = sum_b err[r, b] x[b, k], b in order
            grad += err[:, b:b + 1] * xb[b][None, :]
        g = grad / F32(len(batch))
        lr = learning_rate(a, step)
        bc1 = ONE - np.power(BETA1, F32(step))
        bc2 = ONE - np.power(BETA2, F32(step))
        m *= BETA1
        m += (ONE - BETA1) * g
        v *= BETA2
        v += (ONE - BETA2) * g * g
        w -= lr * (m / bc1) / (np.sqrt(v / bc2) + EPS)
        return float(np.sum(err.astype(np.float64) ** 2))


def save(ckpt, a, shard, loader, step, final):
    shape = (a.rows, a.in_dim)
    chunks = {n: (shape, (shard.row0, 0)) for n in Shard.NAMES}
    ckpt.save(step, shard.tensors, chunks=chunks, data_position=loader.state_dict(),
              lr_schedule={"base_lr": a.lr, "warmup": a.warmup, "total": a.steps,
                           "current": float(learning_rate(a, max(step, 1)))},
              global_state={"trainer": "numpy", "rows": a.rows, "in_dim": a.in_dim,
                            "samples": a.samples, "batch": a.batch, "seed": a.seed},
              reason="final" if final else None)


def resume(ckpt, a, shard, loader):
    """Loads this rank's rows (from a checkpoint of any world size) and the loader position;
    returns the step to continue after (0 on a fresh start)."""
    reader = ckpt.open_resume()
    if reader is None:
        return 0
    with reader:
        for name in Shard.NAMES:
            dtype, shape = reader.info(name)
            if dtype != "F32" or shape != (a.rows, a.in_dim):
                raise SystemExit("numpy_trainer: checkpoint tensor %r is %s%s, not F32 of "
                                 "--rows x --in-dim (%d, %d)"
                                 % (name, dtype, list(shape), a.rows, a.in_dim))
            if shard.rows:
                shard.tensors[name][...] = reader.read(name, (shard.row0, 0),
                                                       (shard.rows, a.in_dim))
        # Every rank's loader state is the same (one global shuffle): ours, or rank 0's
        # when this world is bigger than the one that saved.
        rank = ckpt.rank if ckpt.rank < reader.world_size else 0
        _, position, _ = reader.rank_state(rank)
        loader.load_state_dict(position)
        return reader.step


def main(argv=None):
    a = parse_args(argv)
    ckpt = shardguard.Checkpointer(a.checkpoint_dir, every_steps=a.checkpoint_every,
                                   capture_rng=False)  # all randomness is in DataLoader.gen
    rank, world = ckpt.rank, ckpt.world_size
    if world > a.rows:
        raise SystemExit("numpy_trainer: %d ranks for %d rows" % (world, a.rows))
    row0, row1 = rank * a.rows // world, (rank + 1) * a.rows // world
    shard = Shard(a, row0, row1)
    data = DataSet(a, row0, row1)
    loader = DataLoader(a)
    start = resume(ckpt, a, shard, loader)
    print("numpy_trainer rank %d/%d: rows [%d, %d), %s" % (
        rank, world, row0, row1, "resumed at step %d" % start if start else "fresh start"),
        flush=True)

    # Outside shardguard, catch SIGTERM / SIGUSR1 ourselves (Slurm, a person): the next
    # should_checkpoint() is true, and we exit 75 after that emergency save. Under
    # shardguard the client handles the checkpoint signal and the control socket, and a
    # SIGTERM means teardown: it keeps its default action.
    with (shardguard.PreemptionGuard() if not ckpt.under_shardguard
          else contextlib.nullcontext()):
        code = train(ckpt, a, shard, data, loader, start)
    ckpt.close()
    return code


def train(ckpt, a, shard, data, loader, start):
    """Steps start+1 .. --steps; the exit code (0, or 75 after an emergency checkpoint)."""
    rank = ckpt.rank
    for step in range(start + 1, a.steps + 1):
        batch = loader.next_batch()
        loss = shard.train_step(a, data, batch, step)
        ckpt.heartbeat(step, loss=loss / (len(batch) * max(shard.rows, 1)))
        if a.log_every and step % a.log_every == 0:
            print("numpy_trainer rank %d: step %d loss %.6f lr %.6f" % (
                rank, step, loss / (len(batch) * max(shard.rows, 1)), learning_rate(a, step)),
                flush=True)
        last = step == a.steps
        if last or ckpt.should_checkpoint(step):
            save(ckpt, a, shard, loader, step, last)
        if ckpt.should_exit():
            print("numpy_trainer rank %d: stopping after the emergency checkpoint of step %d"
                  % (rank, ckpt.last_committed_step), flush=True)
            return shardguard.EXIT_AFTER_EMERGENCY
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000.0)
    print("numpy_trainer rank %d: done at step %d" % (rank, a.steps), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
