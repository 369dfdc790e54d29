import os
import random
import shutil
import tempfile
import unittest

import helpers
import genomics

QUALS = ["IIIIIIIIIIHHHHHHHGGG###", "@#==>DA?CDHGHHHHHEHGGGGGFF", "CCCFFFFFHHHHHJJJJJJJJJJJ"]


def write_fastq(path, n=30):
    with open(path, "w") as f:
        for i in range(n):
            q = QUALS[i % 3]
            f.write(f"@r{i}\n{'A' * len(q)}\n+\n{q}\n")


class GeneratorTest(unittest.TestCase):
    def test_qualities_are_read(self):
        with tempfile.TemporaryDirectory() as d:
            write_fastq(os.path.join(d, "r.fq"))
            self.assertEqual(sorted(genomics.real_qualities(os.path.join(d, "r.fq"))), sorted(QUALS))
            with open(os.path.join(d, "bad.fq"), "w") as f:
                f.write("not fastq\nx\n+\ny\n")
            with self.assertRaises(ValueError):
                genomics.real_qualities(os.path.join(d, "bad.fq"))

    def test_errors_follow_qualities(self):
        rng = random.Random(1)
        seq = "ACGT" * 2500
        _, nm_good = genomics._errors(rng, seq, "I" * len(seq))   # Q40: 1 in 10,000
        _, nm_bad = genomics._errors(rng, seq, "+" * len(seq))    # Q10: 1 in 10
        self.assertLess(nm_good, 10)
        self.assertTrue(700 < nm_bad < 1300, nm_bad)

    @unittest.skipUnless(shutil.which("samtools"), "needs samtools")
    def test_dataset(self):
        with tempfile.TemporaryDirectory() as d:
            write_fastq(os.path.join(d, "r.fq"))
            out = os.path.join(d, "g")
            p = genomics.generate(out, os.path.join(d, "r.fq"), 200, [5000, 3000], seed=7)
            self.assertEqual(p["n_reads_per_lane"], 200)
            with open(os.path.join(out, "ref.fa")) as f:
                ref = {}
                for line in f.read().split(">")[1:]:
                    name, *seq = line.split("\n")
                    ref[name] = "".join(seq)
            self.assertEqual({k: len(v) for k, v in ref.items()}, {"chr1": 5000, "chr2": 3000})
            with open(os.path.join(out, "lane1.fq")) as f:
                fq = f.read().splitlines()
            self.assertEqual(len(fq), 800)
            self.assertTrue(all(q in QUALS for q in fq[3::4]))
            with open(os.path.join(out, "lane1.sam")) as f:
                sam = [l.split("\t") for l in f if not l.startswith("@")]
            self.assertEqual(len(sam), 200)
            for r in sam[:50]:
                flag, chrom, pos, cigar, seq, nm = int(r[1]), r[2], int(r[3]), r[5], r[9], int(r[11][5:])
                self.assertEqual(cigar, f"{len(seq)}M")
                truth = ref[chrom][pos - 1:pos - 1 + len(seq)]
                self.assertEqual(sum(a != b for a, b in zip(seq, truth)), nm)  # true positions
            self.assertEqual(os.system(f"samtools quickcheck {out}/lane1.bam {out}/lane2.bam"), 0)
            # A second call with the same parameters reuses the files.
            m = os.path.getmtime(os.path.join(out, "lane1.bam"))
            genomics.generate(out, os.path.join(d, "r.fq"), 200, [5000, 3000], seed=7)
            self.assertEqual(os.path.getmtime(os.path.join(out, "lane1.bam")), m)


if __name__ == "__main__":
    unittest.main()
