"""Teardown: whatever the harness registered is gone afterwards, after a failure, a SIGTERM, a
SIGKILL of the runner (the journal is undone by `bench.py --teardown`, as run.sh's trap does) and
a Ctrl-C of bench/run.sh itself. Uses real loop devices and ext4 mounts (root only)."""
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import unittest

import helpers
import resources
import sysutil

SETUP = f"""
import os, subprocess, sys, time
sys.path.insert(0, {helpers.LIB!r})
import resources, sysutil

def make(work, reg, n):
    img = os.path.join(work, "img%d" % n)
    mnt = os.path.join(work, "mnt%d" % n)
    os.makedirs(mnt, exist_ok=True)
    with open(img, "wb") as f:
        f.truncate(32 << 20)
    dev = sysutil.run(["losetup", "--find", "--show", img]).stdout.strip()
    reg.add("loop", group="t%d" % n, dev=dev, image=img)
    sysutil.run(["mkfs.ext4", "-q", "-F", dev])
    sysutil.run(["mount", dev, mnt])
    reg.add("mount", group="t%d" % n, path=mnt)
    # A daemon: its parent exits at once, as zfs-fuse's does.
    pid = int(subprocess.run(["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], capture_output=True,
                             text=True).stdout)
    reg.add("daemon", group="t%d" % n, pid=pid, name="sleep", match="sleep 600")
    return img, mnt, dev, pid
"""


def loop_attached(img):
    out = subprocess.run(["losetup", "-j", img], capture_output=True, text=True).stdout
    return bool(out.strip())


@unittest.skipUnless(helpers.can_mount(), "needs root, losetup and mkfs.ext4")
class TeardownTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="presso-bench-test-")
        self.work = self.tmp.name
        self.journal = os.path.join(self.work, "resources.jsonl")

    def tearDown(self):
        # Belt and braces: never leave anything behind, whatever the test did.
        resources.Registry(self.journal).teardown()
        self.tmp.cleanup()

    def assertAllGone(self, img, mnt, pid=None):
        self.assertFalse(sysutil.is_mounted(mnt), f"{mnt} still mounted")
        for _ in range(50):
            if not loop_attached(img):
                break
            time.sleep(0.1)
        self.assertFalse(loop_attached(img), f"{img} still on a loop device")
        if pid:
            self.assertFalse(sysutil.pid_alive(pid), f"pid {pid} still alive")
        self.assertEqual(resources.live_entries(self.journal), [])

    def make(self, reg, n=1):
        ns = {}
        exec(SETUP, ns)
        return ns["make"](self.work, reg, n)

    def test_failure_in_a_workload_tears_everything_down(self):
        reg = resources.Registry(self.journal)
        img, mnt, dev, pid = self.make(reg)
        self.assertTrue(sysutil.is_mounted(mnt))
        errors = None
        try:
            with open(os.path.join(mnt, "f"), "w") as f:
                f.write("data")
            raise RuntimeError("workload failed")
        except RuntimeError:
            pass
        finally:
            errors = reg.teardown()
        self.assertEqual(errors, [])
        self.assertAllGone(img, mnt, pid)

    def test_group_teardown_leaves_other_groups(self):
        reg = resources.Registry(self.journal)
        img1, mnt1, _, pid1 = self.make(reg, 1)
        img2, mnt2, _, pid2 = self.make(reg, 2)
        self.assertEqual(reg.teardown(group="t1"), [])
        self.assertFalse(sysutil.is_mounted(mnt1))
        self.assertTrue(sysutil.is_mounted(mnt2))
        self.assertTrue(sysutil.pid_alive(pid2))
        self.assertEqual(reg.teardown(), [])
        self.assertAllGone(img2, mnt2, pid2)

    def test_busy_mount_is_detached(self):
        reg = resources.Registry(self.journal)
        img, mnt, dev, pid = self.make(reg)
        # Not registered (not ours to stop): keeps the mount busy.
        holder = subprocess.Popen(["sleep", "600"], cwd=mnt)
        try:
            self.assertEqual(reg.teardown(), [])
            self.assertFalse(sysutil.is_mounted(mnt))
        finally:
            holder.kill()
            holder.wait()
        self.assertAllGone(img, mnt, pid)

    def test_teardown_is_idempotent_and_survives_a_torn_journal_line(self):
        reg = resources.Registry(self.journal)
        img, mnt, dev, pid = self.make(reg)
        with open(self.journal, "a") as f:
            f.write('{"op": "add", "id": 99, "kind": "mou')  # a crash mid-write
        self.assertEqual(reg.teardown(), [])
        self.assertEqual(reg.teardown(), [])
        self.assertAllGone(img, mnt, pid)

    def test_sigterm_to_the_runner(self):
        code = SETUP + f"""
sysutil.install_signal_handlers()
reg = resources.Registry({self.journal!r})
try:
    img, mnt, dev, pid = make({self.work!r}, reg, 1)
    print(img, mnt, pid, flush=True)
    time.sleep(600)
except sysutil.Interrupted:
    sys.exit(3 if reg.teardown() else 0)
"""
        p = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
        img, mnt, pid = p.stdout.readline().split()
        self.assertTrue(sysutil.is_mounted(mnt))
        p.send_signal(signal.SIGTERM)
        self.assertEqual(p.wait(timeout=120), 0)
        p.stdout.close()
        self.assertAllGone(img, mnt, int(pid))

    def test_sigkilled_runner_is_cleaned_up_from_the_journal(self):
        code = SETUP + f"""
reg = resources.Registry({self.journal!r})
img, mnt, dev, pid = make({self.work!r}, reg, 1)
print(img, mnt, pid, flush=True)
os.kill(os.getpid(), 9)
"""
        p = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
        self.assertEqual(p.returncode, -9)
        img, mnt, pid = p.stdout.split()
        self.assertTrue(sysutil.is_mounted(mnt))
        # What bench/run.sh's EXIT trap runs.
        r = subprocess.run([sys.executable, os.path.join(helpers.LIB, "bench.py"), "--teardown",
                            "--work", self.work], capture_output=True, text=True, timeout=300)
        self.assertEqual(r.returncode, 0, r.stdout + r.stderr)
        self.assertIn("3 resource(s)", r.stdout)
        self.assertAllGone(img, mnt, int(pid))


if __name__ == "__main__":
    unittest.main()
