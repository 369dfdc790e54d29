#!/usr/bin/env bash
# Mount options side by side: the same namespace work on the same build, one fresh pool per run,
# the option sets alternating in every round so that drift on a shared machine hits them alike.
#   create   PRESSO_OPTIONS_FILES files (default 20,000) of 100 bytes in directories of 1,000
#   stat     each of them, after dropping the kernel's caches
#   ls -lR   the whole tree, after a remount and a cache drop (listings with attributes)
#   delete   each of them
#
#   bench/options.sh [-r ROUNDS] OPTIONS_A OPTIONS_B [...]   (default 3 rounds)
#
# Each OPTIONS is what `presso mount -o` takes ("" for the defaults), for example:
#   bench/options.sh channels=1 channels=2
#   PRESSO_HALT_POLL_NS=200000 bench/options.sh -r 5 channels=1 channels=2 channels=4
# PRESSO_COMPRESSION (default gzip-6) picks the codec; PRESSO_BIN=FILE measures that build of
# presso; PRESSO_HALT_POLL_NS sets a virtual machine's guest halt polling (bench/lib/loopdisk.sh).
# Prints a markdown table of medians (seconds). Needs root (loop devices, drop_caches).
set -euo pipefail
cd "$(dirname "$0")/.."
rounds=3
if [ "${1:-}" = -r ]; then
  rounds=$2
  shift 2
fi
[ $# -ge 1 ] || { sed -n '2,16p' "$0" | sed 's/^# \{0,1\}//' >&2; exit 2; }
case $rounds in '' | *[!0-9]* | 0) echo "-r takes a number of rounds (1 or more)" >&2; exit 2 ;; esac
files=${PRESSO_OPTIONS_FILES:-20000}
compression=${PRESSO_COMPRESSION:-gzip-6}
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices, drop_caches)" >&2; exit 1; }
bash scripts/install-packages.sh python3

work=/var/tmp/presso-options-bench
source bench/lib/loopdisk.sh
presso=$(presso_binary)
make_disk $(( files * 8192 + (1 << 30) ))
mnt=$work/mnt-presso
mkdir -p "$mnt"
results=$work/results.tsv
: > "$results"

# timed CMD...: the seconds CMD takes, its output discarded.
timed() {
  local s; s=$(now)
  "$@" > /dev/null
  awk -v s="$s" -v e="$(now)" 'BEGIN { printf "%.3f", e - s }'
}

run() {
  local options=$1 pool=$disk/pool-$2 set=(); [ -n "$1" ] && set=(-o "$1")
  "$presso" create "$pool" -o compression="$compression" >/dev/null
  "$presso" mount "$pool" "$mnt" "${set[@]}" >/dev/null
  local create stat list delete
  create=$(python3 bench/lib/many_files.py create "$mnt" "$files" 1000)
  drop
  stat=$(python3 bench/lib/many_files.py stat "$mnt" "$files" 1000)
  "$presso" unmount "$mnt" >/dev/null
  drop
  "$presso" mount "$pool" "$mnt" "${set[@]}" >/dev/null
  list=$(timed ls -lR "$mnt")
  delete=$(python3 bench/lib/many_files.py delete "$mnt" "$files" 1000)
  "$presso" unmount "$mnt" >/dev/null
  rm -rf "$pool"
  printf '%s\t%s\t%s\t%s\t%s\n' "$options" "$create" "$stat" "$list" "$delete" >> "$results"
  echo "[${options:-defaults}] create $create s, stat $stat s, ls -lR $list s, delete $delete s" >&2
}

for round in $(seq "$rounds"); do
  i=0
  for options in "$@"; do
    i=$((i + 1))
    run "$options" "$round-$i"
  done
done

echo
echo "Seconds, medians of $rounds alternating runs; $files files of 100 bytes; Presso" \
  "compression=$compression; $(halt_poll_note)."
echo
echo "| mount options | create | stat (cold) | ls -lR (cold) | delete |"
echo "|---|---:|---:|---:|---:|"
for options in "$@"; do
  row="| ${options:-(defaults)}"
  for column in 2 3 4 5; do
    row="$row | $(awk -F'\t' -v o="$options" -v c="$column" '$1 == o { print $c }' "$results" | median)"
  done
  echo "$row |"
done
