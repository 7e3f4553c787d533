"""Helpers for tests/pytorch: `shardguard run` and `shardguard drain` as real processes, the
run's events, free ports, and skipping (exit 77) without torch.

Environment (CTest sets it): SHARDGUARD_BIN (the binary), SHARDGUARD_LIB (libshardguard.so),
PYTHONPATH with hooks/python and tests/support. Every wait is bounded in time.
"""

import json
import os
import random
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import unittest

SKIP = 77
HERE = os.path.dirname(os.path.abspath(__file__))
PYTHON = "/usr/bin/python3"


def require_torch():
    try:
        import torch  # noqa: F401
        import numpy  # noqa: F401
    except ImportError as e:
        print("SKIP: %s cannot import %s" % (sys.executable, e.name))
        sys.exit(SKIP)


def shardguard_bin():
    return os.environ["SHARDGUARD_BIN"]


def free_port_base(span=8):
    """A base port with `span` free ports above it (the supervisor adds the attempt)."""
    rng = random.Random()
    for _ in range(200):
        base = rng.randrange(20000, 60000 - span)
        socks = []
        try:
            for p in range(base, base + span):
                s = socket.socket()
                s.bind(("127.0.0.1", p))
                socks.append(s)
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError("no free port range")


def clean_env(**extra):
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHARDGUARD_") or k in ("SHARDGUARD_LIB", "SHARDGUARD_BIN")}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env.update({"PYTHONUNBUFFERED": "1", "OMP_NUM_THREADS": "1", "GLOO_SOCKET_IFNAME": "lo"})
    env.update({k: str(v) for k, v in extra.items()})
    return env


def write_job(path, ckpt_dir, run_dir, every_steps, port, keep_last=100):
    with open(path, "w") as f:
        f.write("""[job]
checkpoint_dir = "%s"
run_dir = "%s"
master_addr = "127.0.0.1"
master_port = %d

[checkpoint]
interval = "steps"
every_steps = %d
keep_last = %d

[restart]
backoff_initial = "100ms"
backoff_max = "1s"

[restart.crash]
max_restarts = 5
window = "1h"

[stop]
grace = "60s"
safety_margin = "2s"
term_grace = "5s"
""" % (ckpt_dir, run_dir, port, every_steps, keep_last))


class Run:
    """One `shardguard run` process."""

    def __init__(self, config, nproc, argv, log_path, env=None):
        self.log_path = log_path
        self.log = open(log_path, "a")
        self.run_dir = None
        self.proc = subprocess.Popen(
            [shardguard_bin(), "run", "--config", config, "--nproc", str(nproc), "--"] + argv,
            stdout=self.log, stderr=subprocess.STDOUT, env=env or clean_env())

    def wait(self, timeout):
        try:
            return self.proc.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)
            raise AssertionError("shardguard run did not end within %d s; see %s"
                                 % (timeout, self.log_path))
        finally:
            self.log.close()

    def output(self):
        with open(self.log_path) as f:
            return f.read()


def events(run_dir):
    path = os.path.join(run_dir, "events.jsonl")
    if not os.path.exists(path):
        return []
    out = []
    with open(path) as f:
        for line in f:
            line = line.strip()
            if line.endswith("}"):
                try:
                    out.append(json.loads(line))
                except ValueError:
                    pass
    return out


def wait_until(what, predicate, timeout, every=0.05):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(every)
    raise AssertionError("timed out after %d s waiting for %s" % (timeout, what))


def last_loss_step(path):
    try:
        with open(path) as f:
            lines = [line.split() for line in f if line.strip()]
        return int(lines[-1][0]) if lines else 0
    except (OSError, ValueError, IndexError):
        return 0


def drain(run_dir, deadline="60s"):
    r = subprocess.run([shardguard_bin(), "drain", "--run-dir", run_dir, "--deadline", deadline],
                       capture_output=True, text=True, timeout=60, env=clean_env())
    if r.returncode != 0:
        raise AssertionError("shardguard drain failed: %s%s" % (r.stdout, r.stderr))


def tensor_hashes(ckpt_dir, step=None):
    argv = [shardguard_bin(), "ckpt", "inspect", "--hash", ckpt_dir]
    if step is not None:
        argv += ["--step", str(step)]
    r = subprocess.run(argv, capture_output=True, text=True, timeout=120, env=clean_env())
    if r.returncode != 0:
        raise AssertionError("ckpt inspect --hash: %s" % r.stderr)
    return r.stdout


def kill_rank(run_dir, rank, after_step):
    """SIGKILLs `rank` of the newest attempt once a checkpoint after `after_step` is
    committed in it; returns (pid, committed step)."""
    def ready():
        ev = events(run_dir)
        launches = [e for e in ev if e["event"] == "launch"]
        if not launches:
            return None
        attempt = launches[-1]["attempt"]
        hello = [e for e in ev if e["event"] == "hello" and e["attempt"] == attempt and
                 e["rank"] == rank]
        done = [e for e in ev if e["event"] == "checkpoint_committed" and
                e.get("step", 0) > after_step and e.get("attempt", attempt) == attempt]
        return (hello[-1]["pid"], done[-1]["step"]) if hello and done else None
    pid, step = wait_until("a commit after step %d" % after_step, ready, 120)
    os.kill(pid, signal.SIGKILL)
    return pid, step


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sg-pytorch-")

    def tearDown(self):
        if os.environ.get("SHARDGUARD_KEEP_TEST_DIRS"):
            print("kept %s" % self.dir)
        else:
            shutil.rmtree(self.dir, ignore_errors=True)

    def path(self, *parts):
        return os.path.join(self.dir, *parts)

    def rank_logs(self, run_dir):
        out = []
        for root, _, files in sorted(os.walk(run_dir)):
            for f in sorted(files):
                if f.startswith("rank-") and f.endswith(".log"):
                    with open(os.path.join(root, f), errors="replace") as fh:
                        out.append("== %s\n%s" % (os.path.join(root, f), fh.read()[-3000:]))
        return "\n".join(out)
