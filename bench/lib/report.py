"""Results on disk: results.csv (every phase of every repetition), summary.csv (medians), PNG bar
charts in the spirit of the QZFS paper's Figures 7-10, and report.md (machine, versions, exact
settings, tables, the issue's targets met or not, failures)."""
import csv
import os

import metrics
import workloads

FAMILY_COLOURS = {"ext4": "#7f7f7f", "btrfs": "#1f77b4", "zfs-fuse": "#ff7f0e", "presso": "#2ca02c",
                  "fuse-floor": "#9467bd"}


# --- CSV ----------------------------------------------------------------------------------------
def _cell(v):
    if v is None:
        return ""
    if isinstance(v, float):
        return f"{v:.6g}"
    return v


def write_csv(path, rows, fields):
    tmp = path + ".tmp"
    with open(tmp, "w", newline="") as f:
        w = csv.DictWriter(f, fieldnames=fields, extrasaction="ignore")
        w.writeheader()
        for r in rows:
            w.writerow({k: _cell(r.get(k)) for k in fields})
    os.replace(tmp, path)


# Printed under each table with CPU columns: which figure to rank by, and why the paper's is not it.
COST_NOTE = ("CPU s/GB (CPU seconds per 10^9 bytes moved) is what each byte costs, and saved MB/CPU s "
             "what each CPU second buys in storage: rank by these. ratio÷CPU is the QZFS paper's "
             "cost-efficiency figure, kept for comparison only: when every target keeps the CPU busy it "
             "ranks by ratio alone, and a file system that idles all cores but one scores well for it.")

NUMERIC = {"rep", "bytes", "seconds", "mbps", "cpu_util", "sys_cpu_util", "cpu_busy_s", "iowait_frac", "steal_frac",
           "logical_bytes", "stored_bytes", "ratio", "cpu_s_per_gb", "saved_mb_per_cpu_s", "cost_efficiency",
           "reps_ok", "reps_failed"}


def read_csv(path):
    out = []
    with open(path, newline="") as f:
        for r in csv.DictReader(f):
            out.append({k: (None if v == "" else float(v) if k in NUMERIC else v) for k, v in r.items()})
    return out


# --- formatting ---------------------------------------------------------------------------------
def f1(v, digits=1):
    return "–" if v is None else f"{v:.{digits}f}"


def pct(v):
    return "–" if v is None else f"{100 * v:.0f}%"


def xf(v):
    return "–" if v is None else f"{v:.2f}x"


def table(header, rows, align=None):
    align = align or ["l"] + ["r"] * (len(header) - 1)
    out = ["| " + " | ".join(header) + " |",
           "|" + "|".join("---:" if a == "r" else "---" for a in align) + "|"]
    out += ["| " + " | ".join(str(c) for c in r) + " |" for r in rows]
    return "\n".join(out)


def target_order(summary, meta):
    names = [t["name"] for t in meta.get("targets", [])]
    for s in summary:
        if s["target"] not in names:
            names.append(s["target"])
    return names


# --- plots --------------------------------------------------------------------------------------
def _plt():
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
        return plt
    except ImportError:
        return None


def _bars(ax, names, fams, values, title, ylabel):
    xs = range(len(names))
    vals = [v if v is not None else 0 for v in values]
    ax.bar(xs, vals, color=[FAMILY_COLOURS.get(f, "#999999") for f in fams])
    top = max(vals) if any(vals) else 1
    for x, v in zip(xs, values):
        if v is None:
            ax.text(x, top * 0.02, "failed", rotation=90, ha="center", va="bottom", fontsize=7, color="#c00")
    ax.set_xticks(list(xs))
    ax.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax.set_title(title, fontsize=9)
    ax.set_ylabel(ylabel, fontsize=8)
    ax.tick_params(axis="y", labelsize=7)
    ax.grid(axis="y", alpha=0.3)


def _legend(fig):
    from matplotlib.patches import Patch
    fig.legend(handles=[Patch(color=c, label=f) for f, c in FAMILY_COLOURS.items()],
               loc="upper right", fontsize=8, ncol=4)


