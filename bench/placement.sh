#!/usr/bin/env bash
# What the vCPU a FUSE request is served on costs `tar x`: the Linux 6.1 source tarball extracted
# (then `sync -f`) onto ext4, the FUSE floor, Presso compression=off and Presso at
# PRESSO_COMPRESSION (default gzip-6), each run two ways in alternating rounds:
#   free     as a user runs it: `xz -dc TARBALL | tar xf -`, the scheduler placing every thread
#   pinned   tar on CPU 0 and xz on CPU 1; the daemon's request threads (fuser-*) on CPU 0, its
#            compression threads (presso-isal-*, presso-cpu-*) on CPU 1
# Pinned, each request is served on the CPU of the program that sent it, as FUSE over io_uring's
# per-CPU queues would serve it, and the daemon's background work stays off that CPU. The
# difference between the two rows is what the kernel's FUSE transport (a request read by
# whichever thread and vCPU the scheduler picks) costs, not the file system's own work.
#
#   bench/placement.sh [ROUNDS=3] [WORK_DIR=/var/tmp/presso-placement-bench]
#
# Prints a markdown table of medians (seconds), each ÷ ext4 placed the same way. Needs root (loop
# devices, drop_caches) and at least 2 CPUs. PRESSO_BIN=FILE measures that build of presso;
# PRESSO_HALT_POLL_NS sets a virtual machine's guest halt polling for the run
# (bench/lib/loopdisk.sh); PRESSO_NS_TARBALL=FILE uses another .tar.xz.
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=${1:-3}
work=${2:-/var/tmp/presso-placement-bench}
compression=${PRESSO_COMPRESSION:-gzip-6}
tarball=${PRESSO_NS_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
case $rounds in '' | *[!0-9]* | 0) echo "ROUNDS is a number of rounds (1 or more)" >&2; exit 2 ;; esac
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices, drop_caches)" >&2; exit 1; }
[ "$(nproc)" -ge 2 ] || { echo "needs at least 2 CPUs (tar and xz are pinned apart)" >&2; exit 1; }
if [ ! -f "$tarball" ] && [ -z "${PRESSO_NS_TARBALL:-}" ]; then
  bash scripts/install-packages.sh linux-source-6.1
fi
[ -f "$tarball" ] || { echo "no tarball at $tarball (set PRESSO_NS_TARBALL)" >&2; exit 1; }
bash scripts/install-packages.sh xz-utils util-linux

source bench/lib/loopdisk.sh
presso=$(presso_binary)
cargo build --release -q -p presso-fs --example fuse_floor >&2
floor=$PWD/target/release/examples/fuse_floor
# The tarball's bytes three times over (extracted, Presso's segments, slack) and a gibibyte.
make_disk $(( $(xz --robot --list "$tarball" | awk '$1 == "totals" { print $5 }') * 3 + (1 << 30) ))
dir=$work/mnt-placement
mkdir -p "$dir"

daemon=""
# setup TARGET: an empty file system of TARGET mounted at $dir; `daemon` is its FUSE daemon's pid.
setup() {
  case $1 in
    ext4) mkdir -p "$disk/ext4"; mount --bind "$disk/ext4" "$dir"; daemon="" ;;
    floor)
      local line=""
      mkdir -p "$disk/floor"
      exec {floor_out}< <("$floor" "$disk/floor" "$dir")
      daemon=$!
      read -r -u "$floor_out" line || true
      exec {floor_out}<&-
      [ "$line" = mounted ] || { echo "the FUSE floor did not mount" >&2; exit 1; } ;;
    presso-*)
      "$presso" create "$disk/pool" -o compression="${1#presso-}" >/dev/null
      "$presso" mount "$disk/pool" "$dir" >/dev/null
      daemon=$(pgrep -f -- "mount $disk/pool $dir" | head -n 1)
      [ -n "$daemon" ] || { echo "no Presso daemon found for $dir" >&2; exit 1; } ;;
  esac
}
teardown() {
  case $1 in
    ext4) umount "$dir"; rm -rf "$disk/ext4" ;;
    floor) umount "$dir"; wait "$daemon" || true; rm -rf "$disk/floor" ;;
    presso-*) "$presso" unmount "$dir" >/dev/null; rm -rf "$disk/pool" ;;
  esac
}

# pin_daemon: the daemon's request threads to CPU 0, its compression threads to CPU 1.
pin_daemon() {
  [ -n "$daemon" ] || return 0
  local task name
  for task in /proc/"$daemon"/task/*; do
    name=$(cat "$task/comm" 2>/dev/null) || continue
    case $name in
      fuser*) taskset -p -c 0 "${task##*/}" >/dev/null ;;
      presso-isal* | presso-cpu*) taskset -p -c 1 "${task##*/}" >/dev/null ;;
    esac
  done
}

extract() {
  if [ "$1" = pinned ]; then
    taskset -c 1 xz -dc "$tarball" | taskset -c 0 tar xf - -C "$dir"
  else
    xz -dc "$tarball" | tar xf - -C "$dir"
  fi
  sync -f "$dir"
}

targets=(ext4 floor presso-off "presso-$compression")
results=$work/results.tsv
: > "$results"
for r in $(seq "$rounds"); do
  for target in "${targets[@]}"; do
    for placement in free pinned; do
      setup "$target"
      [ "$placement" = pinned ] && pin_daemon
      drop
      s=$(now); extract "$placement"; e=$(now)
      teardown "$target"
      awk -v t="$target" -v p="$placement" -v s="$s" -v e="$e" \
        'BEGIN { printf "%s\t%s\t%.3f\n", t, p, e - s }' >> "$results"
      echo "round $r: $target $placement $(tail -n 1 "$results" | cut -f3) s" >&2
    done
  done
done

med() { awk -F'\t' -v t="$1" -v p="$2" '$1 == t && $2 == p { print $3 }' "$results" | median; }
echo
echo "tar x seconds, medians of $rounds alternating rounds; $(halt_poll_note)."
echo
echo "| target | free | pinned | free ÷ ext4 free | pinned ÷ ext4 pinned |"
echo "|---|---:|---:|---:|---:|"
for target in "${targets[@]}"; do
  awk -v t="$target" -v f="$(med "$target" free)" -v p="$(med "$target" pinned)" \
    -v bf="$(med ext4 free)" -v bp="$(med ext4 pinned)" \
    'BEGIN { printf "| %s | %.2f | %.2f | %.2fx | %.2fx |\n", t, f, p, f / bf, p / bp }'
done
