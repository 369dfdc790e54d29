"""System-wide CPU utilisation from /proc/stat deltas.

Every process counts: the workload itself, the FUSE daemons (zfs-fuse, presso), the kernel's
threads (btrfs compression workers, writeback, kswapd) and interrupts. That is the cost a user pays.

Definition used throughout (and stated in the report):
    total = user + nice + system + idle + iowait + irq + softirq + steal   (all cores)
    busy  = total - idle - iowait - steal
    utilisation = busy / total, so 1.0 (100%) means every core was busy for the whole phase.
guest/guest_nice are already counted in user/nice and are not added again. steal (time the
hypervisor ran another machine) is neither our work nor idle: it stays in total and out of busy.
"""
import collections
import os

Times = collections.namedtuple("Times", "user nice system idle iowait irq softirq steal ncpu")


def parse_proc_stat(text):
    """The aggregate 'cpu' line of /proc/stat as Times (in clock ticks), plus the number of cores
    (the cpuN lines)."""
    agg = None
    ncpu = 0
    for line in text.splitlines():
        parts = line.split()
        if not parts:
            continue
        if parts[0] == "cpu":
            vals = [int(x) for x in parts[1:9]]
            vals += [0] * (8 - len(vals))  # very old kernels have fewer fields
            agg = vals
        elif parts[0].startswith("cpu") and parts[0][3:].isdigit():
            ncpu += 1
    if agg is None:
        raise ValueError("no aggregate 'cpu' line in /proc/stat text")
    return Times(*agg, ncpu=ncpu)


def read(path="/proc/stat"):
    with open(path) as f:
        return parse_proc_stat(f.read())


def total(t):
    return t.user + t.nice + t.system + t.idle + t.iowait + t.irq + t.softirq + t.steal


def busy(t):
    return total(t) - t.idle - t.iowait - t.steal


def utilisation(before, after):
    """Fraction of all cores busy between two samples (0..1); None when no tick elapsed."""
    dt = total(after) - total(before)
    if dt <= 0:
        return None
    db = busy(after) - busy(before)
    return max(0.0, min(1.0, db / dt))


def delta(before, after, ticks_per_second=100):
    """A dict of the phase's CPU figures: utilisation (0..1), busy core-seconds, iowait and steal
    fractions."""
    dt = total(after) - total(before)
    if dt <= 0:
        return {"cpu_util": None, "cpu_busy_s": 0.0, "iowait_frac": None, "steal_frac": None}
    return {
        "cpu_util": utilisation(before, after),
        "cpu_busy_s": (busy(after) - busy(before)) / ticks_per_second,
        "iowait_frac": (after.iowait - before.iowait) / dt,
        "steal_frac": (after.steal - before.steal) / dt,
    }


# --- CPU attributed to this run ------------------------------------------------------------------
# On a machine shared with other tenants, the system-wide figure above counts their work too. The
# harness therefore also measures the CPU it is responsible for: its own control group (the harness
# and every process it starts: fio, cp, samtools, the zfs-fuse and presso daemons) plus every
# kernel thread (btrfs compression workers, writeback, the loop devices' workers), over wall clock
# × cores. Kernel threads also serve the other tenants now and then; that error is small next to
# theirs.

def parse_pid_stat(text):
    """(ppid, utime + stime in ticks) from a /proc/PID/stat line."""
    rest = text.rsplit(")", 1)[1].split()
    return int(rest[1]), int(rest[11]) + int(rest[12])


def kernel_thread_table(proc="/proc"):
    """{pid: utime + stime in ticks} of kthreadd and its children (every kernel thread)."""
    out = {}
    for d in os.listdir(proc):
        if not d.isdigit():
            continue
        try:
            with open(f"{proc}/{d}/stat") as f:
                ppid, ticks = parse_pid_stat(f.read())
        except (OSError, IndexError, ValueError):
            continue
        if d == "2" or ppid == 2:
            out[int(d)] = ticks
    return out


def kernel_thread_ticks(proc="/proc"):
    return sum(kernel_thread_table(proc).values())


def table_delta(before, after):
    """Ticks used between two kernel_thread_table()s: per thread, so that a worker that exits
    (taking its past ticks with it) does not make the sum go down; a thread that appeared counts
    whole (as does a recycled pid whose counter went backwards)."""
    total = 0
    for pid, t in after.items():
        b = before.get(pid, 0)
        total += t - b if t >= b else t
    return total


def find_cgroup_roots(mounts_text):
    """[(kind, mount point)] usable for accounting: cgroup2 first, then v1 cpuacct."""
    out = []
    for line in mounts_text.splitlines():
        parts = line.split()
        if len(parts) < 4:
            continue
        mp, fstype, opts = parts[1], parts[2], parts[3].split(",")
        if fstype == "cgroup2":
            out.insert(0, ("v2", mp))
        elif fstype == "cgroup" and "cpuacct" in opts:
            out.append(("v1", mp))
    return out


def cgroup_usage_seconds(kind, path):
    if kind == "v2":
        with open(os.path.join(path, "cpu.stat")) as f:
            for line in f:
                k, v = line.split()
                if k == "usage_usec":
                    return int(v) / 1e6
        raise ValueError("no usage_usec in cpu.stat")
    with open(os.path.join(path, "cpuacct.usage")) as f:
        return int(f.read()) / 1e9


class Attributed:
    """CPU seconds used by this run's control group plus all kernel threads."""

    def __init__(self, kind, path, ticks_per_second):
        self.kind, self.path, self.tps = kind, path, ticks_per_second

    def sample(self):
        return (cgroup_usage_seconds(self.kind, self.path), kernel_thread_table())

    def seconds_between(self, a, b):
        return (b[0] - a[0]) + table_delta(a[1], b[1]) / self.tps

    @staticmethod
    def create(registry, name, ticks_per_second):
        """Moves this process into a new control group NAME (registered for teardown) and returns
        an Attributed for it, or None when no cgroup hierarchy can be used here."""
        try:
            with open("/proc/self/mounts") as f:
                roots = find_cgroup_roots(f.read())
        except OSError:
            return None
        for kind, root in roots:
            path = os.path.join(root, name)
            try:
                os.makedirs(path, exist_ok=True)
                registry.add("cgroup", group="cgroup", path=path, parent=root)
                with open(os.path.join(path, "cgroup.procs"), "w") as f:
                    f.write(str(os.getpid()))
                a = Attributed(kind, path, ticks_per_second)
                a.sample()
                return a
            except (OSError, ValueError):
                continue
        return None
