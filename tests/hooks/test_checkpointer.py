"""shardguard.Checkpointer with numpy and torch (Debian's /usr/bin/python3): dtypes, chunks
from two ranks, RNG and data loader state, async saves, errors, and finding the library."""

import os
import random
import sys

import sgtest

sgtest.require("numpy")

import numpy as np  # noqa: E402

try:
    import torch  # noqa: E402
except ImportError:
    torch = None

import shardguard  # noqa: E402

needs_torch = sgtest.unittest.skipUnless(torch is not None, "torch is not installed")


class CheckpointerTest(sgtest.TempDirCase):
    def ckpt(self, **kw):
        c = shardguard.Checkpointer(self.dir, **kw)
        self.addCleanup(c.close)
        return c

    def test_a_corrupt_block_read_through_open_resume_is_a_resume_failure(self):
        # The example trainers read their rows through open_resume()'s Reader, not load():
        # a flipped byte must be reported as a failed resume (exit 74 under shardguard), not
        # raised as a plain library error (which crash-looped on the same checkpoint).
        c = self.ckpt()
        c.save(1, {"w": np.arange(4096, dtype=np.float32)})
        c.close()
        step = os.path.join(self.dir, "step-000000001")
        shard = max((os.path.join(step, f) for f in os.listdir(step) if f.endswith(".safetensors")),
                    key=os.path.getsize)
        with open(shard, "r+b") as f:
            f.seek(os.path.getsize(shard) // 2)
            b = f.read(1)
            f.seek(-1, 1)
            f.write(bytes([b[0] ^ 0xFF]))
        reader = self.ckpt().open_resume()
        self.assertIsNotNone(reader)
        with reader:
            with self.assertRaises(shardguard.ResumeFailed) as caught:
                reader.read("w")
        self.assertIn("cannot be read", str(caught.exception))

    def test_fresh_start(self):
        c = self.ckpt()
        self.assertIsNone(c.load())
        self.assertEqual((c.rank, c.world_size, c.attempt), (0, 1, 0))
        self.assertFalse(c.under_shardguard)
        self.assertEqual(c.checkpoint_dir, self.dir)

    def test_what_load_returns_pickles_and_copies(self):
        # A Restored handed to a DataLoader worker or another process is pickled.
        import copy
        import pickle
        self.ckpt().save(5, {"w": np.arange(6, dtype=np.float32)}, rank_state={"epoch": 2})
        restored = self.ckpt().load()
        for again in (pickle.loads(pickle.dumps(restored)), copy.deepcopy(restored), copy.copy(restored)):
            self.assertIs(type(again), type(restored))
            step, state, rank_state = again
            self.assertEqual(step, 5)
            self.assertEqual(state["w"].tobytes(), np.arange(6, dtype=np.float32).tobytes())
            self.assertEqual(rank_state, {"epoch": 2})
            self.assertEqual(again.world_size, restored.world_size)
            self.assertEqual(again.rank_state_saved, restored.rank_state_saved)

    def test_numpy_dtypes_round_trip_bit_exact(self):
        rng = np.random.RandomState(0)
        state = {
            "bool": rng.rand(5) > 0.5, "u8": rng.randint(0, 255, 7).astype(np.uint8),
            "i8": rng.randint(-128, 127, 7).astype(np.int8),
            "i16": rng.randint(-9999, 9999, (2, 3)).astype(np.int16),
            "u16": rng.randint(0, 65535, 3).astype(np.uint16),
            "f16": rng.randn(4, 4).astype(np.float16), "i32": np.arange(-3, 3, dtype=np.int32),
            "u32": np.array([0, 2**32 - 1], dtype=np.uint32), "f32": rng.randn(3, 2, 2).astype(np.float32),
            "f64": np.array([np.pi, -0.0, np.inf, 1e-308]), "i64": np.array([-2**63, 2**63 - 1]),
            "u64": np.array([2**64 - 1], dtype=np.uint64), "c64": (rng.randn(3) + 1j).astype(np.complex64),
            "scalar": np.float32(2.5), "empty": np.zeros((0, 4), dtype=np.float32),
            "big_endian": np.arange(6, dtype=">i4"), "transposed": np.arange(12.0).reshape(3, 4).T,
        }
        self.ckpt().save(3, state)
        step, loaded, extra = self.ckpt().load()
        self.assertEqual(step, 3)
        self.assertEqual(extra, {})  # no rank state saved: {} (never None)
        self.assertEqual(sorted(loaded), sorted(state))
        for name, value in state.items():
            expected = np.asarray(value).astype(np.asarray(value).dtype.newbyteorder("="), order="C")
            got = loaded[name]
            self.assertIsInstance(got, np.ndarray, name)
            self.assertEqual(got.shape, expected.shape, name)
            self.assertEqual(got.dtype, expected.dtype, name)
            self.assertEqual(got.tobytes(), expected.tobytes(), name)

    @needs_torch
    def test_torch_dtypes_round_trip_bit_exact(self):
        g = torch.Generator().manual_seed(0)
        state = {
            "f32": torch.randn(4, 3, generator=g), "bf16": torch.randn(5, 2, generator=g).to(torch.bfloat16),
            "f16": torch.randn(6, generator=g).half(), "i64": torch.arange(-5, 5),
            "bool": torch.tensor([True, False, True]), "i8": torch.tensor([-128, 127], dtype=torch.int8),
            "u8": torch.tensor([0, 255], dtype=torch.uint8), "f64": torch.tensor([1e-300, -2.0], dtype=torch.float64),
            "grad": torch.ones(2, 2, requires_grad=True), "strided": torch.arange(12.0).reshape(3, 4).t(),
            "nan_bits": torch.tensor([0x7FC1, -1, 0x7F80], dtype=torch.int16).view(torch.bfloat16),
        }
        self.ckpt().save(8, state)
        _, loaded, _ = self.ckpt().load()
        for name, value in state.items():
            got = loaded[name]
            self.assertIsInstance(got, torch.Tensor, name)
            self.assertEqual(got.dtype, value.dtype, name)
            self.assertEqual(tuple(got.shape), tuple(value.shape), name)
            a, b = value.detach().contiguous(), got
            if value.dtype in (torch.bfloat16, torch.float16):
                a, b = a.view(torch.int16), b.view(torch.int16)
            self.assertTrue(torch.equal(a, b), name)
        _, as_numpy, _ = self.ckpt().load(as_torch=False)
        self.assertEqual(as_numpy["bf16"].dtype, np.uint16)  # raw bits without torch
        self.assertEqual(as_numpy["bf16"].tobytes(), state["bf16"].view(torch.int16).numpy().tobytes())

    def test_rng_data_loader_and_job_state_come_back(self):
        class Loader:
            def __init__(self):
                self.pos = 17

            def state_dict(self):
                return {"pos": self.pos, "epoch": 2}

            def load_state_dict(self, s):
                self.pos = s["pos"]

        random.seed(5)
        np.random.seed(6)
        if torch is not None:
            torch.manual_seed(7)
        self.ckpt(data_loader=Loader()).save(
            4, {"w": np.ones(3)}, extra_state={"best": 0.125, "tags": ["a"]},
            lr_schedule={"lr": 3e-4}, global_state={"run": "x"})

        def draw():
            t = torch.rand(2).tolist() if torch is not None else None
            return random.random(), np.random.rand(3).tolist(), t

        after_save = draw()
        draw()
        loader = Loader()
        loader.pos = 0
        c = self.ckpt(data_loader=loader)
        step, _, extra = c.load()
        self.assertEqual(draw(), after_save)  # every RNG continues where the save left it
        self.assertEqual(loader.pos, 17)
        self.assertEqual(c.data_position, {"pos": 17, "epoch": 2})
        self.assertEqual(extra, {"best": 0.125, "tags": ["a"]})
        self.assertEqual(c.lr_schedule, {"lr": 3e-4})
        self.assertEqual(c.global_state, {"run": "x"})

    def test_chunks_from_two_ranks_and_resharded_reads(self):
        script = (
            "import numpy as np, shardguard, sys\n"
            "c = shardguard.Checkpointer(sys.argv[1])\n"
            "w = np.arange(24, dtype=np.float32).reshape(6, 4)\n"
            "r = c.rank\n"
            "state = {'w': shardguard.Chunk(w[3*r:3*r+3], (6, 4), (3*r, 0)),\n"
            "         'b': w[r:r+1] + 100}\n"
            "c.save(10, state, chunks={'b': ((2, 4), (r, 0))}, extra_state={'rank': r})\n")
        procs = [sgtest.subprocess.Popen(
            [sgtest.python(), "-c", script, self.dir],
            env=sgtest.clean_env(SHARDGUARD_RANK=r, SHARDGUARD_WORLD_SIZE=2)) for r in (0, 1)]
        self.assertEqual([p.wait(timeout=120) for p in procs], [0, 0])
        w = np.arange(24, dtype=np.float32).reshape(6, 4)
        _, loaded, extra = self.ckpt().load(boxes={"w": ((2, 1), (3, 2))})
        self.assertEqual(loaded["w"].tolist(), w[2:5, 1:3].tolist())  # across both chunks
        self.assertEqual(loaded["b"].tolist(), (w[:2] + 100).tolist())
        self.assertEqual(extra, {"rank": 0})
        with shardguard.Reader.open(os.path.join(self.dir, "step-000000010")) as r:
            self.assertEqual(r.world_size, 2)
            self.assertEqual(r.rank_state(1)[2]["extra"], {"rank": 1})

    def test_async_save_snapshots_before_returning(self):
        c = self.ckpt(async_save=True)
        w = np.arange(1000, dtype=np.float64)
        c.save(2, {"w": w})
        w[:] = -1  # after save() returns the library no longer reads it
        c.wait()
        self.assertEqual(c.last_committed_step, 2)
        _, loaded, _ = self.ckpt().load()
        self.assertEqual(loaded["w"].tolist(), list(range(1000)))

    def test_schedule_and_env_override(self):
        self.assertTrue(self.ckpt(every_steps=3).should_checkpoint(6))
        os.environ["SHARDGUARD_CHECKPOINT_EVERY_STEPS"] = "5"
        try:
            c = self.ckpt(every_steps=3)
        finally:
            del os.environ["SHARDGUARD_CHECKPOINT_EVERY_STEPS"]
        self.assertFalse(c.should_checkpoint(6))
        self.assertTrue(c.should_checkpoint(10))
        c.heartbeat(10)
        self.assertFalse(c.should_exit())
        self.assertIsNone(c.emergency())

    def test_errors_raise_with_status_and_message(self):
        c = self.ckpt()
        c.save(1, {"w": np.zeros(2)})
        with self.assertRaises(shardguard.ShardguardError) as e:
            c.save(1, {"w": np.zeros(2)})  # a committed step is never rewritten
        self.assertEqual(e.exception.status, "FENCED")
        self.assertIn("already committed", str(e.exception))
        with self.assertRaises(TypeError):
            c.save(2, {"o": np.array(["text"])})
        with self.assertRaises(ValueError):
            c.save(2, {"w": np.zeros(1)}, extra_state={"x": float("nan")})
        with self.assertRaises(shardguard.ShardguardError) as e:
            shardguard.Reader.open(os.path.join(self.dir, "nope"))
        self.assertEqual(e.exception.status, "NOT_FOUND")

    def test_heartbeat_takes_loss_and_grad_norm(self):
        c = self.ckpt()
        c.heartbeat(1, loss=2.5, grad_norm=0.25)
        c.heartbeat(2, loss=float("nan"))
        c.heartbeat(3)
        if torch is not None:
            c.heartbeat(4, loss=torch.tensor(1.5))
        with self.assertRaises(ValueError):
            c.heartbeat(5, loss="high")

    def test_missing_library_is_a_clear_error(self):
        r = sgtest.run([sgtest.python(), "-c", "import shardguard"],
                       env=sgtest.clean_env(SHARDGUARD_LIB="/nonexistent/libshardguard.so"))
        self.assertNotEqual(r.returncode, 0)
        self.assertIn("LibraryNotFound", r.stderr)
        self.assertIn("/nonexistent/libshardguard.so", r.stderr)
        self.assertIn("SHARDGUARD_LIB", r.stderr)


if __name__ == "__main__":
    sgtest.main()
