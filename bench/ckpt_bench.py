#!/usr/bin/python3
"""Checkpoint benchmark: shardguard against the disk's own limit (fio), memory (memcpy) and
its peers (torch.save, PyTorch DCP), all measured in the same run on the same directory.

Usage: /usr/bin/python3 bench/ckpt_bench.py [--bytes 4GiB] [--rounds 3] [--worlds 1,2,4]
           [--dir DIR] [--bin build/bench/sg_bench_ckpt] [--shardguard build/cli/shardguard]
           [--stall-gap 20s] [--calibration calibration.json] [--no-peers]
Needs fio; the peers need Debian's python3-torch (DCP through tests/support/torch_compat.py).

Rounds are interleaved - fio, shardguard, peers, fio, shardguard, peers, ... - because this
kind of machine (a VM on a shared virtual disk, other work on its cores) changes speed from
minute to minute: every figure is the median of the rounds, printed with its min, and each
ratio is taken within a round (shardguard against the fio of the same round), then the
median over rounds. The load average is printed per round. Within a round the rank counts
take turns at going first. Every state holds random bits, as fio's buffers do: this VM's disk
writes compressible data faster (fio with --zero_buffers ran 1.3x), so a regular pattern
would flatter shardguard against fio.

What one round measures (BYTES of state: 16 float32 tensors of [rows, 4096], split by rows
across ranks, each rank a process):
  fio         write and read of BYTES in the same directory: psync (buffered + fsync, and
              O_DIRECT x1 / x4, 8 MiB blocks; buffered reads cold) and io_uring (O_DIRECT,
              iodepth 16, 1 MiB blocks, 1 and 4 jobs). "best fio" is the best of them all.
  save        each world size: every rank writes its shard durably (fsync, rename, sidecar),
              rank 0 commits the manifest; wall time from the common start to the commit.
  cold load   the files evicted from the page cache, each rank reads its rows of every tensor,
              every byte checked against its block checksum (format 2; always on).
  resume      `shardguard run --nproc W` from the same checkpoint (evicted again), the job
              (sg_bench_ckpt resume) loads its share and takes one step (updates 64 MiB of
              state and heartbeats); from the launch of `shardguard run` to that step's end,
              minus the job's own start-up (building its model: the "interpreter start-up"
              of a C++ job). Target: within 0.3 s of the cold load.
  warm        one process, files in the page cache: whole loads by fresh readers (every block
              hashed) against one thread's memcpy of the same bytes, alternated.
  stall       hooks::Client in async mode: the first save's stall and the steady one (median
              of three later saves) when staging is populated from client start by a size
              hint (reserve()), from a resume manifest, or not at all; STALL_GAP of "training"
              between client start and the first save; the background population's rate.
  peers       torch.save + fsync (one process) and DCP over gloo with 1 and 2 processes
              (sharded tensors, one file per rank, fsynced), each then loaded cold.

Calibration file (--calibration; default: calibration.json in the build directory that
holds --bin): JSON read by the fleet simulator (sim/calibration.h reads the first
five keys and ignores the rest). Medians over rounds:
  {"format": "shardguard-bench-calibration/1",
   "state_bytes": 4294967296,            the state measured on this node (bytes)
   "save_gbps_per_node": 2.9,            best world size's durable save, GB/s (10^9 B/s)
   "load_gbps_per_node": 2.1,            best world size's cold load (verified), GB/s
   "snapshot_seconds_per_gib": 0.1,      steady async stall per GiB of one rank's state
   "commit_seconds": 0.01,               manifest commit after the last shard
   "save_gbps": {"1": .., "2": .., "4": ..},   per world size (ranks on this node)
   "load_gbps": {...}, "resume_seconds": {...}, "cold_load_seconds": {...},
   "warm_load_gbps": .., "memcpy_gbps": .., "first_stall_seconds": {"hint": .., ...},
   "steady_stall_seconds": .., "population_gbps": {"hint": .., "manifest": ..},
   "fio_best_write_gbps": .., "fio_best_read_gbps": .., "rounds": 3,
   "machine": {"hostname", "cpus", "cpu", "memory_bytes", "kernel", "filesystem",
               "device", "thp", "loadavg"}}
"""
import argparse
import json
import os
import platform
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text):
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * UNITS[unit])
    return int(text)


def parse_seconds(text):
    return float(text[:-2]) / 1000 if text.endswith("ms") else float(text.rstrip("s"))


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


