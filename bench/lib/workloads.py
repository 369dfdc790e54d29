"""The three workloads. Each is a generator of result rows (metrics.make_row) for one target and
one repetition; every phase is timed by wall clock and CPU-sampled system-wide (cpustat) over the
same window. Read phases always follow target.cold_cycle(), so they are cold."""
import os
import time

import cpustat
import metrics
import parsers
import sysutil

TICKS = os.sysconf("SC_CLK_TCK")
NCPU = os.cpu_count() or 1
# A cpustat.Attributed (this run's control group + kernel threads) set by the runner, or None: then
# the system-wide figure is the only one.
ATTRIBUTED = None


class Phase:
    """Times a block and samples the CPU counters around it: /proc/stat (system-wide) and, when
    available, the CPU attributed to this run."""

    def __enter__(self):
        self.before = cpustat.read()
        self.a0 = ATTRIBUTED.sample() if ATTRIBUTED else None
        self.t0 = time.monotonic()
        return self

    def __exit__(self, *exc):
        self.seconds = time.monotonic() - self.t0
        self.after = cpustat.read()
        self.a1 = ATTRIBUTED.sample() if ATTRIBUTED else None
        self.busy = cpustat.busy(self.after) - cpustat.busy(self.before)
        self.total = cpustat.total(self.after) - cpustat.total(self.before)
        return False

    def attributed_s(self):
        return None if self.a0 is None else ATTRIBUTED.seconds_between(self.a0, self.a1)

    def cpu(self):
        return combined_cpu([self])


def combined_cpu(phases):
    """CPU figures over one or several phases. cpu_util is the CPU attributed to this run over
    wall clock × cores when it can be measured, else the system-wide figure (cpu_source says
    which); sys_cpu_util is always the system-wide one (summed busy over summed total ticks)."""
    phases = list(phases)
    busy = sum(p.busy for p in phases)
    total = sum(p.total for p in phases)
    sys_util = busy / total if total > 0 else None
    wall = sum(p.seconds for p in phases)
    att = [p.attributed_s() for p in phases]
    out = {"sys_cpu_util": sys_util, "iowait_frac": sum(p.after.iowait - p.before.iowait for p in phases) / total
           if total > 0 else None,
           "steal_frac": sum(p.after.steal - p.before.steal for p in phases) / total if total > 0 else None}
    if all(a is not None for a in att) and wall > 0:
        used = sum(att)
        out.update(cpu_util=max(0.0, min(1.0, used / (wall * NCPU))), cpu_busy_s=used,
                   cpu_source="cgroup+kthreads")
    else:
        out.update(cpu_util=sys_util, cpu_busy_s=busy / TICKS, cpu_source="/proc/stat")
    return out


def usage_fields(u):
    return {"logical_bytes": u["logical"], "stored_bytes": u["stored"], "ratio": u["ratio"],
            "ratio_source": u["source"]}


# --- FIO (the paper's Figure 7) ------------------------------------------------------------------
# (phase, fio --rw, --bs): the paper's four 128K phases, then 4K writes (issue 15's targets name
# SeqW and RandW at 4K too: small writes into 128K records are where a record store pays most).
FIO_SMALL_WRITES = [("SeqW 4K", "write", "4k"), ("RandW 4K", "randwrite", "4k")]
FIO_PATTERNS = [("SeqW 128K", "write", "128k"), ("SeqR 128K", "read", "128k"),
                ("RandW 128K", "randwrite", "128k"), ("RandR 128K", "randread", "128k")] + FIO_SMALL_WRITES


def fio_phases(cfg):
    return [p for p, _, _ in FIO_PATTERNS] + [f"SeqR:SeqW 1:1 {bs}" for bs in cfg["fio_sweep"]]


def fio_args(cfg, directory, rw, bs, size):
    """The fio command line of one phase (every setting explicit, so the report can print it)."""
    args = ["fio", "--output-format=json", "--name=job", f"--directory={directory}",
            f"--rw={rw}", f"--bs={bs}", f"--size={size}", f"--numjobs={cfg['jobs']}",
            "--group_reporting", "--ioengine=psync", "--direct=0", "--fallocate=none",
            f"--runtime={cfg['fio_runtime']}",
            f"--buffer_compress_percentage={cfg['fio_compress_pct']}",
            f"--buffer_compress_chunk={cfg['fio_compress_chunk']}", "--randrepeat=1",
            "--randseed=20190710"]
    if rw in ("write", "randwrite", "rw", "randrw"):
        args.append("--end_fsync=1")
    if rw in ("rw", "randrw"):
        args.append("--rwmixread=50")
    return args


