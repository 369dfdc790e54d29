#!/usr/bin/env bash
# How Presso's costs grow with size, on one pool on a loop-device ext4:
#   tree       PRESSO_SCALE_FILES files (default 1,000,000) of 100 bytes in directories of 1,000:
#              create, stat, readdir, delete rates, and meta.db bytes per file
#   directory  PRESSO_SCALE_DIR_FILES files (default 100,000; 0 skips it) in one directory: the
#              same rates
#   big file   one file of PRESSO_SCALE_GB GB (default 100; 1 GB = 10^9 bytes; 0 skips it) of
#              generated compressible text, written and then read cold: MB/s of the first and
#              the last GB
#   metadata   for each set: the rates of the first and the last tenth of each phase, meta.db's
#              size, and the unmount after the creates, the cold mount and `presso status` at
#              that size, and the unmount after a mount that only read (stat, readdir); a set of
#              several million files makes metadata of gigabytes (PRESSO_SCALE_FILES=6000000
#              PRESSO_SCALE_DIR_FILES=0 PRESSO_SCALE_GB=0: 1.3 GB, about 20 minutes here)
#   memory     the daemon's resident set, sampled every second through all of the above: the
#              largest, and its bound (the dirty buffer limit plus the record cache)
#
#   bench/scale.sh [WORK_DIR=/var/tmp/presso-scale-bench]
#
# PRESSO_COMPRESSION (default gzip-6) picks the codec; PRESSO_BIN=FILE measures that build of
# presso; PRESSO_HALT_POLL_NS sets a virtual machine's guest halt polling (bench/lib/loopdisk.sh).
# Prints a markdown table. Needs root (loop
# devices, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/var/tmp/presso-scale-bench}
files=${PRESSO_SCALE_FILES:-1000000}
dir_files=${PRESSO_SCALE_DIR_FILES:-100000}
gigabytes=${PRESSO_SCALE_GB:-100}
compression=${PRESSO_COMPRESSION:-gzip-6}
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices, drop_caches)" >&2; exit 1; }
bash scripts/install-packages.sh python3

source bench/lib/loopdisk.sh
presso=$(presso_binary)
# The big file compresses about 3x; the small files take a block each in the metadata at most.
make_disk $(( gigabytes * 1000000000 / 2 + (files + dir_files) * 4096 + (4 << 30) ))

pool=$disk/pool
mnt=$work/mnt-presso
mkdir -p "$mnt"
"$presso" create "$pool" -o compression="$compression" >/dev/null
"$presso" mount "$pool" "$mnt" >/dev/null
daemon_pid() { pgrep -f "mount $pool $mnt" | head -n 1; }

# The daemon's resident set every second, until this script ends.
rss_log=$work/rss.tsv
: > "$rss_log"
( while sleep 1; do
    pid=$(daemon_pid) || true
    [ -n "$pid" ] && awk -v t="$(date +%s)" '/^VmRSS/ { print t "\t" $2 }' "/proc/$pid/status" >> "$rss_log" 2>/dev/null
  done ) &
sampler=$!
trap 'kill $sampler 2>/dev/null || true; cleanup' EXIT INT TERM

results=$work/results.tsv
: > "$results"
# many_files OP DIR N PER_DIR: one process runs the whole phase and prints its seconds.
many_files() { python3 bench/lib/many_files.py "$@"; }
# Bytes of the metadata's pages in use (not its file size: freed pages stay in the file), read
# from an unmounted pool.
meta_bytes() {
  python3 - "$pool/meta.db" <<'PY'
import sqlite3, sys
db = sqlite3.connect(f"file:{sys.argv[1]}?mode=ro", uri=True)
pages, free, size = (db.execute(f"PRAGMA {p}").fetchone()[0] for p in ("page_count", "freelist_count", "page_size"))
print((pages - free) * size)
PY
}
remount() { "$presso" unmount "$mnt" >/dev/null; drop; "$presso" mount "$pool" "$mnt" >/dev/null; }

phase_set() {
  local name=$1 n=$2 per_dir=$3 root=$mnt/$1
  mkdir "$root"
  "$presso" unmount "$mnt" >/dev/null
  local before; before=$(meta_bytes)
  "$presso" mount "$pool" "$mnt" >/dev/null
  for op in create stat readdir delete; do
    [ "$op" = stat ] && remount
    local s tenths=$work/$name-$op.tenths
    [ "$op" = readdir ] && tenths=""
    s=$(many_files "$op" "$root" "$n" "$per_dir" $tenths)
    printf '%s\t%s\t%s\t%s\n' "$name" "$op" "$s" "$(awk -v n="$n" -v s="$s" 'BEGIN { printf "%.0f", n / s }')" >> "$results"
    if [ -n "$tenths" ]; then
      printf '%s\t%s first tenth\t%s\n' "$name" "$op" "$(head -n 1 "$tenths")" >> "$results"
      printf '%s\t%s last tenth\t%s\n' "$name" "$op" "$(tail -n 1 "$tenths")" >> "$results"
    fi
    echo "$name: $op of $n files in $s s" >&2
    if [ "$op" = readdir ]; then
      # Nothing but reads since the remount: the unmount has no metadata copy to write.
      local t; t=$(now)
      "$presso" unmount "$mnt" >/dev/null
      printf '%s\tread-only unmount s\t%.2f\n' "$name" "$(echo "$(now) - $t" | bc)" >> "$results"
      "$presso" mount "$pool" "$mnt" >/dev/null
    fi
    if [ "$op" = create ]; then
      # What a pool of this size costs around its use: the unmount (its last commit and the
      # metadata copy), the mount after it, and `presso status`.
      local t; t=$(now)
      "$presso" unmount "$mnt" >/dev/null
      printf '%s\tunmount s\t%.1f\n' "$name" "$(echo "$(now) - $t" | bc)" >> "$results"
      printf '%s\tmeta.db bytes per file\t%s\n' "$name" "$(( ($(meta_bytes) - before) / n ))" >> "$results"
      printf '%s\tmeta.db MB\t%s\n' "$name" "$(( $(stat -c %s "$pool/meta.db") / 1000000 ))" >> "$results"
      drop
      t=$(now)
      "$presso" mount "$pool" "$mnt" >/dev/null
      printf '%s\tmount s\t%.2f\n' "$name" "$(echo "$(now) - $t" | bc)" >> "$results"
      t=$(now)
      "$presso" status "$mnt" >/dev/null
      printf '%s\tstatus s\t%.2f\n' "$name" "$(echo "$(now) - $t" | bc)" >> "$results"
    fi
  done
  find "$root" -mindepth 1 -type d -delete
  rmdir "$root"
}
phase_set tree "$files" 1000
if [ "$dir_files" -gt 0 ]; then phase_set directory "$dir_files" "$dir_files"; fi

