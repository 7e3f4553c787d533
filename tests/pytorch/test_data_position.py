"""DataPosition: a DataLoader (DistributedSampler or a shuffling RandomSampler, main process
or workers) resumed mid-epoch hands out exactly the batches an uninterrupted run does, and
torch's global RNG draws the same numbers afterwards; SHARDGUARD_SKIP_BATCHES skips batches
after the resume position once, across epoch ends; through a Checkpointer the position
comes back with the checkpoint. Skips (77) without torch."""

import os

import sgrun

sgrun.require_torch()

import torch  # noqa: E402
from torch.utils.data import DataLoader, DistributedSampler, TensorDataset  # noqa: E402

import shardguard  # noqa: E402

SAMPLES, BATCH = 40, 4  # 10 batches per epoch on one replica, 5 on each of two


def make_loader(kind, workers=0):
    data = TensorDataset(torch.arange(SAMPLES))
    if kind == "distributed":
        sampler = DistributedSampler(data, num_replicas=2, rank=1, shuffle=True, seed=3)
        return DataLoader(data, batch_size=BATCH, sampler=sampler, num_workers=workers)
    return DataLoader(data, batch_size=BATCH, shuffle=True, num_workers=workers)


def run(position, batches, stop_after=None):
    """Up to `batches` batches as (epoch, batch ids, a global RNG draw after it)."""
    out = []
    for epoch in position.epochs(100):
        for (xb,) in position:
            out.append((epoch, xb.tolist(), torch.rand(1).item()))
            if len(out) == batches or len(out) == stop_after:
                return out
    return out


class DataPositionTest(sgrun.TempDirCase):
    def setUp(self):
        super().setUp()
        os.environ.pop(shardguard.data.SKIP_ENV, None)

    def check_resume(self, kind, stop_after, total, workers=0):
        torch.manual_seed(11)
        whole = run(shardguard.DataPosition(make_loader(kind, workers), seed=5), total)
        torch.manual_seed(11)
        first = shardguard.DataPosition(make_loader(kind, workers), seed=5)
        head = run(first, total, stop_after)
        saved, rng = first.state_dict(), torch.get_rng_state()
        torch.manual_seed(12345)  # a new process: everything else starts elsewhere
        second = shardguard.DataPosition(make_loader(kind, workers), seed=999)
        second.load_state_dict(saved)
        torch.set_rng_state(rng)
        tail = run(second, total - len(head))
        self.assertEqual(head + tail, whole)
        return whole

    def test_distributed_sampler_mid_epoch(self):
        whole = self.check_resume("distributed", 7, 12)  # epoch 1, batch 2 of 5
        self.assertEqual([e for e, _, _ in whole], [0] * 5 + [1] * 5 + [2] * 2)
        self.assertNotEqual(whole[0][1], whole[5][1])  # set_epoch reshuffled

    def test_random_sampler_keeps_off_the_global_rng(self):
        self.check_resume("random", 3, 14)

    def test_epoch_boundary_and_workers(self):
        self.check_resume("random", 10, 13)         # saved right at the end of epoch 0
        self.check_resume("distributed", 2, 6, workers=2)

    def test_skip_batches_once_across_the_epoch_end(self):
        torch.manual_seed(1)
        whole = run(shardguard.DataPosition(make_loader("distributed"), seed=5), 12)
        first = shardguard.DataPosition(make_loader("distributed"), seed=5)
        run(first, 12, 4)
        os.environ[shardguard.data.SKIP_ENV] = "3"
        second = shardguard.DataPosition(make_loader("distributed"), seed=5)
        second.load_state_dict(first.state_dict())
        got = run(second, 5)
        # Batches 5, 6 and 7 (0-based 4..6: the last of epoch 0, two of epoch 1) skipped.
        self.assertEqual([b for _, b, _ in got], [b for _, b, _ in whole[7:12]])
        self.assertEqual(second.skipped, 3)
        self.assertEqual((second.epoch, second.batches), (2, 2))

    def test_position_rides_with_the_checkpoint(self):
        position = shardguard.DataPosition(make_loader("distributed"), seed=5)
        ckpt = shardguard.Checkpointer(self.dir, data_loader=position)
        run(position, 100, 6)
        ckpt.save(6, {"step": 6})
        ckpt.close()
        again = shardguard.DataPosition(make_loader("distributed"), seed=5)
        ckpt = shardguard.Checkpointer(self.dir, data_loader=again)
        restored = ckpt.load()
        ckpt.close()
        self.assertEqual((again.epoch, again.batches), (1, 1))
        self.assertEqual(restored.data_position, position.state_dict())

    def test_bad_states_and_skip_values_are_refused(self):
        p = shardguard.DataPosition(make_loader("random"))
        with self.assertRaises(ValueError):
            p.load_state_dict({"epoch": 1})
        os.environ[shardguard.data.SKIP_ENV] = "many"
        with self.assertRaises(ValueError) as e:
            run(p, 1)
        self.assertIn("SHARDGUARD_SKIP_BATCHES", str(e.exception))


if __name__ == "__main__":
    sgrun.unittest.main(verbosity=2)
