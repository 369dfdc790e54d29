#!/usr/bin/env python3
"""Create, stat, list or delete N small files, one process for the whole phase so the cost
measured is the file system's; prints the seconds it took.

    python3 bench/lib/many_files.py create|stat|readdir|delete DIR N PER_DIR [TENTHS_FILE]

Files of 100 bytes; with PER_DIR < N they go into subdirectories of PER_DIR files each (created
by `create`), otherwise all into DIR. With TENTHS_FILE (not for readdir), the operations per
second of each tenth of the phase go there, one line each, so that the first and the last can be
compared."""
import os, sys, time
op, root, n, per_dir = sys.argv[1], sys.argv[2], int(sys.argv[3]), int(sys.argv[4])
tenths = open(sys.argv[5], "w") if len(sys.argv) > 5 else None
data = b"x" * 100
started = last = time.monotonic()
if op == "readdir":
    seen = 0
    for d in sorted(os.listdir(root)) if per_dir < n else [""]:
        with os.scandir(os.path.join(root, d)) as it:
            seen += sum(1 for _ in it)
    assert seen == n, f"readdir saw {seen} of {n}"
else:
    for i in range(n):
        d = os.path.join(root, f"d{i // per_dir:05d}") if per_dir < n else root
        if op == "create" and i % per_dir == 0 and per_dir < n:
            os.mkdir(d)
        p = os.path.join(d, f"f{i:07d}")
        if op == "create":
            fd = os.open(p, os.O_CREAT | os.O_WRONLY | os.O_EXCL, 0o644)
            os.write(fd, data)
            os.close(fd)
        elif op == "stat":
            os.stat(p)
        else:
            os.unlink(p)
        if tenths and (i + 1) % max(n // 10, 1) == 0:
            now = time.monotonic()
            tenths.write(f"{max(n // 10, 1) / (now - last):.0f}\n")
            last = now
if tenths:
    tenths.close()
print(f"{time.monotonic() - started:.3f}")
