#!/usr/bin/env python3
"""The daemon's memory over a long run: cycles of a mixed workload on a mounted pool, with the
daemon's resident set, peak, threads and open descriptors sampled after every cycle.

    python3 bench/lib/soak.py run MOUNT PID MINUTES OUT_DIR
    python3 bench/lib/soak.py report OUT_DIR

`run` writes OUT_DIR/soak.tsv (one line per cycle) and then reports; `report` prints a markdown
summary of soak.tsv and plots it to OUT_DIR/soak.png. A cycle, every byte checked on the way:
  - a tree of 2,000 files of 1-64 KiB of compressible text in 40 directories: create, stat,
    read back; half of them renamed into a second tree, every tenth given an extended attribute,
    every twentieth a hard link, and the previous cycle's tree removed (one tree stays);
  - a 64 MiB file written in 1 MiB writes and fsynced, 2,000 random 4 KiB overwrites and an
    fsync, read back whole, cut to half its size and read back, removed.
A leak shows as a resident set growing with the cycles after the first ones; a steady daemon's
stays within its bound (the dirty buffer limit plus the record cache)."""
import hashlib
import os
import random
import shutil
import statistics
import sys
import time

FIELDS = ["cycle", "seconds", "ops", "rss_kib", "hwm_kib", "threads", "fds"]
TREE_FILES = 2000
TREE_DIRS = 40
BIG = 64 << 20
WORDS = [w.encode() for w in (
    "alpha beta gamma delta read write sync record segment pool file tree node chunk "
    "genome sample quality base pair lane tile index sort merge view log line entry value"
).split()]


def words(size, seed=0):
    """`size` bytes of words in a seeded order: compressible text."""
    rng = random.Random(seed)
    out = bytearray()
    while len(out) < size:
        out += rng.choice(WORDS) + (b"\n" if rng.random() < 0.1 else b" ")
    return bytes(out[:size])


# 4 MiB of words, twice over, so that any 4 MiB from a point in the first half is one slice.
PIECE = 4 << 20
SOURCE = None


def text(rng, size):
    """`size` bytes of compressible text, from places `rng` picks: different per file."""
    global SOURCE
    if SOURCE is None:
        SOURCE = words(PIECE) * 2
    parts = []
    while size > 0:
        n = min(size, PIECE)
        start = rng.randrange(PIECE)
        parts.append(SOURCE[start:start + n])
        size -= n
    return b"".join(parts)


def daemon_sample(pid):
    """The daemon's resident set and peak (KiB), threads and open descriptors."""
    fields = {}
    with open(f"/proc/{pid}/status") as f:
        for line in f:
            key, _, value = line.partition(":")
            fields[key] = value.split()
    fds = len(os.listdir(f"/proc/{pid}/fd"))
    return int(fields["VmRSS"][0]), int(fields["VmHWM"][0]), int(fields["Threads"][0]), fds


def tree_cycle(mnt, cycle, rng):
    """Builds this cycle's tree, checks it, moves half of it, drops the previous one; returns
    the operations done."""
    root = os.path.join(mnt, f"tree{cycle}")
    moved = os.path.join(mnt, f"moved{cycle}")
    os.mkdir(root)
    os.mkdir(moved)
    sums = {}
    ops = 2
    for i in range(TREE_FILES):
        d = os.path.join(root, f"d{i % TREE_DIRS:02d}")
        if i < TREE_DIRS:
            os.mkdir(d)
            ops += 1
        data = text(rng, rng.randint(1 << 10, 64 << 10))
        path = os.path.join(d, f"f{i:04d}")
        with open(path, "wb") as f:
            f.write(data)
        sums[path] = hashlib.sha256(data).digest()
        ops += 1
    for path, digest in sums.items():
        st = os.stat(path)
        with open(path, "rb") as f:
            data = f.read()
        assert st.st_size == len(data) and hashlib.sha256(data).digest() == digest, path
        ops += 2
    for n, path in enumerate(sorted(sums)):
        if n % 2 == 0:
            os.rename(path, os.path.join(moved, f"m{n:04d}"))
            ops += 1
        if n % 10 == 1:
            os.setxattr(path, "user.soak", str(cycle).encode())
            ops += 1
        if n % 20 == 3:
            os.link(path, path + ".link")
            ops += 1
    for old in (f"tree{cycle - 1}", f"moved{cycle - 1}"):
        if os.path.exists(os.path.join(mnt, old)):
            ops += sum(len(files) + 1 for _, _, files in os.walk(os.path.join(mnt, old)))
            shutil.rmtree(os.path.join(mnt, old))
    return ops


