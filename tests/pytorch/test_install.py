"""Installed like a real tool: `cmake --install --prefix` into a temp dir, the Python package
pip-installed offline into a fresh venv (--system-site-packages, --no-build-isolation), then
the demo run from the install alone: in a mount namespace where the source and build trees
are hidden under empty tmpfs mounts, with the environment scrubbed (env -i), the installed
`shardguard run` trains the installed DDP example (ddp_trainer.py) on 2 ranks with the
venv's python, is drained (exit 75), resumes and finishes, and the checkpoints verify and
export the model for from_pretrained. Also: the
C header and library through the installed pkg-config file, `systemd-analyze verify` on the
agent's unit, and the Debian package from CPack (contents, dependencies, the paths written
for /usr). Skips (77) without torch; needs cmake and, for the demo, unshare (root)."""

import json
import os
import shutil
import subprocess
import sys
import textwrap

import sgrun

sgrun.require_torch()

BUILD = os.environ.get("SHARDGUARD_BUILD_DIR", "")
SOURCE = os.environ.get("SHARDGUARD_SOURCE_DIR", "")

# Runs inside the namespace with only PATH, HOME and TMPDIR set; argv: prefix venv work port.
DEMO = r'''
import json, os, subprocess, sys, time
prefix, venv, work, port = sys.argv[1:5]
sg = os.path.join(prefix, "bin", "shardguard")
py = os.path.join(venv, "bin", "python")
trainer = os.path.join(prefix, "share", "shardguard", "examples", "python", "ddp_trainer.py")
for hidden in sys.argv[5:]:
    if os.path.exists(hidden) and os.listdir(hidden):
        sys.exit("demo: %s is still reachable" % hidden)
with open(os.path.join(work, "job.toml"), "w") as f:
    f.write('[job]\ncheckpoint_dir = "%s/ckpt"\nrun_dir = "%s/run"\nmaster_addr = "127.0.0.1"\n'
            'master_port = %s\n[job.env]\nOMP_NUM_THREADS = "1"\nGLOO_SOCKET_IFNAME = "lo"\n'
            '[checkpoint]\ninterval = "steps"\nevery_steps = 50\n'
            '[restart]\nbackoff_initial = "100ms"\n' % (work, work, port))
argv = [sg, "run", "--config", os.path.join(work, "job.toml"), "--nproc", "2", "--", py,
        trainer, "--steps", "400", "--sleep-ms", "8"]
def committed():
    try:
        with open(os.path.join(work, "run", "events.jsonl")) as f:
            return any('"checkpoint_committed"' in line for line in f)
    except OSError:
        return False
run = subprocess.Popen(argv)
deadline = time.time() + 120
while not committed() and time.time() < deadline and run.poll() is None:
    time.sleep(0.05)
subprocess.run([sg, "drain", "--run-dir", os.path.join(work, "run"), "--deadline", "60s"],
               check=True)
first = run.wait(180)
second = subprocess.run(argv, timeout=300).returncode
verify = subprocess.run([sg, "ckpt", "verify", os.path.join(work, "ckpt"), "--full"],
                        capture_output=True, text=True)
export = subprocess.run([sg, "ckpt", "export", os.path.join(work, "ckpt"), "--out",
                         os.path.join(work, "hf"), "--include", "model.*", "--rename-prefix",
                         "model.=", "--dtype", "bf16"],
                        capture_output=True, text=True)
probe = subprocess.run([py, "-c", "import shardguard, shardguard._lib as l; "
                        "print(shardguard.__file__); print(l.lib._name)"],
                       capture_output=True, text=True)
print("DEMO " + json.dumps({"first": first, "second": second, "verify": verify.stdout,
                            "export": export.returncode, "export_err": export.stderr,
                            "probe": probe.stdout.split(), "probe_err": probe.stderr,
                            "env": sorted(os.environ)}))
'''

C_PROGRAM = r'''
#include <stdio.h>
#include <shardguard.h>
int main(void) {
  sg_reader* r = NULL;
  sg_status s = sg_reader_open("/nonexistent", &r);
  printf("%d %d %s\n", sg_api_version(), SHARDGUARD_API_VERSION, sg_status_name(s));
  return sg_api_version() == SHARDGUARD_API_VERSION && s == SG_ERR_NOT_FOUND ? 0 : 1;
}
'''


def run(argv, **kw):
    kw.setdefault("timeout", 300)
    return subprocess.run(argv, capture_output=True, text=True, **kw)


