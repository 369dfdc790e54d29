#!/usr/bin/env bash
# Namespace-heavy work through a Presso mount, side by side with the kernel's ext4 (and btrfs
# compress-force=zstd:1 when mkfs.btrfs is installed) and the FUSE floor (the least any FUSE file
# system costs here: crates/presso-fs/examples/fuse_floor/) on the same loop-device disk, in one
# run:
#   tar x     extract the Linux 6.1 source tarball (83.7k entries, 1.36 GB), then `sync -f`
#   find      `find DIR | wc -l` over the extracted tree, right after
#   checkout  `git checkout` of the same tree from a repository on the host disk, then `sync -f`
#   create, stat, delete   PRESSO_NS_SMALL (default 100,000) files of 100 bytes in one directory
#   rm -rf    remove the extracted tree and the checkout, then `sync -f`
#
#   bench/namespace.sh [REPEATS=3] [WORK_DIR=/var/tmp/presso-namespace-bench]
#
# Repetitions are outermost, so the targets alternate and drift on a shared machine hits them all
# alike. Prints a markdown table of medians (seconds), Presso ÷ ext4 against the targets
# (tar x ≤ 2x, find ≤ 3x, rm -rf ≤ 1x), and the floor ÷ ext4 beside it. PRESSO_NS_TARGETS picks
# targets (default "ext4 btrfs floor presso"; btrfs only when mkfs.btrfs is installed). PRESSO_NS_TARBALL=FILE uses another tarball (the default
# is /usr/src/linux-source-6.1.tar.xz, from Debian's linux-source-6.1, installed if missing);
# Target presso-uring is Presso with mount option uring (requests from one io_uring queue per CPU
# where the kernel offers FUSE over io_uring); PRESSO_FUSE_URING=on|off sets whether it does for
# the run.
# PRESSO_COMPRESSION (default gzip-6) picks Presso's codec; PRESSO_HALT_POLL_NS sets a virtual
# machine's guest halt polling for the run (bench/lib/loopdisk.sh); PRESSO_BIN=FILE measures that
# build of presso instead of building this tree's. Needs root (loop devices,
# drop_caches).
set -euo pipefail
cd "$(dirname "$0")/.."
repeats=${1:-3}
work=${2:-/var/tmp/presso-namespace-bench}
small=${PRESSO_NS_SMALL:-100000}
compression=${PRESSO_COMPRESSION:-gzip-6}
tarball=${PRESSO_NS_TARBALL:-/usr/src/linux-source-6.1.tar.xz}
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices, drop_caches)" >&2; exit 1; }
if [ ! -f "$tarball" ] && [ -z "${PRESSO_NS_TARBALL:-}" ]; then
  bash scripts/install-packages.sh linux-source-6.1
fi
[ -f "$tarball" ] || { echo "no tarball at $tarball (set PRESSO_NS_TARBALL)" >&2; exit 1; }
bash scripts/install-packages.sh git xz-utils python3 btrfs-progs

source bench/lib/loopdisk.sh
presso=$(presso_binary)
cargo build --release -q -p presso-fs --example fuse_floor >&2
floor=$PWD/target/release/examples/fuse_floor

# The tree, unpacked once on the host disk, and a repository of it for the checkout phase.
tree=$work/tree
repo=$work/repo.git
if [ ! -f "$work/.tree-of" ] || [ "$(cat "$work/.tree-of")" != "$tarball" ]; then
  rm -rf "$tree" "$repo"
  mkdir -p "$tree"
  echo "unpacking $tarball once and committing it to a repository (a minute or two)" >&2
  tar xf "$tarball" -C "$tree"
  git -C "$tree" init -q
  git -C "$tree" add -A -f  # -f: the Debian tarball's .gitignore ignores everything
  git -C "$tree" -c user.name=bench -c user.email=bench@localhost commit -q -m tree
  git clone -q --bare "$tree" "$repo"
  echo "$tarball" > "$work/.tree-of"
fi
tree_bytes=$(du -sb "$tree" | cut -f1)
# Room for the tree twice (extracted and checked out), its metadata, and a gibibyte.
make_disk $(( tree_bytes * 3 + (1 << 30) ))

read -r -a targets <<< "${PRESSO_NS_TARGETS:-ext4 btrfs floor presso}"
command -v mkfs.btrfs >/dev/null || targets=("${targets[@]/btrfs}")
read -r -a targets <<< "${targets[*]}"
for t in "${targets[@]}"; do
  case $t in ext4 | btrfs | floor | presso | presso-uring) ;; *) echo "PRESSO_NS_TARGETS: unknown target $t" >&2; exit 1 ;; esac
done
[[ " ${targets[*]} " == *" ext4 "* ]] || { echo "PRESSO_NS_TARGETS: ext4 is the reference; keep it" >&2; exit 1; }
btrfs_img=$work/btrfs.img
btrfs_loop=""
floor_pid=""

