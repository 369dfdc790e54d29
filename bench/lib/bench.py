"""The evaluation suite's runner (started by bench/run.sh, which installs the packages first).
See `bench/run.sh --help`."""
import argparse
import fnmatch
import json
import os
import platform
import shutil
import subprocess
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import cpustat  # noqa: E402
import genomics  # noqa: E402
import metrics  # noqa: E402
import report  # noqa: E402
import resources  # noqa: E402
import sysutil  # noqa: E402
import targets as targets_mod  # noqa: E402
import workloads  # noqa: E402

REPO = os.path.dirname(os.path.dirname(HERE))

MODES = {
    # Quick: every target and workload, one repetition, small sizes; under 10 minutes on 2 cores.
    "quick": {"corpus_mb": 64, "fio_size": "128m", "fio_runtime": 5, "fio_sweep": ["4K", "64K", "1M"],
              "reads_per_lane": 100_000, "contigs": [400_000, 300_000, 200_000, 100_000],
              "sort_mem": "2M", "reps": 1, "image_gib": 4},
    # Full: the docs/benchmarks.md corpus, 1 GiB per fio job (a phase stops after 10 s, which only
    # the slowest targets reach), a 4-point block-size sweep, a larger genome and 3 repetitions
    # (medians reported): about 80 minutes on 2 cores.
    "full": {"corpus_mb": 400, "fio_size": "1g", "fio_runtime": 10,
             "fio_sweep": ["4K", "64K", "256K", "1M"],
             "reads_per_lane": 500_000, "contigs": [4_000_000, 3_000_000, 2_000_000, 1_000_000],
             "sort_mem": "32M", "reps": 3, "image_gib": 24},
}
FIO_COMPRESS_PCT = 72   # fio fills 28% of each chunk with random bytes, the rest with zeros
FIO_COMPRESS_CHUNK = 512


class Ctx:
    """What the targets share: the work dir, the resource registry, sizes, the presso binary and
    the zfs-fuse daemon."""

    def __init__(self, work, registry, image_bytes, presso, extra_presso=()):
        self.work, self.registry, self.image_bytes = work, registry, image_bytes
        self.presso, self.extra_presso = presso, list(extra_presso)
        # Built beside presso (cargo build --release -p presso-fs --example fuse_floor).
        self.floor = os.path.join(os.path.dirname(presso), "examples", "fuse_floor") if presso else None
        self.zfs_note = None

    def ensure_zfs_daemon(self):
        if sysutil.run(["zpool", "list", "-H"], check=False, timeout=30).returncode == 0:
            if self.zfs_note is None:
                self.zfs_note = "zfs-fuse was already running (not started by this run)"
            return
        pidfile = os.path.join(self.work, "zfs-fuse.pid")
        if os.path.exists(pidfile):
            os.remove(pidfile)
        sysutil.run(["zfs-fuse", "--pidfile", pidfile], timeout=60)
        for _ in range(100):
            if os.path.exists(pidfile) and open(pidfile).read().strip():
                break
            time.sleep(0.1)
        pid = int(open(pidfile).read().strip())
        self.registry.add("daemon", group="zfs-daemon", pid=pid, name="zfs-fuse", match="zfs-fuse")
        self.zfs_note = "zfs-fuse started by this run and stopped at the end"
        for _ in range(100):
            if sysutil.run(["zpool", "list", "-H"], check=False, timeout=30).returncode == 0:
                return
            time.sleep(0.2)
        raise targets_mod.TargetError("zfs-fuse did not start answering")


