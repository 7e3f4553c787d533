#!/usr/bin/python3
"""Bucket benchmark: shardguard's save and cold load on an S3 bucket (a throwaway Ceph RGW on
loopback, started here) against the AWS CLI, rclone and a raw ceiling of parallel curl PUTs and
GETs, all to the same server in the same run.

Usage: /usr/bin/python3 bench/bucket_bench.py [--bytes 4GiB] [--rounds 3] [--worlds 1,2,4]
           [--bin build/bench/sg_bench_ckpt] [--rgw build/tests/support/sg_rgw]
           [--max-inflight 256MiB] [--part-size 16MiB] [--curl-parallel 16,32]
Needs Debian's ceph-mon, ceph-osd, radosgw, awscli, rclone and curl; about 2 x BYTES of RAM
and 4 x BYTES of disk. The OSD is bluestore on a sparse file (a 64 MiB cache), so the server
writes to and reads from the disk as a real one does; on this kind of VM the server's CPU, which
shares the cores with the clients, is what bounds every figure.

Rounds are interleaved - shardguard (each world size), awscli, rclone, curl, then again - and
each ratio is taken within a round, then the median over rounds, because this kind of VM
changes speed from minute to minute. The state is the one bench/ckpt_bench.py uses: 16 float32
tensors of [rows, 4096], split by rows across ranks, random bits (incompressible).

What one round measures:
  shardguard  each world size W: W rank processes (sg_bench_ckpt save s3://...) each upload
              their shard (multipart, parts in parallel within max_inflight) and sidecar, rank
              0 commits the manifest (one conditional PUT); wall time from the common start to
              the commit. Cold load: W fresh processes read their rows of every tensor by
              ranged GETs into their whole state (allocated and touched before the clock),
              every block checked against its checksum. Peak RSS of each rank minus the state
              it holds itself: the transfers' memory, compared with max_inflight.
  awscli      `aws s3 cp --recursive` of the same shard files (the ones a 4-rank save writes,
              in --scratch) up and down again (into --scratch); its defaults (10 requests at once,
              8 MiB parts). Process start-up is included, as a user sees it.
  rclone      `rclone copy` of the same files up and down; its defaults (4 transfers, 4
              concurrent parts each).
  curl        the ceiling: BYTES as part-size objects, PUT and then GET with one curl --parallel
              at each --curl-parallel width (SigV4 by curl itself), the best width of each.

Targets (issue 22): save and cold load >= 1.0x the faster of awscli and rclone, >= 0.8x the
curl ceiling; a rank's peak RSS within max_inflight + 10 % above its state.
"""
import argparse
import json
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time

HERE = os.path.dirname(os.path.abspath(__file__))
UNITS = {"B": 1, "KiB": 1 << 10, "MiB": 1 << 20, "GiB": 1 << 30, "KB": 10**3, "MB": 10**6, "GB": 10**9}
BUCKET = "bench"


def parse_size(text):
    for unit in sorted(UNITS, key=len, reverse=True):
        if text.endswith(unit):
            return int(float(text[: -len(unit)]) * UNITS[unit])
    return int(text)


def gbs(nbytes, seconds):
    return nbytes / seconds / 1e9 if seconds > 0 else float("inf")


def loadavg():
    with open("/proc/loadavg") as f:
        return [float(x) for x in f.read().split()[:3]]


def med(xs):
    xs = [x for x in xs if x is not None]
    return statistics.median(xs) if xs else None


def fmt(xs, digits=2):
    xs = [x for x in xs if x is not None]
    if not xs:
        return "-"
    return f"{statistics.median(xs):.{digits}f} (min {min(xs):.{digits}f})"


