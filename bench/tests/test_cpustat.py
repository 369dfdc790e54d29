import os
import subprocess
import sys
import time
import unittest

import helpers
import cpustat
import resources
import workloads

STAT_A = """cpu  1000 10 500 8000 200 5 15 100 0 0
cpu0 500 5 250 4000 100 2 8 50 0 0
cpu1 500 5 250 4000 100 3 7 50 0 0
intr 12345
ctxt 999
"""
# +300 user, +100 system, +400 idle, +100 iowait, +100 steal: total +1000, busy +400.
STAT_B = """cpu  1300 10 600 8400 300 5 15 200 7 0
cpu0 650 5 300 4200 150 2 8 100 0 0
cpu1 650 5 300 4200 150 3 7 100 0 0
"""


class ProcStatTest(unittest.TestCase):
    def test_parse(self):
        t = cpustat.parse_proc_stat(STAT_A)
        self.assertEqual(t.user, 1000)
        self.assertEqual(t.steal, 100)
        self.assertEqual(t.ncpu, 2)
        self.assertEqual(cpustat.total(t), 9830)
        self.assertEqual(cpustat.busy(t), 1530)

    def test_guest_is_not_counted_twice(self):
        # The 9th field (guest = 7) is already inside user.
        self.assertEqual(cpustat.total(cpustat.parse_proc_stat(STAT_B)),
                         1300 + 10 + 600 + 8400 + 300 + 5 + 15 + 200)

    def test_utilisation_excludes_idle_iowait_and_steal(self):
        a, b = cpustat.parse_proc_stat(STAT_A), cpustat.parse_proc_stat(STAT_B)
        self.assertAlmostEqual(cpustat.utilisation(a, b), 0.4)
        d = cpustat.delta(a, b, ticks_per_second=100)
        self.assertAlmostEqual(d["cpu_util"], 0.4)
        self.assertAlmostEqual(d["cpu_busy_s"], 4.0)
        self.assertAlmostEqual(d["iowait_frac"], 0.1)
        self.assertAlmostEqual(d["steal_frac"], 0.1)

    def test_no_time_elapsed(self):
        a = cpustat.parse_proc_stat(STAT_A)
        self.assertIsNone(cpustat.utilisation(a, a))
        self.assertIsNone(cpustat.delta(a, a)["cpu_util"])

    def test_no_aggregate_line(self):
        with self.assertRaises(ValueError):
            cpustat.parse_proc_stat("cpu0 1 2 3 4\n")

    def test_real_proc_stat(self):
        t = cpustat.read()
        self.assertGreaterEqual(t.ncpu, 1)
        self.assertGreater(cpustat.total(t), 0)


class PidStatTest(unittest.TestCase):
    def test_comm_with_spaces_and_parens(self):
        line = "1234 (kworker/0:1 (x) y) S 2 0 0 0 -1 69238880 0 0 0 0 17 23 0 0 20 0 1 0 5 0 0"
        self.assertEqual(cpustat.parse_pid_stat(line), (2, 40))

    def test_kernel_threads_are_counted(self):
        self.assertGreaterEqual(cpustat.kernel_thread_ticks(), 0)
        self.assertIn(2, cpustat.kernel_thread_table())  # kthreadd itself

    def test_an_exiting_thread_does_not_make_the_delta_negative(self):
        before = {10: 500, 11: 40}
        after = {11: 45, 12: 7}   # 10 exited, 12 appeared
        self.assertEqual(cpustat.table_delta(before, after), 5 + 7)
        self.assertEqual(cpustat.table_delta({13: 90}, {13: 3}), 3)  # pid reused

    def test_cgroup_roots(self):
        mounts = ("tmpfs /sys/fs/cgroup tmpfs rw 0 0\n"
                  "cgroup /sys/fs/cgroup/cpuacct cgroup rw,relatime,cpuacct 0 0\n"
                  "cgroup2 /sys/fs/cgroup/unified cgroup2 rw,relatime 0 0\n")
        self.assertEqual(cpustat.find_cgroup_roots(mounts),
                         [("v2", "/sys/fs/cgroup/unified"), ("v1", "/sys/fs/cgroup/cpuacct")])


class FakePhase:
    def __init__(self, seconds, busy, total, attributed):
        self.seconds, self.busy, self.total = seconds, busy, total
        self.before = cpustat.Times(0, 0, 0, 0, 0, 0, 0, 0, 2)
        self.after = cpustat.Times(0, 0, 0, 0, total // 10, 0, 0, 0, 2)
        self._att = attributed

    def attributed_s(self):
        return self._att


class CombinedCpuTest(unittest.TestCase):
    def test_attributed_over_wall_clock_times_cores(self):
        c = workloads.combined_cpu([FakePhase(2.0, 300, 400, 1.0), FakePhase(1.0, 100, 200, 0.5)])
        self.assertAlmostEqual(c["cpu_util"], 1.5 / (3.0 * workloads.NCPU))
        self.assertEqual(c["cpu_source"], "cgroup+kthreads")
        self.assertAlmostEqual(c["sys_cpu_util"], 400 / 600)
        self.assertAlmostEqual(c["iowait_frac"], 60 / 600)

    def test_falls_back_to_system_wide(self):
        c = workloads.combined_cpu([FakePhase(2.0, 300, 400, None)])
        self.assertEqual(c["cpu_source"], "/proc/stat")
        self.assertAlmostEqual(c["cpu_util"], 0.75)


@unittest.skipUnless(os.geteuid() == 0, "needs root to make a control group")
class AttributedTest(unittest.TestCase):
    def test_counts_a_busy_child_and_is_torn_down(self):
        # In a child process, so this test process stays where it is.
        code = f"""
import os, sys, time, subprocess
sys.path.insert(0, {helpers.LIB!r})
import cpustat, resources
reg = resources.Registry(sys.argv[1])
a = cpustat.Attributed.create(reg, "presso-bench-test-%d" % os.getpid(), os.sysconf("SC_CLK_TCK"))
if a is None:
    print("none"); sys.exit(0)
s0 = a.sample()
subprocess.run([sys.executable, "-c", "import time\\nwhile time.process_time() < 1.0: pass"])
print(a.seconds_between(s0, a.sample()), a.path)
assert reg.teardown() == []
"""
        import tempfile
        with tempfile.TemporaryDirectory() as d:
            out = subprocess.run([sys.executable, "-c", code, os.path.join(d, "j.jsonl")],
                                 capture_output=True, text=True, timeout=60)
            self.assertEqual(out.returncode, 0, out.stderr)
            if out.stdout.strip() == "none":
                self.skipTest("no usable cgroup hierarchy")
            used, path = out.stdout.split()
            self.assertGreater(float(used), 0.95)  # the busy child's CPU second, at least
            self.assertFalse(os.path.exists(path))


if __name__ == "__main__":
    unittest.main()
