import os
import random
import tempfile
import unittest

import helpers  # noqa: F401 (bench/lib on the import path)
import soak


def rows(rss_of_cycle, cycles=100, seconds_per_cycle=4.0):
    return [
        {"cycle": c, "seconds": c * seconds_per_cycle, "ops": 1000 * (c + 1),
         "rss_kib": rss_of_cycle(c), "hwm_kib": rss_of_cycle(c) + 512,
         "threads": 12, "fds": 20}
        for c in range(cycles)
    ]


class SummaryTest(unittest.TestCase):
    def test_a_flat_resident_set_shows_no_growth(self):
        noisy = random.Random(3)
        s = soak.summarise(rows(lambda c: 80_000 + noisy.randint(-200, 200)))
        self.assertEqual(s["cycles"], 100)
        self.assertLess(abs(s["growth_kib_per_100_cycles"]), 400)
        self.assertAlmostEqual(s["rss_first_mib"], 80_000 / 1024, delta=1)

    def test_a_leak_shows_as_growth_per_cycle_and_per_hour(self):
        # 50 KiB per cycle after a warm-up; 4 s per cycle is 900 cycles an hour.
        s = soak.summarise(rows(lambda c: 60_000 + 50 * c if c > 10 else 30_000 + 3_000 * c))
        self.assertAlmostEqual(s["growth_kib_per_100_cycles"], 5_000, delta=1)
        self.assertAlmostEqual(s["growth_mib_per_hour"], 50 * 900 / 1024, delta=0.1)
        self.assertGreater(s["rss_last_mib"], s["rss_first_mib"])
        self.assertEqual(s["rss_peak_mib"], (60_000 + 50 * 99 + 512) / 1024)

    def test_the_report_reads_what_a_run_wrote(self):
        with tempfile.TemporaryDirectory() as d:
            with open(os.path.join(d, "soak.tsv"), "w") as f:
                f.write("\t".join(soak.FIELDS) + "\n")
                for r in rows(lambda c: 70_000, cycles=5):
                    f.write("\t".join(str(r[k]) for k in soak.FIELDS) + "\n")
            read = soak.read_rows(os.path.join(d, "soak.tsv"))
            self.assertEqual(len(read), 5)
            self.assertEqual(soak.summarise(read)["fds_last"], 20)

    def test_text_is_compressible_and_differs_per_seed(self):
        a = soak.text(random.Random(1), 100_000)
        b = soak.text(random.Random(2), 100_000)
        self.assertEqual(len(a), 100_000)
        self.assertNotEqual(a, b)
        import zlib
        self.assertLess(len(zlib.compress(a)), len(a) // 3)


if __name__ == "__main__":
    unittest.main()
