#!/usr/bin/env bash
# Measures the compression engine's targets side by side in one run and prints them as markdown:
#   bench/engine-targets.sh CORPUS_DIR [WORKERS]
# CORPUS_DIR comes from scripts/make-corpus.sh. Needs a release build (cargo build --release).
# Every figure is a ratio of two rows of the same run, so a noisy machine affects both sides.
set -euo pipefail
corpus=${1:?usage: bench/engine-targets.sh CORPUS_DIR [WORKERS]}
workers=${2:-$(nproc)}
presso=$(dirname "$0")/../target/release/presso
[ -x "$presso" ] || { echo "build first: cargo build --release -p presso-cli" >&2; exit 1; }

run() { "$presso" bench --json --workers "$@" 2>/dev/null | grep '"codec"'; }

echo "### gzip-6 paths against zlib gzip-6 ($workers workers, 128 KiB records)"
echo
echo "| file | backend | ratio | × zlib ratio | compress MB/s | × zlib speed | decompress MB/s | CPU s/GB |"
echo "|------|---------|------:|-------------:|--------------:|-------------:|----------------:|---------:|"
for f in text.tar reads.fq; do
  run "$workers" --codecs gzip-6 "$corpus/$f" | python3 -c '
import json, sys
rows = [json.loads(l) for l in sys.stdin]
base = next(r for r in rows if r["backend"] == "zlib")
for r in rows:
    print(f"| '"$f"' | {r[\"backend\"]} | {r[\"ratio\"]:.3f} | {r[\"ratio\"]/base[\"ratio\"]:.3f} | "
          f"{r[\"compress_mbps\"]:.0f} | {r[\"compress_mbps\"]/base[\"compress_mbps\"]:.1f} | "
          f"{r[\"decompress_mbps\"]:.0f} | {r[\"cpu_s_per_gb\"]:.2f} |")'
done

echo
echo "### Pre-check on already-compressed media.bin (gzip-6)"
echo
echo "| backend | records skipped | MB/s with pre-check | MB/s without | speed-up |"
echo "|---------|----------------:|--------------------:|-------------:|---------:|"
with=$(run "$workers" --codecs gzip-6 "$corpus/media.bin")
without=$(run "$workers" --codecs gzip-6 --no-precheck "$corpus/media.bin")
python3 -c '
import json, sys
w = [json.loads(l) for l in sys.argv[1].splitlines()]
n = {json.loads(l)["backend"]: json.loads(l) for l in sys.argv[2].splitlines()}
for r in w:
    o = n[r["backend"]]
    print(f"| {r[\"backend\"]} | {r[\"skipped\"]}/{r[\"records\"]} ({100*r[\"skipped\"]/r[\"records\"]:.1f}%) | "
          f"{r[\"compress_mbps\"]:.0f} | {o[\"compress_mbps\"]:.0f} | {r[\"compress_mbps\"]/o[\"compress_mbps\"]:.1f}x |")' "$with" "$without"

echo
echo "### Worker scaling (text.tar + reads.fq)"
echo
echo "| codec | backend | 1 worker MB/s | $workers workers MB/s | speed-up |"
echo "|-------|---------|--------------:|----------------:|---------:|"
one=$(run 1 --codecs gzip-6,zstd-3 "$corpus/text.tar" "$corpus/reads.fq")
many=$(run "$workers" --codecs gzip-6,zstd-3 "$corpus/text.tar" "$corpus/reads.fq")
python3 -c '
import json, sys
a = [json.loads(l) for l in sys.argv[1].splitlines()]
b = {(json.loads(l)["codec"], json.loads(l)["backend"]): json.loads(l) for l in sys.argv[2].splitlines()}
for r in a:
    m = b[(r["codec"], r["backend"])]
    print(f"| {r[\"codec\"]} | {r[\"backend\"]} | {r[\"compress_mbps\"]:.0f} | {m[\"compress_mbps\"]:.0f} | {m[\"compress_mbps\"]/r[\"compress_mbps\"]:.2f}x |")' "$one" "$many"