# ---------------------------------------------------------------------------------- fio
def fio(directory, name, rw, size, jobs=1, direct=False, fsync=False, bs="8m", engine="psync",
        iodepth=1):
    """Runs fio and returns bytes/s summed over jobs."""
    args = ["fio", f"--name={name}", f"--directory={directory}", f"--rw={rw}", f"--bs={bs}",
            f"--size={size // jobs}", f"--numjobs={jobs}", "--group_reporting",
            f"--ioengine={engine}", f"--iodepth={iodepth}", f"--direct={1 if direct else 0}",
            "--invalidate=1", "--output-format=json"]
    if fsync:
        args.append("--end_fsync=1")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    return (job["write"] if "write" in rw else job["read"])["bw_bytes"]


def fio_round(base, nbytes):
    d = os.path.join(base, "fio")
    ref = {}

    def fresh():
        shutil.rmtree(d, ignore_errors=True)
        os.makedirs(d)

    fresh()
    ref["write psync buffered+fsync x1"] = fio(d, "wb", "write", nbytes, fsync=True)
    fresh()
    ref["write psync O_DIRECT x1"] = fio(d, "wd1", "write", nbytes, direct=True)
    fresh()
    ref["write io_uring O_DIRECT qd16 1m x1"] = fio(d, "u1", "write", nbytes, direct=True,
                                                    bs="1m", engine="io_uring", iodepth=16)
    ref["read io_uring O_DIRECT qd16 1m x1"] = fio(d, "u1", "read", nbytes, direct=True,
                                                   bs="1m", engine="io_uring", iodepth=16)
    fresh()
    ref["write io_uring O_DIRECT qd16 1m x4"] = fio(d, "u4", "write", nbytes, jobs=4, direct=True,
                                                    bs="1m", engine="io_uring", iodepth=16)
    ref["read io_uring O_DIRECT qd16 1m x4"] = fio(d, "u4", "read", nbytes, jobs=4, direct=True,
                                                   bs="1m", engine="io_uring", iodepth=16)
    fresh()
    ref["write psync O_DIRECT x4"] = fio(d, "wd4", "write", nbytes, jobs=4, direct=True)
    # Reads of the 4 files that write left (same job name: fio reuses them).
    ref["read psync O_DIRECT x4"] = fio(d, "wd4", "read", nbytes, jobs=4, direct=True)
    drop_file_cache(d)
    ref["read psync buffered x4 (cold)"] = fio(d, "wd4", "read", nbytes, jobs=4)
    shutil.rmtree(d)
    return {k: v / 1e9 for k, v in ref.items()}


# ------------------------------------------------------------------------ page cache
def drop_file_cache(directory):
    for root, _, files in os.walk(directory):
        for f in files:
            fd = os.open(os.path.join(root, f), os.O_RDONLY)
            os.fdatasync(fd)
            os.posix_fadvise(fd, 0, 0, os.POSIX_FADV_DONTNEED)
            os.close(fd)


def cache_files(directory):
    """Reads every file under `directory` through the page cache."""
    buf = bytearray(8 << 20)
    for root, _, files in os.walk(directory):
        for f in files:
            with open(os.path.join(root, f), "rb", buffering=0) as fh:
                while fh.readinto(buf):
                    pass


