"""The example Python trainers (examples/python/) alone, without `shardguard run`: the same
final weights for any world size, after kill -9 of every rank and a resume on another world
size (resharding), and after SIGTERM (emergency checkpoint, exit 75) and a resume.

The ranks are started by hand with SHARDGUARD_RANK / SHARDGUARD_WORLD_SIZE (and, for torch,
MASTER_ADDR / MASTER_PORT); without SHARDGUARD_JOB_ID the client resumes from the newest
complete checkpoint of the directory. Exit code 77 (skipped) when numpy is missing; the
torch cases skip when torch is.

Environment (CTest sets it): PYTHONPATH with hooks/python, SHARDGUARD_LIB, SG_EXAMPLES (the
examples/python directory).
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

try:
    import numpy  # noqa: F401 (the trainers need it)
except ImportError:
    print("skipped: no numpy for %s" % sys.executable)
    sys.exit(77)
try:
    import torch  # noqa: F401 (the torch trainer needs it)
    HAVE_TORCH = True
except ImportError:
    HAVE_TORCH = False

import shardguard

EXAMPLES = os.environ.get("SG_EXAMPLES") or os.path.join(
    os.path.dirname(os.path.abspath(__file__)), "..", "..", "examples", "python")
SEED = int(os.environ.get("SHARDGUARD_TEST_SEED", random.randrange(1 << 30)))
print("SHARDGUARD_TEST_SEED=%d" % SEED, flush=True)


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def clean_env():
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHARDGUARD_") or k == "SHARDGUARD_LIB"}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT"):
        env.pop(k, None)
    env["PYTHONUNBUFFERED"] = "1"
    return env


class TrainerCase:
    """Shared cases; subclasses set SCRIPT and ARGS."""
    SCRIPT = None
    ARGS = []
    KILL_AFTER_S = (0.3, 1.2)   # after the first committed checkpoint

    def setUp(self):
        self.tmp = tempfile.mkdtemp(prefix="sg-pytrainer-")
        self.rng = random.Random(SEED)

    def tearDown(self):
        if not os.environ.get("SHARDGUARD_KEEP_TEST_DIRS"):
            shutil.rmtree(self.tmp, ignore_errors=True)

    def start(self, ckpt_dir, world, extra=()):
        port = free_port()
        procs = []
        for rank in range(world):
            env = clean_env()
            if world > 1:
                env.update(SHARDGUARD_RANK=str(rank), SHARDGUARD_WORLD_SIZE=str(world),
                           RANK=str(rank), WORLD_SIZE=str(world), MASTER_ADDR="127.0.0.1",
                           MASTER_PORT=str(port))
            log = open(os.path.join(self.tmp, "rank-%d.log" % rank), "ab")
            procs.append(subprocess.Popen(
                [sys.executable, os.path.join(EXAMPLES, self.SCRIPT)] + self.ARGS +
                ["--checkpoint-dir", ckpt_dir] + list(extra),
                env=env, stdout=log, stderr=subprocess.STDOUT))
            log.close()
        return procs

    def logs(self):
        out = []
        for name in sorted(os.listdir(self.tmp)):
            if name.endswith(".log"):
                with open(os.path.join(self.tmp, name), errors="replace") as f:
                    out.append("== %s\n%s" % (name, f.read()[-3000:]))
        return "\n".join(out)

    def wait_all(self, procs, timeout=240):
        codes = [p.wait(timeout=timeout) for p in procs]
        return codes

    def run_to_end(self, ckpt_dir, world):
        codes = self.wait_all(self.start(ckpt_dir, world))
        self.assertEqual(codes, [0] * world, self.logs())

    def final(self, ckpt_dir):
        """{tensor: bytes} of the newest complete checkpoint, and its manifest."""
        steps = sorted(d for d in os.listdir(ckpt_dir)
                       if d.startswith("step-") and
                       os.path.exists(os.path.join(ckpt_dir, d, "manifest.json")))
        self.assertTrue(steps, "no complete checkpoint in %s" % ckpt_dir)
        path = os.path.join(ckpt_dir, steps[-1])
        with shardguard.Reader.open(path) as r:
            tensors = {n: r.read(n).tobytes() for n in r.names()}
        with open(os.path.join(path, "manifest.json")) as f:
            return tensors, json.load(f)

    _reference = None  # per class: the uninterrupted run's final tensors

    def reference(self):
        if type(self)._reference is None:
            d = os.path.join(self.tmp, "reference")
            self.run_to_end(d, 1)
            type(self)._reference = self.final(d)[0]
        return type(self)._reference

    def assert_same(self, ckpt_dir, want):
        got, manifest = self.final(ckpt_dir)
        self.assertEqual(sorted(got), sorted(want))
        for name in want:
            self.assertEqual(got[name], want[name], "tensor %s differs (seed %d)\n%s"
                             % (name, SEED, self.logs()))
        self.assertEqual(manifest.get("reason"), "final")

    def wait_for_commit(self, ckpt_dir, procs, timeout=120):
        until = time.time() + timeout
        while time.time() < until:
            if os.path.isdir(ckpt_dir) and any(
                    os.path.exists(os.path.join(ckpt_dir, d, "manifest.json"))
                    for d in os.listdir(ckpt_dir)):
                return
            if any(p.poll() is not None for p in procs):
                self.fail("a rank exited before the first checkpoint\n" + self.logs())
            time.sleep(0.02)
        self.fail("no checkpoint committed in %ds\n%s" % (timeout, self.logs()))

    # ---- cases ----
    def test_world_sizes_agree(self):
        want = self.reference()
        for world in (2, 3):
            d = os.path.join(self.tmp, "world-%d" % world)
            self.run_to_end(d, world)
            self.assert_same(d, want)

    def test_kill_every_rank_then_resume_on_another_world_size(self):
        want = self.reference()
        d = os.path.join(self.tmp, "killed")
        worlds = [3, 1, 2]
        self.rng.shuffle(worlds)
        for world in worlds[:2]:
            procs = self.start(d, world)
            self.wait_for_commit(d, procs)
            time.sleep(self.rng.uniform(*self.KILL_AFTER_S))
            for p in procs:
                p.kill()
            self.wait_all(procs)
        self.run_to_end(d, worlds[2])
        self.assert_same(d, want)

    def test_sigterm_alone_saves_exits_75_and_resumes(self):
        want = self.reference()
        d = os.path.join(self.tmp, "sigterm")
        procs = self.start(d, 1)
        self.wait_for_commit(d, procs)
        time.sleep(self.rng.uniform(*self.KILL_AFTER_S))
        procs[0].send_signal(signal.SIGTERM)
        code = procs[0].wait(timeout=60)
        if code == 0:
            self.skipTest("the run finished before SIGTERM landed (seed %d)" % SEED)
        self.assertEqual(code, shardguard.EXIT_AFTER_EMERGENCY, self.logs())
        self.assertEqual(self.final(d)[1].get("reason"), "emergency", self.logs())
        self.run_to_end(d, 1)
        self.assert_same(d, want)


class NumpyTrainerTest(TrainerCase, unittest.TestCase):
    SCRIPT = "numpy_trainer.py"
    ARGS = ["--steps", "500", "--rows", "50", "--samples", "700", "--log-every", "0",
            "--checkpoint-every", "40", "--sleep-ms", "4"]


@unittest.skipUnless(HAVE_TORCH, "no torch for %s" % sys.executable)
class TorchTrainerTest(TrainerCase, unittest.TestCase):
    SCRIPT = "torch_trainer.py"
    ARGS = ["--steps", "300", "--rows", "50", "--samples", "700", "--log-every", "0",
            "--checkpoint-every", "40", "--sleep-ms", "4"]


if __name__ == "__main__":
    unittest.main(verbosity=2)