class InstallTest(sgrun.TempDirCase):
    @classmethod
    def setUpClass(cls):
        if not BUILD or not shutil.which("cmake"):
            raise sgrun.unittest.SkipTest("no build directory or cmake")

    def install(self):
        prefix = self.path("prefix")
        r = run(["cmake", "--install", BUILD, "--prefix", prefix])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        return prefix

    def test_prefix_install_venv_and_the_demo_out_of_reach_of_the_trees(self):
        prefix = self.install()
        venv = self.path("venv")
        r = run(["/usr/bin/python3", "-m", "venv", "--system-site-packages", venv])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([os.path.join(venv, "bin", "pip"), "install", "--no-build-isolation",
                 "--no-index", os.path.join(prefix, "share", "shardguard", "python")],
                cwd=self.dir, env=sgrun.clean_env(PIP_DISABLE_PIP_VERSION_CHECK=1))
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        work = self.path("work")
        os.makedirs(work)
        with open(os.path.join(work, "demo.py"), "w") as f:
            f.write(DEMO)
        # Deeper first: a build tree inside the source tree is hidden before the source.
        hide = sorted((d for d in (SOURCE, BUILD) if d), key=len, reverse=True)
        mounts = " && ".join("mount -t tmpfs -o size=1m none '%s'" % d for d in hide)
        scrubbed = ["env", "-i", "PATH=/usr/bin:/bin", "HOME=" + work, "TMPDIR=" + work,
                    os.path.join(venv, "bin", "python"), os.path.join(work, "demo.py"), prefix,
                    venv, work, str(sgrun.free_port_base())] + hide
        probe = run(["unshare", "--mount", "--propagation", "private", "true"])
        if probe.returncode != 0:
            self.skipTest("unshare --mount is not permitted here: %s" % probe.stderr.strip())
        quoted = " ".join("'%s'" % a for a in scrubbed)
        r = run(["unshare", "--mount", "--propagation", "private", "sh", "-c",
                 mounts + " && exec " + quoted], timeout=600)
        lines = [line for line in r.stdout.splitlines() if line.startswith("DEMO ")]
        self.assertTrue(lines, "demo failed (%d):\n%s\n%s" % (r.returncode, r.stdout[-4000:],
                                                              r.stderr[-4000:]))
        demo = json.loads(lines[-1][5:])
        self.assertEqual((demo["first"], demo["second"]), (75, 0), r.stdout[-4000:])
        self.assertIn("complete", demo["verify"])
        self.assertEqual(demo["export"], 0, demo["export_err"])
        self.assertEqual(demo["probe"], [
            os.path.join(venv, "lib", "python%d.%d" % sys.version_info[:2], "site-packages",
                         "shardguard", "__init__.py"),
            os.path.join(prefix, "lib", "libshardguard.so.1")], demo["probe_err"])
        self.assertFalse([k for k in demo["env"] if k.startswith(("SHARDGUARD_LIB", "PYTHONPATH"))])

    def test_header_library_and_pkg_config(self):
        prefix = self.install()
        env = sgrun.clean_env(PKG_CONFIG_PATH=os.path.join(prefix, "lib", "pkgconfig"))
        flags = run(["pkg-config", "--cflags", "--libs", "shardguard"], env=env)
        self.assertEqual(flags.returncode, 0, flags.stderr)
        self.assertIn("-I%s/include" % prefix, flags.stdout)
        version = run(["pkg-config", "--modversion", "shardguard"], env=env).stdout.strip()
        self.assertEqual(version, run([os.path.join(prefix, "bin", "shardguard"), "--version"]
                                      ).stdout.split()[-1])
        src, exe = self.path("probe.c"), self.path("probe")
        with open(src, "w") as f:
            f.write(C_PROGRAM)
        r = run(["cc", "-std=c99", "-Wall", "-Werror", src, "-o", exe] +
                flags.stdout.split() + ["-Wl,-rpath," + os.path.join(prefix, "lib")])
        self.assertEqual(r.returncode, 0, r.stderr)
        r = run([exe])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertEqual(r.stdout.split()[2], "SG_ERR_NOT_FOUND")

    def test_agent_unit_verifies(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("no systemd-analyze (Debian package systemd)")
        prefix = self.install()
        unit = os.path.join(prefix, "lib", "systemd", "system", "shardguard-agent.service")
        with open(unit) as f:
            text = f.read()
        self.assertIn("ExecStart=%s/bin/shardguard agent --config /etc/shardguard/agent.toml"
                      % prefix, text)
        r = run(["systemd-analyze", "verify", unit])
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
        # The example config the unit points to is one the agent accepts.
        cfg = self.path("agent.toml")
        with open(os.path.join(prefix, "share", "shardguard", "examples", "agent.toml")) as f:
            example = f.read()
        with open(cfg, "w") as f:
            f.write(example.replace("/var/lib/shardguard/agent", self.path("agent-run"))
                    .replace('clouds = "auto"', 'clouds = "none"'))
        agent = subprocess.Popen([os.path.join(prefix, "bin", "shardguard"), "agent", "--config",
                                  cfg], stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                 text=True)
        try:
            out, _ = agent.communicate(timeout=2)
            self.fail("the agent exited %d: %s" % (agent.returncode, out))
        except subprocess.TimeoutExpired:  # still running: the config was accepted
            agent.kill()  # SIGTERM would be a notice, with its grace
            agent.communicate(timeout=30)

    def test_job_unit_verifies(self):
        if not shutil.which("systemd-analyze"):
            self.skipTest("no systemd-analyze (Debian package systemd)")
        prefix = self.install()
        template = os.path.join(prefix, "lib", "systemd", "system", "shardguard-job@.service")
        with open(template) as f:
            text = f.read()
        self.assertIn("ExecStart=%s/bin/shardguard run --config /etc/shardguard/jobs/%%i.toml"
                      % prefix, text)
        # SIGTERM to `shardguard run` alone (a notice), never to the ranks.
        self.assertIn("KillMode=mixed", text)
        self.assertIn("RestartPreventExitStatus=78", text)
        # systemd checks an instance of a template, not the template itself.
        instance = self.path("shardguard-job@demo.service")
        shutil.copy(template, instance)
        r = run(["systemd-analyze", "verify", instance])
        self.assertEqual((r.returncode, r.stdout + r.stderr), (0, ""))
        # The example job config is one `shardguard run` reads (up to reaching the bucket).
        example = os.path.join(prefix, "share", "shardguard", "examples", "job.toml")
        r = run([os.path.join(prefix, "bin", "shardguard"), "run", "--config", example,
                 "--check-config"], env=dict(os.environ, AWS_EC2_METADATA_DISABLED="true",
                                             AWS_ACCESS_KEY_ID="", AWS_SECRET_ACCESS_KEY="",
                                             AWS_SHARED_CREDENTIALS_FILE="/nonexistent",
                                             AWS_CONFIG_FILE="/nonexistent"))
        self.assertIn("s3://my-training-bucket/runs/llama-7b", r.stderr)
        self.assertNotIn("unknown key", r.stderr)

    def test_debian_package(self):
        if not shutil.which("cpack") or not shutil.which("dpkg-deb"):
            self.skipTest("no cpack or dpkg-deb")
        out = self.path("deb")
        r = run(["cpack", "-G", "DEB", "--config", os.path.join(BUILD, "CPackConfig.cmake"),
                 "-B", out])
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        debs = [f for f in os.listdir(out) if f.endswith(".deb")]
        self.assertEqual(len(debs), 1, os.listdir(out))
        deb = os.path.join(out, debs[0])
        info = run(["dpkg-deb", "-I", deb]).stdout
        for words in ("Package: shardguard", "python3-numpy", "libssl3", "Recommends: python3-torch"):
            self.assertIn(words, info)
        files = run(["dpkg-deb", "-c", deb]).stdout
        for path in ("./usr/bin/shardguard", "./usr/lib/libshardguard.so.1",
                     "./usr/include/shardguard.h", "./usr/lib/pkgconfig/shardguard.pc",
                     "./usr/lib/python3/dist-packages/shardguard/checkpointer.py",
                     "./usr/lib/systemd/system/shardguard-agent.service",
                     "./usr/lib/systemd/system/shardguard-job@.service",
                     "./usr/share/shardguard/python/pyproject.toml"):
            self.assertIn(path, files)
        root = self.path("root")
        self.assertEqual(run(["dpkg-deb", "-x", deb, root]).returncode, 0)

        def read(*parts):
            with open(os.path.join(root, *parts)) as f:
                return f.read()
        self.assertIn('LIBRARY = "/usr/lib/libshardguard.so.1"',
                      read("usr", "lib", "python3", "dist-packages", "shardguard",
                           "_install_paths.py"))
        self.assertIn("prefix=/usr\n", read("usr", "lib", "pkgconfig", "shardguard.pc"))
        self.assertIn("ExecStart=/usr/bin/shardguard agent",
                      read("usr", "lib", "systemd", "system", "shardguard-agent.service"))


if __name__ == "__main__":
    sgrun.unittest.main(verbosity=2)
