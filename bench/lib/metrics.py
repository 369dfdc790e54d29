"""Metric computation: per-phase rows, medians over repetitions, CPU cost per byte (and the QZFS
cost-efficiency figure), comparisons of Presso's targets against the anchors, and the issue's
targets (reported, never asserted).

What a user pays for is CPU time per byte: `cpu_s_per_gb` (CPU seconds per 10^9 bytes moved) and
`saved_mb_per_cpu_s` (MB of storage saved per CPU second). QZFS's `cost_efficiency` (ratio ÷ CPU
utilisation) is kept as an extra column only: when every target keeps the CPU busy it ranks by ratio
alone, and a slow single-threaded file system scores well for idling the other cores."""
import math
import statistics

MB = 1_000_000

# Columns of results.csv (one row per target, workload, phase and repetition).
ROW_FIELDS = [
    "target", "fs", "setting", "workload", "phase", "rep", "status", "bytes", "seconds", "mbps",
    "cpu_util", "cpu_busy_s", "cpu_source", "sys_cpu_util", "iowait_frac", "steal_frac",
    "logical_bytes", "stored_bytes",
    "ratio", "ratio_source", "cpu_s_per_gb", "saved_mb_per_cpu_s", "cost_efficiency", "error",
]
# Columns of summary.csv (medians over the repetitions that succeeded).
SUMMARY_FIELDS = [
    "target", "fs", "setting", "workload", "phase", "status", "reps_ok", "reps_failed", "bytes",
    "seconds", "mbps", "cpu_util", "cpu_busy_s", "cpu_source", "sys_cpu_util", "ratio",
    "ratio_source", "cpu_s_per_gb", "saved_mb_per_cpu_s", "cost_efficiency", "error",
]
MEDIAN_FIELDS = ["bytes", "seconds", "mbps", "cpu_util", "cpu_busy_s", "sys_cpu_util", "ratio",
                 "cpu_s_per_gb", "saved_mb_per_cpu_s", "cost_efficiency"]


def cost_efficiency(ratio, cpu_util):
    """The QZFS figure: compression ratio ÷ CPU utilisation (utilisation as a fraction of all
    cores, so ext4 at ratio 1.0 and 25% CPU scores 4.0). None when either is unknown or the CPU
    was idle."""
    if ratio is None or cpu_util is None or cpu_util <= 0:
        return None
    return ratio / cpu_util


def cpu_s_per_gb(cpu_busy_s, nbytes):
    """CPU seconds per 10^9 bytes moved (lower is better). None when either is unknown or nothing
    moved."""
    if cpu_busy_s is None or not nbytes or nbytes <= 0:
        return None
    return cpu_busy_s / (nbytes / 1e9)


def saved_mb_per_cpu_s(nbytes, ratio, cpu_busy_s):
    """MB of storage saved (bytes × (1 − 1/ratio)) per CPU second (higher is better; negative when
    the stored form is larger). None when any is unknown or no CPU time was measured."""
    if nbytes is None or not ratio or ratio <= 0 or not cpu_busy_s or cpu_busy_s <= 0:
        return None
    return nbytes * (1 - 1 / ratio) / MB / cpu_busy_s


def throughput_mbps(nbytes, seconds):
    if not seconds or seconds <= 0 or nbytes is None:
        return None
    return nbytes / seconds / MB


def median(values):
    vals = [v for v in values if v is not None and not (isinstance(v, float) and math.isnan(v))]
    return statistics.median(vals) if vals else None


def geomean(values):
    vals = [v for v in values if v is not None and v > 0]
    if not vals:
        return None
    return math.exp(sum(math.log(v) for v in vals) / len(vals))


def ratio_of(a, b):
    """a / b, None when either is missing or b is 0."""
    if a is None or b is None or b == 0:
        return None
    return a / b


def make_row(target, workload, phase, rep, **kw):
    """A results row with every column present; mbps, the CPU cost per byte and cost_efficiency
    are derived when not given."""
    row = {f: None for f in ROW_FIELDS}
    row.update(target=target.name, fs=target.fs, setting=target.setting, workload=workload,
               phase=phase, rep=rep, status="ok")
    row.update(kw)
    if row["mbps"] is None and row["bytes"] and row["seconds"]:
        row["mbps"] = throughput_mbps(row["bytes"], row["seconds"])
    if row["cpu_s_per_gb"] is None:
        row["cpu_s_per_gb"] = cpu_s_per_gb(row["cpu_busy_s"], row["bytes"])
    if row["saved_mb_per_cpu_s"] is None:
        row["saved_mb_per_cpu_s"] = saved_mb_per_cpu_s(row["bytes"], row["ratio"], row["cpu_busy_s"])
    if row["cost_efficiency"] is None:
        row["cost_efficiency"] = cost_efficiency(row["ratio"], row["cpu_util"])
    return row