def parse_args(argv):
    p = argparse.ArgumentParser(prog="bench/run.sh", description=__doc__)
    m = p.add_mutually_exclusive_group()
    m.add_argument("--quick", dest="mode", action="store_const", const="quick")
    m.add_argument("--full", dest="mode", action="store_const", const="full")
    p.set_defaults(mode="full")
    p.add_argument("--work", default=os.path.join(REPO, "bench", "work"))
    p.add_argument("--out")
    p.add_argument("--corpus")
    p.add_argument("--corpus-mb", type=int)
    p.add_argument("--targets", default="*")
    p.add_argument("--workloads", default="fio,files,genomics")
    p.add_argument("--reps", type=int)
    p.add_argument("--presso", default=os.path.join(REPO, "target", "release", "presso"))
    p.add_argument("--presso-target", action="append", default=[], metavar="NAME=OPT,OPT")
    p.add_argument("--fio-size")
    p.add_argument("--fio-runtime", type=int)
    p.add_argument("--dry-run", action="store_true")
    p.add_argument("--teardown", action="store_true")
    p.add_argument("--report-only", action="store_true")
    a = p.parse_args(argv)
    a.work = os.path.abspath(a.work)
    cfg = dict(MODES[a.mode])
    for k in ("corpus_mb", "reps", "fio_size", "fio_runtime"):
        if getattr(a, k) is not None:
            cfg[k] = getattr(a, k)
    cfg["mode"] = a.mode
    cfg["jobs"] = os.cpu_count() or 1
    cfg["fio_compress_pct"] = FIO_COMPRESS_PCT
    cfg["fio_compress_chunk"] = FIO_COMPRESS_CHUNK
    cfg["corpus"] = os.path.abspath(a.corpus) if a.corpus else os.path.join(a.work, f"corpus-{cfg['corpus_mb']}")
    cfg["genomics_data"] = os.path.join(a.work, f"genomics-{cfg['reads_per_lane']}")
    a.out = os.path.abspath(a.out or os.path.join(REPO, "bench", "results", a.mode))
    a.workloads = [w.strip() for w in a.workloads.split(",") if w.strip()]
    for w in a.workloads:
        if w not in workloads.WORKLOADS:
            p.error(f"unknown workload {w!r} (have: {', '.join(workloads.WORKLOADS)})")
    extra = []
    for spec in a.presso_target:
        name, _, opts = spec.partition("=")
        if not name.startswith("presso-") or not opts:
            p.error(f"--presso-target wants presso-NAME=OPT,OPT (got {spec!r})")
        extra.append((name, opts.split(",")))
    a.extra_presso = extra
    return a, cfg


def select_targets(all_t, patterns):
    pats = [x.strip() for x in patterns.split(",") if x.strip()]
    return [t for t in all_t if any(fnmatch.fnmatchcase(t.name, pat) for pat in pats)]


def round_order(targets, rep):
    """The targets in the order round `rep` (from 1) runs them: rotated by one per round."""
    k = (rep - 1) % len(targets) if targets else 0
    return targets[k:] + targets[:k]


def machine_info(a, cfg):
    def cmd(argv):
        try:
            r = subprocess.run(argv, capture_output=True, text=True, timeout=30)
            return (r.stdout or r.stderr).strip().splitlines()[0] if (r.stdout or r.stderr).strip() else "?"
        except (OSError, subprocess.TimeoutExpired):
            return "not installed"

    def line_starting(path, prefix):
        try:
            return next((line for line in open(path) if line.startswith(prefix)), None)
        except OSError:
            return None

    line = line_starting("/proc/cpuinfo", "model name")
    cpu = line.split(":", 1)[1].strip() if line else "?"
    line = line_starting("/proc/meminfo", "MemTotal")
    mem = f"{int(line.split()[1]) / 1024 / 1024:.1f} GiB" if line else "?"
    line = line_starting("/etc/os-release", "PRETTY_NAME=")
    distro = line.split("=", 1)[1].strip().strip('"') if line else "?"
    pkgs = {}
    for pkg in ("fio", "zfs-fuse", "btrfs-progs", "btrfs-compsize", "e2fsprogs", "samtools", "biobambam2",
                "python3-matplotlib"):
        v = cmd(["dpkg-query", "-W", "-f=${Version}", pkg])
        pkgs[pkg] = v if v and "no packages" not in v else "not installed"
    rev = cmd(["git", "-C", REPO, "describe", "--always", "--dirty"])
    presso_v = cmd([a.presso, "--version"]) if os.access(a.presso, os.X_OK) else "not built"
    zfsrc = ""
    try:
        zfsrc = ", ".join(l.strip() for l in open("/etc/zfs/zfsrc") if l.strip() and not l.startswith("#"))
    except OSError:
        pass
    return {"cpu": cpu, "cores": os.cpu_count(), "memory": mem, "kernel": platform.release(),
            "distro": distro, "python": platform.python_version(), "packages": pkgs,
            "presso": f"{presso_v} (git {rev})", "zfsrc": zfsrc, "date": time.strftime("%Y-%m-%d %H:%M %Z")}


def idle_baseline(seconds=3.0):
    """System-wide CPU utilisation while the harness does nothing: other tenants' load."""
    b = cpustat.read()
    time.sleep(seconds)
    return cpustat.utilisation(b, cpustat.read())


def fmt_row(r):
    parts = []
    if r.get("mbps"):
        parts.append(f"{r['mbps']:.1f} MB/s")
    if r.get("seconds") is not None:
        parts.append(f"{r['seconds']:.1f} s")
    if r.get("ratio"):
        parts.append(f"ratio {r['ratio']:.2f}")
    if r.get("cpu_util") is not None:
        parts.append(f"CPU {100 * r['cpu_util']:.0f}%")
    return ", ".join(parts)


