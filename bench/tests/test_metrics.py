import unittest

import helpers
import metrics
from helpers import FakeTarget


def srow(target, fs, workload, phase, **kw):
    s = {f: None for f in metrics.SUMMARY_FIELDS}
    s.update(target=target, fs=fs, setting="", workload=workload, phase=phase, status="ok")
    s.update(kw)
    return s


class BasicsTest(unittest.TestCase):
    def test_median(self):
        self.assertEqual(metrics.median([3, 1, 2]), 2)
        self.assertEqual(metrics.median([4, 1, 2, 3]), 2.5)
        self.assertEqual(metrics.median([None, 5, float("nan")]), 5)
        self.assertIsNone(metrics.median([None]))

    def test_cpu_cost_per_byte(self):
        self.assertAlmostEqual(metrics.cpu_s_per_gb(3.0, 2_000_000_000), 1.5)
        self.assertIsNone(metrics.cpu_s_per_gb(None, 1_000))
        self.assertIsNone(metrics.cpu_s_per_gb(1.0, 0))
        # 100 MB at ratio 4 saves 75 MB; in 1.5 CPU seconds that is 50 MB per CPU second.
        self.assertAlmostEqual(metrics.saved_mb_per_cpu_s(100_000_000, 4.0, 1.5), 50.0)
        self.assertLess(metrics.saved_mb_per_cpu_s(100_000_000, 0.5, 1.0), 0)
        self.assertIsNone(metrics.saved_mb_per_cpu_s(100_000_000, 4.0, 0))
        self.assertIsNone(metrics.saved_mb_per_cpu_s(100_000_000, None, 1.0))

    def test_cost_efficiency(self):
        self.assertAlmostEqual(metrics.cost_efficiency(3.6, 0.5), 7.2)
        self.assertIsNone(metrics.cost_efficiency(3.6, 0))
        self.assertIsNone(metrics.cost_efficiency(None, 0.5))
        self.assertIsNone(metrics.cost_efficiency(2.0, None))

    def test_throughput_and_ratios(self):
        self.assertAlmostEqual(metrics.throughput_mbps(50_000_000, 2.0), 25.0)
        self.assertIsNone(metrics.throughput_mbps(1, 0))
        self.assertAlmostEqual(metrics.ratio_of(10, 4), 2.5)
        self.assertIsNone(metrics.ratio_of(1, 0))
        self.assertAlmostEqual(metrics.geomean([1, 4]), 2.0)
        self.assertIsNone(metrics.geomean([None]))

    def test_make_row_derives_mbps_and_cost_efficiency(self):
        r = metrics.make_row(FakeTarget("zfs-gzip-6", "zfs-fuse"), "fio", "SeqW 128K", 1,
                             bytes=100_000_000, seconds=4.0, cpu_util=0.25, cpu_busy_s=2.0, ratio=3.0)
        self.assertAlmostEqual(r["mbps"], 25.0)
        self.assertAlmostEqual(r["cpu_s_per_gb"], 20.0)
        self.assertAlmostEqual(r["saved_mb_per_cpu_s"], 100 * (2 / 3) / 2.0)
        self.assertAlmostEqual(r["cost_efficiency"], 12.0)
        self.assertEqual(r["fs"], "zfs-fuse")
        self.assertEqual(set(r), set(metrics.ROW_FIELDS))


class SummariseTest(unittest.TestCase):
    def test_medians_over_ok_reps_and_failures(self):
        t = FakeTarget("btrfs-zstd:3", "btrfs")
        rows = [metrics.make_row(t, "fio", "SeqW 128K", i, bytes=100_000_000, seconds=s, cpu_util=0.5, ratio=3.0)
                for i, s in ((1, 1.0), (2, 2.0), (3, 4.0))]
        rows.append(metrics.make_row(t, "fio", "SeqR 128K", 1, status="failed", error="boom"))
        rows.append(metrics.make_row(t, "fio", "SeqR 128K", 2, status="failed", error="boom2"))
        s = metrics.index(metrics.summarise(rows))
        w = s[("btrfs-zstd:3", "fio", "SeqW 128K")]
        self.assertEqual(w["status"], "ok")
        self.assertEqual(w["reps_ok"], 3)
        self.assertAlmostEqual(w["seconds"], 2.0)
        self.assertAlmostEqual(w["mbps"], 50.0)
        self.assertAlmostEqual(w["cost_efficiency"], 6.0)
        r = s[("btrfs-zstd:3", "fio", "SeqR 128K")]
        self.assertEqual(r["status"], "failed")
        self.assertEqual(r["reps_failed"], 2)
        self.assertEqual(r["error"], "boom")
        self.assertIsNone(r["mbps"])

    def test_one_failed_rep_leaves_the_median_of_the_others(self):
        t = FakeTarget("ext4")
        rows = [metrics.make_row(t, "files", "all write", 1, bytes=10, seconds=1.0),
                metrics.make_row(t, "files", "all write", 2, status="failed", error="x"),
                metrics.make_row(t, "files", "all write", 3, bytes=10, seconds=3.0)]
        s = metrics.summarise(rows)[0]
        self.assertEqual((s["status"], s["reps_ok"], s["reps_failed"]), ("ok", 2, 1))
        self.assertAlmostEqual(s["seconds"], 2.0)


