#!/usr/bin/env python3
"""mlp_trainer.py: a PyTorch user's trainer, integrated with shardguard the natural way.

A 2-layer MLP with dropout, AdamW and OneCycleLR, fed by a DataLoader with a
DistributedSampler, on gloo (CPU), in one of two parallel forms:
  --parallel ddp      DistributedDataParallel: every rank holds the whole model; it saves
                      {"model": model.state_dict(), "optim": opt.state_dict(),
                       "sched": sched.state_dict(), "step": step} on every rank (written
                      once in total) and loads it back with the torch calls.
  --parallel sharded  a hand-written parameter-sharded model (FSDP-like; real FSDP needs
                      CUDA): each rank holds rows [r*n//W, (r+1)*n//W) of every parameter
                      and their AdamW state, gathers the whole weights for the forward and
                      all-reduces the gradients; it saves its rows as Chunks and loads its
                      own rows on any world size (dim0_boxes).
Rank 0 appends "step loss" (float.hex, exact) to --loss-log. With --record DIR every save
also writes what it saved (torch.save, per rank); after a resume the trainer compares what
it restored into the model, the optimizer, the scheduler, the data position and the step
with those records, element by element and bit for bit, and writes
DIR/verified-step-S-world-W-rank-R.json (or exits 3 naming the difference).

Environment: `shardguard run` (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT, SHARDGUARD_*).
Single-threaded torch (set_num_threads(1)) so that every run does the same arithmetic.
"""

import argparse
import datetime
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import shardguard
from shardguard.sharding import chunk_optimizer_state, dim0_boxes, dim0_rows

IN, HIDDEN, OUT = 16, 64, 4


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--parallel", choices=("ddp", "sharded"), default="ddp")
    p.add_argument("--steps", type=int, default=160)
    p.add_argument("--samples", type=int, default=768)
    p.add_argument("--batch", type=int, default=16)
    p.add_argument("--seed", type=int, default=7)
    p.add_argument("--sleep-ms", type=float, default=0)
    p.add_argument("--loss-log", default=None)
    p.add_argument("--record", default=None)
    p.add_argument("--checkpoint-dir", default="checkpoints")
    return p.parse_args(argv)


def dataset(seed, samples):
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(samples, IN, generator=g)
    w = torch.randn(IN, OUT, generator=g)
    return TensorDataset(x, x @ w + 0.1 * torch.randn(samples, OUT, generator=g))


def reference_layers(seed):
    """The initial weights, the same on every rank and world size."""
    torch.manual_seed(seed)
    return torch.nn.Linear(IN, HIDDEN), torch.nn.Linear(HIDDEN, OUT)


# ---- DDP ----
class DdpModel:
    def __init__(self, seed):
        l1, l2 = reference_layers(seed)
        self.module = torch.nn.Sequential(l1, torch.nn.ReLU(), torch.nn.Dropout(0.1), l2)
        self.ddp = None

    def parameters(self):
        return self.module.parameters()

    def wrap(self):
        self.ddp = torch.nn.parallel.DistributedDataParallel(self.module)

    def loss(self, xb, yb):
        return F.mse_loss(self.ddp(xb), yb)

    def after_backward(self):
        pass

    def state_to_save(self, opt):
        return self.module.state_dict(), opt.state_dict()

    def load(self, restored, opt):
        self.module.load_state_dict(restored.state["model"])
        opt.load_state_dict(restored.state["optim"])

    def boxes(self):
        return None


