#!/usr/bin/env python3
"""Writes the synthetic spot traces of this folder, in the shape of skypilot's public
spot-traces files ({"metadata": {"gap_seconds": N, ...}, "data": [one integer per tick]}).
They are made up (this machine cannot download the real ones): a seeded random walk, so the
files are reproducible. Run it from this folder: python3 make_traces.py"""
import json
import random

GAP = 600          # 10-minute ticks, as in the public traces
TICKS = 7 * 144    # one week


def preemption(seed, per_day):
    """0/1 per tick: 1 = the instance was preempted in that tick."""
    rng = random.Random(seed)
    p = per_day / 144
    return [1 if rng.random() < p else 0 for _ in range(TICKS)]


def availability(seed, capacity, floor):
    """Instances available per tick: mostly `capacity`, with dips that recover."""
    rng = random.Random(seed)
    out, level = [], capacity
    for _ in range(TICKS):
        if level == capacity and rng.random() < 0.02:
            level = max(floor, capacity - rng.randint(1, 4))
        elif level < capacity and rng.random() < 0.15:
            level += 1
        out.append(level)
    return out


def write(name, data, kind):
    meta = {"gap_seconds": GAP, "kind": kind, "synthetic": True,
            "note": "made up by make_traces.py in the shape of skypilot spot-traces"}
    with open(name, "w") as f:
        json.dump({"metadata": meta, "data": data}, f, separators=(",", ":"))
        f.write("\n")


if __name__ == "__main__":
    write("preemption-a.json", preemption(1, 0.5), "preemption")
    write("preemption-b.json", preemption(2, 1.0), "preemption")
    write("availability-16.json", availability(3, 16, 10), "availability")
