"""The workloads' bookkeeping on a fake target (a plain directory): rows, per-file ratios from
pool-wide accounting, failure of a step, and the fio command lines."""
import os
import tempfile
import unittest

import helpers
import workloads

RATIOS = {"text.tar": 4.0, "reads.fq": 3.0, "media.bin": 1.0}


class FakePoolTarget:
    """Stores into a directory; 'compresses' each corpus file by its RATIOS entry; accounts for
    the whole pool only, like Presso."""
    name, fs, setting = "fake-pool", "presso", "test"
    pool_accounting = True

    def __init__(self, root):
        self.mnt = root
        self.cold_cycles = 0

    def make_dir(self, name):
        p = os.path.join(self.mnt, name)
        os.makedirs(p, exist_ok=True)
        return p

    def remove_dir(self, name):
        import shutil
        shutil.rmtree(os.path.join(self.mnt, name), ignore_errors=True)

    def cold_cycle(self):
        self.cold_cycles += 1

    def barrier(self, path):
        pass

    def status(self):
        logical = stored = 0
        for root, _d, files in os.walk(self.mnt):
            for f in files:
                n = os.path.getsize(os.path.join(root, f))
                logical += n
                stored += n / RATIOS.get(f, 2.0)
        return {"logical_bytes": logical, "stored_bytes": stored}

    def usage_begin(self, path):
        return self.status()

    def usage_end(self, path, token):
        return self.usage_between(token, self.status())

    @staticmethod
    def usage_between(a, b):
        lg, st = b["logical_bytes"] - a["logical_bytes"], b["stored_bytes"] - a["stored_bytes"]
        return {"logical": lg, "stored": st, "ratio": lg / st if st else None, "source": "fake"}


class FilesTest(unittest.TestCase):
    def setUp(self):
        self.tmp = tempfile.TemporaryDirectory()
        self.corpus = os.path.join(self.tmp.name, "corpus")
        os.makedirs(self.corpus)
        for f, n in (("text.tar", 300_000), ("reads.fq", 200_000), ("media.bin", 100_000)):
            with open(os.path.join(self.corpus, f), "wb") as fh:
                fh.write(b"x" * n)
        self.target = FakePoolTarget(os.path.join(self.tmp.name, "mnt"))
        os.makedirs(self.target.mnt)

    def tearDown(self):
        self.tmp.cleanup()

    def test_rows_and_per_file_ratios(self):
        rows = list(workloads.run_files(self.target, {"corpus": self.corpus}, 1))
        self.assertEqual([r["phase"] for r in rows], workloads.files_phases({}))
        by = {r["phase"]: r for r in rows}
        for f, ratio in RATIOS.items():
            self.assertAlmostEqual(by[f"{f} write"]["ratio"], ratio)
            self.assertAlmostEqual(by[f"{f} read"]["ratio"], ratio)
        self.assertAlmostEqual(by["all write"]["ratio"], 600_000 / (75_000 + 200_000 / 3 + 100_000))
        self.assertEqual(by["all write"]["bytes"], 600_000)
        self.assertAlmostEqual(by["all write"]["seconds"], sum(by[f"{f} write"]["seconds"] for f in RATIOS))
        for r in rows:  # phases of a few ms may see no CPU tick at all: then both are None
            self.assertEqual(r["cpu_source"], "/proc/stat")
            if r["cpu_util"]:
                self.assertAlmostEqual(r["cost_efficiency"], r["ratio"] / r["cpu_util"])
            else:
                self.assertIsNone(r["cost_efficiency"])
        self.assertEqual(self.target.cold_cycles, 1)
        self.assertEqual(os.listdir(self.target.mnt), [])  # cleaned up

    def test_failure_midway_still_cleans_up(self):
        os.remove(os.path.join(self.corpus, "media.bin"))
        gen = workloads.run_files(self.target, {"corpus": self.corpus}, 1)
        with self.assertRaises(Exception):
            list(gen)
        self.assertEqual(os.listdir(self.target.mnt), [])


class FioArgsTest(unittest.TestCase):
    CFG = {"jobs": 2, "fio_runtime": 5, "fio_compress_pct": 72, "fio_compress_chunk": 512}

    def test_write_and_read(self):
        w = workloads.fio_args(self.CFG, "/d", "write", "128k", "128m")
        self.assertIn("--fallocate=none", w)  # btrfs does not compress into preallocated extents
        self.assertIn("--end_fsync=1", w)
        self.assertIn("--numjobs=2", w)
        self.assertIn("--buffer_compress_percentage=72", w)
        r = workloads.fio_args(self.CFG, "/d", "randread", "128k", "128m")
        self.assertNotIn("--end_fsync=1", r)
        m = workloads.fio_args(self.CFG, "/d", "rw", "4k", "128m")
        self.assertIn("--rwmixread=50", m)
        self.assertIn("--end_fsync=1", m)

    def test_phases(self):
        self.assertEqual(workloads.fio_phases({"fio_sweep": ["4K", "1M"]}),
                         ["SeqW 128K", "SeqR 128K", "RandW 128K", "RandR 128K", "SeqW 4K",
                          "RandW 4K", "SeqR:SeqW 1:1 4K", "SeqR:SeqW 1:1 1M"])


if __name__ == "__main__":
    unittest.main()