def full_summary(presso_mult=6.0, presso_ratio=3.5):
    """zfs-gzip-6 at 20 MB/s, ratio 3.5, 50% CPU; Presso gzip at PRESSO_MULT times that."""
    out = []
    for t, fs, mbps, ratio, cpu, gen in (
            ("ext4", "ext4", 100, 1.0, 0.2, 10),
            ("btrfs-zstd:3", "btrfs", 80, 3.3, 0.3, 12),
            ("zfs-gzip-6", "zfs-fuse", 20, 3.5, 0.5, 40),
            ("presso-off", "presso", 60, 1.0, 0.3, 12),
            ("presso-gzip-6", "presso", 20 * presso_mult, presso_ratio, 0.25, 12),
            ("presso-zstd-3", "presso", 70, 3.2, 0.3, 13)):
        for ph in ("SeqW 128K", "SeqR 128K", "RandW 128K", "RandR 128K"):
            out.append(srow(t, fs, "fio", ph, mbps=mbps, ratio=ratio, cpu_util=cpu,
                            cost_efficiency=ratio / cpu))
        for ph in ("all write", "all read"):
            out.append(srow(t, fs, "files", ph, mbps=mbps, ratio=ratio, cpu_util=cpu, cost_efficiency=ratio / cpu))
        out.append(srow(t, fs, "genomics", "total", seconds=gen, ratio=1.5, cpu_util=cpu))
    return out


class TargetsTest(unittest.TestCase):
    def by_text(self, ev):
        return {e["target"]: e for e in ev}

    def test_met_and_not_met(self):
        ev = self.by_text(metrics.evaluate_targets(full_summary()))
        w = ev["presso-gzip-6 vs zfs-gzip-6: FIO SeqW throughput ≥ 5x at ≥ 0.95x its ratio"]
        self.assertTrue(w["met"])
        self.assertIn("6.00x throughput at 1.000x ratio", w["measured"])
        ce = ev["presso-gzip-6 vs zfs-gzip-6: cost-efficiency ≥ 4x (FIO SeqW)"]
        self.assertFalse(ce["met"])  # 14 / 7 = 2x
        self.assertIn("2.00x", ce["measured"])
        g = ev["presso-gzip-6 vs zfs-gzip-6: genomics ≥ 60% less execution time"]
        self.assertTrue(g["met"])
        self.assertEqual(g["measured"], "70% less time")
        z = ev["presso-zstd-3 vs btrfs-zstd:3: write throughput ≥ 1x at ≥ its ratio (corpus files)"]
        self.assertFalse(z["met"])  # slower and lower ratio
        off = ev["presso-off vs ext4: throughput ≥ 0.7x (geometric mean of the four FIO 128K patterns)"]
        self.assertFalse(off["met"])
        self.assertTrue(off["measured"].startswith("0.60x"))

    def test_ratio_too_low_fails_the_throughput_target(self):
        ev = self.by_text(metrics.evaluate_targets(full_summary(presso_ratio=3.0)))
        self.assertFalse(ev["presso-gzip-6 vs zfs-gzip-6: FIO SeqW throughput ≥ 5x at ≥ 0.95x its ratio"]["met"])

    def test_missing_target_is_not_measured(self):
        s = [x for x in full_summary() if x["target"] != "presso-gzip-6"]
        ev = self.by_text(metrics.evaluate_targets(s))
        e = ev["presso-gzip-6 vs zfs-gzip-6: FIO SeqW throughput ≥ 5x at ≥ 0.95x its ratio"]
        self.assertIsNone(e["met"])
        self.assertEqual(e["measured"], "not measured")
        # A failed phase counts as missing too.
        s = full_summary()
        for x in s:
            if x["target"] == "presso-gzip-6" and x["phase"] == "SeqW 128K":
                x["status"] = "failed"
        ev = self.by_text(metrics.evaluate_targets(s))
        self.assertIsNone(ev["presso-gzip-6 vs zfs-gzip-6: cost-efficiency ≥ 4x (FIO SeqW)"]["met"])

    def test_comparisons(self):
        s = full_summary()
        rows = metrics.comparisons(s, ["presso-gzip-6", "presso-off"],
                                   ["ext4", "btrfs-zstd:3", "zfs-gzip-6"])
        pairs = [(r["presso"], r["anchor"]) for r in rows]
        self.assertEqual(pairs, [("presso-gzip-6", "zfs-gzip-6"), ("presso-gzip-6", "ext4"),
                                 ("presso-gzip-6", "btrfs-zstd:3"), ("presso-off", "ext4"),
                                 ("presso-off", "zfs-gzip-6"), ("presso-off", "btrfs-zstd:3")])
        self.assertAlmostEqual(rows[0]["SeqW 128K MB/s"], 6.0)
        self.assertAlmostEqual(rows[0]["genomics time"], 0.3)
        self.assertAlmostEqual(rows[0]["fio ratio"], 1.0)


if __name__ == "__main__":
    unittest.main()
