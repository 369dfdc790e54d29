"""The runner end to end on a tiny corpus: bench/run.sh --help and --dry-run; a real run on ext4
with a Presso target whose binary fails (recorded as failed, the run goes on, the report is
written, nothing is left); the same with two repetitions, run as rounds with the targets
alternating; and Ctrl-C in the middle of a run."""
import csv
import glob
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

RUN = os.path.join(helpers.BENCH, "run.sh")


def tiny_corpus(d):
    os.makedirs(d)
    with open(os.path.join(d, "text.tar"), "w") as f:
        f.write("int main(void) { return 0; }\n" * 40000)
    with open(os.path.join(d, "reads.fq"), "w") as f:
        for i in range(5000):
            f.write(f"@r{i}\nACGTTGCAAGGCTTAGCCAT\n+\nIIIIIHHHHHGGGGG#####\n")
    with open(os.path.join(d, "media.bin"), "wb") as f:
        f.write(os.urandom(1 << 20))


class CliTest(unittest.TestCase):
    def test_help(self):
        r = subprocess.run(["bash", RUN, "--help"], capture_output=True, text=True)
        self.assertEqual(r.returncode, 0)
        self.assertIn("usage: bench/run.sh", r.stdout)
        self.assertIn("examples:", r.stdout)

    def test_dry_run(self):
        with tempfile.TemporaryDirectory() as d:
            r = subprocess.run([sys.executable, os.path.join(helpers.LIB, "bench.py"), "--quick", "--dry-run",
                                "--work", d, "--targets", "ext4,zfs-gzip-*,presso-*",
                                "--presso-target", "presso-auto=compression=auto"],
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 0, r.stderr)
            targets = [l.split()[1] for l in r.stdout.splitlines() if l.startswith("target ")]
            self.assertEqual(targets, ["ext4", "zfs-gzip-1", "zfs-gzip-6", "presso-off", "presso-lz4",
                                       "presso-gzip-6", "presso-gzip-6-isal", "presso-zstd-3", "presso-auto"])
            self.assertIn("workload fio: SeqW 128K, SeqR 128K, RandW 128K, RandR 128K, SeqW 4K, RandW 4K",
                          r.stdout)

    def test_bad_arguments(self):
        for args in (["--workloads", "nope"], ["--presso-target", "x=y"]):
            r = subprocess.run([sys.executable, os.path.join(helpers.LIB, "bench.py"), "--dry-run"] + args,
                               capture_output=True, text=True)
            self.assertEqual(r.returncode, 2, args)


@unittest.skipUnless(helpers.can_mount(), "needs root, losetup and mkfs.ext4")
class EndToEndTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory(prefix="presso-bench-test-")
        self.d = self.tmp.name
        self.work, self.out, self.corpus = (os.path.join(self.d, x) for x in ("work", "out", "corpus"))
        tiny_corpus(self.corpus)
        self.fake = os.path.join(self.d, "presso")
        with open(self.fake, "w") as f:
            f.write("#!/bin/sh\necho 'presso: not implemented yet' >&2\nexit 1\n")
        os.chmod(self.fake, 0o755)

    def tearDown(self):
        resources.Registry(os.path.join(self.work, "resources.jsonl")).teardown()
        self.tmp.cleanup()

    def argv(self, *extra):
        return ["bash", RUN, "--quick", "--no-install", "--no-build", "--work", self.work, "--out", self.out,
                "--corpus", self.corpus, "--presso", self.fake, "--workloads", "files"] + list(extra)

    def assertNothingLeft(self):
        self.assertEqual(resources.live_entries(os.path.join(self.work, "resources.jsonl")), [])
        with open("/proc/self/mountinfo") as f:
            self.assertNotIn(self.work, f.read())
        out = subprocess.run(["losetup", "-a"], capture_output=True, text=True).stdout
        self.assertNotIn(self.work, out)

    def test_run_with_a_failing_target(self):
        r = subprocess.run(self.argv("--targets", "ext4,presso-off"), capture_output=True, text=True, timeout=600)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        self.assertIn("[ 2/2 presso-off] FAILED to set up", r.stderr)
        with open(os.path.join(self.out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        ext4 = [x for x in rows if x["target"] == "ext4"]
        presso = [x for x in rows if x["target"] == "presso-off"]
        self.assertEqual(len(ext4), 8)
        self.assertTrue(all(x["status"] == "ok" for x in ext4))
        self.assertTrue(all(float(x["mbps"]) > 0 for x in ext4))
        self.assertAlmostEqual(float([x for x in ext4 if x["phase"] == "text.tar write"][0]["ratio"]), 1.0, delta=0.05)
        self.assertEqual(len(presso), 8)
        self.assertTrue(all(x["status"] == "failed" and "not implemented yet" in x["error"] for x in presso))
        with open(os.path.join(self.out, "report.md")) as f:
            md = f.read()
        self.assertIn("presso-off, files (8 phase(s)): failed", md)
        self.assertNothingLeft()

    def test_repetitions_alternate_between_targets(self):
        r = subprocess.run(self.argv("--targets", "ext4,presso-off", "--reps", "2"), capture_output=True,
                           text=True, timeout=900)
        self.assertEqual(r.returncode, 0, r.stderr[-3000:])
        # Each round sets every target up afresh and runs one repetition on it, starting one
        # target further on than the round before.
        setups = [line.split(" setup (")[0].split(" FAILED to set up")[0] for line in r.stderr.splitlines()
                  if " setup (" in line or " FAILED to set up" in line]
        self.assertEqual(setups, ["[ 1/2 ext4] round 1/2", "[ 2/2 presso-off] round 1/2",
                                  "[ 2/2 presso-off] round 1/2",
                                  "[ 2/2 presso-off] round 2/2", "[ 2/2 presso-off] round 2/2",
                                  "[ 1/2 ext4] round 2/2"])
        with open(os.path.join(self.out, "results.csv")) as f:
            rows = list(csv.DictReader(f))
        ext4 = [x for x in rows if x["target"] == "ext4"]
        self.assertEqual(sorted({x["rep"] for x in ext4}), ["1", "2"])
        self.assertEqual(len(ext4), 16)
        self.assertTrue(all(x["status"] == "ok" for x in ext4))
        self.assertEqual(len([x for x in rows if x["target"] == "presso-off"]), 16)
        with open(os.path.join(self.out, "report.md")) as f:
            self.assertIn("Medians over 2 repetition(s), the targets alternating in every round", f.read())
        with open(os.path.join(self.out, "run.json")) as f:
            self.assertEqual([t["name"] for t in json.load(f)["targets"]], ["ext4", "presso-off"])
        self.assertNothingLeft()

    def test_ctrl_c_mid_run(self):
        p = subprocess.Popen(self.argv("--targets", "ext4"), stdout=subprocess.DEVNULL,
                             stderr=subprocess.DEVNULL, start_new_session=True)
        journal = os.path.join(self.work, "resources.jsonl")
        deadline = time.time() + 120
        while time.time() < deadline:
            if any(e["kind"] == "mount" for e in resources.live_entries(journal)):
                break
            time.sleep(0.05)
        else:
            p.kill()
            self.fail("the run never mounted anything")
        os.killpg(p.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        rc = p.wait(timeout=300)
        self.assertNotEqual(rc, 0)
        self.assertNothingLeft()


if __name__ == "__main__":
    unittest.main()