class Rgw:
    """sg_rgw in the background: a one-OSD Ceph cluster with radosgw on loopback."""

    def __init__(self, binary, store_bytes, bluestore):
        argv = [binary, "--bucket", BUCKET, "--store-bytes", str(store_bytes)]
        if bluestore:
            argv.append("--bluestore")
        self.proc = subprocess.Popen(argv, stdout=subprocess.PIPE, text=True)
        self.endpoint = None
        keys = {}
        deadline = time.monotonic() + 120
        while time.monotonic() < deadline and not keys:
            line = self.proc.stdout.readline()
            if not line:
                sys.exit("sg_rgw exited before it served (see its stderr above)")
            if line.startswith("listening "):
                self.endpoint = line.split()[1]
            elif line.startswith("AWS_ACCESS_KEY_ID="):
                keys = dict(kv.split("=", 1) for kv in line.split())
        if not keys:
            self.stop()
            sys.exit("sg_rgw did not start within 120 s")
        self.key, self.secret = keys["AWS_ACCESS_KEY_ID"], keys["AWS_SECRET_ACCESS_KEY"]

    def env(self, extra=None):
        e = dict(os.environ)
        # The test cluster's keys and endpoint only; a CA bundle in the caller's environment
        # makes rclone refuse to start even for plain http.
        for k in ("AWS_PROFILE", "AWS_SESSION_TOKEN", "AWS_CA_BUNDLE"):
            e.pop(k, None)
        e.update({"AWS_ACCESS_KEY_ID": self.key, "AWS_SECRET_ACCESS_KEY": self.secret,
                  "AWS_ENDPOINT_URL": self.endpoint, "AWS_REGION": "us-east-1",
                  "AWS_DEFAULT_REGION": "us-east-1", "AWS_CONFIG_FILE": "/dev/null",
                  "AWS_SHARED_CREDENTIALS_FILE": "/dev/null"})
        e.update(extra or {})
        return e

    def stop(self):
        if self.proc.poll() is None:
            self.proc.send_signal(signal.SIGTERM)
            try:
                self.proc.wait(60)
            except subprocess.TimeoutExpired:
                self.proc.kill()


