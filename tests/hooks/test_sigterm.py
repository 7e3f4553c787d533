"""SIGTERM under shardguard, from Python (Slurm signals every process of a job): the
Checkpointer's client catches it by itself (the README's five calls, no PreemptionGuard), tells
the agent with a `signal` message and keeps training until checkpoint_now names the step;
a PreemptionGuard that caught it forwards it the same way; SHARDGUARD_HANDLE_SIGTERM=0 opts
out. The agent here is a plain Unix socket server speaking the control protocol."""

import ctypes
import json
import os
import signal
import socket
import threading
import time

import sgtest

sgtest.require("numpy")

import numpy as np  # noqa: E402

import shardguard  # noqa: E402


def os_handler(sig):
    """The handler the kernel has for `sig` (signal.getsignal only knows Python's own):
    glibc's struct sigaction starts with it; 0 is SIG_DFL."""
    buf = ctypes.create_string_buffer(256)
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.sigaction(sig, None, buf) != 0:
        raise OSError(ctypes.get_errno(), "sigaction")
    return ctypes.c_void_p.from_buffer(buf).value or 0


class FakeAgent:
    """Accepts one connection on `path`, keeps every line it gets, sends lines on demand."""

    def __init__(self, path):
        self.lines = []
        self._conn = None
        self._srv = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        self._srv.bind(path)
        self._srv.listen(1)
        self._thread = threading.Thread(target=self._serve, daemon=True)
        self._thread.start()

    def _serve(self):
        self._conn, _ = self._srv.accept()
        buf = b""
        while True:
            data = self._conn.recv(4096)
            if not data:
                return
            buf += data
            while b"\n" in buf:
                line, buf = buf.split(b"\n", 1)
                self.lines.append(json.loads(line))

    def send(self, message):
        self._conn.sendall((json.dumps(dict({"v": 2}, **message)) + "\n").encode())

    def wait_for(self, type_, timeout=5.0):
        until = time.monotonic() + timeout
        while time.monotonic() < until:
            found = [m for m in self.lines if m.get("type") == type_]
            if found:
                return found
            time.sleep(0.01)
        return []

    def close(self):
        if self._conn:
            self._conn.close()
        self._srv.close()


class SigtermTest(sgtest.TempDirCase):
    def under_shardguard(self, **extra):
        self.agent = FakeAgent(os.path.join(self.dir, "control.sock"))
        self.addCleanup(self.agent.close)
        os.environ.update({"SHARDGUARD_JOB_ID": "job", "SHARDGUARD_CHECKPOINT_DIR": self.dir,
                           "SHARDGUARD_CONTROL_SOCKET": os.path.join(self.dir, "control.sock")})
        os.environ.update(extra)
        c = shardguard.Checkpointer()
        self.addCleanup(c.close)
        self.assertTrue(self.agent.wait_for("hello"))
        return c

    def emergency_at(self, c, step):
        deadline = int((time.time() + 60) * 1000)
        self.agent.send({"type": "checkpoint_now", "deadline_unix_ms": deadline,
                         "kind": "emergency", "reason": "sigterm", "at_step": step})
        until = time.monotonic() + 5
        while c.emergency() is None and time.monotonic() < until:
            time.sleep(0.01)
        self.assertIsNotNone(c.emergency())

    def test_the_checkpointer_alone_reports_sigterm_and_saves_the_named_step(self):
        c = self.under_shardguard()
        os.kill(os.getpid(), signal.SIGTERM)  # we live on: the C handler only sets a flag
        # Reported by the client's own thread, without a call from the training loop.
        self.assertEqual([m["name"] for m in self.agent.wait_for("signal")], ["SIGTERM"])
        self.assertFalse(c.should_checkpoint(3))  # the step is the supervisor's to choose
        self.assertFalse(c.should_exit())
        self.emergency_at(c, 5)
        self.assertFalse(c.should_checkpoint(4))
        self.assertTrue(c.should_checkpoint(5))
        c.save(5, {"w": np.arange(4, dtype=np.float32)})
        self.assertTrue(c.should_exit())
        self.assertEqual(len(self.agent.wait_for("signal")), 1)

    def test_a_guard_forwards_a_caught_sigterm_to_the_supervisor(self):
        c = self.under_shardguard()
        with shardguard.PreemptionGuard() as guard:
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(guard.triggered)
            self.assertFalse(c.should_checkpoint(3))  # forwards it; no step of its own
            self.assertEqual([m["name"] for m in self.agent.wait_for("signal")], ["SIGTERM"])
            self.emergency_at(c, 4)
            self.assertTrue(c.should_checkpoint(4))
            c.save(4, {"w": np.arange(2, dtype=np.float32)})
            self.assertTrue(c.should_exit())
        # The client's own SIGTERM handler is back after the guard: a SIGTERM is reported again.
        self.assertNotEqual(os_handler(signal.SIGTERM), 0)
        os.kill(os.getpid(), signal.SIGTERM)
        until = time.monotonic() + 5
        while len(self.agent.wait_for("signal")) < 2 and time.monotonic() < until:
            time.sleep(0.01)
        self.assertEqual(len(self.agent.wait_for("signal")), 2)

    def test_opting_out_leaves_sigterm_alone(self):
        before = os_handler(signal.SIGTERM)
        self.under_shardguard(SHARDGUARD_HANDLE_SIGTERM="0")
        self.assertEqual(os_handler(signal.SIGTERM), before)

    def test_by_default_the_client_catches_sigterm_under_shardguard(self):
        before = os_handler(signal.SIGTERM)
        c = self.under_shardguard()
        self.assertNotEqual(os_handler(signal.SIGTERM), before)
        c.close()
        self.assertEqual(os_handler(signal.SIGTERM), before)


if __name__ == "__main__":
    sgtest.main()
