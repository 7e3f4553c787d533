#!/usr/bin/python3
"""Checkpoint save/load benchmark: shardguard against the disk (fio) and memory (memcpy)
measured in the same run on the same directory, and against torch.save and
torch.distributed.checkpoint (DCP) on the same bytes when Debian's python3-torch is there.

Usage: /usr/bin/python3 bench/ckpt_bench.py [--bytes 4GiB] [--dir DIR] [--bin build/bench/sg_bench_ckpt]
Prints every measurement as it goes and a short table last. Needs fio.

Loads: "cold" right after the files are evicted from the page cache; "reload" right after
that (the reader reads uncached data with O_DIRECT, so this is a cold load again);
"warm" after the files were read through the page cache first (as by `cat`).
The worker reads ReaderOptions from SG_BENCH_READ_THREADS, SG_BENCH_READ_DIRECT,
SG_BENCH_READ_REQUEST_KIB and SG_BENCH_MIN_PREAD_KIB (see bench/ckpt_bench_main.cc).
"""
import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time

UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}


def parse_size(text):
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * UNITS[unit])
    return int(text)


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def fio(directory, name, rw, size, jobs=1, direct=False, fsync=False, bs="8m"):
    """Runs fio and returns bytes/s summed over jobs."""
    args = ["fio", f"--name={name}", f"--directory={directory}", f"--rw={rw}", f"--bs={bs}",
            f"--size={size // jobs}", f"--numjobs={jobs}", "--group_reporting", "--ioengine=psync",
            f"--direct={1 if direct else 0}", "--invalidate=1", "--output-format=json"]
    if fsync:
        args.append("--end_fsync=1")
    out = subprocess.run(args, check=True, capture_output=True, text=True).stdout
    job = json.loads(out[out.index("{"):])["jobs"][0]
    side = job["write"] if "write" in rw else job["read"]
    return side["bw_bytes"]


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


def run_ranks(binary, cmd, directory, step, world, extra=()):
    """Starts `world` rank processes, lets them prepare, releases them together, and returns
    (seconds from the first start to the last end, outputs)."""
    procs = [subprocess.Popen([binary, cmd, directory, str(step), str(r), str(world), *extra],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True) for r in range(world)]
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