# ------------------------------------------------------------------------ shardguard
def run_ranks(args, env, cmd, url, step, world, extra=()):
    """`world` rank processes, released together; (wall seconds, outputs)."""
    procs = [subprocess.Popen([args.bin, cmd, url, str(step), str(r), str(world), *extra],
                              stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
             for r in range(world)]
    for p in procs:
        if p.stdout.readline().strip() != "ready":
            for q in procs:
                q.kill()
            sys.exit(f"sg_bench_ckpt {cmd} {url}: a rank failed to start")
    for p in procs:
        p.stdin.write("go\n")
        p.stdin.flush()
    outs = [p.communicate()[0] for p in procs]
    for p in procs:
        if p.returncode != 0:
            sys.exit(f"sg_bench_ckpt {cmd} {url} failed with exit code {p.returncode}")
    outs = [json.loads(o) for o in outs]
    wall = (max(o["end_ns"] for o in outs) - min(o["start_ns"] for o in outs)) / 1e9
    return wall, outs


def clear(args, env, url):
    done = subprocess.run([args.bin, "clear", url], capture_output=True, text=True, env=env)
    if done.returncode != 0:
        sys.exit(f"clearing {url}: {done.stderr.strip()}")


def shardguard_round(args, rgw, nbytes, worlds, rnd):
    env = rgw.env({"SHARDGUARD_S3_MAX_INFLIGHT": str(args.max_inflight),
                   "SHARDGUARD_S3_PART_SIZE": str(args.part_size)})
    res = {}
    turn = (rnd - 1) % len(worlds)
    for world in worlds[turn:] + worlds[:turn]:
        url = f"s3://{BUCKET}/sg-w{world}"
        wall, outs = run_ranks(args, env, "save", url, 1, world, [str(nbytes)])
        total = sum(o["bytes"] for o in outs)
        cold, louts = run_ranks(args, env, "load", url, 1, world)
        loaded = sum(o["bytes"] for o in louts)
        clear(args, env, url)
        over = lambda os_: max(o["rss_peak_bytes"] - o["state_bytes"] for o in os_)
        r = {"save_gbs": gbs(total, wall), "save_s": wall, "commit_s": outs[0]["commit_seconds"],
             "load_gbs": gbs(loaded, cold), "load_s": cold,
             "save_rss_over": over(outs), "load_rss_over": over(louts)}
        print(f"  [{rnd}] shardguard {world} rank(s): save {r['save_gbs']:.3f} GB/s ({wall:.2f} s, "
              f"commit {r['commit_s'] * 1e3:.0f} ms), cold load {r['load_gbs']:.3f} GB/s "
              f"({cold:.2f} s); peak RSS above the state: save {r['save_rss_over'] / 2**20:.0f} MiB, "
              f"load {r['load_rss_over'] / 2**20:.0f} MiB", flush=True)
        res[world] = r
    return res


# ------------------------------------------------------------------------ the peers
def timed(cmd, env):
    t0 = time.monotonic()
    done = subprocess.run(cmd, env=env, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"{' '.join(cmd[:4])} ... exited {done.returncode}: {done.stderr[-1500:]}")
    return time.monotonic() - t0


def empty_dir(path):
    shutil.rmtree(path, ignore_errors=True)
    os.makedirs(path)


def tree_bytes(path):
    return sum(os.path.getsize(os.path.join(d, f)) for d, _, fs in os.walk(path) for f in fs)


def peer_round(args, label, env, up_cmd, down_cmd, src, dst, prefix, rnd):
    """One tool's upload of `src` and download into `dst`, checked by size, then cleared."""
    up = timed(up_cmd, env)
    empty_dir(dst)
    down = timed(down_cmd, env)
    nbytes = tree_bytes(dst)
    if nbytes != tree_bytes(src):
        sys.exit(f"{label} downloaded {nbytes} bytes of {tree_bytes(src)}")
    empty_dir(dst)
    clear(args, env, f"s3://{BUCKET}/{prefix}")
    r = {"save_gbs": gbs(nbytes, up), "load_gbs": gbs(nbytes, down)}
    print(f"  [{rnd}] {label}: up {r['save_gbs']:.3f} GB/s ({up:.2f} s), down {r['load_gbs']:.3f} "
          f"GB/s ({down:.2f} s)", flush=True)
    return r


def awscli_round(args, rgw, src, dst, rnd):
    aws = [args.aws, "--endpoint-url", rgw.endpoint, "s3", "cp", "--recursive", "--only-show-errors"]
    return peer_round(args, "awscli", rgw.env(), aws + [src, f"s3://{BUCKET}/aws/"],
                      aws + [f"s3://{BUCKET}/aws/", dst], src, dst, "aws", rnd)


def rclone_round(args, rgw, src, dst, rnd):
    env = rgw.env({"RCLONE_CONFIG_RGW_TYPE": "s3", "RCLONE_CONFIG_RGW_PROVIDER": "Ceph",
                   "RCLONE_CONFIG_RGW_ENDPOINT": rgw.endpoint,
                   "RCLONE_CONFIG_RGW_ACCESS_KEY_ID": rgw.key,
                   "RCLONE_CONFIG_RGW_SECRET_ACCESS_KEY": rgw.secret})
    rc = [args.rclone, "--config", "/dev/null", "copy"]
    return peer_round(args, "rclone", env, rc + [src, f"rgw:{BUCKET}/rclone/"],
                      rc + [f"rgw:{BUCKET}/rclone/", dst], src, dst, "rclone", rnd)


def curl_round(args, rgw, part_file, nbytes, rnd):
    """Parallel PUTs, then GETs, of part-size objects with curl's own SigV4; best width."""
    env = rgw.env()
    count = max(1, nbytes // args.part_size)
    sign = ["--aws-sigv4", "aws:amz:us-east-1:s3", "--user", f"{rgw.key}:{rgw.secret}",
            # curl 7.88 sends no payload hash; S3 wants one (it is then signed too).
            "-H", "x-amz-content-sha256: UNSIGNED-PAYLOAD"]
    best = {"save_gbs": 0.0, "load_gbs": 0.0}
    for width in args.curl_parallel:
        urls = [f"{rgw.endpoint}/{BUCKET}/curl/p{i:05d}" for i in range(count)]
        put = ["curl", "-sS", "--no-progress-meter", "--fail", "--parallel", "--parallel-max", str(width), *sign]
        for u in urls:
            put += ["-T", part_file, u]
        up = timed(put, env)
        get = ["curl", "-sS", "--no-progress-meter", "--fail", "--parallel", "--parallel-max", str(width), *sign]
        for u in urls:
            get += [u, "-o", "/dev/null"]
        down = timed(get, env)
        clear(args, env, f"s3://{BUCKET}/curl")
        moved = count * args.part_size
        best["save_gbs"] = max(best["save_gbs"], gbs(moved, up))
        best["load_gbs"] = max(best["load_gbs"], gbs(moved, down))
        print(f"  [{rnd}] curl x{width}: PUT {gbs(moved, up):.3f} GB/s ({up:.2f} s), GET "
              f"{gbs(moved, down):.3f} GB/s ({down:.2f} s)", flush=True)
    return best


# ------------------------------------------------------------------------ report
def report(args, nbytes, worlds, rounds):
    n = len(rounds)
    print(f"\n== bucket benchmark, {nbytes / 2**30:.2f} GiB of state, Ceph RGW 16 ({args.store}) on "
          f"loopback, {n} interleaved rounds: median (min) ==")
    print("load average per round (start -> end): " + "; ".join(
        f"{r['load_start'][0]:.1f} -> {r['load_end'][0]:.1f}" for r in rounds))
    print(f"shardguard: part_size {args.part_size >> 20} MiB, max_inflight "
          f"{args.max_inflight >> 20} MiB per rank\n")
    peers = {k: {m: [r[k][m] for r in rounds] for m in ("save_gbs", "load_gbs")}
             for k in ("awscli", "rclone", "curl")}
    print(f"{'':28}{'save GB/s':>22}{'cold load GB/s':>22}")
    for k, label in (("awscli", "aws s3 cp --recursive"), ("rclone", "rclone copy"),
                     ("curl", "curl ceiling (best width)")):
        print(f"{label:28}{fmt(peers[k]['save_gbs'], 3):>22}{fmt(peers[k]['load_gbs'], 3):>22}")
    for w in worlds:
        print(f"{'shardguard, ' + str(w) + ' rank(s)':28}"
              f"{fmt([r['sg'][w]['save_gbs'] for r in rounds], 3):>22}"
              f"{fmt([r['sg'][w]['load_gbs'] for r in rounds], 3):>22}")

    print("\nratios within each round, median (min) over rounds; targets: >= 1.00 vs the faster "
          "peer, >= 0.80 vs curl")
    print(f"{'':28}{'save/peer':>12}{'save/curl':>12}{'load/peer':>12}{'load/curl':>12}"
          f"{'RSS over, MiB (save/load)':>28}")
    verdict = []
    limit = 1.1 * args.max_inflight
    for w in worlds:
        def ratio(metric, ref):
            out = []
            for r in rounds:
                base = max(r["awscli"][metric], r["rclone"][metric]) if ref == "peer" else r["curl"][metric]
                out.append(r["sg"][w][metric] / base)
            return out
        cells = [ratio("save_gbs", "peer"), ratio("save_gbs", "curl"), ratio("load_gbs", "peer"),
                 ratio("load_gbs", "curl")]
        rss_s = max(r["sg"][w]["save_rss_over"] for r in rounds)
        rss_l = max(r["sg"][w]["load_rss_over"] for r in rounds)
        print(f"{'shardguard, ' + str(w) + ' rank(s)':28}" + "".join(f"{fmt(c):>12}" for c in cells)
              + f"{rss_s / 2**20:>14.0f} / {rss_l / 2**20:<11.0f}")
        meds = [med(c) for c in cells]
        verdict.append((w, meds[0] >= 1.0 and meds[2] >= 1.0, meds[1] >= 0.8 and meds[3] >= 0.8,
                        max(rss_s, rss_l) <= limit))
    print(f"\npeak RSS of a rank above the state it holds (largest over rounds), limit "
          f"max_inflight + 10 % = {limit / 2**20:.0f} MiB")
    for w, peer_ok, curl_ok, rss_ok in verdict:
        print(f"  {w} rank(s): vs peers {'met' if peer_ok else 'NOT met'}, vs curl "
              f"{'met' if curl_ok else 'NOT met'}, RSS {'met' if rss_ok else 'NOT met'}")


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--bytes", default="4GiB")
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--worlds", default="1,2,4")
    ap.add_argument("--bin", default="build/bench/sg_bench_ckpt")
    ap.add_argument("--rgw", default="build/tests/support/sg_rgw")
    ap.add_argument("--aws", default="/usr/bin/aws", help="Debian's awscli (not a pyenv shim)")
    ap.add_argument("--rclone", default="/usr/bin/rclone")
    ap.add_argument("--max-inflight", default="256MiB")
    ap.add_argument("--part-size", default="16MiB")
    ap.add_argument("--curl-parallel", default="16,32")
    ap.add_argument("--scratch", default="/var/tmp", help="where the peers' files go")
    ap.add_argument("--store", choices=("bluestore", "memstore"), default="bluestore",
                    help="the OSD's store (memstore keeps objects in RAM and did not give "
                         "it back after deletes: the OOM killer took the OSD at 15 GiB)")
    args = ap.parse_args()
    args.bin, args.rgw = os.path.abspath(args.bin), os.path.abspath(args.rgw)
    args.max_inflight, args.part_size = parse_size(args.max_inflight), parse_size(args.part_size)
    args.curl_parallel = [int(x) for x in args.curl_parallel.split(",")]
    nbytes = parse_size(args.bytes)
    worlds = [int(w) for w in args.worlds.split(",")]
    for b in (args.bin, args.rgw):
        if not os.access(b, os.X_OK):
            sys.exit(f"{b} is not built (cmake --build build --target sg_bench_ckpt sg_rgw)")
    for tool in (args.aws, args.rclone, shutil.which("curl")):
        if not tool or not os.access(tool, os.X_OK):
            sys.exit(f"{tool or 'curl'} is needed (apt-get install awscli rclone curl)")
    scratch = tempfile.mkdtemp(prefix="sg-bucket-bench-", dir=args.scratch)
    # One state at a time on the server (each tool clears what it wrote), with room for what
    # a deletion leaves until the OSD reclaims it.
    rgw = Rgw(args.rgw, store_bytes=3 * nbytes + (4 << 30), bluestore=args.store == "bluestore")
    try:
        print(f"state: {nbytes / 2**30:.2f} GiB in 16 tensors; RGW {rgw.endpoint}; {args.rounds} "
              f"rounds; {os.cpu_count()} CPUs; scratch {scratch}", flush=True)
        # The peers' files: the shard files and sidecars a 4-rank save writes, in tmpfs.
        src, dst = os.path.join(scratch, "src"), os.path.join(scratch, "dst")
        os.makedirs(dst)
        env = dict(os.environ, SG_BENCH_DIRECT="0")
        procs = [subprocess.Popen([args.bin, "save", src, "1", str(r), "4", str(nbytes)],
                                  stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env)
                 for r in range(4)]
        for p in procs:
            p.stdin.write("go\n")
            p.stdin.flush()
        for p in procs:
            p.communicate()
            if p.returncode != 0:
                sys.exit("could not write the peers' files")
        part_file = os.path.join(scratch, "part")
        with open(part_file, "wb") as f:
            f.write(os.urandom(args.part_size))
        print(f"peers' files: {tree_bytes(src) / 2**30:.2f} GiB in {src}", flush=True)
        rounds = []
        for rnd in range(1, args.rounds + 1):
            r = {"load_start": loadavg()}
            r["sg"] = shardguard_round(args, rgw, nbytes, worlds, rnd)
            r["awscli"] = awscli_round(args, rgw, src, dst, rnd)
            r["rclone"] = rclone_round(args, rgw, src, dst, rnd)
            r["curl"] = curl_round(args, rgw, part_file, nbytes, rnd)
            r["load_end"] = loadavg()
            rounds.append(r)
        report(args, nbytes, worlds, rounds)
    finally:
        rgw.stop()
        shutil.rmtree(scratch, ignore_errors=True)


if __name__ == "__main__":
    main()
