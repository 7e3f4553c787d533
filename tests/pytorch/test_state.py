"""save(step, state) with what PyTorch users have, on one rank: model, optimizer and LR
scheduler state dicts (int keys, param_groups, tuples, OrderedDict with _metadata, inf in
ReduceLROnPlateau, OneCycleLR's bound method), nested containers, exact floats; errors that
name the key path; each rank's own state; and a resume checkpoint that fails verification
(reported to the supervisor, exit 74). Skips (77) without torch."""

import collections
import json
import math
import os
import random
import socket
import subprocess
import sys
import threading

import sgrun

sgrun.require_torch()

import numpy as np  # noqa: E402
import torch  # noqa: E402

import shardguard  # noqa: E402

SCHEDULERS = {
    "onecycle": lambda o: torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.05, total_steps=50),
    "plateau": lambda o: torch.optim.lr_scheduler.ReduceLROnPlateau(o, patience=1),
    "lambda": lambda o: torch.optim.lr_scheduler.LambdaLR(o, lambda e: 0.9 ** e),
    "step": lambda o: torch.optim.lr_scheduler.StepLR(o, step_size=2, gamma=0.5),
    "warm_restarts": lambda o: torch.optim.lr_scheduler.CosineAnnealingWarmRestarts(o, T_0=3),
    "cyclic": lambda o: torch.optim.lr_scheduler.CyclicLR(o, 0.001, 0.01, step_size_up=2,
                                                          cycle_momentum=False),
}


def make_model():
    torch.manual_seed(3)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.BatchNorm1d(8), torch.nn.ReLU(),
                               torch.nn.Dropout(0.2), torch.nn.Linear(8, 2))


def train_steps(model, opt, scheds, n, seed):
    g = torch.Generator().manual_seed(seed)
    for _ in range(n):
        x, y = torch.randn(5, 6, generator=g), torch.randn(5, 2, generator=g)
        loss = torch.nn.functional.mse_loss(model(x), y)
        opt.zero_grad()
        loss.backward()
        opt.step()
        for name, s in scheds.items():
            s.step(loss.item()) if name == "plateau" else s.step()
    return loss


def clone(x):
    if isinstance(x, torch.Tensor):
        return x.detach().clone()
    if isinstance(x, dict):
        out = type(x)((k, clone(v)) for k, v in x.items())
        if hasattr(x, "_metadata"):
            out._metadata = x._metadata
        return out
    if isinstance(x, (list, tuple)):
        return type(x)(clone(v) for v in x)
    return x


def bits(t):
    return t.detach().reshape(-1).view(torch.uint8).tolist()


def same(a, b):
    """Exact equality of nested states (tensors bit for bit, nan equal to nan)."""
    if isinstance(a, torch.Tensor):
        return isinstance(b, torch.Tensor) and a.dtype == b.dtype and a.shape == b.shape and \
            bits(a) == bits(b)
    if isinstance(a, dict):
        return isinstance(b, dict) and list(a) == list(b) and all(same(a[k], b[k]) for k in a)
    if isinstance(a, (list, tuple)):
        return type(a) == type(b) and len(a) == len(b) and all(map(same, a, b))
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    return type(a) == type(b) and a == b