# setup TARGET: an empty file system of TARGET mounted at $work/mnt-TARGET.
setup() {
  local target=$1 dir=$work/mnt-$1
  mkdir -p "$dir"
  case $target in
    ext4) mkdir -p "$disk/ext4"; mount --bind "$disk/ext4" "$dir" ;;
    btrfs)
      truncate -s $(( (tree_bytes * 3 + (1 << 30)) >> 20 << 20 )) "$btrfs_img"
      mkfs.btrfs -q -f "$btrfs_img"
      btrfs_loop=$(losetup --direct-io=on --find --show "$btrfs_img")
      mount -o compress-force=zstd:1 "$btrfs_loop" "$dir" ;;
    floor)
      # The floor prints one line once its mount is in place.
      local line=""
      exec {floor_out}< <("$floor" "$disk/floor" "$dir")
      floor_pid=$!
      read -r -u "$floor_out" line || true
      exec {floor_out}<&-
      [ "$line" = mounted ] || { echo "the FUSE floor did not mount" >&2; exit 1; } ;;
    presso | presso-uring)
      rm -rf "$disk/pool"
      "$presso" create "$disk/pool" -o compression="$compression" >/dev/null
      local options=()
      [ "$target" = presso ] || options=(-o uring)
      "$presso" mount "$disk/pool" "$dir" "${options[@]}" >/dev/null ;;
  esac
}
teardown() {
  local target=$1 dir=$work/mnt-$1
  case $target in
    ext4) umount "$dir"; rm -rf "$disk/ext4" ;;
    btrfs) umount "$dir"; losetup -d "$btrfs_loop"; btrfs_loop=""; rm -f "$btrfs_img" ;;
    floor) umount "$dir"; wait "$floor_pid" || true; floor_pid=""; rm -rf "$disk/floor" ;;
    presso | presso-uring) "$presso" unmount "$dir" >/dev/null; rm -rf "$disk/pool" ;;
  esac
}
cleanup_btrfs() {
  cleanup
  [ -n "$btrfs_loop" ] && losetup -d "$btrfs_loop" 2>/dev/null || true
  rm -f "$btrfs_img"
}
trap cleanup_btrfs EXIT INT TERM

# timed PHASE COMMAND...: runs COMMAND, appends "target phase seconds" to the results.
results=$work/results.tsv
: > "$results"
timed() {
  local phase=$1; shift
  local s e
  s=$(now); "$@"; e=$(now)
  awk -v t="$target" -v p="$phase" -v s="$s" -v e="$e" 'BEGIN { printf "%s\t%s\t%.3f\n", t, p, e - s }' >> "$results"
  echo "$target run $r: $phase $(tail -n 1 "$results" | cut -f3) s" >&2
}
# Small files, all in one directory: one process for the whole phase (its own timing is not
# used; `timed` measures the phase).
small_files() { python3 bench/lib/many_files.py "$1" "$2" "$small" "$small" >/dev/null; }

for r in $(seq "$repeats"); do
  for target in "${targets[@]}"; do
    setup "$target"
    dir=$work/mnt-$target
    drop
    timed "tar x" sh -c 'tar xf "$1" -C "$2" && sync -f "$2"' sh "$tarball" "$dir"
    timed "find" sh -c 'find "$1" | wc -l > /dev/null' sh "$dir"
    timed "checkout" sh -c 'git clone -q --no-checkout "$1" "$2/co" && git -C "$2/co" checkout -q HEAD -- . && sync -f "$2"' sh "$repo" "$dir"
    [ "$(find "$dir/co" -path "$dir/co/.git" -prune -o -type f -print | wc -l)" -gt 0 ] || { echo "checkout made no files on $target" >&2; exit 1; }
    mkdir "$dir/small"
    timed "create" small_files create "$dir/small"
    timed "stat" small_files stat "$dir/small"
    timed "delete" small_files delete "$dir/small"
    timed "rm -rf" sh -c 'rm -rf "$1"/* && sync -f "$1"' sh "$dir"
    teardown "$target"
  done
done

phases=("tar x" "find" "checkout" "create" "stat" "delete" "rm -rf")
med() { awk -F'\t' -v t="$1" -v p="$2" '$1 == t && $2 == p { print $3 }' "$results" | median; }
x() { awk -v a="$1" -v b="$2" 'BEGIN { printf "%.2f", a / b }'; }
echo
echo "Seconds, medians of $repeats alternating runs; $small small files; Presso compression=$compression; $(halt_poll_note); $(uring_note)."
echo
header="| target |"; rule="|---|"
for p in "${phases[@]}"; do header+=" $p |"; rule+="---:|"; done
echo "$header"; echo "$rule"
for target in "${targets[@]}"; do
  row="| $target |"
  for p in "${phases[@]}"; do row+=" $(med "$target" "$p") |"; done
  echo "$row"
done
echo
has() { [[ " ${targets[*]} " == *" $1 "* ]]; }
ratio() { has "$1" && echo "$(x "$(med "$1" "$2")" "$(med ext4 "$2")")x" || echo "–"; }
echo "| ÷ ext4 | Presso | Presso, io_uring | FUSE floor | target (Presso) |"
echo "|---|---:|---:|---:|---|"
for p in "${phases[@]}"; do
  case $p in "tar x") goal="≤ 2x" ;; find) goal="≤ 3x" ;; "rm -rf") goal="≤ 1x" ;; *) goal="–" ;; esac
  echo "| $p | $(ratio presso "$p") | $(ratio presso-uring "$p") | $(ratio floor "$p") | $goal |"
done