def summarise(rows):
    """Medians over repetitions per (target, workload, phase), in first-seen order."""
    groups = {}
    for r in rows:
        groups.setdefault((r["target"], r["workload"], r["phase"]), []).append(r)
    out = []
    for (target, workload, phase), rs in groups.items():
        ok = [r for r in rs if r["status"] == "ok"]
        s = {f: None for f in SUMMARY_FIELDS}
        s.update(target=target, fs=rs[0]["fs"], setting=rs[0]["setting"], workload=workload,
                 phase=phase, reps_ok=len(ok), reps_failed=len(rs) - len(ok))
        if ok:
            s["status"] = "ok"
            for f in MEDIAN_FIELDS:
                s[f] = median(_num(r.get(f)) for r in ok)
            s["ratio_source"] = ok[0].get("ratio_source")
            s["cpu_source"] = ok[0].get("cpu_source")
        else:
            s["status"] = rs[0]["status"]
            s["error"] = next((r["error"] for r in rs if r.get("error")), None)
        out.append(s)
    return out


def _num(v):
    if v is None or v == "":
        return None
    return float(v)


def index(summary):
    """{(target, workload, phase): summary row}."""
    return {(s["target"], s["workload"], s["phase"]): s for s in summary}


def value(idx, target, workload, phase, field):
    s = idx.get((target, workload, phase))
    if not s or s["status"] != "ok":
        return None
    return s.get(field)


# --- Presso against the anchors ------------------------------------------------------------------
# The headline figures of the comparison table: (label, workload, phase or list of phases, field,
# how to combine several phases, higher is better?).
COMPARE_METRICS = [
    ("SeqW 128K MB/s", "fio", "SeqW 128K", "mbps"),
    ("SeqR 128K MB/s", "fio", "SeqR 128K", "mbps"),
    ("RandW 128K MB/s", "fio", "RandW 128K", "mbps"),
    ("RandR 128K MB/s", "fio", "RandR 128K", "mbps"),
    ("SeqW 4K MB/s", "fio", "SeqW 4K", "mbps"),
    ("RandW 4K MB/s", "fio", "RandW 4K", "mbps"),
    ("fio ratio", "fio", "SeqW 128K", "ratio"),
    ("fio CPU s/GB", "fio", "SeqW 128K", "cpu_s_per_gb"),
    ("files write MB/s", "files", "all write", "mbps"),
    ("files read MB/s", "files", "all read", "mbps"),
    ("files ratio", "files", "all write", "ratio"),
    ("files CPU s/GB", "files", "all write", "cpu_s_per_gb"),
    ("files saved MB/CPU s", "files", "all write", "saved_mb_per_cpu_s"),
    ("genomics time", "genomics", "total", "seconds"),
]

# Which anchors each Presso target is compared with (its natural counterparts first); every Presso
# target is also compared with the three main anchors.
MAIN_ANCHORS = ["ext4", "zfs-gzip-6", "btrfs-zstd:3"]
PAIRS = {
    "presso-off": ["ext4", "fuse-floor", "zfs-off"],
    "presso-lz4": ["zfs-lzjb", "btrfs-lzo"],
    "presso-gzip-6": ["zfs-gzip-6", "btrfs-zlib:3"],
    "presso-gzip-6-isal": ["zfs-gzip-6", "btrfs-zlib:3"],
    "presso-zstd-3": ["btrfs-zstd:3", "btrfs-zstd:1"],
}


def comparisons(summary, presso_targets, anchor_targets):
    """Rows of {presso, anchor, label: presso ÷ anchor} for each Presso target and its anchors."""
    idx = index(summary)
    out = []
    for p in presso_targets:
        anchors = [a for a in PAIRS.get(p, []) + MAIN_ANCHORS if a in anchor_targets]
        for a in dict.fromkeys(anchors):
            row = {"presso": p, "anchor": a}
            for label, wl, phase, field in COMPARE_METRICS:
                row[label] = ratio_of(value(idx, p, wl, phase, field), value(idx, a, wl, phase, field))
            out.append(row)
    return out


