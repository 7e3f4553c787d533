"""Helpers for the Python tests of tests/hooks: skip (exit 77, CTest's SKIP_RETURN_CODE)
when numpy or torch is missing, temp dirs, and running child interpreters."""

import os
import shutil
import subprocess
import sys
import tempfile
import unittest

SKIP = 77


def require(*modules):
    """Exits with SKIP when one of `modules` cannot be imported."""
    for name in modules:
        try:
            __import__(name)
        except ImportError:
            print("SKIP: %s has no %s" % (sys.executable, name))
            sys.exit(SKIP)


def clean_env(**extra):
    """Our environment without the SHARDGUARD_* job variables, plus `extra`."""
    keep = ("SHARDGUARD_LIB", "SHARDGUARD_BIN")
    env = {k: v for k, v in os.environ.items()
           if not k.startswith("SHARDGUARD_") or k in keep}
    for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK"):
        env.pop(k, None)
    env.update({k: str(v) for k, v in extra.items()})
    return env


def python():
    return os.environ.get("SG_PYTHON", sys.executable)


def run(argv, env=None, timeout=120):
    return subprocess.run(argv, env=env or clean_env(), timeout=timeout, capture_output=True,
                          text=True)


class TempDirCase(unittest.TestCase):
    def setUp(self):
        self.dir = tempfile.mkdtemp(prefix="sg-py-")
        for k in list(os.environ):
            if k.startswith("SHARDGUARD_") and k not in ("SHARDGUARD_LIB", "SHARDGUARD_BIN"):
                del os.environ[k]

    def tearDown(self):
        shutil.rmtree(self.dir, ignore_errors=True)


def main():
    unittest.main(verbosity=2)