def run_target(t, a, cfg, rows, prefix, t_start, rep):
    """Sets target `t` up on a fresh file system and runs repetition `rep` of every workload."""
    def failed(workload, phases, status, err):
        for ph in phases:
            rows.append(metrics.make_row(t, workload, ph, rep, status=status, error=err))

    try:
        sysutil.progress(f"{prefix} setup ({t.setting})")
        t.commands = []
        t.setup()
    except sysutil.Interrupted:
        raise
    except Exception as e:
        sysutil.progress(f"{prefix} FAILED to set up: {e}")
        for w in a.workloads:
            failed(w, workloads.WORKLOADS[w][1](cfg), "failed", f"setup: {e}")
        return
    for w in a.workloads:
        run, phases = workloads.WORKLOADS[w]
        done = set()
        try:
            for row in run(t, cfg, rep):
                rows.append(row)
                done.add(row["phase"])
                el = time.monotonic() - t_start
                sysutil.progress(f"{prefix} {w} {row['phase']} rep {rep}/{cfg['reps']}: "
                                 f"{fmt_row(row)}  [{el / 60:.1f} min]")
        except sysutil.Interrupted:
            failed(w, [p for p in phases(cfg) if p not in done], "interrupted", "interrupted")
            raise
        except Exception as e:
            sysutil.progress(f"{prefix} {w} rep {rep} FAILED: {e}")
            failed(w, [p for p in phases(cfg) if p not in done], "failed", str(e))


