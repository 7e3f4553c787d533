#!/usr/bin/env python3
"""A trainer written from the README's five calls and nothing else (no PreemptionGuard, no
signal handling of its own): Checkpointer, load, heartbeat, should_checkpoint + save,
should_exit -> exit 75.

Each rank owns a slice of --rows weights (RANK / WORLD_SIZE) and saves it as a chunk of the
global tensor. Every weight follows the same float32 recurrence, element by element (no
reductions), so the final weights are bit-identical for any world size and any number of
interruptions. Needs numpy and the shardguard package (PYTHONPATH, SHARDGUARD_LIB).
"""

import argparse
import sys
import time

import numpy as np

from shardguard import Checkpointer, Chunk

F32 = np.float32


def train_step(w, step, index):
    decay = F32(1.0) - F32(0.001) * F32(step % 7)
    return (w * decay + F32(0.01) * F32(step % 13) + index * F32(1e-4)).astype(F32)


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=1000)
    p.add_argument("--rows", type=int, default=64)
    p.add_argument("--sleep-ms", type=float, default=0)
    p.add_argument("--checkpoint-dir", default="checkpoints")
    a = p.parse_args()

    ckpt = Checkpointer(a.checkpoint_dir, every_steps=50)
    row0 = a.rows * ckpt.rank // ckpt.world_size
    row1 = a.rows * (ckpt.rank + 1) // ckpt.world_size
    index = np.arange(row0, row1, dtype=F32)
    restored = ckpt.load(boxes={"w": ((row0,), (row1 - row0,))})  # None on a fresh start
    start = restored[0] if restored else 0
    w = restored[1]["w"] if restored else (index * F32(0.5)).astype(F32)
    for step in range(start + 1, a.steps + 1):
        w = train_step(w, step, index)
        ckpt.heartbeat(step)
        if ckpt.should_checkpoint(step):
            ckpt.save(step, {"w": Chunk(w, (a.rows,), (row0,))}, extra_state={"step": step})
        if ckpt.should_exit():  # after an emergency checkpoint
            sys.exit(75)
        if a.sleep_ms:
            time.sleep(a.sleep_ms / 1000.0)


if __name__ == "__main__":
    main()