# ---- hand-written parameter sharding ----
class ShardedModel:
    """Rows of fc1.weight [HIDDEN, IN], fc1.bias, fc2.weight [OUT, HIDDEN], fc2.bias."""

    def __init__(self, seed, rank, world):
        l1, l2 = reference_layers(seed)
        self.rank, self.world = rank, world
        self.full = {"fc1.weight": l1.weight, "fc1.bias": l1.bias,
                     "fc2.weight": l2.weight, "fc2.bias": l2.bias}
        self.shapes = {n: tuple(t.shape) for n, t in self.full.items()}
        self.rows = {n: dim0_rows(s[0], rank, world) for n, s in self.shapes.items()}
        self.shards = {n: torch.nn.Parameter(t.detach()[slice(*self.rows[n])].clone())
                       for n, t in self.full.items()}
        self.gathered = {}

    def parameters(self):
        return list(self.shards.values())

    def wrap(self):
        pass

    def _gather(self, name):
        shard, rows = self.shards[name], self.shapes[name][0]
        most = max(b - a for a, b in (dim0_rows(rows, r, self.world) for r in range(self.world)))
        padded = torch.zeros((most,) + self.shapes[name][1:])
        padded[:shard.shape[0]] = shard.detach()
        parts = [torch.empty_like(padded) for _ in range(self.world)]
        dist.all_gather(parts, padded)
        pieces = [parts[r][:b - a] for r, (a, b) in
                  enumerate(dim0_rows(rows, r, self.world) for r in range(self.world))]
        return torch.cat(pieces).requires_grad_(True)

    def loss(self, xb, yb):
        self.gathered = {n: self._gather(n) for n in self.shards}
        g = self.gathered
        h = F.dropout(F.relu(F.linear(xb, g["fc1.weight"], g["fc1.bias"])), 0.1, training=True)
        return F.mse_loss(F.linear(h, g["fc2.weight"], g["fc2.bias"]), yb)

    def after_backward(self):
        for name, full in self.gathered.items():
            grad = full.grad
            dist.all_reduce(grad)
            grad /= self.world
            self.shards[name].grad = grad[slice(*self.rows[name])].clone()

    def chunks(self):
        return {n: shardguard.Chunk(p.detach(), self.shapes[n], (self.rows[n][0],) +
                                    (0,) * (len(self.shapes[n]) - 1))
                for n, p in self.shards.items()}

    def state_to_save(self, opt):
        chunks = self.chunks()
        return chunks, chunk_optimizer_state(opt.state_dict(), list(chunks.values()))

    def load(self, restored, opt):
        with torch.no_grad():
            for n, p in self.shards.items():
                p.copy_(restored.state["model"][n])
        opt.load_state_dict(restored.state["optim"])

    def boxes(self):
        return dim0_boxes(self.rank, self.world)


# ---- records of what was saved, and the check after a resume ----
def clone_tree(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, shardguard.Chunk):
        return {"chunk_offsets": list(x.offsets), "value": x.value.detach().clone()}
    if isinstance(x, dict):
        return {k: clone_tree(v) for k, v in x.items() if not callable(v)}
    if isinstance(x, (list, tuple)):
        return type(x)(clone_tree(v) for v in x)
    return x


def differences(a, b, where="", out=None):
    """Every place where a and b differ (tensors bit for bit, floats exactly)."""
    out = [] if out is None else out
    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        if not (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor)) or \
                a.dtype != b.dtype or a.shape != b.shape or \
                a.reshape(-1).view(torch.uint8).tolist() != b.reshape(-1).view(torch.uint8).tolist():
            out.append(where)
    elif isinstance(a, dict) and isinstance(b, dict):
        for k in sorted(set(a) | set(b), key=str):
            if k not in a or k not in b:
                out.append("%s[%r] only on one side" % (where, k))
            else:
                differences(a[k], b[k], "%s[%r]" % (where, k), out)
    elif isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b) or type(a) != type(b):
            out.append(where + " length or type")
        for i, (x, y) in enumerate(zip(a, b)):
            differences(x, y, "%s[%d]" % (where, i), out)
    elif type(a) != type(b) or (a != b and not (a != a and b != b)):
        out.append("%s: %r != %r" % (where, a, b))
    return out


def record_path(directory, step, rank):
    return os.path.join(directory, "saved-step-%06d-rank-%d.pt" % (step, rank))


def write_record(a, step, rank, world, model_state, optim_state, sched, position):
    rec = {"world": world, "step": step, "model": clone_tree(model_state),
           "optim": clone_tree(optim_state), "sched": clone_tree(sched.state_dict()),
           "position": dict(position.state_dict())}
    torch.save(rec, record_path(a.record, step, rank) + ".tmp")
    os.replace(record_path(a.record, step, rank) + ".tmp", record_path(a.record, step, rank))


def assemble(records, part):
    """{name: whole tensor} from every old rank's chunks of `part` ("model" or optim)."""
    out = {}
    for rec in records:
        for name, c in part(rec).items():
            whole = out.setdefault(name, [])
            whole.append((c["chunk_offsets"][0], c["value"]))
    return {n: torch.cat([v for _, v in sorted(pieces, key=lambda p: p[0])])
            for n, pieces in out.items()}


