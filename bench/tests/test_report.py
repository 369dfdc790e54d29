import os
import tempfile
import unittest

import helpers
import metrics
import report
from helpers import FakeTarget

CFG = {"mode": "quick", "reps": 1, "jobs": 2, "fio_size": "96m", "fio_runtime": 4, "fio_compress_pct": 72,
       "fio_compress_chunk": 512, "fio_sweep": ["4K", "1M"], "image_gib": 4, "sort_mem": "2M"}


def rows():
    out = []
    for name, fs, mbps, ratio in (("ext4", "ext4", 100, 1.0), ("zfs-gzip-6", "zfs-fuse", 20, 3.4),
                                  ("btrfs-zstd:3", "btrfs", 80, 3.2), ("presso-gzip-6", "presso", None, None)):
        t = FakeTarget(name, fs)
        for ph in ("SeqW 128K", "SeqR 128K", "RandW 128K", "RandR 128K", "SeqW 4K", "RandW 4K",
                   "SeqR:SeqW 1:1 4K", "SeqR:SeqW 1:1 1M"):
            if mbps is None:
                out.append(metrics.make_row(t, "fio", ph, 1, status="failed", error="setup: no presso binary"))
            else:
                out.append(metrics.make_row(t, "fio", ph, 1, bytes=mbps * 1_000_000, seconds=1.0, cpu_util=0.4,
                                            cpu_busy_s=0.8, sys_cpu_util=0.9, ratio=ratio,
                                            cpu_source="cgroup+kthreads"))
        for step in ("converting", "viewing", "sorting", "merging", "indexing", "total"):
            if mbps is None:
                out.append(metrics.make_row(t, "genomics", step, 1, status="failed", error="setup: no presso binary"))
            else:
                out.append(metrics.make_row(t, "genomics", step, 1, seconds=1000 / mbps, cpu_util=0.3, ratio=1.5))
    return out


META = {"mode": "quick", "cfg": CFG, "argv": ["--quick"], "workloads": ["fio", "genomics"], "status": "complete",
        "duration_s": 95, "machine": {"cpu": "Test CPU", "cores": 2, "packages": {"fio": "3.33"}},
        "targets": [{"name": "ext4", "fs": "ext4", "setting": "none", "anchor": True, "commands": ["mkfs.ext4 LOOP"]}],
        "fio_commands": {"SeqW 128K": "fio --rw=write"}}


class CsvTest(unittest.TestCase):
    def test_round_trip(self):
        with tempfile.TemporaryDirectory() as d:
            p = os.path.join(d, "results.csv")
            rs = rows()
            report.write_csv(p, rs, metrics.ROW_FIELDS)
            back = report.read_csv(p)
            self.assertEqual(len(back), len(rs))
            self.assertEqual(back[0]["target"], "ext4")
            self.assertAlmostEqual(back[0]["mbps"], 100.0)
            self.assertAlmostEqual(back[0]["cost_efficiency"], 2.5)
            self.assertIsNone(back[-1]["mbps"])
            self.assertEqual(back[-1]["status"], "failed")
            with open(p) as f:
                self.assertEqual(f.readline().strip().split(","), metrics.ROW_FIELDS)


class ReportTest(unittest.TestCase):
    def test_report_md(self):
        s = metrics.summarise(rows())
        md = report.report_md(s, META, [])
        self.assertIn("# Presso evaluation suite: quick run", md)
        self.assertIn("Test CPU (2 cores)", md)
        self.assertIn("## The issue's targets (reported, not asserted)", md)
        self.assertIn("| presso-gzip-6 vs zfs-gzip-6: FIO SeqW throughput ≥ 5x at ≥ 0.95x its ratio | not measured |", md)
        # 0.8 CPU s for 20 MB: 40 CPU s/GB; 20 MB × (1 − 1/3.4) saved in 0.8 CPU s: 17.6 MB/CPU s.
        self.assertIn("| zfs-gzip-6 | 20.0 | 20.0 | 20.0 | 20.0 | 20.0 | 20.0 | 3.40 | 40.00 | 17.6 | 40.00 | 40% "
                      "| 8.50 |", md)
        self.assertIn("rank by these. ratio÷CPU is the QZFS paper's cost-efficiency figure", md)
        self.assertIn("| presso-gzip-6 | failed | failed | failed | failed |", md)
        self.assertIn("- presso-gzip-6, fio (8 phase(s)): failed: setup: no presso binary", md)
        self.assertIn("## Presso against each anchor", md)
        self.assertIn("`mkfs.ext4 LOOP`", md)

    def test_write_all(self):
        with tempfile.TemporaryDirectory() as d:
            report.write_all(d, rows(), META)
            for f in ("results.csv", "summary.csv", "report.md"):
                self.assertTrue(os.path.getsize(os.path.join(d, f)) > 0, f)
            if report._plt() is not None:
                for f in ("fio_throughput.png", "fio_cpu_s_per_gb.png", "fio_sweep.png", "genomics.png"):
                    with open(os.path.join(d, f), "rb") as fh:
                        self.assertEqual(fh.read(8), b"\x89PNG\r\n\x1a\n", f)
                with open(os.path.join(d, "report.md")) as fh:
                    self.assertIn("![fio_throughput.png](fio_throughput.png)", fh.read())


class ScrubTest(unittest.TestCase):
    def test_machine_paths_are_replaced(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "report.md"), "w") as f:
                f.write("error: /srv/x/repo/bench/work/targets/ext4/mnt busy; binary /srv/x/repo/target/release/presso\n")
            report.scrub_paths(d, {"/srv/x/repo/bench/work/": "WORK/", "/srv/x/repo/": ""})
            with open(os.path.join(d, "report.md")) as f:
                self.assertEqual(f.read(), "error: WORK/targets/ext4/mnt busy; binary target/release/presso\n")


if __name__ == "__main__":
    unittest.main()
