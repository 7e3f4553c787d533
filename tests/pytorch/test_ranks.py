"""Several ranks over gloo (rank_worker.py), without a supervisor:

- DDP: every rank saves the same state; each tensor is written once in total (the large
  one in dim-0 chunks from every rank, the small ones whole, spread), the layout is in the
  manifest, and 3 ranks and 1 rank load exactly the saved values;
- ranks that save different structures refuse at once, naming the tensor;
- a save() on rank 0 alone logs every 5 s which ranks it waits for and what to do, then
  refuses after arrival_timeout; a legitimately late rank is waited for (and logged),
  with and without torch.distributed (then the library's commit logs the missing rank);
- torch.distributed._shard ShardedTensors (with tests/support/torch_compat.py's import fix)
  saved by 2 ranks, loaded by 3 into their own shards in place, and whole.
Skips (77) without torch."""

import json
import math
import os
import subprocess

import sgrun

sgrun.require_torch()

WORKER = os.path.join(sgrun.HERE, "rank_worker.py")


class RanksTest(sgrun.TempDirCase):
    def ranks(self, scenario, world, arg=None, timeout=150, expect=0):
        port = sgrun.free_port_base(1)
        procs = []
        for rank in range(world):
            env = sgrun.clean_env(SHARDGUARD_RANK=rank, SHARDGUARD_WORLD_SIZE=world, RANK=rank,
                                  WORLD_SIZE=world, MASTER_ADDR="127.0.0.1", MASTER_PORT=port)
            argv = [sgrun.PYTHON, WORKER, scenario, self.path("ckpt")] + ([str(arg)] if arg else [])
            procs.append(subprocess.Popen(argv, env=env, stdout=subprocess.PIPE,
                                          stderr=subprocess.PIPE, text=True))
        outs = []
        for p in procs:
            try:
                out, err = p.communicate(timeout=timeout)
            except subprocess.TimeoutExpired:
                for q in procs:
                    q.kill()
                raise AssertionError("%s: a rank did not finish in %d s" % (scenario, timeout))
            outs.append((p.returncode, out, err))
        for code, out, err in outs:
            self.assertEqual(code, expect, "%s: %s%s" % (scenario, out, err))
        results = []
        for _, out, err in outs:
            lines = [line for line in out.splitlines() if line.startswith("RESULT ")]
            results.append((json.loads(lines[-1][7:]) if lines else None, err + out))
        return results

    def manifest(self, step):
        with open(self.path("ckpt", "step-%09d" % step, "manifest.json")) as f:
            return json.load(f)

    def test_ddp_state_is_written_once_split_and_loads_on_any_world_size(self):
        self.ranks("save-replicated", 2, arg=16 * 1024)
        m = self.manifest(9)
        big = m["tensors"]["model.big.weight"]["chunks"]
        self.assertEqual(sorted((c["offsets"], c["sizes"]) for c in big),
                         [([0, 0], [150, 40]), ([150, 0], [150, 40])])
        self.assertEqual(len({c["file"] for c in big}), 2)  # one half from each rank
        for name, t in m["tensors"].items():
            covered = sum(math.prod(c["sizes"]) for c in t["chunks"])
            self.assertEqual(covered, math.prod(t["shape"]), name)
        tensor_bytes = 4 * (2 * 300 * 40 + 7 + 2)
        shards = sum(f["size"] for f in m["files"])
        self.assertLess(shards, tensor_bytes + 2 * 64 * 1024)  # not twice: written once
        both = {f["rank"] for f in m["files"] if f["size"] > 4096}
        self.assertEqual(both, {0, 1})
        layouts = {ref["$tensor"]: ref["layout"]
                   for ref in _refs(m["global"]["tree"])}
        self.assertEqual(set(layouts.values()), {"replicated"})
        for world in (3, 1):
            for res, log in self.ranks("load", world):
                self.assertEqual(res["state"], res["expected"], log)

    def test_ranks_saving_different_structures_refuse_at_once(self):
        results = self.ranks("mismatch", 2)
        for res, log in results:
            self.assertIsNotNone(res, log)
        msgs = [r["refused"] for r, _ in results]
        self.assertIn("model.small.bias", msgs[1])
        self.assertIn("rank_state", msgs[1])
        self.assertIn("ranks 1 save another structure", msgs[0])
        self.assertFalse(os.path.exists(self.path("ckpt", "step-000000009", "manifest.json")))

    def test_save_on_rank0_alone_is_logged_then_refused(self):
        (r0, log0), (r1, _) = self.ranks("rank0-only", 2, arg=7)
        self.assertIn("has waited 5 s for rank(s) 1 to call save()", log0)
        self.assertIn("without `if rank == 0`", log0)
        self.assertIn("refused after 7 s", r0["refused"])
        self.assertGreaterEqual(r0["after"], 6.5)
        self.assertLess(r0["after"], 30)

    def test_save_on_rank0_alone_in_a_loop_is_refused_at_once(self):
        (r0, log0), (r1, log1) = self.ranks("rank0-only-loop", 2)
        self.assertIsNotNone(r0, log0)
        self.assertIn("rank 1 (at step 3) went past the step without calling save()", r0["refused"])
        self.assertIn("without `if rank == 0`", r0["refused"])
        self.assertLess(r0["after"], 5)  # not arrival_timeout (60 s)
        self.assertNotIn("has waited", log0)
        self.assertIn("should_checkpoint(3) was True but save() was not called", log1)
        self.assertFalse(os.path.exists(self.path("ckpt", "step-000000003", "manifest.json")))

    def test_a_late_rank_is_waited_for_and_named(self):
        (_, log0), (_, log1) = self.ranks("late-rank", 2)
        self.assertIn("has waited 5 s for rank(s) 1", log0)
        self.assertTrue(os.path.exists(self.path("ckpt", "step-000000009", "manifest.json")))
        (_, log0), _ = self.ranks("late-rank-no-dist", 2)
        # Python's log (every rank) and the library's commit log (rank 0) name rank 1.
        self.assertIn("missing rank(s) 1", log0)
        self.assertIn("the commit of step 1 is still waiting", log0)
        self.assertTrue(os.path.exists(self.path("ckpt", "step-000000001", "manifest.json")))

    def test_sharded_tensors_save_on_two_and_load_on_three(self):
        self.ranks("sharded-tensor", 2)
        chunks = self.manifest(3)["tensors"]["model.emb.weight"]["chunks"]
        self.assertEqual(sorted(c["offsets"][0] for c in chunks), [0, 6])
        for res, log in self.ranks("load-sharded-tensor", 3):
            self.assertTrue(res["in_place"], log)
            self.assertTrue(res["whole"], log)
        self.assertEqual(sorted(r["rows"] for r, _ in self.ranks("load-sharded-tensor", 3)),
                         [[[0, 0]], [[4, 0]], [[8, 0]]])


def _refs(node):
    if isinstance(node, list):
        for x in node:
            yield from _refs(x)
    elif isinstance(node, dict):
        if "$tensor" in node:
            yield node
        for v in node.values():
            yield from _refs(v)


if __name__ == "__main__":
    sgrun.unittest.main(verbosity=2)
