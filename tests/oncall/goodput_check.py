#!/usr/bin/python3
"""Recomputes a run dir's goodput from events.jsonl on its own - no shardguard code - and
checks the figures `shardguard status --json` and `shardguard report` printed against it.

    goodput_check.py EVENTS_JSONL [--status-json FILE] [--report FILE] [--tolerance 0.01]

Prints its own figures as one JSON object. Exits 0 when every printed figure agrees within the
tolerance (goodput ratio, allocated and productive GPU-seconds: relative; each badput cause:
as a share of the allocated GPU-seconds), 1 when one does not (each difference is named), 2 on
bad input.

The definition it implements (supervisor/timeline.h, issue 14), read here attempt by attempt
rather than as the supervisor's state machine: each run is allocated from `start` to `finish`
(or to its last record) with the attempt's world size (`launch` nproc; the `start` nproc before
the first launch); an attempt trains from `ranks_ready` to the first of teardown, the commit of
its emergency checkpoint, and a hang's last heartbeat (or a commit after it); the seconds of each commit inside that
span are checkpoint stalls; an attempt without `ranks_ready` trained from its launch to its
teardown only if it committed something or ended in success; start -> first node_joined is
waiting; every other allocated second is restart; and each attempt_end's lost_steps x the
attempt's seconds per step (training seconds / steps run) move from productive to recompute.
"""
import argparse
import json
import re
import sys

CAUSES = ("recompute", "restart", "checkpoint", "waiting")


def read_records(path):
    records = []
    with open(path, "rb") as f:
        for raw in f:
            if not raw.endswith(b"\n"):
                break  # a line still being written
            try:
                r = json.loads(raw.decode("utf-8"))
            except (UnicodeDecodeError, ValueError):
                continue
            if not isinstance(r, dict) or not isinstance(r.get("event"), str) or not r["event"]:
                continue
            t = r.get("time_unix_ms")
            if isinstance(t, bool) or not isinstance(t, int):
                continue
            records.append(r)
    return records


def num(r, key, default=None):
    v = r.get(key)
    if isinstance(v, bool) or not isinstance(v, (int, float)):
        return default
    return v


def split_runs(records):
    runs = []
    for r in records:
        if r["event"] == "start" or not runs:
            runs.append([])
        runs[-1].append(r)
    return runs


def attempt_figures(recs, start_t, end_t):
    """Training, stall and lost seconds (wall, not GPU) of one attempt's records."""
    launch = recs[0]
    attempt = num(launch, "attempt")
    mine = [r for r in recs if num(r, "attempt", attempt) == attempt]
    first = lambda name: next((r for r in mine if r["event"] == name), None)
    ready, teardown, end = first("ranks_ready"), first("teardown"), first("attempt_end")
    stop_t = teardown["time_unix_ms"] if teardown else (end["time_unix_ms"] if end else end_t)
    emergency_at = None
    commits = []
    for r in mine:
        if r["event"] == "checkpoint_now" and r.get("kind") == "emergency":
            emergency_at = num(r, "at_step")
        if r["event"] == "checkpoint_committed" and num(r, "step") is not None:
            commits.append((r, emergency_at))
    train_end = stop_t
    for r, at in commits:
        if at is not None and num(r, "step") >= at and r["time_unix_ms"] <= stop_t:
            train_end = min(train_end, r["time_unix_ms"])
            break
    hang = first("hang")
    if hang is not None and ready is not None and hang["time_unix_ms"] <= train_end:
        # Training stopped at the hung rank's last heartbeat - or at a commit after it, which
        # shows the job still got that far.
        quiet_ms = int(max(0.0, num(hang, "seconds_since_heartbeat", 0)) * 1000)
        last = ready["time_unix_ms"]
        for r, _ in commits:
            if last <= r["time_unix_ms"] <= hang["time_unix_ms"]:
                last = r["time_unix_ms"]
        train_end = min(train_end, max(last, hang["time_unix_ms"] - quiet_ms))
    cls = end.get("class") if end else "unknown"
    if ready is not None:
        train_start = ready["time_unix_ms"]
    elif cls == "success" or commits:
        train_start = launch["time_unix_ms"]
    else:
        train_start = None
    training = stalls = 0.0
    if train_start is not None and train_end > train_start:
        boundary = train_start
        for r, _ in commits:
            t = r["time_unix_ms"]
            if t < train_start or t > train_end:
                continue
            stall = min(max(0.0, num(r, "seconds", 0)), (t - boundary) / 1000.0)
            stalls += stall
            boundary = t
        training = (train_end - train_start) / 1000.0 - stalls
    lost = 0.0
    if end is not None:
        resume = num(launch, "resume_step", -1)
        ran = (num(end, "max_step", 0) or 0) - (resume if resume and resume > 0 else 0)
        if ran > 0 and training > 0:
            lost = num(end, "lost_steps", 0) * training / ran
    return training, stalls, lost