class StateTest(sgrun.TempDirCase):
    def ckpt(self, **kw):
        c = shardguard.Checkpointer(self.dir, **kw)
        self.addCleanup(c.close)
        return c

    def test_torch_state_dicts_round_trip_and_training_continues_bit_identically(self):
        model = make_model()
        opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.05)
        scheds = {k: f(opt) for k, f in SCHEDULERS.items()}
        train_steps(model, opt, scheds, 4, seed=1)
        state = {"model": model.state_dict(), "optim": opt.state_dict(),
                 "sched": {k: s.state_dict() for k, s in scheds.items()}, "step": 4}
        self.ckpt().save(4, state)
        saved = clone(state)  # state_dict() tensors are the live ones
        torch.manual_seed(99)
        expected = train_steps(model, opt, scheds, 3, seed=2)

        model2 = make_model()
        opt2 = torch.optim.AdamW(model2.parameters(), lr=0.01, weight_decay=0.05)
        scheds2 = {k: f(opt2) for k, f in SCHEDULERS.items()}
        restored = self.ckpt().load()
        self.assertEqual((restored.step, restored.state["step"]), (4, 4))
        m = restored.state["model"]
        self.assertIsInstance(m, collections.OrderedDict)
        self.assertEqual(m._metadata, state["model"]._metadata)  # module versions (BatchNorm)
        self.assertEqual(m["1.num_batches_tracked"].dtype, torch.int64)
        self.assertTrue(same(restored.state["optim"], saved["optim"]))  # int keys, tuples
        self.assertTrue(same(dict(m), dict(saved["model"])))
        model2.load_state_dict(m)
        opt2.load_state_dict(restored.state["optim"])
        for name, s in scheds2.items():
            s.load_state_dict(restored.state["sched"][name])
        self.assertEqual(restored.state["sched"]["plateau"]["mode_worse"], float("inf"))
        self.assertNotIn("anneal_func", restored.state["sched"]["onecycle"])  # dropped
        self.assertTrue(callable(scheds2["onecycle"].anneal_func))  # kept by the scheduler
        torch.manual_seed(99)
        got = train_steps(model2, opt2, scheds2, 3, seed=2)
        self.assertEqual(bits(got), bits(expected))
        self.assertTrue(same(model2.state_dict(), model.state_dict()))
        self.assertTrue(same(opt2.state_dict(), opt.state_dict()))
        for name in SCHEDULERS:
            want = {k: v for k, v in scheds[name].state_dict().items() if not callable(v)}
            have = {k: v for k, v in scheds2[name].state_dict().items() if not callable(v)}
            want.pop("_scale_fn_ref", None), have.pop("_scale_fn_ref", None)
            self.assertTrue(same(have, want), name)

    def test_nested_values_come_back_with_their_types_and_exact_numbers(self):
        rng = random.Random(5)
        floats = [rng.uniform(-1, 1) * 10 ** rng.randint(-300, 300) for _ in range(200)]
        state = {
            "floats": floats, "special": [float("inf"), float("-inf"), float("nan"), -0.0],
            "ints": {0: 1, 7: -(2 ** 63), 8: 2 ** 64 - 1, 9: 2 ** 70, -3: "minus"},
            "tuple": (1, (2.5, None), "x", True), "empty": {"l": [], "t": (), "d": {}},
            "np": np.arange(6, dtype=np.int16).reshape(2, 3), "np_scalar": np.float32(2.5),
            "bf16": torch.tensor([1.5, -2.25], dtype=torch.bfloat16),
            "list_of_tensors": [torch.zeros(2), torch.ones(3, dtype=torch.float64)],
            "fn_in_list": [len, 3], "fn_in_dict": {"keep": 1, "drop": lambda x: x},
        }
        self.ckpt().save(1, state)
        s = self.ckpt().load().state
        self.assertEqual([x.hex() for x in s["floats"]], [x.hex() for x in floats])
        self.assertEqual(s["special"][:2], [float("inf"), float("-inf")])
        self.assertTrue(math.isnan(s["special"][2]))
        self.assertEqual(math.copysign(1, s["special"][3]), -1.0)
        self.assertEqual(s["ints"], state["ints"])
        self.assertEqual(list(s["ints"]), [0, 7, 8, 9, -3])
        self.assertEqual(s["tuple"], state["tuple"])
        self.assertEqual(s["empty"], state["empty"])
        self.assertIsInstance(s["np"], np.ndarray)
        self.assertEqual(s["np"].tolist(), state["np"].tolist())
        self.assertEqual(s["np_scalar"].dtype, np.float32)
        self.assertEqual(s["bf16"].dtype, torch.bfloat16)
        self.assertTrue(same(s["list_of_tensors"], state["list_of_tensors"]))
        self.assertEqual(s["fn_in_list"], [None, 3])
        self.assertEqual(s["fn_in_dict"], {"keep": 1})
        with open(os.path.join(self.dir, "step-000000001", "manifest.json")) as f:
            manifest = json.load(f)
        tree = manifest["global"]["tree"]
        self.assertIn({"$float": "inf"}, tree["$dict"][1][1])  # tagged, as documented
        self.assertEqual(sorted(manifest["tensors"]),
                         ["bf16", "list_of_tensors.0", "list_of_tensors.1", "np", "np_scalar"])

    def test_errors_name_the_key_path_and_what_is_supported(self):
        c = self.ckpt()
        cases = [
            ({"a": {"b": [1, {2, 3}]}}, TypeError, "state['a']['b'][1]", "builtins.set"),
            ({"m": torch.nn.Linear(1, 1)}, TypeError, "state['m']", "save() supports dicts"),
            ({"x": {"c": torch.zeros(2, dtype=torch.complex128)}}, TypeError, "state['x']['c']",
             "complex128"),
            ({"o": np.array(["text"], dtype=object)}, TypeError, "state['o']", "object"),
            ({"a.b": torch.zeros(1), "a": {"b": torch.ones(1)}}, ValueError, "tensor 'a.b'",
             "rename"),
            ({"d": {(1, 2): 3}}, TypeError, "state['d']", "str or int"),
            ({"d": {1: 2, "1": 3}}, ValueError, "state['d']", "rename"),
            (torch.zeros(3), TypeError, "save a dict", "model.state_dict()"),
        ]
        for state, kind, where, what in cases:
            with self.assertRaises(kind) as e:
                c.save(1, state)
            self.assertIn(where, str(e.exception))
            self.assertIn(what, str(e.exception))
        c.save(1, {"ok": torch.zeros(1)})  # nothing was left half-written

    def test_rank_state_is_each_ranks_own_and_never_none(self):
        c = self.ckpt()
        c.save(3, {"w": torch.arange(4.0)}, rank_state={"seen": torch.tensor([7]), "n": 1})
        r = self.ckpt().load()
        self.assertTrue(r.rank_state_saved)
        self.assertEqual(r.rank_state["n"], 1)
        self.assertEqual(r.rank_state["seen"].tolist(), [7])
        # A rank that did not exist at save time (world 1 -> 2) gets {} and rank 0's globals.
        script = ("import shardguard, sys\n"
                  "r = shardguard.Checkpointer(sys.argv[1]).load()\n"
                  "print(r.rank_state, r.rank_state_saved, r.state['w'].tolist(), r.world_size)\n")
        out = subprocess.run([sgrun.PYTHON, "-c", "import torch\n" + script, self.dir],
                             env=sgrun.clean_env(SHARDGUARD_RANK=1, SHARDGUARD_WORLD_SIZE=2),
                             capture_output=True, text=True, timeout=120)
        self.assertEqual(out.returncode, 0, out.stderr)
        self.assertEqual(out.stdout.strip(), "{} False [0.0, 1.0, 2.0, 3.0] 1")

    def test_data_loader_without_state_dict_is_refused_with_the_fix(self):
        loader = torch.utils.data.DataLoader(list(range(4)))
        with self.assertRaises(TypeError) as e:
            shardguard.Checkpointer(self.dir, data_loader=loader)
        self.assertIn("shardguard.DataPosition(loader)", str(e.exception))