def torch_bench(directory, nbytes):
    """torch.save and DCP on 16 float32 tensors of the same total size; None without torch."""
    try:
        import torch
    except ImportError as e:
        print(f"torch not available ({e}); torch figures skipped")
        return None
    dcp = None
    for module in ("torch.distributed.checkpoint", "torch.distributed._shard.checkpoint"):
        try:
            dcp = __import__(module, fromlist=["save_state_dict"])
            break
        except Exception as e:  # Debian's 1.13 fails to import it on Python 3.11
            dcp_error = f"{module}: {type(e).__name__}: {e}"
    if dcp is None:
        print(f"DCP not available ({dcp_error}); DCP figures skipped")
    cols = 4096
    rows = max(1, nbytes // 16 // cols // 4)
    state = {f"layer{t}": torch.arange(rows * cols, dtype=torch.float32).reshape(rows, cols) + t
             for t in range(16)}
    total = rows * cols * 4 * 16
    res = {}
    path = os.path.join(directory, "torch.pt")
    t0 = time.perf_counter()
    with open(path, "wb") as f:
        torch.save(state, f)
        f.flush()
        os.fsync(f.fileno())
    res["torch.save"] = gbs(total, time.perf_counter() - t0)
    drop_file_cache(directory)
    t0 = time.perf_counter()
    loaded = torch.load(path)
    res["torch.load cold"] = gbs(total, time.perf_counter() - t0)
    del loaded
    os.remove(path)

    if dcp is None:
        return res
    dcp_dir = os.path.join(directory, "dcp")
    os.makedirs(dcp_dir)
    t0 = time.perf_counter()
    dcp.save_state_dict(state, dcp.FileSystemWriter(dcp_dir), no_dist=True)
    res["DCP save"] = gbs(total, time.perf_counter() - t0)
    drop_file_cache(dcp_dir)
    target = {k: torch.empty_like(v) for k, v in state.items()}
    t0 = time.perf_counter()
    dcp.load_state_dict(target, dcp.FileSystemReader(dcp_dir), no_dist=True)
    res["DCP load cold"] = gbs(total, time.perf_counter() - t0)
    shutil.rmtree(dcp_dir)
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", default="4GiB")
    ap.add_argument("--dir", default=None, help="directory on the disk to measure (default: a temp dir under /var/tmp)")
    ap.add_argument("--bin", default="build/bench/sg_bench_ckpt")
    ap.add_argument("--worlds", default="1,2,4")
    args = ap.parse_args()
    nbytes = parse_size(args.bytes)
    worlds = [int(w) for w in args.worlds.split(",")]
    if not shutil.which("fio"):
        sys.exit("fio is needed (apt-get install fio)")
    base = tempfile.mkdtemp(prefix="sg-bench-", dir=args.dir or "/var/tmp")
    try:
        run(args, nbytes, worlds, base)
    finally:
        shutil.rmtree(base, ignore_errors=True)


def run(args, nbytes, worlds, base):
    print(f"state: {nbytes / 2**30:.2f} GiB in 16 tensors; directory {base}")
    ref = {}
    fio_dir = os.path.join(base, "fio")
    os.makedirs(fio_dir)
    ref["fio write buffered+fsync"] = fio(fio_dir, "wb", "write", nbytes, fsync=True)
    shutil.rmtree(fio_dir); os.makedirs(fio_dir)
    for jobs in (1, 2, 4):
        ref[f"fio write O_DIRECT x{jobs}"] = fio(fio_dir, f"wd{jobs}", "write", nbytes, jobs=jobs, direct=True)
        if jobs != 4:
            shutil.rmtree(fio_dir); os.makedirs(fio_dir)
    # Reads of the 4 files the last write left (same job name, so fio reuses them).
    ref["fio read O_DIRECT x4"] = fio(fio_dir, "wd4", "read", nbytes, jobs=4, direct=True)
    drop_file_cache(fio_dir)
    ref["fio read buffered x4 (cold)"] = fio(fio_dir, "wd4", "read", nbytes, jobs=4)
    shutil.rmtree(fio_dir)
    for k, v in ref.items():
        print(f"  {k:34s} {v / 1e9:6.2f} GB/s")
    best_write = max(v for k, v in ref.items() if "write" in k) / 1e9
    best_read = max(v for k, v in ref.items() if "read" in k) / 1e9

    stall = json.loads(subprocess.run([args.bin, "stall", str(nbytes)], check=True,
                                      capture_output=True, text=True).stdout)
    memcpy_gbs = gbs(stall["bytes"], stall["memcpy_seconds"])
    print(f"  memcpy into touched memory          {memcpy_gbs:6.2f} GB/s")

    rows = []
    for step, world in enumerate(worlds, start=1):
        d = os.path.join(base, f"w{world}")
        os.makedirs(d)
        wall, outs = run_ranks(args.bin, "save", d, step, world, [str(nbytes)])
        t0 = time.perf_counter()
        subprocess.run([args.bin, "commit", d, str(step), str(world)], check=True, capture_output=True)
        wall += time.perf_counter() - t0
        total = sum(o["bytes"] for o in outs)
        save = gbs(total, wall)
        subprocess.run([args.bin, "drop", d, str(step)], check=True, capture_output=True)
        cold_wall, louts = run_ranks(args.bin, "load", d, step, world)
        loaded = sum(o["bytes"] for o in louts)
        cold = gbs(loaded, cold_wall)
        reload_wall, _ = run_ranks(args.bin, "load", d, step, world)
        reload = gbs(loaded, reload_wall)
        cache_files(d)
        warm_wall, _ = run_ranks(args.bin, "load", d, step, world)
        warm = gbs(loaded, warm_wall)
        print(f"  shardguard {world} rank(s): save {save:.2f} GB/s, cold load {cold:.2f} GB/s, "
              f"reload {reload:.2f} GB/s, warm load {warm:.2f} GB/s")
        rows.append((world, save, cold, warm))
        shutil.rmtree(d)

    torch_res = torch_bench(base, nbytes)
    if torch_res:
        for k, v in torch_res.items():
            print(f"  {k:34s} {v:6.2f} GB/s")

    print("\n== checkpoint benchmark: ratios against references measured in this run ==")
    print(f"best fio write {best_write:.2f} GB/s, best fio read {best_read:.2f} GB/s, memcpy {memcpy_gbs:.2f} GB/s")
    print(f"{'ranks':>5} {'save GB/s':>10} {'/fio':>6} {'cold load':>10} {'/fio':>6} {'warm load':>10} {'/memcpy':>8}")
    for world, save, cold, warm in rows:
        print(f"{world:>5} {save:>10.2f} {save / best_write:>6.2f} {cold:>10.2f} {cold / best_read:>6.2f} {warm:>10.2f} {warm / memcpy_gbs:>8.2f}")
    print(f"async stall: {stall['stall_seconds'] * 1e3:.0f} ms for {stall['bytes'] / 2**30:.2f} GiB, "
          f"{stall['stall_seconds'] / stall['memcpy_seconds']:.2f}x memcpy into touched memory "
          f"(first save, staging not yet allocated: {stall['first_stall_seconds'] * 1e3:.0f} ms)")
    if torch_res:
        best_save = max(r[1] for r in rows)
        best_cold = max(r[2] for r in rows)
        for ours, label, peer in ((best_save, "save", "torch.save"), (best_save, "save", "DCP save"),
                                  (best_cold, "cold load", "torch.load cold"), (best_cold, "cold load", "DCP load cold")):
            if peer in torch_res:
                print(f"{label}: {ours:.2f} GB/s vs {peer} {torch_res[peer]:.2f} GB/s = {ours / torch_res[peer]:.2f}x")


if __name__ == "__main__":
    main()