def verify_restored(a, step, rank, world, model, opt, sched, position):
    old0 = torch.load(record_path(a.record, step, 0))
    old_world = old0["world"]
    problems = []
    if a.parallel == "ddp":
        problems += differences(model.module.state_dict(), old0["model"], "model")
        problems += differences(opt.state_dict(), old0["optim"], "optim")
    else:
        records = [torch.load(record_path(a.record, step, r)) for r in range(old_world)]
        whole = assemble(records, lambda rec: rec["model"])
        for n, p in model.shards.items():
            problems += differences(p.detach(), whole[n][slice(*model.rows[n])], "model." + n)
        mine = opt.state_dict()
        names = list(model.shards)
        for key in ("exp_avg", "exp_avg_sq"):
            saved = assemble(records, lambda rec: {names[i]: s[key] for i, s in
                                                   rec["optim"]["state"].items()})
            for i, n in enumerate(names):
                problems += differences(mine["state"][i][key], saved[n][slice(*model.rows[n])],
                                        "optim.%s.%s" % (n, key))
        for i in range(len(names)):
            problems += differences(mine["state"][i]["step"], old0["optim"]["state"][i]["step"],
                                    "optim.%d.step" % i)
        problems += differences(mine["param_groups"], old0["optim"]["param_groups"],
                                "optim.param_groups")
    problems += differences(clone_tree(sched.state_dict()), old0["sched"], "sched")
    own = torch.load(record_path(a.record, step, rank if rank < old_world else 0))
    problems += differences(dict(position.state_dict()), own["position"], "position")
    if problems:
        print("mlp_trainer rank %d: the restored state differs from what was saved at step %d: "
              "%s" % (rank, step, "; ".join(problems[:20])), flush=True)
        sys.exit(3)
    with open(os.path.join(a.record, "verified-step-%d-world-%d-rank-%d.json"
                           % (step, world, rank)), "w") as f:
        json.dump({"step": step, "old_world": old_world, "world": world,
                   "lr": opt.param_groups[0]["lr"], "position": position.state_dict()}, f)


# ---- the run ----
def init_group(ckpt):
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=ckpt.rank, world_size=ckpt.world_size,
                            timeout=datetime.timedelta(seconds=60))


def main(argv=None):
    a = parse_args(argv)
    torch.set_num_threads(1)
    if a.record:
        os.makedirs(a.record, exist_ok=True)
    ckpt = shardguard.Checkpointer(a.checkpoint_dir)
    rank, world = ckpt.rank, ckpt.world_size
    init_group(ckpt)
    model = DdpModel(a.seed) if a.parallel == "ddp" else ShardedModel(a.seed, rank, world)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.01, foreach=False)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.02, total_steps=a.steps)
    data = dataset(a.seed, a.samples)
    sampler = DistributedSampler(data, num_replicas=world, rank=rank, shuffle=True,
                                 seed=a.seed, drop_last=True)
    loader = DataLoader(data, batch_size=a.batch, sampler=sampler, drop_last=True)
    torch.manual_seed(a.seed + 1)  # dropout: the same stream on every rank
    position = shardguard.DataPosition(loader, seed=a.seed)
    ckpt.data_loader = position

    step = 0
    restored = ckpt.load(boxes=model.boxes())
    if restored is not None:
        model.load(restored, opt)
        sched.load_state_dict(restored.state["sched"])
        step = restored.state["step"]
        if a.record:
            verify_restored(a, step, rank, world, model, opt, sched, position)
    model.wrap()
    print("mlp_trainer rank %d/%d (%s): %s" % (rank, world, a.parallel,
          "resumed after step %d" % step if step else "fresh start"), flush=True)
    log = open(a.loss_log, "a", buffering=1) if a.loss_log and rank == 0 else None
    code = train(a, ckpt, model, opt, sched, position, step, log)
    ckpt.close()
    dist.destroy_process_group()
    return code


def train(a, ckpt, model, opt, sched, position, step, log):
    rank, world = ckpt.rank, ckpt.world_size
    for _ in position.epochs(1 << 30):
        for xb, yb in position:
            if step >= a.steps:
                break
            step += 1
            loss = model.loss(xb, yb)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            model.after_backward()
            opt.step()
            sched.step()
            if log is not None:
                log.write("%d %s\n" % (step, loss.item().hex()))
            ckpt.heartbeat(step)
            last = step == a.steps
            if last or ckpt.should_checkpoint(step):
                model_state, optim_state = model.state_to_save(opt)
                if a.record:  # first: a kill after the commit must not leave it unrecorded
                    write_record(a, step, rank, world, model_state, optim_state, sched, position)
                ckpt.save(step, {"model": model_state, "optim": optim_state,
                                 "sched": sched.state_dict(), "step": step},
                          reason="final" if last else None)
            if ckpt.should_exit():
                print("mlp_trainer rank %d: stopping after the emergency checkpoint of step %d"
                      % (rank, ckpt.last_committed_step), flush=True)
                return shardguard.EXIT_AFTER_EMERGENCY
            if a.sleep_ms:
                time.sleep(a.sleep_ms / 1000.0)
        if step >= a.steps:
            break
    print("mlp_trainer rank %d: done at step %d" % (rank, step), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