# --- the targets -------------------------------------------------------------------------
def evaluate_targets(summary):
    """The issue's targets, each {"target": text, "measured": text, "met": True/False/None}
    (None: not measured, e.g. a target that failed). Reported, never asserted."""
    idx = index(summary)
    v = lambda t, wl, ph, f: value(idx, t, wl, ph, f)
    out = []

    for p in ("presso-gzip-6", "presso-gzip-6-isal"):
        w = ratio_of(v(p, "fio", "SeqW 128K", "mbps"), v("zfs-gzip-6", "fio", "SeqW 128K", "mbps"))
        r = ratio_of(v(p, "fio", "SeqW 128K", "ratio"), v("zfs-gzip-6", "fio", "SeqW 128K", "ratio"))
        fw = ratio_of(v(p, "files", "all write", "mbps"), v("zfs-gzip-6", "files", "all write", "mbps"))
        fr = ratio_of(v(p, "files", "all write", "ratio"), v("zfs-gzip-6", "files", "all write", "ratio"))
        out.append(_target(
            f"{p} vs zfs-gzip-6: FIO SeqW throughput ≥ 5x at ≥ 0.95x its ratio",
            [w, r], lambda w, r: w >= 5 and r >= 0.95,
            f"{_x(w)} throughput at {_x(r, 3)} ratio (corpus files: {_x(fw)} at {_x(fr, 3)})"))
        ce = ratio_of(v(p, "fio", "SeqW 128K", "cost_efficiency"),
                      v("zfs-gzip-6", "fio", "SeqW 128K", "cost_efficiency"))
        fce = ratio_of(v(p, "files", "all write", "cost_efficiency"),
                       v("zfs-gzip-6", "files", "all write", "cost_efficiency"))
        cpu = ratio_of(v(p, "fio", "SeqW 128K", "cpu_s_per_gb"),
                       v("zfs-gzip-6", "fio", "SeqW 128K", "cpu_s_per_gb"))
        fcpu = ratio_of(v(p, "files", "all write", "cpu_s_per_gb"),
                        v("zfs-gzip-6", "files", "all write", "cpu_s_per_gb"))
        out.append(_target(f"{p} vs zfs-gzip-6: cost-efficiency ≥ 4x (FIO SeqW)", [ce],
                           lambda ce: ce >= 4,
                           f"{_x(ce)} (corpus files: {_x(fce)}); CPU s per GB written: {_x(cpu)} "
                           f"of zfs-gzip-6's (corpus files: {_x(fcpu)})"))

    p, a = "presso-zstd-3", "btrfs-zstd:3"
    w = ratio_of(v(p, "fio", "SeqW 128K", "mbps"), v(a, "fio", "SeqW 128K", "mbps"))
    fw = ratio_of(v(p, "files", "all write", "mbps"), v(a, "files", "all write", "mbps"))
    fr = ratio_of(v(p, "files", "all write", "ratio"), v(a, "files", "all write", "ratio"))
    out.append(_target(
        f"{p} vs {a}: write throughput ≥ 1x at ≥ its ratio (corpus files)", [fw, fr],
        lambda fw, fr: fw >= 1 and fr >= 1,
        f"{_x(fw)} throughput at {_x(fr, 3)} ratio (FIO SeqW: {_x(w)})"))

    for p in ("presso-gzip-6", "presso-gzip-6-isal"):
        t = ratio_of(v(p, "genomics", "total", "seconds"), v("zfs-gzip-6", "genomics", "total", "seconds"))
        less = None if t is None else 1 - t
        out.append(_target(f"{p} vs zfs-gzip-6: genomics ≥ 60% less execution time", [less],
                           lambda less: less >= 0.60,
                           "not measured" if less is None else f"{100 * less:.0f}% less time"))

    per = {ph: ratio_of(v("presso-off", "fio", ph, "mbps"), v("ext4", "fio", ph, "mbps"))
           for ph in ("SeqW 128K", "SeqR 128K", "RandW 128K", "RandR 128K")}
    g = geomean(per.values()) if all(x is not None for x in per.values()) else None
    out.append(_target("presso-off vs ext4: throughput ≥ 0.7x (geometric mean of the four FIO 128K patterns)",
                       [g], lambda g: g >= 0.7,
                       f"{_x(g)} (" + ", ".join(f"{ph.split()[0]} {_x(x)}" for ph, x in per.items()) + ")"))
    return out


def _target(text, inputs, test, measured):
    if any(x is None for x in inputs):
        return {"target": text, "measured": "not measured", "met": None}
    return {"target": text, "measured": measured, "met": bool(test(*inputs))}


def _x(v, digits=2):
    return "n/a" if v is None else f"{v:.{digits}f}x"
