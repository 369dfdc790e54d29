#!/usr/bin/env bash
# Issue-4 targets: sequential write and cold sequential read through a Presso mount, side by side
# with the kernel's ext4 on a loop device, in one run. Both write with `dd ... conv=fsync` (so
# the data is durable when dd returns) and read cold with `dd` after dropping the page cache
# (ext4 and Presso are also remounted, so Presso's record cache is empty too). The loop device uses
# direct I/O, like a disk: no second page cache on the host file system below it.
#   bench/mount-targets.sh CORPUS_DIR [REPEATS=3] [WORK_DIR=/var/tmp/presso-mount-bench]
# Prints a markdown table of medians (MB/s = 10^6 bytes/s) and the target ratios.
# PRESSO_BASE=/path/to/presso (another build) adds its off, gzip-6 and gzip-6-cpu as targets
# base-off, base-gzip-6 and base-gzip-6-cpu, alternating with this build's in the same run, and
# prints this build against it: the way to show a change does not regress.
set -euo pipefail
cd "$(dirname "$0")/.."
corpus=$(realpath "${1:?usage: bench/mount-targets.sh CORPUS_DIR [REPEATS] [WORK_DIR]}")
repeats=${2:-3}
work=${3:-/var/tmp/presso-mount-bench}
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices, drop_caches)" >&2; exit 1; }

source bench/lib/loopdisk.sh
presso=$(presso_binary)
# Room for three copies of the corpus and a gibibyte.
make_disk $(( $(du -sb "$corpus" | cut -f1) * 3 + (1 << 30) ))
rate() { awk -v b="$1" -v s="$2" -v e="$3" 'BEGIN { printf "%.1f\n", b / 1e6 / (e - s) }'; }

base=${PRESSO_BASE:-}
targets=(ext4 off gzip-6 gzip-6-cpu)
if [ -n "$base" ]; then
  base=$(realpath "$base")
  targets+=(base-off base-gzip-6 base-gzip-6-cpu)
fi
# The presso binary of a target: base-* run the PRESSO_BASE build.
bin() { case $1 in base-*) echo "$base" ;; *) echo "$presso" ;; esac; }

# target: ext4 | off | gzip-6 (ISA-L, offload=on) | gzip-6-cpu (offload=off), each also as base-*
setup() {
  local target=$1 dir=$work/mnt-$1
  mkdir -p "$dir"
  case $target in
    ext4) mkdir -p "$disk/ext4"; mount --bind "$disk/ext4" "$dir" ;;
    *)
      local exe; exe=$(bin "$target")
      local plain=${target#base-}
      local comp=${plain%-cpu} offload=on
      [ "$plain" != "${plain%-cpu}" ] && offload=off
      [ "$comp" = off ] && offload=auto
      rm -rf "$disk/pool-$target"
      "$exe" create "$disk/pool-$target" -o compression="$comp" -o offload="$offload" >/dev/null
      "$exe" mount "$disk/pool-$target" "$dir" >/dev/null ;;
  esac
}
remount() {
  local target=$1 dir=$work/mnt-$1
  case $target in
    ext4) umount "$dir"; umount "$disk"; mount "$loopdev" "$disk"; mount --bind "$disk/ext4" "$dir" ;;
    *) "$(bin "$target")" unmount "$dir" >/dev/null; drop; "$(bin "$target")" mount "$disk/pool-$target" "$dir" >/dev/null ;;
  esac
  drop
}
teardown() {
  local target=$1 dir=$work/mnt-$1
  case $target in
    ext4) umount "$dir"; rm -rf "$disk/ext4" ;;
    *) "$(bin "$target")" unmount "$dir" >/dev/null; rm -rf "$disk/pool-$target" ;;
  esac
}

results=$work/results.tsv
: > "$results"
for file in text.tar reads.fq media.bin; do
  bytes=$(stat -c %s "$corpus/$file")
  # Repetitions outermost, so that the targets alternate and drift on a shared machine hits
  # them all alike.
  for r in $(seq "$repeats"); do
    for target in "${targets[@]}"; do
      setup "$target"
      drop
      s=$(now); dd if="$corpus/$file" of="$work/mnt-$target/$file" bs=1M conv=fsync status=none; e=$(now)
      w=$(rate "$bytes" "$s" "$e")
      remount "$target"
      s=$(now); dd if="$work/mnt-$target/$file" of=/dev/null bs=1M status=none; e=$(now)
      rd=$(rate "$bytes" "$s" "$e")
      cmp -s "$corpus/$file" "$work/mnt-$target/$file" || { echo "MISMATCH: $target $file" >&2; exit 1; }
      ratio=1
      [ "$target" != ext4 ] && ratio=$("$(bin "$target")" status "$work/mnt-$target" --json | python3 -c 'import json,sys; print("%.3f" % json.load(sys.stdin)["ratio"])')
      printf '%s\t%s\t%s\t%s\t%s\n' "$file" "$target" "$w" "$rd" "$ratio" >> "$results"
      echo "$file $target run $r: write $w MB/s, cold read $rd MB/s, ratio $ratio" >&2
      teardown "$target"
    done
  done
done

med() { awk -F'\t' -v f="$1" -v t="$2" -v c="$3" '$1 == f && $2 == t { print $c }' "$results" | median; }
echo
echo "| file | target | write MB/s | cold read MB/s | ratio |"
echo "|---|---|---|---|---|"
for file in text.tar reads.fq media.bin; do
  for target in "${targets[@]}"; do
    echo "| $file | $target | $(med "$file" "$target" 3) | $(med "$file" "$target" 4) | $(med "$file" "$target" 5) |"
  done
done
echo
x() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo "| target | measured | goal |"
echo "|---|---|---|"
for file in text.tar reads.fq media.bin; do
  echo "| off vs ext4, write, $file | $(x "$(med "$file" off 3)" "$(med "$file" ext4 3)")x | ≥ 0.7x |"
  echo "| off vs ext4, cold read, $file | $(x "$(med "$file" off 4)" "$(med "$file" ext4 4)")x | ≥ 0.7x |"
done
echo "| gzip (ISA-L) write, text.tar | $(med text.tar gzip-6 3) MB/s | ≥ 400 MB/s |"
echo "| gzip (ISA-L) write, reads.fq | $(med reads.fq gzip-6 3) MB/s | ≥ 300 MB/s |"
echo "| media.bin gzip-6 write vs off | $(x "$(med media.bin gzip-6 3)" "$(med media.bin off 3)")x | ≥ 0.9x |"
echo "| cold read, text.tar, gzip | $(med text.tar gzip-6 4) MB/s | ≥ 800 MB/s |"
if [ -n "$base" ]; then
  echo
  echo "| this build vs PRESSO_BASE | write | cold read |"
  echo "|---|---|---|"
  for file in text.tar reads.fq media.bin; do
    for target in off gzip-6 gzip-6-cpu; do
      echo "| $target, $file | $(x "$(med "$file" "$target" 3)" "$(med "$file" "base-$target" 3)")x | $(x "$(med "$file" "$target" 4)" "$(med "$file" "base-$target" 4)")x |"
    done
  done
fi
