"""Says, every few seconds, what a save() that is taking long is waiting for.

The library's commit (rank 0) logs "the commit of step N is still waiting: ..." on the C
stdout; this says it again in Python's logging (which a notebook or a redirected sys.stderr
shows, where C output may not), on every rank, from what the step directory holds: this
rank's own part still being written, the sidecars (rank-NNNNN.json) of the ranks that are
done and of those that are missing, or the manifest rank 0 has not written yet. A thread
runs beside the blocking library call (ctypes releases the GIL) and only lists a directory;
for a bucket (s3://) it lists nothing (ranks must not all list a bucket) and says only how
long the save has run (the supervisor's log has its bytes, rate and time left).
Thread-safety: one Watch per save; start and stop from the training thread.
"""

import logging
import os
import re
import threading
import time

log = logging.getLogger("shardguard")

LOG_EVERY_S = 5.0
_SIDECAR = re.compile(r"^rank-(\d{5})\.json$")


def step_dir(checkpoint_dir, step):
    if is_bucket(checkpoint_dir):
        return checkpoint_dir.rstrip("/") + "/step-%09d" % step
    return os.path.join(checkpoint_dir, "step-%09d" % step)


def is_bucket(location):
    return str(location).startswith("s3://")


def describe_wait(directory, rank, world):
    """What a save of this step directory is waiting for, in words."""
    if is_bucket(directory):
        return ("its objects are still being uploaded or the commit is pending (the supervisor's "
                "log shows the save's progress)")
    try:
        names = os.listdir(directory)
    except OSError:
        names = []
    if "manifest.json" in names:
        return "committed"
    done = sorted(int(m.group(1)) for m in map(_SIDECAR.match, names) if m)
    if rank not in done:
        return "this rank is still writing its part"
    missing = [r for r in range(world) if r not in done]
    if missing:
        shown = ", ".join(map(str, missing[:16])) + (" ..." if len(missing) > 16 else "")
        return ("ranks done: %d of %d; missing rank(s) %s (no rank-NNNNN.json yet: each must "
                "call save() for this step)" % (len(done), world, shown))
    return "every rank is done; rank 0 has not written the manifest yet"


class Watch:
    """Logs every LOG_EVERY_S seconds while the save of `step` runs."""

    def __init__(self, checkpoint_dir, step, rank, world, every=LOG_EVERY_S):
        self.dir = step_dir(checkpoint_dir, step)
        self.step, self.rank, self.world, self.every = step, rank, world, every
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name="shardguard-save-watch",
                                        daemon=True)
        self.logged = 0

    def __enter__(self):
        self._thread.start()
        return self

    def __exit__(self, *exc):
        self._stop.set()
        self._thread.join()

    def _run(self):
        start = time.monotonic()
        while not self._stop.wait(self.every):
            state = describe_wait(self.dir, self.rank, self.world)
            if state == "committed":
                continue  # a non-zero rank's emergency wait ends by itself
            log.warning("shardguard rank %d: the save of step %d is still running after %.0f s: "
                        "%s", self.rank, self.step, time.monotonic() - start, state)
            self.logged += 1
