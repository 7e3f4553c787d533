#!/usr/bin/python3
"""Supervisor and agent benchmark, against references measured in the same run.

1. Restart latency: `shardguard run --nproc 4` over the example trainer; a random rank is
   killed with SIGKILL N times; for each, the time from the kill to every relaunched rank's
   first heartbeat (the `ranks_ready` event), next to the configured backoff.
   Target: median under 200 ms plus the backoff.
2. Idle cost: CPU share of one core and RSS of the `shardguard run` process over a window
   while 4 ranks heartbeat and the embedded agent polls an (emulated) AWS metadata
   service. Targets: under 0.5 % of a core, under 20 MB.
3. Notice to committed: an emulated AWS spot notice; the time from the notice event to the
   emergency checkpoint's commit, against the plain write time of the same checkpoint
   (the periodic saves of the same run). Target overhead: under 0.5 s plus one poll interval.

Usage: /usr/bin/python3 bench/supervisor_bench.py [--build build] [--kills 10] [--idle-seconds 60]
"""
import argparse
import json
import os
import random
import signal
import statistics
import subprocess
import sys
import tempfile
import time

POLL_S = 0.5  # the agent's AWS poll interval for the notice measurement
IDLE_POLL_S = 2.0  # and its default, for the idle measurement


def events(run_dir):
    path = os.path.join(run_dir, "events.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    for line in open(path):
        try:
            out.append(json.loads(line))
        except ValueError:
            pass
    return out


def wait_for(pred, timeout):
    end = time.time() + timeout
    while time.time() < end:
        v = pred()
        if v:
            return v
        time.sleep(0.005)
    return None


def start_emulator(build, workdir, scenario):
    path = os.path.join(workdir, "scenario.json")
    with open(path, "w") as f:
        json.dump(scenario, f)
    log = open(os.path.join(workdir, "emulator.log"), "w")
    proc = subprocess.Popen([os.path.join(build, "tests/agent/sg_metadata_emulator"), "--port", "0",
                             "--scenario", path], stdout=log, stderr=subprocess.STDOUT)
    url = wait_for(lambda: next((w for w in open(log.name).read().split() if w.startswith("http://")), None), 10)
    if not url:
        sys.exit("emulator did not start")
    return proc, url


def write_config(workdir, url, backoff="1ms", every_steps=200, poll_s=POLL_S):
    path = os.path.join(workdir, "job.toml")
    with open(path, "w") as f:
        f.write(f"""[job]
checkpoint_dir = "{workdir}/ckpt"
run_dir = "{workdir}/run"
[checkpoint]
every_steps = {every_steps}
[restart]
backoff_initial = "{backoff}"
backoff_max = "{backoff}"
backoff_jitter = 0.0
[restart.crash]
max_restarts = 1000
window = "1h"
[agent]
clouds = "aws"
aws_url = "{url}"
poll_interval = "{int(poll_s * 1000)}ms"
""")
    return path


def proc_cpu_seconds(pid):
    fields = open(f"/proc/{pid}/stat").read().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def proc_rss_mb(pid):
    for line in open(f"/proc/{pid}/status"):
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    return 0.0


def launch(build, config, nproc, trainer_args):
    return subprocess.Popen([os.path.join(build, "cli/shardguard"), "run", "--config", config,
                             "--nproc", str(nproc), "--", os.path.join(build, "examples/trainer/sg_trainer"),
                             *trainer_args], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def restart_and_idle(build, kills, idle_seconds):
    work = tempfile.mkdtemp(prefix="sg-supbench-")
    emu, url = start_emulator(build, work, {"clouds": ["aws"], "timelines": {}})
    config = write_config(work, url, every_steps=10, poll_s=IDLE_POLL_S)  # progress between kills
    run = launch(build, config, 4, ["--steps", "100000000", "--rows", "64", "--samples", "256",
                                    "--sleep-ms", "10", "--log-every", "0"])
    run_dir = os.path.join(work, "run")
    rng = random.Random(7)
    latencies = []
    try:
        for i in range(kills):
            launches = wait_for(lambda: [e["attempt"] for e in events(run_dir) if e["event"] == "launch"], 30)
            attempt = max(launches)
            if not wait_for(lambda: any(e["event"] == "ranks_ready" and e["attempt"] == attempt for e in events(run_dir)), 30):
                sys.exit(f"attempt {attempt} never became ready")
            time.sleep(0.3)
            hello = [e for e in events(run_dir) if e["event"] == "hello" and e["attempt"] == attempt]
            victim = rng.choice(hello)
            t_kill = time.time()
            os.kill(victim["pid"], signal.SIGKILL)
            nxt = wait_for(lambda: next((e for e in events(run_dir) if e["event"] == "ranks_ready"
                                         and e["attempt"] > attempt), None), 30)
            if not nxt:
                sys.exit("no relaunch seen")
            latencies.append(nxt["time_unix_ms"] / 1000 - t_kill)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
    # Idle: a fresh run, 4 ranks heartbeating, no checkpoints due, the agent polling.
    config = write_config(work, url, every_steps=10**9, poll_s=IDLE_POLL_S)
    run = launch(build, config, 4, ["--steps", "100000000", "--rows", "64", "--samples", "256",
                                    "--sleep-ms", "10", "--log-every", "0"])
    try:
        wait_for(lambda: sum(e["event"] == "ranks_ready" for e in events(run_dir)) > kills, 30)
        time.sleep(1)
        c0, t0 = proc_cpu_seconds(run.pid), time.time()
        rss = []
        while time.time() - t0 < idle_seconds:
            time.sleep(1)
            rss.append(proc_rss_mb(run.pid))
        cpu = (proc_cpu_seconds(run.pid) - c0) / (time.time() - t0)
        polls = sum(1 for line in open(os.path.join(work, "emulator.log")) if "GET" in line)
    finally:
        run.send_signal(signal.SIGKILL)
        run.wait()
        subprocess.run(["pkill", "-KILL", "-f", f"{work}/ckpt"], check=False)
        emu.kill()
    return latencies, cpu, max(rss) if rss else 0.0, polls


def notice_latency(build, step_ms):
    work = tempfile.mkdtemp(prefix="sg-noticebench-")
    notice_at_ms = 8000
    emu, url = start_emulator(build, work, {"clouds": ["aws"], "timelines": {
        "/latest/meta-data/spot/instance-action": [
            {"at_ms": 0, "status": 404, "body": ""},
            {"at_ms": notice_at_ms, "status": 200, "json": {"action": "terminate", "time": "${rfc3339:+60}"}}]}})
    t_emu = time.time()
    config = write_config(work, url, every_steps=20)
    # A checkpoint of about 100 MB (rows x in_dim x 3 tensors x 4 bytes), 2 ranks.
    run = launch(build, config, 2, ["--steps", "100000000", "--rows", "32768", "--in-dim", "256",
                                    "--samples", "8", "--batch", "1", "--sleep-ms", str(step_ms),
                                    "--log-every", "0"])
    code = run.wait(timeout=120)
    emu.kill()
    ev = events(os.path.join(work, "run"))
    notice = next(e for e in ev if e["event"] == "notice")
    commits = [e for e in ev if e["event"] == "checkpoint_committed"]
    emergency = commits[-1]
    periodic = [e["seconds"] for e in commits[:-1]]
    return {
        "exit_code": code,
        "detection_s": notice["time_unix_ms"] / 1000 - (t_emu + notice_at_ms / 1000),
        "notice_to_commit_s": (emergency["time_unix_ms"] - notice["time_unix_ms"]) / 1000,
        "write_s": statistics.median(periodic) if periodic else float("nan"),
        "periodic_saves": len(periodic),
        "bytes": sum(os.path.getsize(os.path.join(dp, f)) for dp, _, fs in os.walk(os.path.join(work, "ckpt",
                     os.path.basename(os.path.dirname(emergency["manifest"])))) for f in fs),
    }


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--build", default="build")
    ap.add_argument("--kills", type=int, default=10)
    ap.add_argument("--idle-seconds", type=int, default=60)
    args = ap.parse_args()
    build = os.path.abspath(args.build)

    lat, cpu, rss, polls = restart_and_idle(build, args.kills, args.idle_seconds)
    print(f"restart latency over {len(lat)} kills (backoff 1 ms): median {statistics.median(lat) * 1000:.0f} ms, "
          f"max {max(lat) * 1000:.0f} ms")
    print(f"idle over {args.idle_seconds} s, 4 ranks heartbeating, agent polling every {IDLE_POLL_S} s: "
          f"CPU {cpu * 100:.2f} % of a core, RSS {rss:.1f} MB")
    n = notice_latency(build, step_ms=5)
    overhead = n["notice_to_commit_s"] - n["write_s"]
    print(f"notice: seen {n['detection_s'] * 1000:.0f} ms after it appeared (poll {POLL_S * 1000:.0f} ms); "
          f"notice -> committed {n['notice_to_commit_s'] * 1000:.0f} ms vs plain write {n['write_s'] * 1000:.0f} ms "
          f"({n['periodic_saves']} periodic saves, {n['bytes'] / 1e6:.0f} MB); exit {n['exit_code']}")

    print("\n== supervisor and agent benchmark: figures against targets ==")
    print(f"{'measure':44s} {'value':>12s} {'target':>22s}")
    print(f"{'restart: kill -> all ranks heartbeating':44s} {statistics.median(lat) * 1000:>9.0f} ms {'< 200 ms + backoff':>22s}")
    print(f"{'idle CPU (supervisor + agent)':44s} {cpu * 100:>10.2f} % {'< 0.5 % of a core':>22s}")
    print(f"{'idle RSS':44s} {rss:>9.1f} MB {'< 20 MB':>22s}")
    print(f"{'notice -> committed minus plain write':44s} {overhead * 1000:>9.0f} ms {'< 500 ms + poll':>22s}")


if __name__ == "__main__":
    main()