class WaitingLogTest(sgrun.TempDirCase):
    """What a long save() logs every few seconds, from the step directory's contents."""

    def test_each_rank_says_what_it_waits_for(self):
        from shardguard import _progress
        step = _progress.step_dir(self.dir, 7)
        os.makedirs(step)
        cases = [([], 0, "this rank is still writing its part"),
                 (["rank-00000.json", "rank-00002.json"], 0, "missing rank(s) 1"),
                 (["rank-00000.json", "rank-00001.json", "rank-00002.json"], 1,
                  "rank 0 has not written the manifest yet")]
        for files, rank, words in cases:
            for f in files:
                open(os.path.join(step, f), "w").close()
            with self.assertLogs("shardguard", "WARNING") as logs:
                with _progress.Watch(self.dir, 7, rank, 3, every=0.05) as w:
                    sgrun.wait_until("a log line", lambda: w.logged, 10, every=0.01)
            self.assertIn("shardguard rank %d: the save of step 7 is still running" % rank,
                          logs.output[0])
            self.assertIn(words, logs.output[0])
        open(os.path.join(step, "manifest.json"), "w").close()
        self.assertEqual(_progress.describe_wait(step, 1, 3), "committed")


class ResumeFailureTest(sgrun.TempDirCase):
    """A block of the resume checkpoint flipped: the rank reports it and exits 74."""

    def corrupt_checkpoint(self):
        c = shardguard.Checkpointer(self.dir)
        c.save(5, {"w": torch.arange(300000, dtype=torch.float32)})
        c.close()
        step = os.path.join(self.dir, "step-000000005")
        shard = [f for f in os.listdir(step) if f.endswith(".safetensors")][0]
        with open(os.path.join(step, shard), "r+b") as f:
            f.seek(600000)
            byte = f.read(1)
            f.seek(600000)
            f.write(bytes([byte[0] ^ 0xFF]))
        return os.path.join(step, "manifest.json"), shard

    def listen(self):
        """A stand-in agent socket that records what the client sends."""
        path = os.path.join(self.dir, "agent.sock")
        server = socket.socket(socket.AF_UNIX)
        server.bind(path)
        server.listen(1)
        lines = []

        def serve():
            conn, _ = server.accept()
            server.close()
            with conn, conn.makefile() as f:
                for line in f:
                    lines.append(json.loads(line))
        t = threading.Thread(target=serve, daemon=True)
        t.start()
        return path, lines, t

    def test_under_shardguard_the_rank_reports_and_exits_74(self):
        manifest, shard = self.corrupt_checkpoint()
        sock, lines, thread = self.listen()
        env = sgrun.clean_env(SHARDGUARD_JOB_ID="j", SHARDGUARD_RESUME_MANIFEST=manifest,
                              SHARDGUARD_CHECKPOINT_DIR=self.dir, SHARDGUARD_CONTROL_SOCKET=sock)
        r = subprocess.run([sgrun.PYTHON, "-c", "import torch, shardguard\n"
                            "shardguard.Checkpointer().load()\nprint('not reached')"],
                           env=env, capture_output=True, text=True, timeout=120)
        thread.join(10)
        self.assertEqual(r.returncode, shardguard.EXIT_RESUME_FAILED, r.stdout + r.stderr)
        self.assertIn("reported to the supervisor", r.stderr)
        self.assertIn(shard, r.stderr)
        failed = [m for m in lines if m.get("type") == "resume_failed"]
        self.assertEqual(len(failed), 1, lines)
        self.assertEqual(failed[0]["file"], shard)
        self.assertEqual(failed[0]["offset"] % 4096, 0)
        self.assertLessEqual(failed[0]["offset"], 600000)
        self.assertEqual(failed[0]["manifest"], manifest)

    def test_outside_shardguard_it_raises_naming_the_block(self):
        _, shard = self.corrupt_checkpoint()
        with self.assertRaises(shardguard.ResumeFailed) as e:
            shardguard.Checkpointer(self.dir).load()
        self.assertIn(shard, str(e.exception))
        self.assertIn("offset", str(e.exception))

    def test_header_constant_matches(self):
        header = os.path.join(os.path.dirname(shardguard.__file__), "..", "..", "include",
                              "shardguard.h")
        with open(header) as f:
            text = f.read()
        self.assertIn("#define SG_EXIT_RESUME_FAILED %d" % shardguard.EXIT_RESUME_FAILED, text)
        self.assertIn("#define SG_EXIT_AFTER_EMERGENCY %d" % shardguard.EXIT_AFTER_EMERGENCY, text)


if __name__ == "__main__":
    sgrun.unittest.main(verbosity=2)
