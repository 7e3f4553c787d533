"""A notice while a rank is still starting (fault n10): torch's TCPStore connect in
init_process_group died of the checkpoint signal ("Interrupted system call") because the
recipe creates its Checkpointer, which says hello, before init_process_group. The supervisor
now sends the checkpoint signal only to ranks that have sent a heartbeat (they are in their
training loop and can take it); a rank still starting learns of the emergency on its socket
at its first call, saves it and exits 75, as any other."""

import os
import signal
import subprocess
import textwrap
import time

import sgtest

sgtest.require("numpy")

RANK = textwrap.dedent("""
    import os, signal, sys, time
    import numpy as np
    import shardguard

    ckpt = shardguard.Checkpointer(every_steps=0)
    got = []
    previous = signal.getsignal(signal.SIGUSR1)

    def record(sig, frame):
        got.append(sig)
        if callable(previous):
            previous(sig, frame)

    signal.signal(signal.SIGUSR1, record)
    open(sys.argv[1], "w").close()  # hello said: the start-up window begins
    time.sleep(3)                   # init_process_group, say: no heartbeat yet
    with open(sys.argv[2], "w") as f:
        f.write("signals while starting: %d\\n" % len(got))
    state = {"w": np.zeros(4, dtype=np.float32)}
    for step in range(1, 100000):
        state["w"] += 1
        ckpt.heartbeat(step)
        if ckpt.should_checkpoint(step):
            ckpt.save(step, state)
        if ckpt.should_exit():
            ckpt.close()
            sys.exit(75)
        time.sleep(0.01)
""")


class StartupSignalTest(sgtest.TempDirCase):
    def test_a_rank_still_starting_gets_no_checkpoint_signal_and_saves_the_emergency(self):
        d = self.dir
        with open(os.path.join(d, "rank.py"), "w") as f:
            f.write(RANK)
        with open(os.path.join(d, "job.toml"), "w") as f:
            f.write('[job]\ncheckpoint_dir = "%s/ckpt"\nrun_dir = "%s/run"\n'
                    '[stop]\ngrace = "20s"\nterm_grace = "2s"\n' % (d, d))
        ready, report = os.path.join(d, "ready"), os.path.join(d, "report")
        env = sgtest.clean_env(PYTHONPATH=os.environ.get("PYTHONPATH", ""),
                               SHARDGUARD_DMI_DIR=os.path.join(d, "no-dmi"))
        with open(os.path.join(d, "run.log"), "w") as log:
            run = subprocess.Popen(
                [os.environ["SHARDGUARD_BIN"], "run", "--config", os.path.join(d, "job.toml"),
                 "--", sgtest.python(), os.path.join(d, "rank.py"), ready, report],
                env=env, stdout=log, stderr=subprocess.STDOUT)
        try:
            deadline = time.time() + 60
            while not os.path.exists(ready) and time.time() < deadline and run.poll() is None:
                time.sleep(0.05)
            self.assertTrue(os.path.exists(ready), open(os.path.join(d, "run.log")).read())
            run.send_signal(signal.SIGTERM)  # the notice, inside the start-up window
            code = run.wait(timeout=60)
        finally:
            if run.poll() is None:
                run.kill()
        text = open(os.path.join(d, "run.log")).read()
        self.assertEqual(open(report).read(), "signals while starting: 0\n", text)
        self.assertEqual(code, 75, text)
        self.assertIn("emergency checkpoint of step", text)


if __name__ == "__main__":
    sgtest.main()
