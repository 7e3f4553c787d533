"""Python writes, C++ reads, and the reverse (two ranks each, with chunks): tensors are
bit-equal across languages (BF16, F16, I64, BOOL and more), state survives, and every
checkpoint passes `shardguard ckpt verify --full`."""

import os
import subprocess

import sgtest

sgtest.require("numpy", "torch")

import xlang_py  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))


class CrossLanguageTest(sgtest.TempDirCase):
    def write_both_ranks(self, argv_for_rank):
        procs = [subprocess.Popen(argv_for_rank(r), stdout=subprocess.PIPE,
                                  stderr=subprocess.STDOUT, text=True,
                                  env=sgtest.clean_env(SHARDGUARD_RANK=r, SHARDGUARD_WORLD_SIZE=2))
                 for r in (0, 1)]
        for p in procs:
            out, _ = p.communicate(timeout=120)
            self.assertEqual(p.returncode, 0, out)

    def verify_full(self):
        r = sgtest.run([os.environ["SHARDGUARD_BIN"], "ckpt", "verify", self.dir, "--full"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("sizes and checksums", r.stdout)

    def test_python_writes_cxx_reads(self):
        self.write_both_ranks(lambda r: [sgtest.python(), os.path.join(HERE, "xlang_py.py"),
                                         "write", self.dir])
        xlang_py.check(self.dir, "python")
        r = sgtest.run([os.environ["SG_XLANG_TOOL"], "check", self.dir, "python"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.verify_full()

    def test_cxx_writes_python_reads(self):
        tool = os.environ["SG_XLANG_TOOL"]
        self.write_both_ranks(lambda r: [tool, "write", self.dir, str(r), "2"])
        r = sgtest.run([tool, "check", self.dir, "cxx"])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        xlang_py.check(self.dir, "cxx")
        self.verify_full()


if __name__ == "__main__":
    sgtest.main()