def plot_grid(plt, path, idx, names, fams, panels, field, ylabel, suptitle, ncols=2):
    nrows = (len(panels) + ncols - 1) // ncols
    fig, axes = plt.subplots(nrows, ncols, figsize=(6 * ncols, 3.6 * nrows), squeeze=False)
    for ax, (wl, ph) in zip(axes.flat, panels):
        _bars(ax, names, fams, [metrics.value(idx, n, wl, ph, field) for n in names], ph, ylabel)
    for ax in list(axes.flat)[len(panels):]:
        ax.axis("off")
    fig.suptitle(suptitle, fontsize=11, x=0.02, ha="left")
    _legend(fig)
    fig.tight_layout(rect=(0, 0, 1, 0.95))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_sweep(plt, path, idx, names, fams, sweep):
    fig, ax = plt.subplots(figsize=(10, 4.5))
    styles = {}
    for n, fam in zip(names, fams):
        ys = [metrics.value(idx, n, "fio", f"SeqR:SeqW 1:1 {bs}", "mbps") for bs in sweep]
        if all(y is None for y in ys):
            continue
        k = styles.setdefault(fam, 0)
        styles[fam] += 1
        ax.plot(range(len(sweep)), [y if y is not None else float("nan") for y in ys], marker="o",
                color=FAMILY_COLOURS.get(fam, "#999"), linestyle=["-", "--", ":", "-."][k % 4],
                alpha=1 - 0.12 * (k // 4), label=n)
    ax.set_xticks(range(len(sweep)))
    ax.set_xticklabels(sweep)
    ax.set_xlabel("block size (SeqR:SeqW = 1:1)")
    ax.set_ylabel("MB/s (read + write)")
    ax.set_yscale("log")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, ncol=2, bbox_to_anchor=(1.01, 1), loc="upper left")
    ax.set_title("FIO block-size sweep", fontsize=10)
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def plot_genomics(plt, path, idx, names, fams):
    fig, (ax1, ax2) = plt.subplots(1, 2, figsize=(13, 4.5))
    bottoms = [0.0] * len(names)
    cmap = plt.get_cmap("tab10")
    for k, step in enumerate(workloads.GENOMICS_STEPS):
        vals = [metrics.value(idx, n, "genomics", step, "seconds") or 0 for n in names]
        ax1.bar(range(len(names)), vals, bottom=bottoms, color=cmap(k), label=step)
        bottoms = [b + v for b, v in zip(bottoms, vals)]
    for x, n in enumerate(names):
        if metrics.value(idx, n, "genomics", "total", "seconds") is None:
            ax1.text(x, 0, "failed", rotation=90, ha="center", va="bottom", fontsize=7, color="#c00")
    ax1.set_xticks(range(len(names)))
    ax1.set_xticklabels(names, rotation=60, ha="right", fontsize=7)
    ax1.set_ylabel("seconds (lower is better)", fontsize=8)
    ax1.set_title("Genomics post-processing: execution time per step", fontsize=9)
    ax1.legend(fontsize=7)
    ax1.grid(axis="y", alpha=0.3)
    _bars(ax2, names, fams, [metrics.value(idx, n, "genomics", "total", "cpu_busy_s") for n in names],
          "Genomics: CPU seconds of the whole pipeline (lower is better)", "CPU seconds")
    _legend(fig)
    fig.tight_layout(rect=(0, 0, 1, 0.93))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_plots(out, summary, meta):
    plt = _plt()
    if plt is None:
        return []
    idx = metrics.index(summary)
    names = target_order(summary, meta)
    fam = {s["target"]: s["fs"] for s in summary}
    fams = [fam.get(n, "?") for n in names]
    made = []
    wls = set(s["workload"] for s in summary)
    pats = [("fio", p) for p, _, _ in workloads.FIO_PATTERNS]
    if "fio" in wls:
        plot_grid(plt, os.path.join(out, "fio_throughput.png"), idx, names, fams, pats, "mbps", "MB/s",
                  "FIO throughput (higher is better)")
        plot_grid(plt, os.path.join(out, "fio_cpu_s_per_gb.png"), idx, names, fams, pats, "cpu_s_per_gb",
                  "CPU seconds per GB", "FIO CPU cost per byte (lower is better)")
        sweep = meta["cfg"]["fio_sweep"]
        plot_sweep(plt, os.path.join(out, "fio_sweep.png"), idx, names, fams, sweep)
        made += ["fio_throughput.png", "fio_cpu_s_per_gb.png", "fio_sweep.png"]
    if "files" in wls:
        panels = [("files", f"{f} {op}") for op in ("write", "read") for f in workloads.FILES]
        plot_grid(plt, os.path.join(out, "files_throughput.png"), idx, names, fams, panels, "mbps", "MB/s",
                  "Corpus files: write (copy in + fsync) and cold read (higher is better)", ncols=3)
        panels = [("files", f"{f} write") for f in workloads.FILES]
        plot_grid(plt, os.path.join(out, "files_ratio.png"), idx, names, fams, panels, "ratio",
                  "compression ratio", "Corpus files: compression ratio (file system's own accounting)", ncols=3)
        plot_grid(plt, os.path.join(out, "files_cpu_s_per_gb.png"), idx, names, fams,
                  [("files", "all write"), ("files", "all read")], "cpu_s_per_gb", "CPU seconds per GB",
                  "Corpus files: CPU cost per byte (lower is better)")
        made += ["files_throughput.png", "files_ratio.png", "files_cpu_s_per_gb.png"]
    if "genomics" in wls:
        plot_genomics(plt, os.path.join(out, "genomics.png"), idx, names, fams)
        made.append("genomics.png")
    return made


# --- markdown -----------------------------------------------------------------------------------
def _embed(L, plots, names):
    """Appends an image line for each of NAMES that was plotted."""
    for p in names:
        if p in plots:
            L.append("")
            L.append(f"![{p}]({p})")


def _metric_table(idx, names, fam, wl, phases, field, fmt):
    rows = []
    for n in names:
        vals = [metrics.value(idx, n, wl, ph, field) for ph in phases]
        if all(v is None for v in vals) and not any((n, wl, ph) in idx for ph in phases):
            continue
        rows.append([n] + [fmt(v) if v is not None else _status(idx, n, wl, ph) for v, ph in zip(vals, phases)])
    return rows


def _status(idx, n, wl, ph):
    s = idx.get((n, wl, ph))
    return "–" if s is None else s["status"]


def report_md(summary, meta, plots):
    idx = metrics.index(summary)
    names = target_order(summary, meta)
    fam = {s["target"]: s["fs"] for s in summary}
    cfg = meta["cfg"]
    m = meta.get("machine", {})
    L = []
    L.append(f"# Presso evaluation suite: {meta['mode']} run")
    L.append("")
    L.append(f"Run of `bench/run.sh {' '.join(meta.get('argv', []))}` on {m.get('date', '?')}: "
             f"{meta.get('status', '?')}, {meta.get('duration_s', 0) / 60:.1f} minutes. Medians over "
             f"{cfg['reps']} repetition(s)" + (", the targets alternating in every round" if cfg['reps'] > 1 else "")
             + ". MB = 10^6 bytes.")
    if meta.get("leaks"):
        L.append("")
        L.append("**Left behind by teardown:** " + "; ".join(meta["leaks"]))
    L.append("")
    L.append("## Machine and versions")
    L.append("")
    L.append(f"- CPU: {m.get('cpu')} ({m.get('cores')} cores), memory {m.get('memory')}")
    L.append(f"- {m.get('distro')}, kernel {m.get('kernel')}, Python {m.get('python')}")
    L.append("- Packages: " + ", ".join(f"{k} {v}" for k, v in m.get("packages", {}).items()))
    L.append(f"- Presso: {m.get('presso')}")
    L.append(f"- zfs-fuse settings (/etc/zfs/zfsrc): {m.get('zfsrc') or 'defaults'}; {meta.get('zfs_daemon') or ''}")
    if meta.get("idle_cpu_util") is not None:
        L.append(f"- System-wide CPU utilisation while idle just before the run: {100 * meta['idle_cpu_util']:.1f}% "
                 "(other tenants of this machine; it is inside every CPU figure below)")
    L.append("")
    L.append("## Settings")
    L.append("")
    L.append(f"- Mode `{cfg['mode']}`: {cfg['jobs']} fio jobs (one per core), {cfg['fio_size']} per job, each "
             f"phase capped at {cfg['fio_runtime']} s; buffers compressible: `buffer_compress_percentage="
             f"{cfg['fio_compress_pct']}` in chunks of {cfg['fio_compress_chunk']} bytes (28% random bytes, "
             f"the rest zeros: nominally {1 / (1 - cfg['fio_compress_pct'] / 100):.2f}x; the ratio columns "
             "show what each file system got).")
    if meta.get("corpus"):
        L.append("- Corpus (`scripts/make-corpus.sh`, real public data): " +
                 ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in meta["corpus"].items()))
    if meta.get("genomics"):
        g = meta["genomics"]
        L.append(f"- Genomics dataset (bench/lib/genomics.py, seed {g['seed']}): reference of "
                 f"{sum(g['contig_lengths']) / 1e6:.1f} Mbp in {len(g['contig_lengths'])} contigs, "
                 f"2 lanes × {g['n_reads_per_lane']} reads with quality strings drawn from the real reads "
                 f"in {g['qualities_from']} and errors drawn from them; " +
                 ", ".join(f"{k} {v / 1e6:.1f} MB" for k, v in g.get("files", {}).items()))
    L.append("- Every phase is timed by wall clock; writes include the final fsync (`end_fsync=1`, "
             "`sync FILE`). Throughput = bytes moved ÷ that time.")
    L.append("- Cold reads: before every read phase the target is flushed and unmounted, the page cache "
             "dropped (`echo 3 > /proc/sys/vm/drop_caches`) and the target mounted again (ext4, btrfs: "
             "umount/mount; zfs-fuse: `zpool export`/`zpool import`; Presso: `presso unmount`, umount of its "
             "ext4 backing, mount, `presso mount`).")
    L.append("- Ratio: each file system's own accounting after that remount: `compsize -b` (btrfs), "
             "`zfs get compressratio` of a dataset per workload (zfs-fuse), `presso status --json` "
             "logical ÷ stored before/after (Presso), apparent size ÷ allocated blocks (ext4).")
    L.append("- CPU utilisation, as a fraction of all cores (100% = every core busy for the whole phase), "
             "two ways. **Attributed** (the `CPU` and `CPU s/GB` columns, when available: "
             f"{meta.get('cpu_attribution', '?')}): CPU time of this run's control group (the harness and "
             "everything it starts: fio, cp, samtools, the zfs-fuse and presso daemons) plus all kernel "
             "threads (btrfs compression workers, writeback, loop workers), over wall clock × cores. "
             "**System-wide** (`sys_cpu_util` in the CSV files): /proc/stat deltas, busy = total − idle − "
             "iowait − steal; it also counts whatever else runs on the machine. CPU s/GB = attributed CPU "
             "seconds ÷ GB moved (lower is better); saved MB/CPU s = MB × (1 − 1/ratio) ÷ CPU seconds "
             "(higher is better); ratio÷CPU (the QZFS paper's cost-efficiency) = ratio ÷ CPU utilisation.")
    L.append("")
    L.append("FIO command lines (DIR is a directory on the target):")
    L.append("")
    L.append("```")
    for ph, c in meta.get("fio_commands", {}).items():
        L.append(f"{ph}: {c}")
    L.append("```")
    if meta.get("genomics"):
        L.append("")
        L.append("Genomics steps (on the target; sort's temporary files too), each step's outputs fsynced:")
        L.append("")
        L.append("```")
        for step, cmds, _o in workloads.genomics_commands(cfg, "D"):
            for argv, out in cmds:
                L.append(f"{step}: {' '.join(argv)}" + (f" > {out}" if out else ""))
        L.append("```")
    L.append("")
    L.append("Targets (images are sparse files of "
             f"{cfg['image_gib']} GiB; paths are relative to the work directory; LOOP is the loop device):")
    L.append("")
    for t in meta.get("targets", []):
        L.append(f"- **{t['name']}** ({t['fs']}, {t['setting']}): `" + "; ".join(t["commands"]) + "`")

    L.append("")
    L.append("## The issue's targets (reported, not asserted)")
    L.append("")
    ev = metrics.evaluate_targets(summary)
    L.append(table(["target", "measured", "met?"],
                   [[e["target"], e["measured"], {True: "yes", False: "no", None: "not measured"}[e["met"]]]
                    for e in ev], ["l", "l", "l"]))
    presso = [n for n in names if fam.get(n) == "presso"]
    anchors = [n for n in names if fam.get(n) != "presso"]
    comps = metrics.comparisons(summary, presso, anchors)
    if comps:
        L.append("")
        L.append("## Presso against each anchor (Presso ÷ anchor; time and CPU s/GB: < 1 is better)")
        L.append("")
        labels = [c[0] for c in metrics.COMPARE_METRICS]
        L.append(table(["Presso", "anchor"] + labels,
                       [[c["presso"], c["anchor"]] + [xf(c[l]) for l in labels] for c in comps],
                       ["l", "l"] + ["r"] * len(labels)))

    wls = meta.get("workloads", [])
    if "fio" in wls:
        pats = [p for p, _, _ in workloads.FIO_PATTERNS]
        L.append("")
        L.append("## FIO (Figure 7)")
        L.append("")
        rows = []
        for n in names:
            if not any((n, "fio", p) in idx for p in pats):
                continue
            r = [n]
            for p in pats:
                r.append(f1(metrics.value(idx, n, "fio", p, "mbps")) if metrics.value(idx, n, "fio", p, "mbps")
                         is not None else _status(idx, n, "fio", p))
            r += [f1(metrics.value(idx, n, "fio", "SeqW 128K", "ratio"), 2),
                  f1(metrics.value(idx, n, "fio", "SeqW 128K", "cpu_s_per_gb"), 2),
                  f1(metrics.value(idx, n, "fio", "SeqW 128K", "saved_mb_per_cpu_s")),
                  f1(metrics.value(idx, n, "fio", "SeqR 128K", "cpu_s_per_gb"), 2),
                  pct(metrics.value(idx, n, "fio", "SeqW 128K", "cpu_util")),
                  f1(metrics.value(idx, n, "fio", "SeqW 128K", "cost_efficiency"), 2)]
            rows.append(r)
        L.append(table(["target"] + [f"{p} MB/s" for p in pats] +
                       ["ratio", "SeqW CPU s/GB", "SeqW saved MB/CPU s", "SeqR CPU s/GB", "SeqW CPU",
                        "SeqW ratio÷CPU (QZFS)"], rows))
        L.append("")
        L.append(COST_NOTE)
        sweep = [f"SeqR:SeqW 1:1 {bs}" for bs in cfg["fio_sweep"]]
        L.append("")
        L.append("Block-size sweep, SeqR:SeqW = 1:1, MB/s (read + write):")
        L.append("")
        L.append(table(["target"] + cfg["fio_sweep"], _metric_table(idx, names, fam, "fio", sweep, "mbps", f1)))
        _embed(L, plots, ("fio_throughput.png", "fio_cpu_s_per_gb.png", "fio_sweep.png"))
    if "files" in wls:
        L.append("")
        L.append("## Corpus files: copy in, cold read (the ZFS+QAT FASTQ test)")
        L.append("")
        rows = []
        for n in names:
            if not any((n, "files", f"{f} write") in idx for f in workloads.FILES):
                continue
            r = [n]
            for f in workloads.FILES:
                w = metrics.value(idx, n, "files", f"{f} write", "mbps")
                rd = metrics.value(idx, n, "files", f"{f} read", "mbps")
                ra = metrics.value(idx, n, "files", f"{f} write", "ratio")
                r.append(_status(idx, n, "files", f"{f} write") if w is None else f"{f1(w)} / {f1(rd)} / {f1(ra, 2)}")
            r += [f1(metrics.value(idx, n, "files", "all write", "cpu_s_per_gb"), 2),
                  f1(metrics.value(idx, n, "files", "all write", "saved_mb_per_cpu_s")),
                  f1(metrics.value(idx, n, "files", "all read", "cpu_s_per_gb"), 2),
                  pct(metrics.value(idx, n, "files", "all write", "cpu_util")),
                  f1(metrics.value(idx, n, "files", "all write", "cost_efficiency"), 2)]
            rows.append(r)
        L.append(table(["target"] + [f"{f}: write / read MB/s / ratio" for f in workloads.FILES] +
                       ["write CPU s/GB", "write saved MB/CPU s", "read CPU s/GB", "write CPU",
                        "write ratio÷CPU (QZFS)"], rows))
        L.append("")
        L.append(COST_NOTE)
        _embed(L, plots, ("files_throughput.png", "files_ratio.png", "files_cpu_s_per_gb.png"))
    if "genomics" in wls:
        L.append("")
        L.append("## Genomics post-processing (Figures 9-10), seconds")
        L.append("")
        ph = workloads.GENOMICS_STEPS + ["total"]
        rows = _metric_table(idx, names, fam, "genomics", ph, "seconds", lambda v: f1(v, 2))
        for r in rows:
            n = r[0]
            r += [f1(metrics.value(idx, n, "genomics", "total", "ratio"), 2),
                  f1(metrics.value(idx, n, "genomics", "total", "cpu_busy_s")),
                  pct(metrics.value(idx, n, "genomics", "total", "cpu_util")),
                  f1(metrics.value(idx, n, "genomics", "total", "cost_efficiency"), 2)]
        L.append(table(["target"] + ph + ["ratio", "CPU s", "CPU", "ratio÷CPU (QZFS)"], rows))
        _embed(L, plots, ("genomics.png",))

    fails = {}
    for s in summary:
        if s["status"] != "ok":
            fails.setdefault((s["target"], s["workload"], s["status"], s.get("error") or ""), []).append(s["phase"])
    L.append("")
    L.append("## Failures")
    L.append("")
    if not fails:
        L.append("None: every phase of every target ran.")
    for (t, wl, st, err), phs in fails.items():
        L.append(f"- {t}, {wl} ({len(phs)} phase(s)): {st}: {err}")
    L.append("")
    L.append("Files: `results.csv` (every phase and repetition), `summary.csv` (medians), "
             "`commands.log` (every command run, with its output), `run.json` (settings).")
    return "\n".join(L) + "\n"


def write_all(out, rows, meta):
    summary = metrics.summarise(rows)
    write_csv(os.path.join(out, "results.csv"), rows, metrics.ROW_FIELDS)
    write_csv(os.path.join(out, "summary.csv"), summary, metrics.SUMMARY_FIELDS)
    plots = write_plots(out, summary, meta)
    with open(os.path.join(out, "report.md"), "w") as f:
        f.write(report_md(summary, meta, plots))
    return summary


def scrub_paths(out, replacements, files=("report.md", "results.csv", "summary.csv", "run.json")):
    """Replaces this machine's absolute paths (the work directory, the repository) in the result
    files, so that they can be committed and compared across machines."""
    for name in files:
        p = os.path.join(out, name)
        if not os.path.exists(p):
            continue
        with open(p) as f:
            text = f.read()
        for old, new in sorted(replacements.items(), key=lambda kv: -len(kv[0])):
            text = text.replace(old, new)
        with open(p, "w") as f:
            f.write(text)
