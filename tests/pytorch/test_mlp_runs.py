"""The PyTorch trainer of mlp_trainer.py (DDP, and a hand-written parameter-sharded model)
under `shardguard run`, as real processes:

- drained (emergency checkpoint, exit 75), resumed, one rank killed with SIGKILL after a
  commit, relaunched, finished: 2 -> 2 -> 2 ranks, with a loss at every step and final
  weights and optimizer state bit-identical to an uninterrupted run's;
- 2 -> 3 -> 1 ranks (drained twice): each resumed rank checks what it restored (weights,
  optimizer, LR schedule, step, data position) bit for bit against what was saved.

Usage: test_mlp_runs.py Ddp | Sharded (one parallel form per CTest test). Skips (77)
without torch.
"""

import os
import sys

import sgrun

sgrun.require_torch()

TRAINER = os.path.join(sgrun.HERE, "mlp_trainer.py")
STEPS, EVERY, SLEEP_MS = 160, 40, 15


class Runs(sgrun.TempDirCase):
    PARALLEL = None

    def setUp(self):
        super().setUp()
        self.port = sgrun.free_port_base()

    def job(self, name):
        ckpt, run = self.path(name, "ckpt"), self.path(name, "run")
        os.makedirs(self.path(name), exist_ok=True)
        config = self.path(name, "job.toml")
        sgrun.write_job(config, ckpt, run, EVERY, self.port)
        self.port += 3  # the next job's attempts do not meet this one's lingering sockets
        return config, ckpt, run

    def argv(self, name, sleep_ms=SLEEP_MS):
        return [sgrun.PYTHON, TRAINER, "--parallel", self.PARALLEL, "--steps", str(STEPS),
                "--sleep-ms", str(sleep_ms), "--loss-log", self.path(name, "loss.txt"),
                "--record", self.path(name, "record")]

    def sg_run(self, name, nproc, config, expect, timeout=180, sleep_ms=SLEEP_MS, during=None):
        r = sgrun.Run(config, nproc, self.argv(name, sleep_ms), self.path(name, "run.log"))
        if during is not None:
            during()
        code = r.wait(timeout)
        run_dir = os.path.join(os.path.dirname(config), "run")
        self.assertEqual(code, expect, "shardguard run exited %d, expected %d\n%s\n%s"
                         % (code, expect, r.output()[-4000:], self.rank_logs(run_dir)))

    def losses(self, name):
        out = {}
        with open(self.path(name, "loss.txt")) as f:
            for line in f:
                step, value = line.split()
                out.setdefault(int(step), set()).add(value)
        return out

    def drain_at(self, name, run_dir, step):
        def go():
            sgrun.wait_until("step %d" % step,
                             lambda: sgrun.last_loss_step(self.path(name, "loss.txt")) >= step, 40)
            sgrun.drain(run_dir)
        return go

    def test_drain_kill_resume_is_bit_identical(self):
        config, ref_ckpt, _ = self.job("reference")
        self.sg_run("reference", 2, config, 0, sleep_ms=0)
        reference = self.losses("reference")
        self.assertEqual(sorted(reference), list(range(1, STEPS + 1)))

        config, ckpt, run_dir = self.job("interrupted")
        self.sg_run("interrupted", 2, config, 75, during=self.drain_at("interrupted", run_dir, 50))
        drained = [e for e in sgrun.events(run_dir) if e["event"] == "checkpoint_committed"]
        first = drained[-1]["step"]
        self.assertGreater(first, 0)

        def kill_after_commit():
            sgrun.kill_rank(run_dir, 1, first)
        self.sg_run("interrupted", 2, config, 0, during=kill_after_commit)
        ev = sgrun.events(run_dir)
        kills = [e for e in ev if e["event"] == "rank_exit" and e.get("signal") == 9]
        launches = [e for e in ev if e["event"] == "launch"]
        self.assertTrue(kills or len(launches) >= 3, "no rank was killed: %s" % launches)
        self.assertGreaterEqual(len(launches), 3, "drain, then kill: three launches of 2 ranks")
        self.assertTrue(all(e["nproc"] == 2 for e in launches))
        self.assertTrue(any(e["resume_step"] == first for e in launches))

        # Every step's loss, however often recomputed, equals the uninterrupted run's.
        got = self.losses("interrupted")
        self.assertEqual(sorted(got), list(range(1, STEPS + 1)))
        for step, values in got.items():
            self.assertEqual(values, reference[step], "loss of step %d" % step)
        self.assertEqual(sgrun.tensor_hashes(ckpt, STEPS), sgrun.tensor_hashes(ref_ckpt, STEPS))

    def test_world_size_2_3_1_restores_exactly_what_was_saved(self):
        config, ckpt, run_dir = self.job("resharded")
        name = "resharded"
        self.sg_run(name, 2, config, 75, during=self.drain_at(name, run_dir, 45))
        first = [e for e in sgrun.events(run_dir) if e["event"] == "checkpoint_committed"][-1]["step"]
        self.sg_run(name, 3, config, 75, during=self.drain_at(name, run_dir, first + 30))
        second = [e for e in sgrun.events(run_dir) if e["event"] == "checkpoint_committed"][-1]["step"]
        self.assertGreater(second, first)
        self.sg_run(name, 1, config, 0)
        record = self.path(name, "record")
        verified = sorted(f for f in os.listdir(record) if f.startswith("verified-"))
        want = sorted(["verified-step-%d-world-3-rank-%d.json" % (first, r) for r in range(3)] +
                      ["verified-step-%d-world-1-rank-0.json" % second])
        self.assertEqual(verified, want)
        self.assertTrue(os.path.exists(os.path.join(ckpt, "step-%09d" % STEPS, "manifest.json")))


class Ddp(Runs):
    PARALLEL = "ddp"


class Sharded(Runs):
    PARALLEL = "sharded"


if __name__ == "__main__":
    which = sys.argv[1] if len(sys.argv) > 1 else None
    suite = sgrun.unittest.TestSuite()
    loader = sgrun.unittest.TestLoader()
    for cls in (Ddp, Sharded):
        if which in (None, cls.__name__):
            suite.addTests(loader.loadTestsFromTestCase(cls))
    result = sgrun.unittest.TextTestRunner(verbosity=2).run(suite)
    sys.exit(0 if result.wasSuccessful() else 1)