def run_figures(run, totals):
    start_t = run[0]["time_unix_ms"]
    finish = next((r for r in run if r["event"] == "finish"), None)
    end_t = finish["time_unix_ms"] if finish else max(r["time_unix_ms"] for r in run)
    gpus = num(run[0], "nproc", 0) if run[0]["event"] == "start" else 0
    launches = [i for i, r in enumerate(run) if r["event"] == "launch"]
    # Allocation: the start's nproc until the first launch, then each launch's.
    t, allocated = start_t, 0.0
    for i in launches:
        allocated += gpus * max(0, run[i]["time_unix_ms"] - t) / 1000.0
        t, gpus = run[i]["time_unix_ms"], num(run[i], "nproc", gpus)
    allocated += gpus * max(0, end_t - t) / 1000.0
    joined = next((r for r in run if r["event"] == "node_joined"), None)
    first_launch_t = run[launches[0]]["time_unix_ms"] if launches else end_t
    waiting = 0.0
    if run[0]["event"] == "start":
        until = joined["time_unix_ms"] if joined and joined["time_unix_ms"] <= first_launch_t else first_launch_t
        waiting = num(run[0], "nproc", 0) * max(0, until - start_t) / 1000.0
    training = checkpoint = recompute = 0.0
    for k, i in enumerate(launches):
        j = launches[k + 1] if k + 1 < len(launches) else len(run)
        n = num(run[i], "nproc", 0)
        tr, st, lo = attempt_figures(run[i:j], start_t, end_t)
        training += n * tr
        checkpoint += n * st
        recompute += n * lo
    recompute = min(recompute, training)
    totals["allocated"] += allocated
    totals["productive"] += training - recompute
    totals["recompute"] += recompute
    totals["checkpoint"] += checkpoint
    totals["waiting"] += waiting
    totals["restart"] += allocated - training - checkpoint - waiting


def compute(records):
    totals = dict(allocated=0.0, productive=0.0, **{c: 0.0 for c in CAUSES})
    for run in split_runs(records):
        run_figures(run, totals)
    totals["ratio"] = totals["productive"] / totals["allocated"] if totals["allocated"] > 0 else 0.0
    return totals


def from_status_json(path):
    g = json.load(open(path))["goodput"]
    out = dict(ratio=g["ratio"], allocated=g["allocated_gpu_seconds"],
               productive=g["productive_gpu_seconds"])
    for c in CAUSES:
        out[c] = g["badput_gpu_seconds"][c]
    return out


def from_report(path):
    text = open(path, encoding="utf-8").read()
    out = {}
    for name in ("allocated", "productive") + CAUSES:
        m = re.search(r"^\| %s \| ([0-9.]+) \|" % name, text, re.M)
        if not m:
            raise ValueError("the report has no '%s' row in its lost-time table" % name)
        out[name] = float(m.group(1))
    m = re.search(r"\*\*Goodput\*\* \| \*\*([0-9.]+) %\*\*", text)
    if not m:
        raise ValueError("the report has no goodput line")
    out["ratio"] = float(m.group(1)) / 100.0
    return out


def compare(what, printed, mine, tol):
    problems = []
    alloc = max(mine["allocated"], 1e-9)
    for key in ("ratio", "allocated", "productive") + CAUSES:
        a, b = printed[key], mine[key]
        if key in CAUSES:
            ok = abs(a - b) <= tol * alloc
        else:
            # The report prints the ratio to 0.1 %: allow for that rounding too.
            slack = 0.0005 if key == "ratio" and what == "report" else 0.0
            ok = abs(a - b) <= tol * abs(b) + slack + 1e-9
        if not ok:
            problems.append("%s: %s is %.6f, recomputed %.6f" % (what, key, a, b))
    return problems


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    p.add_argument("events")
    p.add_argument("--status-json")
    p.add_argument("--report")
    p.add_argument("--tolerance", type=float, default=0.01)
    a = p.parse_args()
    try:
        mine = compute(read_records(a.events))
        problems = []
        if a.status_json:
            problems += compare("status", from_status_json(a.status_json), mine, a.tolerance)
        if a.report:
            problems += compare("report", from_report(a.report), mine, a.tolerance)
    except (OSError, ValueError, KeyError) as e:
        print("goodput_check: %s" % e, file=sys.stderr)
        return 2
    print(json.dumps(mine, sort_keys=True))
    for line in problems:
        print("DISAGREE " + line, file=sys.stderr)
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
