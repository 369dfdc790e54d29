#!/usr/bin/env python3
"""Measures the compression engine's targets side by side in one run and prints markdown.

    bench/engine_targets.py CORPUS_DIR [--workers N]

CORPUS_DIR comes from scripts/make-corpus.sh; needs a release build (cargo build --release).
Every figure is a ratio of two rows of the same run, so a noisy machine affects both sides.
"""
import argparse
import json
import os
import subprocess
import sys

PRESSO = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "target", "release", "presso")


def bench(workers, *args):
    out = subprocess.run([PRESSO, "bench", "--json", "--workers", str(workers), *args],
                         check=True, capture_output=True, text=True).stdout
    return [r for r in map(json.loads, out.splitlines()) if "codec" in r]


def main():
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("corpus")
    parser.add_argument("--workers", type=int, default=os.cpu_count())
    a = parser.parse_args()
    if not os.access(PRESSO, os.X_OK):
        sys.exit("build first: cargo build --release -p presso-cli")
    w = a.workers
    path = lambda name: os.path.join(a.corpus, name)

    print(f"### gzip-6 paths against zlib gzip-6 ({w} workers, 128 KiB records)\n")
    print("| file | backend | ratio | × zlib ratio | compress MB/s | × zlib speed | decompress MB/s | CPU s/GB |")
    print("|------|---------|------:|-------------:|--------------:|-------------:|----------------:|---------:|")
    for name in ["text.tar", "reads.fq"]:
        rows = bench(w, "--codecs", "gzip-6", path(name))
        base = next(r for r in rows if r["backend"] == "zlib")
        for r in rows:
            print(f"| {name} | {r['backend']} | {r['ratio']:.3f} | {r['ratio'] / base['ratio']:.3f} | "
                  f"{r['compress_mbps']:.0f} | {r['compress_mbps'] / base['compress_mbps']:.1f}x | "
                  f"{r['decompress_mbps']:.0f} | {r['cpu_s_per_gb']:.2f} |")

    print("\n### Pre-check on already-compressed media.bin (gzip-6)\n")
    print("| backend | records skipped | MB/s with pre-check | MB/s without | speed-up |")
    print("|---------|----------------:|--------------------:|-------------:|---------:|")
    with_check = bench(w, "--codecs", "gzip-6", path("media.bin"))
    without = {r["backend"]: r for r in bench(w, "--codecs", "gzip-6", "--no-precheck", path("media.bin"))}
    for r in with_check:
        o = without[r["backend"]]
        print(f"| {r['backend']} | {r['skipped']}/{r['records']} ({100 * r['skipped'] / r['records']:.1f}%) | "
              f"{r['compress_mbps']:.0f} | {o['compress_mbps']:.0f} | {r['compress_mbps'] / o['compress_mbps']:.1f}x |")

    print(f"\n### Worker scaling (text.tar + reads.fq)\n")
    print(f"| codec | backend | 1 worker MB/s | {w} workers MB/s | speed-up |")
    print("|-------|---------|--------------:|----------------:|---------:|")
    files = [path("text.tar"), path("reads.fq")]
    one = bench(1, "--codecs", "gzip-6,zstd-3", *files)
    many = {(r["codec"], r["backend"]): r for r in bench(w, "--codecs", "gzip-6,zstd-3", *files)}
    for r in one:
        m = many[(r["codec"], r["backend"])]
        print(f"| {r['codec']} | {r['backend']} | {r['compress_mbps']:.0f} | {m['compress_mbps']:.0f} | "
              f"{m['compress_mbps'] / r['compress_mbps']:.2f}x |")


if __name__ == "__main__":
    main()