def big_file_cycle(mnt, rng):
    """Writes, overwrites, checks, cuts and removes one large file; returns the operations."""
    path = os.path.join(mnt, "big")
    model = bytearray(text(rng, BIG))
    ops = 0
    fd = os.open(path, os.O_CREAT | os.O_TRUNC | os.O_RDWR, 0o644)
    try:
        for off in range(0, BIG, 1 << 20):
            os.pwrite(fd, model[off:off + (1 << 20)], off)
            ops += 1
        os.fsync(fd)
        for _ in range(2000):
            off = rng.randrange(0, BIG // 4096) * 4096
            block = text(rng, 4096)
            os.pwrite(fd, block, off)
            model[off:off + 4096] = block
            ops += 1
        os.fsync(fd)
        assert read_all(fd, BIG) == model, "the large file reads other bytes"
        os.ftruncate(fd, BIG // 2)
        assert read_all(fd, BIG) == model[:BIG // 2], "the cut file reads other bytes"
        ops += 4 + 2 * (BIG >> 20)
    finally:
        os.close(fd)
    os.unlink(path)
    return ops + 1


def read_all(fd, limit):
    out = bytearray()
    while len(out) < limit:
        chunk = os.pread(fd, 1 << 20, len(out))
        if not chunk:
            break
        out += chunk
    return out


def run(mnt, pid, minutes, out_dir):
    started = time.monotonic()
    path = os.path.join(out_dir, "soak.tsv")
    ops = 0
    with open(path, "w") as tsv:
        tsv.write("\t".join(FIELDS) + "\n")
        cycle = 0
        while time.monotonic() - started < minutes * 60:
            rng = random.Random(cycle)
            ops += tree_cycle(mnt, cycle, rng)
            ops += big_file_cycle(mnt, rng)
            rss, hwm, threads, fds = daemon_sample(pid)
            row = [cycle, round(time.monotonic() - started, 1), ops, rss, hwm, threads, fds]
            tsv.write("\t".join(map(str, row)) + "\n")
            tsv.flush()
            cycle += 1
            if cycle % 10 == 0:
                print(f"cycle {cycle}: {ops:,} operations, resident {rss / 1024:.0f} MiB",
                      file=sys.stderr)


def read_rows(path):
    with open(path) as f:
        header = f.readline().split()
        return [dict(zip(header, map(float, line.split()))) for line in f if line.strip()]


def slope(xs, ys):
    """Least-squares slope of ys over xs (0 for fewer than two distinct xs)."""
    if len(xs) < 2 or len(set(xs)) < 2:
        return 0.0
    mx, my = statistics.fmean(xs), statistics.fmean(ys)
    return sum((x - mx) * (y - my) for x, y in zip(xs, ys)) / sum((x - mx) ** 2 for x in xs)


def summarise(rows):
    """What the rows say about growth: medians of the first and the last tenth of the cycles,
    and the resident set's slope over the second half (KiB per 100 cycles and per hour)."""
    n = len(rows)
    tenth = max(n // 10, 1)
    first, last = rows[:tenth], rows[-tenth:]
    half = rows[n // 2:]
    per_cycle = slope([r["cycle"] for r in half], [r["rss_kib"] for r in half])
    per_second = slope([r["seconds"] for r in half], [r["rss_kib"] for r in half])
    med = lambda rs, key: statistics.median(r[key] for r in rs)
    return {
        "cycles": n,
        "hours": rows[-1]["seconds"] / 3600 if rows else 0.0,
        "operations": int(rows[-1]["ops"]) if rows else 0,
        "rss_first_mib": med(first, "rss_kib") / 1024,
        "rss_last_mib": med(last, "rss_kib") / 1024,
        "rss_peak_mib": max(r["hwm_kib"] for r in rows) / 1024,
        "growth_kib_per_100_cycles": per_cycle * 100,
        "growth_mib_per_hour": per_second * 3600 / 1024,
        "threads_first": med(first, "threads"),
        "threads_last": med(last, "threads"),
        "fds_first": med(first, "fds"),
        "fds_last": med(last, "fds"),
    }


def report(out_dir):
    rows = read_rows(os.path.join(out_dir, "soak.tsv"))
    if not rows:
        sys.exit("no cycle finished")
    s = summarise(rows)
    print(f"{s['cycles']} cycles, {s['operations']:,} operations in {s['hours']:.2f} h\n")
    print("| | first tenth | last tenth |")
    print("|---|---|---|")
    print(f"| resident set (median) | {s['rss_first_mib']:.0f} MiB | {s['rss_last_mib']:.0f} MiB |")
    print(f"| threads | {s['threads_first']:.0f} | {s['threads_last']:.0f} |")
    print(f"| open descriptors | {s['fds_first']:.0f} | {s['fds_last']:.0f} |")
    print(f"\npeak resident set {s['rss_peak_mib']:.0f} MiB; over the second half the resident "
          f"set grew {s['growth_kib_per_100_cycles']:+.0f} KiB per 100 cycles "
          f"({s['growth_mib_per_hour']:+.1f} MiB per hour)")
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("(no plot: python3-matplotlib is not installed)")
        return
    minutes = [r["seconds"] / 60 for r in rows]
    fig, ax = plt.subplots(figsize=(8, 4))
    ax.plot(minutes, [r["rss_kib"] / 1024 for r in rows], label="resident set")
    ax.plot(minutes, [r["hwm_kib"] / 1024 for r in rows], label="peak so far", linestyle="--")
    ax.set_xlabel("minutes")
    ax.set_ylabel("MiB")
    ax.set_ylim(bottom=0)
    ax.set_title(f"presso daemon memory, {s['cycles']} cycles, {s['operations']:,} operations")
    ax.legend()
    fig.tight_layout()
    fig.savefig(os.path.join(out_dir, "soak.png"), dpi=100)
    print(f"plot: {os.path.join(out_dir, 'soak.png')}")


if __name__ == "__main__":
    if len(sys.argv) == 6 and sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), float(sys.argv[4]), sys.argv[5])
        report(sys.argv[5])
    elif len(sys.argv) == 3 and sys.argv[1] == "report":
        report(sys.argv[2])
    else:
        sys.exit(__doc__)
