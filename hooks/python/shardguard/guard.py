"""PreemptionGuard: turns the checkpoint signal (and SIGTERM) into a flag.

    with PreemptionGuard() as guard:
        for step in ...:
            ...
            if ckpt.should_checkpoint(step):   # true at once after a caught signal
                ckpt.save(step, state)
            if ckpt.should_exit():             # the emergency checkpoint is committed
                sys.exit(EXIT_AFTER_EMERGENCY)

The Python handler only sets flags; Checkpointer.should_checkpoint() forwards a caught
signal to the client, which turns it into an emergency checkpoint of the step at hand (or
of the step the agent asked for). Under shardguard a caught SIGTERM goes to the supervisor
instead (Slurm sends it to every process of the job), which names the step every rank
saves, as when the client catches it itself. On exit the previous handlers come back (the
client's own C handlers included). Thread-safety: enter and exit on the main thread (Python's rule for
signal handlers); `triggered` may be read anywhere.
"""

import os
import signal

from ._lib import lib

_active = []  # guards inside their `with`, innermost last


def _default_signals():
    name = os.environ.get("SHARDGUARD_CHECKPOINT_SIGNAL", "SIGUSR1")
    if name in ("none", "0"):
        return (signal.SIGTERM,)
    if name.isdigit():
        return (int(name), signal.SIGTERM)
    if not name.startswith("SIG"):
        name = "SIG" + name
    return (getattr(signal, name, signal.SIGUSR1), signal.SIGTERM)


class PreemptionGuard:
    """Catches `signals` (default: the checkpoint signal and SIGTERM) while inside `with`."""

    def __init__(self, signals=None):
        self.signals = tuple(signals) if signals is not None else _default_signals()
        self.triggered = False   # a signal arrived (stays set)
        self.signum = None       # the last one
        self._pending = False    # not yet forwarded to a client
        self._caught = set()     # the signals behind _pending
        self._previous = {}

    def _handler(self, signum, frame):
        self.triggered = True
        self.signum = signum
        self._caught.add(signum)
        self._pending = True

    def _install(self):
        for sig in self.signals:
            old = signal.signal(sig, self._handler)
            self._previous.setdefault(sig, old)

    def __enter__(self):
        self._install()
        _active.append(self)
        return self

    def __exit__(self, *exc):
        if self in _active:
            _active.remove(self)
        from .checkpointer import live_checkpointers
        for sig, old in self._previous.items():
            # None: installed outside Python (the client's C handler, put back below).
            signal.signal(sig, signal.SIG_DFL if old is None else old)
        self._previous.clear()
        if not _active:
            for ckpt in live_checkpointers():  # a live client keeps catching its signal
                if ckpt.handle:
                    lib.sg_client_restore_signal(ckpt.handle)
        return False

    def reset(self):
        self.triggered = False
        self.signum = None
        self._pending = False
        self._caught.clear()


def reinstall_active():
    """Puts the active guards' handlers back (a new client installs its own)."""
    for guard in _active:
        for sig in guard.signals:
            signal.signal(sig, guard._handler)


def take_pending():
    """The signals (a set, empty when none) that active guards caught and did not forward
    yet; each is returned once."""
    pending = set()
    for guard in _active:
        if guard._pending:
            guard._pending = False
            pending.update(guard._caught)
            guard._caught.clear()
    return pending
