"""PreemptionGuard: a caught signal only sets a flag; the Checkpointer turns it into an
emergency checkpoint of the step at hand, then should_exit(); handlers come back on exit."""

import os
import signal

import sgtest

sgtest.require("numpy")

import numpy as np  # noqa: E402

import shardguard  # noqa: E402


class GuardTest(sgtest.TempDirCase):
    def ckpt(self):
        c = shardguard.Checkpointer(self.dir)
        self.addCleanup(c.close)
        return c

    def test_signal_only_sets_a_flag(self):
        seen = []
        previous = signal.signal(signal.SIGUSR2, lambda s, f: seen.append(s))
        try:
            with shardguard.PreemptionGuard(signals=[signal.SIGUSR2]) as guard:
                self.assertFalse(guard.triggered)
                os.kill(os.getpid(), signal.SIGUSR2)
                self.assertTrue(guard.triggered)
                self.assertEqual(guard.signum, signal.SIGUSR2)
            self.assertEqual(seen, [])
            os.kill(os.getpid(), signal.SIGUSR2)  # the previous handler is back
            self.assertEqual(seen, [signal.SIGUSR2])
        finally:
            signal.signal(signal.SIGUSR2, previous)

    def _emergency_flow(self, sig, guard_first):
        if guard_first:
            guard = shardguard.PreemptionGuard().__enter__()
            c = self.ckpt()  # its C handler must not replace the guard's
        else:
            c = self.ckpt()
            guard = shardguard.PreemptionGuard().__enter__()
        try:
            self.assertFalse(c.should_checkpoint(6))
            os.kill(os.getpid(), sig)
            self.assertTrue(guard.triggered)
            self.assertTrue(c.should_checkpoint(7))
            self.assertEqual(c.emergency()["at_step"], 7)
            self.assertEqual(c.emergency()["reason"], "signal")
            self.assertFalse(c.should_exit())
            c.save(7, {"w": np.arange(4)})
            self.assertTrue(c.should_exit())
        finally:
            guard.__exit__(None, None, None)
        with shardguard.Reader.open(os.path.join(self.dir, "step-000000007")) as r:
            self.assertEqual(r.step, 7)

    def test_checkpoint_signal_becomes_an_emergency_save(self):
        self._emergency_flow(signal.SIGUSR1, guard_first=False)

    def test_sigterm_becomes_an_emergency_save(self):
        self._emergency_flow(signal.SIGTERM, guard_first=False)

    def test_guard_entered_before_the_checkpointer(self):
        self._emergency_flow(signal.SIGUSR1, guard_first=True)

    def test_a_client_without_a_signal_still_gets_the_emergency(self):
        os.environ["SHARDGUARD_CHECKPOINT_SIGNAL"] = "none"
        try:
            c = self.ckpt()
        finally:
            del os.environ["SHARDGUARD_CHECKPOINT_SIGNAL"]
        with shardguard.PreemptionGuard() as guard:
            os.kill(os.getpid(), signal.SIGTERM)
            self.assertTrue(guard.triggered)
            self.assertTrue(c.should_checkpoint(4))
            c.save(4, {"w": np.arange(2)})
            self.assertTrue(c.should_exit())
        with shardguard.Reader.open(os.path.join(self.dir, "step-000000004")) as r:
            self.assertEqual(r.step, 4)

    def test_the_clients_own_handler_comes_back(self):
        c = self.ckpt()
        with shardguard.PreemptionGuard():
            pass
        os.kill(os.getpid(), signal.SIGUSR1)  # would kill us under SIG_DFL
        self.assertTrue(c.should_checkpoint(3))
        self.assertEqual(c.emergency()["at_step"], 3)
        self.assertEqual(signal.getsignal(signal.SIGTERM), signal.SIG_DFL)


if __name__ == "__main__":
    sgtest.main()