if [ "$gigabytes" -gt 0 ]; then
# The big file, a GB at a time; a block of generated text with a counter so no two GB are alike.
python3 - "$mnt/big" "$gigabytes" write > "$work/write.tsv" <<'PY'
import os, random, sys, time
path, gb = sys.argv[1], int(sys.argv[2])
rng = random.Random(7)
words = [bytes(rng.choice(b"abcdefghijklmnopqrstuvwxyz") for _ in range(rng.randint(2, 10))) for _ in range(5000)]
block = bytearray()
while len(block) < 1 << 24:
    block += b" ".join(rng.choice(words) for _ in range(12)) + b"\n"
block = bytes(block[: 1 << 24])
fd = os.open(path, os.O_CREAT | os.O_WRONLY | os.O_TRUNC, 0o644)
written = 0
for g in range(gb):
    started = time.monotonic()
    end = (g + 1) * 10**9
    while written < end:
        chunk = block[: min(len(block), end - written)]
        written += os.write(fd, b"%020d" % written + chunk[20:])
    os.fsync(fd)
    print(f"{g + 1}\t{1e3 / (time.monotonic() - started):.1f}", flush=True)
os.close(fd)
PY
remount
python3 - "$mnt/big" read > "$work/read.tsv" <<'PY'
import os, sys, time
fd = os.open(sys.argv[1], os.O_RDONLY)
g = 0
while True:
    started, got = time.monotonic(), 0
    while got < 10**9:
        b = os.read(fd, min(1 << 20, 10**9 - got))
        if not b:
            break
        got += len(b)
    if got == 0:
        break
    g += 1
    print(f"{g}\t{got / 1e6 / (time.monotonic() - started):.1f}", flush=True)
PY
ratio=$("$presso" status "$mnt" --json | python3 -c 'import json,sys; print("%.2f" % json.load(sys.stdin)["ratio"])')
fi
"$presso" unmount "$mnt" >/dev/null
kill "$sampler" 2>/dev/null || true

first() { head -n 1 "$1" | cut -f2; }
last() { tail -n 1 "$1" | cut -f2; }
peak=$(cut -f2 "$rss_log" | sort -n | tail -n 1)
echo
echo "Presso compression=$compression; $(halt_poll_note); rates in operations per second (one process, one at a time)."
echo
echo "| set | files | create/s | stat/s (cold) | readdir entries/s | delete/s | meta.db bytes per file |"
echo "|---|---:|---:|---:|---:|---:|---:|"
sets="tree"; [ "$dir_files" -gt 0 ] && sets="tree directory"
value() { awk -F'\t' -v s="$1" -v o="$2" -v c="${3:-3}" '$1 == s && $2 == o { print $c }' "$results"; }
for name in $sets; do
  n=$files; [ "$name" = directory ] && n=$dir_files
  echo "| $name | $n | $(value "$name" create 4) | $(value "$name" stat 4) | $(value "$name" readdir 4) | $(value "$name" delete 4) | $(value "$name" "meta.db bytes per file") |"
done
echo
echo "How the rates and the costs around them grow with the metadata (operations per second of the first and the last tenth of each phase; the unmount after the creates, a mount after it with a cold cache, \`presso status\` on that mount, the unmount after a mount that only read):"
echo
echo "| set | meta.db MB | create/s first, last tenth | stat/s first, last | delete/s first, last | unmount s | mount s | status s | read-only unmount s |"
echo "|---|---:|---:|---:|---:|---:|---:|---:|---:|"
for name in $sets; do
  tenths() { echo "$(value "$name" "$1 first tenth"), $(value "$name" "$1 last tenth")"; }
  echo "| $name | $(value "$name" "meta.db MB") | $(tenths create) | $(tenths stat) | $(tenths delete) | $(value "$name" "unmount s") | $(value "$name" "mount s") | $(value "$name" "status s") | $(value "$name" "read-only unmount s") |"
done
if [ "$gigabytes" -gt 0 ]; then
  echo
  echo "| big file ($gigabytes GB, ratio $ratio) | first GB | last GB |"
  echo "|---|---:|---:|"
  echo "| write MB/s (each GB ends with fsync) | $(first "$work/write.tsv") | $(last "$work/write.tsv") |"
  echo "| cold read MB/s | $(first "$work/read.tsv") | $(last "$work/read.tsv") |"
fi
echo
echo "Daemon resident set: largest $(( ${peak:-0} / 1024 )) MiB over $(wc -l < "$rss_log") samples \
(target: under 512 MiB whatever the data size; dirty buffers are capped at 256 MiB and the record \
cache at 64 MiB)."
