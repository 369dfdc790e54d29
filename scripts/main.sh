#!/usr/bin/env bash
# The main job, on an embedded default: builds Presso, fetches a corpus of real data (Linux
# source, Illumina FASTQ reads, already-compressed media) from Debian packages, creates a pool,
# mounts it, copies the corpus in, shows the ratio and the write and cold-read speed, verifies
# every byte, and unmounts.
#   scripts/main.sh                  (PRESSO_CORPUS_MB=100 sets the corpus size;
#                                     PRESSO_COMPRESSION=gzip-6 the pool's codec;
#                                     PRESSO_WORK=presso-demo where the pool and mount go)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-packages.sh nasm autoconf automake libtool pkg-config make gcc zlib1g-dev \
  fuse3 libfuse3-dev xz-utils

cargo build --release -p presso-cli
presso=$PWD/target/release/presso
bash scripts/make-corpus.sh corpus "${PRESSO_CORPUS_MB:-100}"

work=${PRESSO_WORK:-presso-demo}
pool=$work/pool
mnt=$work/mnt
if grep -qs " $(realpath -m "$mnt") " /proc/self/mountinfo; then "$presso" unmount "$mnt"; fi
rm -rf "$pool"
mkdir -p "$mnt"
cleanup() { grep -qs " $(realpath -m "$mnt") " /proc/self/mountinfo && "$presso" unmount "$mnt" >/dev/null || true; }
trap cleanup EXIT

"$presso" create "$pool" -o compression="${PRESSO_COMPRESSION:-gzip-6}"
"$presso" mount "$pool" "$mnt"

bytes=$(cat corpus/text.tar corpus/reads.fq corpus/media.bin | wc -c)
now() { date +%s.%N; }
mbps() { awk -v b="$1" -v s="$2" -v e="$3" 'BEGIN { printf "%.0f", b / 1e6 / (e - s) }'; }

echo "== writing $((bytes / 1000000)) MB of real data into the mount (cp), then unmounting (flushes everything)"
start=$(now)
cp corpus/text.tar corpus/reads.fq corpus/media.bin "$mnt"/
# fsync the copies: status counts committed data, and the kernel may still hold some of it.
sync "$mnt"/text.tar "$mnt"/reads.fq "$mnt"/media.bin
"$presso" status "$mnt" > "$work/status.txt"
"$presso" unmount "$mnt" >/dev/null
end=$(now)
write=$(mbps "$bytes" "$start" "$end")
ratio=$("$presso" status "$pool" --json | python3 -c 'import json, sys; print("%.2f" % json.load(sys.stdin)["ratio"])')

"$presso" mount "$pool" "$mnt" >/dev/null
if [ -w /proc/sys/vm/drop_caches ]; then sync; echo 3 > /proc/sys/vm/drop_caches; fi
echo "== reading it back cold (after a remount and dropping the page cache) and comparing"
start=$(now)
cat "$mnt"/text.tar "$mnt"/reads.fq "$mnt"/media.bin > /dev/null
end=$(now)
read=$(mbps "$bytes" "$start" "$end")
for f in text.tar reads.fq media.bin; do
  cmp corpus/$f "$mnt"/$f
done
echo "every byte verified"

echo
echo "presso status, right after the copy (and its fsync):"
cat "$work/status.txt"
"$presso" unmount "$mnt" >/dev/null
echo
echo "write (cp + fsync + unmount): $write MB/s    cold read (cat): $read MB/s    ratio: ${ratio}x"