# ------------------------------------------------------------------------ shardguard
def run_ranks(binary, cmd, directory, step, world, extra=()):
    """Starts `world` rank processes, lets them prepare, releases them together, and returns
    (seconds from the first start to the last end, outputs)."""
    procs = [subprocess.Popen([binary, cmd, directory, str(step), str(r), str(world), *extra],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
             for r in range(world)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            sys.exit(f"{cmd}: a rank failed to start")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [json.loads(p.communicate()[0]) for p in procs]
    for p in procs:
        if p.returncode != 0:
            sys.exit(f"{cmd} failed with exit code {p.returncode}")
    wall = (max(o["end_ns"] for o in outs) - min(o["start_ns"] for o in outs)) / 1e9
    return wall, outs


def resume_run(args, ckpt_dir, run_dir, world):
    """`shardguard run` of the resume job; returns (resume seconds, breakdown dict)."""
    cmd = [args.shardguard, "run", "--nproc", str(world), "--checkpoint-dir", ckpt_dir,
           "--run-dir", run_dir, "--", args.bin, "resume"]
    t_launch = time.monotonic_ns()
    done = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if done.returncode != 0:
        sys.exit(f"shardguard run exited {done.returncode}: {done.stderr[-2000:]}")
    outs = []
    for root, _, files in os.walk(run_dir):
        for f in files:
            if f.startswith("rank-") and f.endswith(".log"):
                for line in open(os.path.join(root, f)):
                    if line.startswith('{"cmd":"resume"'):
                        outs.append(json.loads(line))
    if len(outs) != world:
        sys.exit(f"resume: {len(outs)} of {world} ranks reported")
    # Per rank: launch -> its step's end, minus its own start-up (model construction).
    per_rank = [(o["step_end_ns"] - t_launch - (o["load_start_ns"] - o["entry_ns"])) / 1e9
                for o in outs]
    breakdown = {
        "launch_to_entry": max(o["entry_ns"] - t_launch for o in outs) / 1e9,
        "load": max(o["load_end_ns"] - o["load_start_ns"] for o in outs) / 1e9,
        "step": max(o["step_end_ns"] - o["load_end_ns"] for o in outs) / 1e9,
        "job_startup_excluded": max(o["load_start_ns"] - o["entry_ns"] for o in outs) / 1e9,
    }
    return max(per_rank), breakdown


def shardguard_round(args, base, nbytes, worlds, rnd):
    res = {}
    # The order of the rank counts turns with each round, so that none always writes first
    # after fio (this VM's disk varies from one write to the next).
    turn = (rnd - 1) % len(worlds)
    for world in worlds[turn:] + worlds[:turn]:
        d = os.path.join(base, f"sg-w{world}")
        os.makedirs(d)
        step = 1
        wall, outs = run_ranks(args.bin, "save", d, step, world, [str(nbytes)])
        commit = {"seconds": outs[0]["commit_seconds"]}  # rank 0's, inside the wall time
        total = sum(o["bytes"] for o in outs)
        subprocess.run([args.bin, "drop", d, str(step)], check=True, capture_output=True)
        cold_wall, louts = run_ranks(args.bin, "load", d, step, world)
        loaded = sum(o["bytes"] for o in louts)
        subprocess.run([args.bin, "drop", d, str(step)], check=True, capture_output=True)
        resume_s, parts = resume_run(args, d, os.path.join(base, f"run-w{world}"), world)
        cache_files(os.path.join(d, f"step-{step:09d}"))
        warm_wall, _ = run_ranks(args.bin, "load", d, step, world)
        r = {"save_gbs": gbs(total, wall), "save_s": wall, "commit_s": commit["seconds"],
             "cold_gbs": gbs(loaded, cold_wall), "cold_s": cold_wall,
             "resume_s": resume_s, "resume_parts": parts, "warm_ranks_gbs": gbs(loaded, warm_wall)}
        print(f"  [{rnd}] shardguard {world} rank(s): save {r['save_gbs']:.2f} GB/s "
              f"({wall:.2f} s, commit {commit['seconds'] * 1e3:.0f} ms), cold load "
              f"{r['cold_gbs']:.2f} GB/s ({cold_wall:.2f} s), resume {resume_s:.2f} s "
              f"(launch {parts['launch_to_entry']:.2f} + load {parts['load']:.2f} + step "
              f"{parts['step']:.2f}; job start-up {parts['job_startup_excluded']:.2f} s excluded), "
              f"warm {r['warm_ranks_gbs']:.2f} GB/s", flush=True)
        res[world] = r
        shutil.rmtree(d)
        shutil.rmtree(os.path.join(base, f"run-w{world}"), ignore_errors=True)
    return res


def warm_round(args, base, nbytes, rnd):
    d = os.path.join(base, "warm")
    os.makedirs(d)
    run_ranks(args.bin, "save", d, 1, 1, [str(nbytes)])
    w = json.loads(subprocess.run([args.bin, "warm", d, "1", "5"], check=True,
                                  capture_output=True, text=True).stdout)
    shutil.rmtree(d)
    print(f"  [{rnd}] warm load (1 process, verified): median {w['load_median_gbs']:.2f} GB/s, "
          f"best {w['load_best_gbs']:.2f}; memcpy 1 thread {w['memcpy_gbs']:.2f} (median "
          f"{w['memcpy_median_gbs']:.2f}); XXH3 {w['xxh3_gbs']:.2f}; memcpy+XXH3 "
          f"{w['copy_hash_gbs']:.2f}; load CPU {w['load_cpu_seconds_best']:.3f} s", flush=True)
    return w


def stall_round(args, base, nbytes, rnd):
    res = {}
    for mode in ("none", "hint", "manifest"):
        d = os.path.join(base, f"stall-{mode}")
        os.makedirs(d)
        gap_ms = 0 if mode == "none" else int(args.stall_gap * 1000)
        s = json.loads(subprocess.run([args.bin, "stall", str(nbytes), str(gap_ms), mode, d],
                                      check=True, capture_output=True, text=True).stdout)
        shutil.rmtree(d)
        s["population_gbs"] = (gbs(s["populated_bytes"], s["populate_seconds"])
                               if s["populate_seconds"] > 0 else None)
        pop = (f"population {s['population_gbs']:.2f} GB/s "
               f"({s['populated_bytes'] / 2**30:.2f} GiB in {s['populate_seconds']:.2f} s"
               f"{', still running at the first save' if s['populating_at_first_save'] else ''})"
               if s["population_gbs"] else "no background population")
        print(f"  [{rnd}] stall, staging {mode:8s}: first {s['first_stall_seconds'] * 1e3:.0f} ms, "
              f"steady {s['stall_seconds'] * 1e3:.0f} ms (memcpy {s['memcpy_seconds'] * 1e3:.0f} ms), "
              f"{pop}, huge pages {s['huge_page_kb'] >> 10} MiB", flush=True)
        res[mode] = s
    return res


def peers_round(base, nbytes, rnd, strict=False):
    res = {}
    py = "/usr/bin/python3"
    script = os.path.join(HERE, "torch_peers.py")
    for name, extra in (("torch.save", ["torch-save"]), ("DCP x1", ["dcp"]), ("DCP x2", ["dcp"])):
        d = os.path.join(base, "peer")
        os.makedirs(d)
        argv = [py, script, *extra, d, str(nbytes)] + ([name[-1]] if extra == ["dcp"] else [])
        done = subprocess.run(argv, capture_output=True, text=True)
        shutil.rmtree(d, ignore_errors=True)
        if done.returncode != 0:
            print(f"  [{rnd}] {name}: failed ({done.stderr.strip().splitlines()[-1:]})")
            if strict:
                sys.exit(f"{name} failed (--strict)")
            continue
        o = json.loads(done.stdout.strip().splitlines()[-1])
        if not o["verified"]:
            sys.exit(f"{name}: the loaded state differs from the saved one")
        res[name] = {"save_gbs": gbs(o["bytes"], o["save_seconds"]),
                     "cold_gbs": gbs(o["bytes"], o["load_cold_seconds"])}
        print(f"  [{rnd}] {name:10s} save {res[name]['save_gbs']:.2f} GB/s, cold load "
              f"{res[name]['cold_gbs']:.2f} GB/s", flush=True)
    return res


# ---------------------------------------------------------------------------- report
def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(xs, unit="", scale=1.0, digits=2):
    """'median (min ...)' of a list."""
    xs = [x * scale for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.{digits}f}{unit} (min {min(xs):.{digits}f})"


def machine(base):
    info = {"hostname": socket.gethostname(), "cpus": os.cpu_count(), "kernel": platform.release(),
            "loadavg": loadavg()}
    try:
        for line in open("/proc/cpuinfo"):
            if line.startswith("model name"):
                info["cpu"] = line.split(":", 1)[1].strip()
                break
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal"):
                info["memory_bytes"] = int(line.split()[1]) * 1024
        df = subprocess.run(["df", "--output=source,fstype", base], capture_output=True,
                            text=True).stdout.split("\n")[1].split()
        info["device"], info["filesystem"] = df[0], df[1]
        info["thp"] = open("/sys/kernel/mm/transparent_hugepage/enabled").read().strip()
    except (OSError, IndexError):
        pass
    return info


def report(args, nbytes, worlds, rounds):
    n = len(rounds)
    print(f"\n== checkpoint benchmark, {nbytes / 2**30:.2f} GiB of state, {n} interleaved rounds: "
          "median (min) ==")
    print("load average per round (1/5/15 min, start -> end): " + "; ".join(
        f"{r['load_start'][0]:.1f}/{r['load_start'][1]:.1f}/{r['load_start'][2]:.1f} -> "
        f"{r['load_end'][0]:.1f}/{r['load_end'][1]:.1f}/{r['load_end'][2]:.1f}" for r in rounds))
    best_w = [max(v for k, v in r["fio"].items() if k.startswith("write")) for r in rounds]
    best_r = [max(v for k, v in r["fio"].items() if k.startswith("read")) for r in rounds]
    for k in rounds[0]["fio"]:
        print(f"  fio {k:36s} {fmt([r['fio'][k] for r in rounds], ' GB/s')}")
    print(f"  best fio write {fmt(best_w, ' GB/s')}, best fio read {fmt(best_r, ' GB/s')}")
    print(f"\n{'ranks':>5} | {'save GB/s':>17} {'/best fio':>16} | {'cold load GB/s':>17} "
          f"{'/best fio':>16} | {'resume s':>16} {'- cold load s':>16}")
    for w in worlds:
        sg = [r["sg"][w] for r in rounds]
        print(f"{w:>5} | {fmt([s['save_gbs'] for s in sg]):>17} "
              f"{fmt([s['save_gbs'] / b for s, b in zip(sg, best_w)]):>16} | "
              f"{fmt([s['cold_gbs'] for s in sg]):>17} "
              f"{fmt([s['cold_gbs'] / b for s, b in zip(sg, best_r)]):>16} | "
              f"{fmt([s['resume_s'] for s in sg]):>16} "
              f"{fmt([s['resume_s'] - s['cold_s'] for s in sg]):>16}")
    warm = [r["warm"] for r in rounds]
    print(f"\nwarm load, verified, 1 process: {fmt([w['load_median_gbs'] for w in warm], ' GB/s')}; "
          f"one thread's memcpy {fmt([w['memcpy_median_gbs'] for w in warm], ' GB/s')}; ratio "
          f"{fmt([w['load_median_gbs'] / w['memcpy_median_gbs'] for w in warm])} (target >= 0.8)")
    print(f"  (best of 5 each: load {fmt([w['load_best_gbs'] for w in warm], ' GB/s')}, memcpy "
          f"{fmt([w['memcpy_gbs'] for w in warm], ' GB/s')}; load CPU "
          f"{fmt([w['load_cpu_seconds_best'] for w in warm], ' s', digits=3)} for "
          f"{warm[0]['bytes'] / 2**30:.2f} GiB)")
    stalls = [r["stall"] for r in rounds]
    print(f"\nasync save stall ({nbytes / 2**30:.2f} GiB, one rank), client start -> first save "
          f"{args.stall_gap:.0f} s:")
    for mode in ("none", "hint", "manifest"):
        ss = [s[mode] for s in stalls]
        print(f"  staging {mode:8s}: first {fmt([s['first_stall_seconds'] for s in ss], ' ms', 1e3, 0)}, "
              f"steady {fmt([s['stall_seconds'] for s in ss], ' ms', 1e3, 0)}, first/steady "
              f"{fmt([s['first_stall_seconds'] / s['stall_seconds'] for s in ss])} "
              f"(target <= 1.5), population {fmt([s['population_gbs'] for s in ss], ' GB/s')}")
    print(f"  memcpy of the same bytes into touched memory: "
          f"{fmt([s['hint']['memcpy_seconds'] for s in stalls], ' ms', 1e3, 0)}")
    peers = {}
    if rounds[0].get("peers"):
        print()
        best_save = [max(r["sg"][w]["save_gbs"] for w in worlds) for r in rounds]
        best_cold = [max(r["sg"][w]["cold_gbs"] for w in worlds) for r in rounds]
        for name in ("torch.save", "DCP x1", "DCP x2"):
            got = [(r["peers"][name], s, c) for r, s, c in zip(rounds, best_save, best_cold)
                   if name in r.get("peers", {})]
            if not got:
                continue
            peers[name] = got
            target = " (target >= 5)" if name == "torch.save" else " (target >= 2)"
            print(f"  {name:10s} save {fmt([p['save_gbs'] for p, _, _ in got], ' GB/s')}, cold load "
                  f"{fmt([p['cold_gbs'] for p, _, _ in got], ' GB/s')}; shardguard's best save / it "
                  f"{fmt([s / p['save_gbs'] for p, s, _ in got])}{target}, best cold load / it "
                  f"{fmt([c / p['cold_gbs'] for p, _, c in got])}")
    return best_w, best_r


def calibration(args, nbytes, worlds, rounds, best_w, best_r, base):
    per = lambda key: {str(w): med([r["sg"][w][key] for r in rounds]) for w in worlds}
    save, load = per("save_gbs"), per("cold_gbs")
    stalls = [r["stall"] for r in rounds]
    steady = med([s["hint"]["stall_seconds"] for s in stalls])
    return {
        "format": "shardguard-bench-calibration/1",
        "state_bytes": nbytes,
        "save_gbps_per_node": max(save.values()),
        "load_gbps_per_node": max(load.values()),
        "snapshot_seconds_per_gib": steady / (nbytes / 2**30),
        "commit_seconds": med([max(r["sg"][w]["commit_s"] for w in worlds) for r in rounds]),
        "save_gbps": save,
        "load_gbps": load,
        "cold_load_seconds": per("cold_s"),
        "resume_seconds": per("resume_s"),
        "warm_load_gbps": med([r["warm"]["load_median_gbs"] for r in rounds]),
        "memcpy_gbps": med([r["warm"]["memcpy_median_gbs"] for r in rounds]),
        "first_stall_seconds": {m: med([s[m]["first_stall_seconds"] for s in stalls])
                                for m in ("none", "hint", "manifest")},
        "steady_stall_seconds": steady,
        "population_gbps": {m: med([s[m]["population_gbs"] for s in stalls]) for m in ("hint", "manifest")},
        "fio_best_write_gbps": med(best_w),
        "fio_best_read_gbps": med(best_r),
        "rounds": len(rounds),
        "machine": machine(base),
        "created_unix": int(time.time()),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", default="4GiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir under /var/tmp)")
    ap.add_argument("--bin", default="build/bench/sg_bench_ckpt")
    ap.add_argument("--shardguard", default="build/cli/shardguard")
    ap.add_argument("--stall-gap", default="20s", help="'training' between client start and the first save")
    ap.add_argument("--calibration", default=None, help="where to write the calibration JSON")
    ap.add_argument("--no-peers", action="store_true", help="skip torch.save and DCP")
    ap.add_argument("--strict", action="store_true",
                    help="a peer that fails fails the bench (the CTest smoke run)")
    args = ap.parse_args()
    args.stall_gap = parse_seconds(args.stall_gap)
    args.bin, args.shardguard = os.path.abspath(args.bin), os.path.abspath(args.shardguard)
    nbytes = parse_size(args.bytes)
    worlds = [int(w) for w in args.worlds.split(",")]
    if not shutil.which("fio"):
        sys.exit("fio is needed (apt-get install fio)")
    for b in (args.bin, args.shardguard):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is not built (cmake --build build --target sg_bench_ckpt shardguard)")
    base = tempfile.mkdtemp(prefix="sg-bench-", dir=args.dir or "/var/tmp")
    try:
        print(f"state: {nbytes / 2**30:.2f} GiB in 16 tensors; directory {base}; "
              f"{args.rounds} rounds; {os.cpu_count()} CPUs", flush=True)
        rounds = []
        for rnd in range(1, args.rounds + 1):
            r = {"load_start": loadavg()}
            r["fio"] = fio_round(base, nbytes)
            print(f"  [{rnd}] fio: " + ", ".join(f"{k} {v:.2f}" for k, v in r["fio"].items()), flush=True)
            r["sg"] = shardguard_round(args, base, nbytes, worlds, rnd)
            r["warm"] = warm_round(args, base, nbytes, rnd)
            r["stall"] = stall_round(args, base, nbytes, rnd)
            if not args.no_peers:
                r["peers"] = peers_round(base, nbytes, rnd, args.strict)
            r["load_end"] = loadavg()
            print(f"  [{rnd}] load average {r['load_start']} -> {r['load_end']}", flush=True)
            rounds.append(r)
        best_w, best_r = report(args, nbytes, worlds, rounds)
        cal = calibration(args, nbytes, worlds, rounds, best_w, best_r, base)
        path = args.calibration or os.path.join(os.path.dirname(args.bin), "..", "calibration.json")
        with open(path, "w") as f:
            json.dump(cal, f, indent=1)
        print(f"\ncalibration written to {os.path.normpath(path)}")
    finally:
        shutil.rmtree(base, ignore_errors=True)


if __name__ == "__main__":
    main()
