import json
import unittest

import helpers  # noqa: F401  (import path)
import parsers

FIO = """fio: this platform does not support process shared mutexes, forcing use of threads
{
  "fio version" : "fio-3.33",
  "jobs" : [
    {
      "jobname" : "job", "groupid" : 0, "error" : 0,
      "read" : {"io_bytes" : 100663296, "bw_bytes" : 50331648, "iops" : 384.0, "runtime" : 2000},
      "write" : {"io_bytes" : 33554432, "bw_bytes" : 16777216, "iops" : 128.0, "runtime" : 2100},
      "trim" : {"io_bytes" : 0, "bw_bytes" : 0, "iops" : 0.0, "runtime" : 0}
    }
  ]
}
"""


class FioTest(unittest.TestCase):
    def test_group_reported_mixed_job(self):
        r = parsers.parse_fio(FIO)
        self.assertEqual(r["read_bytes"], 96 << 20)
        self.assertEqual(r["write_bytes"], 32 << 20)
        self.assertEqual(r["bytes"], 128 << 20)
        self.assertEqual(r["bw"], 64 << 20)
        self.assertAlmostEqual(r["runtime_s"], 2.1)
        self.assertAlmostEqual(r["iops"], 512.0)
        self.assertEqual(r["errors"], 0)

    def test_jobs_are_summed_and_errors_counted(self):
        d = json.loads(FIO[FIO.index("{"):])
        d["jobs"].append(dict(d["jobs"][0], error=5))
        r = parsers.parse_fio(json.dumps(d))
        self.assertEqual(r["bytes"], 256 << 20)
        self.assertEqual(r["errors"], 5)

    def test_no_json_or_no_jobs(self):
        with self.assertRaises(ValueError):
            parsers.parse_fio("fio: failed to open file\n")
        with self.assertRaises(ValueError):
            parsers.parse_fio('{"jobs": []}')


class SizeTest(unittest.TestCase):
    def test_sizes(self):
        self.assertEqual(parsers.parse_size("123"), 123)
        self.assertEqual(parsers.parse_size("1.5K"), 1536)
        self.assertEqual(parsers.parse_size("2.9M"), round(2.9 * (1 << 20)))
        self.assertEqual(parsers.parse_size("4G"), 4 << 30)
        with self.assertRaises(ValueError):
            parsers.parse_size("lots")


class ZfsTest(unittest.TestCase):
    def test_zfs_get_hp(self):
        out = ("pbench-zfs-gzip-6/fio\tcompressratio\t3.41x\t-\n"
               "pbench-zfs-gzip-6/fio\tused\t29540352\t-\n"
               "pbench-zfs-gzip-6/fio\treferenced\t29515776\t-\n"
               "pbench-zfs-gzip-6\tcompression\tgzip\tlocal\n")
        p = parsers.parse_zfs_get(out)
        self.assertEqual(p["compressratio"], 3.41)
        self.assertEqual(p["used"], 29540352)
        self.assertEqual(p["referenced"], 29515776)
        self.assertEqual(p["compression"], "gzip")

    def test_human_readable_and_uncompressed(self):
        p = parsers.parse_zfs_get("pool  used  1.5M  -\npool  compressratio  1.00x  -\n")
        self.assertEqual(p["used"], round(1.5 * (1 << 20)))
        self.assertEqual(p["compressratio"], 1.0)

    def test_garbage(self):
        with self.assertRaises(ValueError):
            parsers.parse_zfs_get("bad property list: invalid property 'logicalused'\n")


class CompsizeTest(unittest.TestCase):
    BYTES = """Processed 2 files, 256 regular extents (256 refs), 0 inline.
Type       Perc     Disk Usage   Uncompressed Referenced  
TOTAL       31%     10485760     33554432     33554432    
zstd        31%     10485760     33554432     33554432    
"""

    def test_bytes(self):
        c = parsers.parse_compsize(self.BYTES)
        self.assertEqual(c["disk"], 10485760)
        self.assertEqual(c["uncompressed"], 33554432)
        self.assertAlmostEqual(c["ratio"], 3.2)

    def test_human_readable(self):
        c = parsers.parse_compsize("Type  Perc  Disk Usage  Uncompressed Referenced\n"
                                   "TOTAL  71%  2.9M  4.0M  4.0M\nnone 100% 2.8M 2.8M 2.8M\n")
        self.assertAlmostEqual(c["ratio"], 4.0 / 2.9, places=3)

    def test_nothing_processed(self):
        c = parsers.parse_compsize("Processed 0 files, 0 regular extents (0 refs), 0 inline.\n")
        self.assertIsNone(c["ratio"])
        self.assertEqual(c["disk"], 0)


class PressoStatusTest(unittest.TestCase):
    def test_status(self):
        s = parsers.parse_presso_status(json.dumps({
            "logical_bytes": 1000, "stored_bytes": 250, "garbage_bytes": 10, "ratio": 4.0,
            "compression": "gzip-6"}) + "\n")
        self.assertEqual(s["logical_bytes"], 1000)
        self.assertEqual(s["ratio"], 4.0)
        self.assertEqual(s["compression"], "gzip-6")

    def test_ratio_derived_when_missing_or_null(self):
        s = parsers.parse_presso_status('{"logical_bytes": 300, "stored_bytes": 100, "garbage_bytes": 0, "ratio": null}')
        self.assertEqual(s["ratio"], 3.0)
        s = parsers.parse_presso_status('{"logical_bytes": 0, "stored_bytes": 0, "garbage_bytes": 0}')
        self.assertIsNone(s["ratio"])

    def test_missing_field(self):
        with self.assertRaises(ValueError):
            parsers.parse_presso_status('{"logical_bytes": 1, "ratio": 1.0}')


if __name__ == "__main__":
    unittest.main()