def main(argv):
    a, cfg = parse_args(argv)
    os.makedirs(a.work, exist_ok=True)
    registry = resources.Registry(os.path.join(a.work, "resources.jsonl"))

    if a.teardown:
        left = registry.live()
        errs = registry.teardown()
        print(f"teardown: {len(left)} resource(s) from the journal, {len(errs)} error(s)")
        for e in errs:
            print("  " + e)
        return 1 if errs else 0
    if a.report_only:
        rows = report.read_csv(os.path.join(a.out, "results.csv"))
        with open(os.path.join(a.out, "run.json")) as f:
            meta = json.load(f)
        report.write_all(a.out, rows, meta)
        report.scrub_paths(a.out, {a.work + "/": "WORK/", a.work: "WORK", REPO + "/": "", REPO: "."})
        print(f"report rewritten in {a.out}")
        return 0

    ctx = Ctx(a.work, registry, cfg["image_gib"] << 30, a.presso, a.extra_presso)
    chosen = select_targets(targets_mod.all_targets(ctx), a.targets)
    if not chosen:
        print(f"no target matches {a.targets!r}", file=sys.stderr)
        return 2
    if a.dry_run:
        print(f"mode {cfg['mode']}: {cfg['reps']} repetition(s), work dir {a.work}, results in {a.out}")
        print("settings: " + json.dumps({k: v for k, v in cfg.items()}, sort_keys=True))
        for t in chosen:
            print(f"target {t.name:20s} {t.fs:9s} {t.setting}")
        for w in a.workloads:
            print(f"workload {w}: " + ", ".join(workloads.WORKLOADS[w][1](cfg)))
        return 0

    os.makedirs(a.out, exist_ok=True)
    sysutil.set_log(os.path.join(a.out, "commands.log"))
    sysutil.install_signal_handlers()
    t_start = time.monotonic()
    rows, leaks, status = [], [], "complete"
    meta = {"mode": cfg["mode"], "cfg": cfg, "argv": argv, "targets": [], "workloads": a.workloads}
    try:
        stale = registry.live()
        if stale:
            sysutil.progress(f"tearing down {len(stale)} resource(s) left by an earlier run")
            for e in registry.teardown():
                sysutil.progress("  could not: " + e)
        workloads.ATTRIBUTED = cpustat.Attributed.create(registry, f"presso-bench-{os.getpid()}",
                                                         workloads.TICKS)
        meta["cpu_attribution"] = (f"cgroup ({workloads.ATTRIBUTED.kind}) + kernel threads"
                                   if workloads.ATTRIBUTED else "unavailable: system-wide /proc/stat only")
        meta["machine"] = machine_info(a, cfg)
        meta["idle_cpu_util"] = idle_baseline()
        sysutil.progress(f"machine: {meta['machine']['cpu']}, {meta['machine']['cores']} cores; idle CPU "
                         f"utilisation before the run {100 * (meta['idle_cpu_util'] or 0):.1f}%")
        if "files" in a.workloads or "genomics" in a.workloads:
            if not all(os.path.exists(os.path.join(cfg["corpus"], f)) for f in workloads.FILES):
                if a.corpus:
                    raise SystemExit(f"{a.corpus} lacks {', '.join(workloads.FILES)}")
                sysutil.progress(f"making the corpus ({cfg['corpus_mb']} MB) in {cfg['corpus']}")
                sysutil.run(["bash", os.path.join(REPO, "scripts", "make-corpus.sh"), cfg["corpus"],
                             str(cfg["corpus_mb"])], timeout=3600)
            meta["corpus"] = {f: os.path.getsize(os.path.join(cfg["corpus"], f)) for f in workloads.FILES}
        if "genomics" in a.workloads:
            sysutil.progress(f"generating the genomics dataset ({cfg['reads_per_lane']} reads per lane)")
            meta["genomics"] = genomics.generate(cfg["genomics_data"], os.path.join(cfg["corpus"], "reads.fq"),
                                                 cfg["reads_per_lane"], cfg["contigs"])
            meta["genomics"]["files"] = {f: os.path.getsize(os.path.join(cfg["genomics_data"], f))
                                         for f in ("lane1.fq", "lane2.fq", "lane1.bam", "lane2.bam")}
            meta["genomics"]["commands"] = [" ".join(os.path.basename(x) if x.startswith("/") else x for x in argv)
                                            + (f" > {os.path.basename(out)}" if out else "")
                                            for _s, cmds, _o in workloads.genomics_commands(cfg, "/D")
                                            for argv, out in cmds]
        meta["fio_commands"] = {
            ph: " ".join(workloads.fio_args(cfg, "DIR", rw, bs, cfg["fio_size"]))
            for ph, rw, bs in workloads.FIO_PATTERNS + [("SeqR:SeqW 1:1 BS", "rw", "BS")]}
        zfs_left = [t for t in chosen if t.fs == "zfs-fuse"]
        # Repetitions are outermost: each round sets every target up afresh and runs one
        # repetition of every workload on it, so drift on a shared machine hits all targets alike
        # and the medians are of alternating runs. Each round starts one target further on: a
        # target runs after the others' writes (their writeback, the page cache they filled) in
        # some rounds and first in others, instead of always in the same place.
        reps = cfg["reps"]
        for rep in range(1, reps + 1):
            for i, t in round_order(list(enumerate(chosen, 1)), rep):
                prefix = f"[{i:2d}/{len(chosen)} {t.name}]" + (f" round {rep}/{reps}" if reps > 1 else "")
                try:
                    run_target(t, a, cfg, rows, prefix, t_start, rep)
                finally:
                    errs = t.teardown()
                    leaks += errs
                    for e in errs:
                        sysutil.progress(f"{prefix} teardown could not: {e}")
                    if not errs and not registry.live(group=t.name):
                        # Its images are of no use once it is down, and they hold gigabytes.
                        shutil.rmtree(t.dir, ignore_errors=True)
                    if rep == 1:
                        meta["targets"].append({"name": t.name, "fs": t.fs, "setting": t.setting,
                                                "anchor": t.anchor, "commands": list(t.commands)})
                    if rep == reps and t in zfs_left:
                        zfs_left.remove(t)
                        if not zfs_left:
                            leaks += registry.teardown(group="zfs-daemon")
                    report.write_csv(os.path.join(a.out, "results.csv"), rows, metrics.ROW_FIELDS)
    except sysutil.Interrupted as e:
        status = str(e)
        sysutil.progress(f"{e}: tearing everything down")
    except BaseException as e:
        status = f"aborted: {e!r}"
        sysutil.progress(f"aborted: {e!r}; tearing everything down")
        raise
    finally:
        sysutil.kill_children()
        leaks += registry.teardown()
        meta["zfs_daemon"] = ctx.zfs_note
        meta["status"] = status
        meta["leaks"] = leaks
        meta["duration_s"] = time.monotonic() - t_start
        if rows:
            with open(os.path.join(a.out, "run.json"), "w") as f:
                json.dump(meta, f, indent=1, default=str)
            report.write_all(a.out, rows, meta)
            report.scrub_paths(a.out, {a.work + "/": "WORK/", a.work: "WORK", REPO + "/": "", REPO: "."})
            sysutil.progress(f"results: {a.out}/report.md ({meta['duration_s'] / 60:.1f} min)")
        if leaks:
            sysutil.progress("LEFT BEHIND: " + "; ".join(leaks))
    return 0 if status == "complete" and not leaks else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