def _fio(target, cfg, directory, rw, bs, size):
    with Phase() as ph:
        out = sysutil.run(fio_args(cfg, directory, rw, bs, size),
                          timeout=3 * cfg["fio_runtime"] + 300).stdout
        if rw != "read" and rw != "randread":
            target.barrier(directory)
    res = parsers.parse_fio(out)
    if res["errors"]:
        raise RuntimeError(f"fio reported {res['errors']} job errors")
    if res["bytes"] == 0:
        raise RuntimeError("fio moved no data")
    return ph, res


def _job_file_size(directory, jobs):
    """The smallest of the files fio's jobs wrote (a write capped by --runtime may be short), in
    whole MiB: the size the following phases use, so fio never extends (writes) a file while
    reading."""
    sizes = [os.path.getsize(os.path.join(directory, f"job.{j}.0")) for j in range(jobs)]
    return max(1, min(sizes) // (1 << 20)) * (1 << 20)


def run_fio(target, cfg, rep):
    d = target.make_dir("fio")
    try:
        tok = target.usage_begin(d)
        ph, res = _fio(target, cfg, d, "write", "128k", cfg["fio_size"])
        seqw = (ph, res)
        target.cold_cycle()
        u = usage_fields(target.usage_end(d, tok))
        size = _job_file_size(d, cfg["jobs"])
        yield _fio_row(target, "SeqW 128K", rep, *seqw, u)
        ph, res = _fio(target, cfg, d, "read", "128k", size)
        yield _fio_row(target, "SeqR 128K", rep, ph, res, u)
        randw = _fio(target, cfg, d, "randwrite", "128k", size)
        target.cold_cycle()
        u = usage_fields(target.usage_end(d, tok))
        yield _fio_row(target, "RandW 128K", rep, *randw, u)
        ph, res = _fio(target, cfg, d, "randread", "128k", size)
        yield _fio_row(target, "RandR 128K", rep, ph, res, u)
        # Overwrites of the same files in 4 KiB writes, each phase capped by the runtime.
        for phase, rw, bs in FIO_SMALL_WRITES:
            w = _fio(target, cfg, d, rw, bs, size)
            target.cold_cycle()
            u = usage_fields(target.usage_end(d, tok))
            yield _fio_row(target, phase, rep, *w, u)
        for bs in cfg["fio_sweep"]:
            target.cold_cycle()
            ph, res = _fio(target, cfg, d, "rw", bs.lower(), size)
            yield _fio_row(target, f"SeqR:SeqW 1:1 {bs}", rep, ph, res, u)
    finally:
        target.remove_dir("fio")


def _fio_row(target, phase, rep, ph, res, u):
    # Throughput over our own wall clock (which also bounds the CPU window, fio's start-up and the
    # final fsync included), from the bytes fio moved.
    return metrics.make_row(target, "fio", phase, rep, bytes=res["bytes"], seconds=ph.seconds,
                            **ph.cpu(), **u)


# --- real files (the ZFS+QAT FASTQ test) ---------------------------------------------------------
FILES = ["text.tar", "reads.fq", "media.bin"]


def files_phases(cfg):
    return [f"{f} {op}" for op in ("write", "read") for f in FILES] + ["all write", "all read"]


def run_files(target, cfg, rep):
    dirs = {f: target.make_dir("files-" + f.split(".")[0]) for f in FILES}
    try:
        toks = {f: target.usage_begin(dirs[f]) for f in FILES}
        # A file system that accounts for the whole pool only (Presso) is read after each file
        # (untimed): each file's figures are the difference between two readings.
        marks = [toks[FILES[0]]] if target.pool_accounting else None
        writes = {}
        for f in FILES:
            src, dst = os.path.join(cfg["corpus"], f), os.path.join(dirs[f], f)
            with Phase() as ph:
                sysutil.run(["cp", src, dst], timeout=3600)
                sysutil.run(["sync", dst], timeout=3600)  # fsync: the data is on the device
                target.barrier(dirs[f])
            writes[f] = ph
            if marks is not None:
                marks.append(target.usage_begin(dirs[f]))
        target.cold_cycle()
        if marks is not None:
            usage = {f: target.usage_between(marks[i], marks[i + 1]) for i, f in enumerate(FILES)}
        else:
            usage = {f: target.usage_end(dirs[f], toks[f]) for f in FILES}
        sizes = {f: os.path.getsize(os.path.join(cfg["corpus"], f)) for f in FILES}
        for f in FILES:
            yield metrics.make_row(target, "files", f"{f} write", rep, bytes=sizes[f],
                                   seconds=writes[f].seconds, **writes[f].cpu(), **usage_fields(usage[f]))
        reads = {}
        for f in FILES:
            with Phase() as ph, open(os.devnull, "w") as null:
                sysutil.run(["cat", os.path.join(dirs[f], f)], stdout=null, timeout=3600)
            reads[f] = ph
            yield metrics.make_row(target, "files", f"{f} read", rep, bytes=sizes[f],
                                   seconds=ph.seconds, **ph.cpu(), **usage_fields(usage[f]))
        logical = sum(u["logical"] or 0 for u in usage.values())
        stored = sum(u["stored"] or 0 for u in usage.values())
        # The whole corpus: the ratio of the summed accounting (zfs-fuse reports a ratio per
        # dataset only, so its total is weighted by the stored bytes).
        if target.fs == "zfs-fuse":
            logical = sum((u["ratio"] or 1) * (u["stored"] or 0) for u in usage.values())
        total = {"logical_bytes": logical, "stored_bytes": stored,
                 "ratio": logical / stored if stored else None,
                 "ratio_source": usage[FILES[0]]["source"]}
        for op, phs in (("write", writes), ("read", reads)):
            yield metrics.make_row(target, "files", f"all {op}", rep, bytes=sum(sizes.values()),
                                   seconds=sum(p.seconds for p in phs.values()),
                                   **combined_cpu(phs.values()), **total)
    finally:
        for f in FILES:
            target.remove_dir("files-" + f.split(".")[0])


# --- genomics (the paper's Figures 9-10) ---------------------------------------------------------
GENOMICS_STEPS = ["converting", "viewing", "sorting", "merging", "indexing"]


def genomics_phases(cfg):
    return GENOMICS_STEPS + ["total"]


def genomics_commands(cfg, d):
    """(step, [(argv, stdout file or None)], outputs to fsync) for each timed step; every path is
    on the file system under test, sort's temporary files included."""
    t = str(cfg["jobs"])
    j = lambda *p: os.path.join(d, *p)
    lanes = ("lane1", "lane2")
    return [
        # (fastqtobam's RGID= option crashes in Debian's biobambam2 2.0.185: no read groups here.)
        ("converting", [(["fastqtobam", f"I={j(l + '.fq')}", f"threads={cfg['jobs'] - 1}"],
                         j(l + ".unaligned.bam")) for l in lanes],
         [j(l + ".unaligned.bam") for l in lanes]),
        ("viewing", [(["samtools", "view", "-h", "-@", t, "-o", j(l + ".sam"), j(l + ".bam")], None)
                     for l in lanes], [j(l + ".sam") for l in lanes]),
        ("sorting", [(["samtools", "sort", "-@", t, "-m", cfg["sort_mem"], "-T", j("tmp", l),
                       "-o", j(l + ".sorted.bam"), j(l + ".bam")], None) for l in lanes],
         [j(l + ".sorted.bam") for l in lanes]),
        ("merging", [(["samtools", "merge", "-f", "-@", t, "-o", j("merged.bam")]
                      + [j(l + ".sorted.bam") for l in lanes], None)], [j("merged.bam")]),
        ("indexing", [(["samtools", "index", "-@", t, j("merged.bam")], None)], [j("merged.bam.bai")]),
    ]


def run_genomics(target, cfg, rep):
    d = target.make_dir("genomics")
    try:
        tok = target.usage_begin(d)
        os.makedirs(os.path.join(d, "tmp"))
        # Staging (not timed): the inputs onto the file system under test, then a cold cycle so the
        # first step reads them from the device.
        for f in ("lane1.fq", "lane2.fq", "lane1.bam", "lane2.bam"):
            sysutil.run(["cp", os.path.join(cfg["genomics_data"], f), d], timeout=3600)
        target.cold_cycle()
        phases = []
        for step, cmds, outputs in genomics_commands(cfg, d):
            with Phase() as ph:
                for argv, out in cmds:
                    if out:
                        with open(out, "w") as fh:
                            sysutil.run(argv, stdout=fh, timeout=7200)
                    else:
                        sysutil.run(argv, timeout=7200)
                sysutil.run(["sync"] + outputs, timeout=3600)
                target.barrier(d)
            phases.append((step, ph))
        target.cold_cycle()
        u = usage_fields(target.usage_end(d, tok))
        for step, ph in phases:
            yield metrics.make_row(target, "genomics", step, rep, seconds=ph.seconds, **ph.cpu(), **u)
        yield metrics.make_row(target, "genomics", "total", rep,
                               seconds=sum(p.seconds for _, p in phases),
                               **combined_cpu([p for _, p in phases]), **u)
    finally:
        target.remove_dir("genomics")


WORKLOADS = {
    "fio": (run_fio, fio_phases),
    "files": (run_files, files_phases),
    "genomics": (run_genomics, genomics_phases),
}
