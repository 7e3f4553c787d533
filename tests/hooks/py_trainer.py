"""py_trainer.py DIR STEPS SLEEP_MS EVERY: a toy Python trainer for the kill -9 tests.

Its state (torch weights and moment, a bf16 copy, a numpy EMA and counters, a bool mask,
Python/numpy/torch RNG states, a data loader position and a JSON extra state) evolves
deterministically from all three RNGs; it is checkpointed every EVERY steps and at the last
step ("final") and resumed after any kill, so an interrupted run ends bit-identical to one
that never stopped. Without torch it runs on numpy alone. Exit 0 when done.
"""

import random
import sys
import time

import numpy as np

try:
    import torch
    torch.set_num_threads(1)
except ImportError:
    torch = None

import shardguard


class Loader:
    """A data loader whose position is saved: a fixed permutation walked in order."""

    def __init__(self, n):
        self.order = np.random.RandomState(7).permutation(n)
        self.pos = 0

    def next(self):
        i = int(self.order[self.pos % len(self.order)])
        self.pos += 1
        return i

    def state_dict(self):
        return {"pos": self.pos}

    def load_state_dict(self, state):
        self.pos = state["pos"]


def initial_state():
    random.seed(1)
    np.random.seed(2)
    state = {"ema": np.zeros(16, dtype=np.float64), "hist": np.zeros(4, dtype=np.int64)}
    if torch is not None:
        torch.manual_seed(3)
        state["w"] = torch.randn(32, 16)
        state["m"] = torch.zeros(32, 16)
        state["mask"] = torch.zeros(8, dtype=torch.bool)
    else:
        state["w"] = np.random.randn(32, 16).astype(np.float32)
        state["m"] = np.zeros((32, 16), dtype=np.float32)
        state["mask"] = np.zeros(8, dtype=np.bool_)
    return state, {"loss_sum": 0.0}


def train_step(state, extra, loader):
    x = np.random.randn(16).astype(np.float32) + loader.next() * 1e-3
    jitter = random.random()
    if torch is not None:
        g = torch.from_numpy(x).unsqueeze(0) * state["w"] + torch.randn(32, 16) * 0.01
        state["m"] = 0.9 * state["m"] + 0.1 * g
        state["w"] = state["w"] - (0.01 * (1 + jitter)) * state["m"]
        loss = float((state["w"] ** 2).sum())
        state["mask"] = state["mask"] ^ (state["w"][:8, 0] > 0)
        w = state["w"].numpy()
    else:
        g = x[None, :] * state["w"] + np.random.randn(32, 16).astype(np.float32) * 0.01
        state["m"] = (0.9 * state["m"] + 0.1 * g).astype(np.float32)
        state["w"] = (state["w"] - np.float32(0.01 * (1 + jitter)) * state["m"]).astype(np.float32)
        loss = float((state["w"].astype(np.float64) ** 2).sum())
        state["mask"] = state["mask"] ^ (state["w"][:8, 0] > 0)
        w = state["w"]
    state["ema"] = 0.99 * state["ema"] + 0.01 * w.astype(np.float64).mean(axis=0)
    state["hist"][random.randrange(4)] += 1
    extra["loss_sum"] += loss


def to_save(state):
    out = dict(state)
    if torch is not None:
        out["w_bf16"] = state["w"].to(torch.bfloat16)
    return out


def main():
    ckpt_dir, steps, sleep_ms, every = sys.argv[1], int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4])
    loader = Loader(1000)
    ckpt = shardguard.Checkpointer(ckpt_dir, every_steps=every, data_loader=loader)
    state, extra = initial_state()
    start = 0
    resumed = ckpt.load()
    if resumed is not None:
        start, loaded, extra = resumed
        state = {k: v for k, v in loaded.items() if k != "w_bf16"}
    for step in range(start + 1, steps + 1):
        train_step(state, extra, loader)
        ckpt.heartbeat(step)
        last = step == steps
        if last or ckpt.should_checkpoint(step):
            ckpt.save(step, to_save(state), extra_state=extra, lr_schedule={"step": step},
                      reason="final" if last else None)
        if ckpt.should_exit():
            ckpt.close()
            sys.exit(shardguard.EXIT_AFTER_EMERGENCY)
        time.sleep(sleep_ms / 1000.0)
    ckpt.close()
    print("py_trainer: done at step %d" % steps)


if __name__ == "__main__":
    main()
