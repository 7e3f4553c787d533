#!/usr/bin/env python3
"""ddp_trainer.py: the shortest PyTorch DDP trainer that survives preemption with shardguard.

A small MLP with dropout, AdamW and OneCycleLR, a DataLoader with a DistributedSampler, gloo
(CPU). The shardguard parts are marked "# shardguard": the data position helper, load() on
start, heartbeat / should_checkpoint / save with the state dicts as they are, and exit 75
after an emergency checkpoint. Every rank calls save(): the replicated state is written once
in total, split across the ranks, and any world size resumes it.

    shardguard run --nproc 2 --checkpoint-dir ckpt --run-dir run -- \
        python3 ddp_trainer.py --steps 2000
    shardguard drain --run-dir run      # emergency checkpoint, exit 75; run again to resume

Environment: `shardguard run` sets RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT and the
SHARDGUARD_* variables; without it, one rank with checkpoints in --checkpoint-dir.
"""

import argparse
import datetime
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.nn.functional as F
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset

import shardguard


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--steps", type=int, default=2000)
    p.add_argument("--sleep-ms", type=float, default=0, help="pretend a step takes longer")
    p.add_argument("--checkpoint-dir", default="checkpoints")
    a = p.parse_args()
    torch.set_num_threads(1)
    ckpt = shardguard.Checkpointer(a.checkpoint_dir, every_steps=200)       # shardguard
    rank, world = ckpt.rank, ckpt.world_size
    os.environ.setdefault("MASTER_ADDR", "127.0.0.1")
    os.environ.setdefault("MASTER_PORT", "29500")
    os.environ.setdefault("GLOO_SOCKET_IFNAME", "lo")
    dist.init_process_group("gloo", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=60))

    torch.manual_seed(0)
    g = torch.Generator().manual_seed(0)
    x = torch.randn(4096, 32, generator=g)
    data = TensorDataset(x, x @ torch.randn(32, 1, generator=g))
    loader = DataLoader(data, batch_size=32, drop_last=True,
                        sampler=DistributedSampler(data, world, rank, seed=0, drop_last=True))
    position = shardguard.DataPosition(loader)                                # shardguard
    ckpt.data_loader = position                                               # shardguard
    model = torch.nn.Sequential(torch.nn.Linear(32, 128), torch.nn.ReLU(),
                                torch.nn.Dropout(0.1), torch.nn.Linear(128, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3)
    sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=0.01, total_steps=a.steps)

    step = 0
    restored = ckpt.load()                                                    # shardguard
    if restored is not None:
        model.load_state_dict(restored.state["model"])
        opt.load_state_dict(restored.state["optim"])
        sched.load_state_dict(restored.state["sched"])
        step = restored.state["step"]
    ddp = torch.nn.parallel.DistributedDataParallel(model)
    print("rank %d/%d: %s" % (rank, world, "resumed after step %d" % step if step else
                              "fresh start"), flush=True)

    for _ in position.epochs(1 << 30):
        for xb, yb in position:
            if step == a.steps:
                break
            step += 1
            loss = F.mse_loss(ddp(xb), yb)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
            ckpt.heartbeat(step, loss=loss.detach())                          # shardguard
            if step % 100 == 0 and rank == 0:
                print("step %d loss %.5f" % (step, loss.item()), flush=True)
            if ckpt.should_checkpoint(step) or step == a.steps:              # shardguard
                ckpt.save(step, {"model": model.state_dict(), "optim": opt.state_dict(),
                                 "sched": sched.state_dict(), "step": step},
                          reason="final" if step == a.steps else None)
            if ckpt.should_exit():                                            # shardguard
                ckpt.close()
                return shardguard.EXIT_AFTER_EMERGENCY
            time.sleep(a.sleep_ms / 1000.0)
        if step == a.steps:
            break
    ckpt.close()
    dist.destroy_process_group()
    return 0


if __name__ == "__main__":
    sys.exit(main())
