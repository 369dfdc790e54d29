#!/usr/bin/env bash
# The daemon's memory over a long run: one pool on a loop-device ext4, mounted once, and cycles
# of a mixed workload on it for PRESSO_SOAK_MINUTES (default 60), each cycle checking every byte
# it wrote: 2,000 small files created, stat'ed, read, half renamed, some given an extended
# attribute or a hard link, the previous cycle's removed; a 64 MiB file written, overwritten at
# 2,000 random places, read, cut and removed (bench/lib/soak.py). After every cycle the daemon's
# resident set, peak, threads and open descriptors are recorded.
#
#   bench/soak.sh [WORK_DIR=/var/tmp/presso-soak-bench]
#
# Prints a markdown summary (first and last tenth of the cycles, growth over the second half)
# and leaves WORK_DIR/soak.tsv and WORK_DIR/soak.png. PRESSO_COMPRESSION (default gzip-6) picks
# the codec; PRESSO_BIN=FILE measures that build of presso. Needs root (loop devices).
set -euo pipefail
cd "$(dirname "$0")/.."
work=${1:-/var/tmp/presso-soak-bench}
minutes=${PRESSO_SOAK_MINUTES:-60}
compression=${PRESSO_COMPRESSION:-gzip-6}
[ "$(id -u)" -eq 0 ] || { echo "needs root (loop devices)" >&2; exit 1; }
bash scripts/install-packages.sh python3 python3-matplotlib

source bench/lib/loopdisk.sh
presso=$(presso_binary)
# One tree (about 65 MB) and one large file live at a time, and their garbage until collected.
make_disk $(( 4 << 30 ))
pool=$disk/pool
mnt=$work/mnt-presso
mkdir -p "$mnt"
"$presso" create "$pool" -o compression="$compression" >/dev/null
"$presso" mount "$pool" "$mnt" >/dev/null
pid=$(pgrep -f "mount $pool $mnt" | head -n 1)
echo "presso $("$presso" --version | awk '{ print $2 }'), compression=$compression, $minutes minutes; $(uring_note); $(halt_poll_note)"
# Debian's python3 has python3-matplotlib (the plot); another python3 earlier on PATH may not.
python=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [ -x /usr/bin/python3 ]; then
  python=/usr/bin/python3
fi
"$python" bench/lib/soak.py run "$mnt" "$pid" "$minutes" "$work"
"$presso" status "$mnt" --json | "$python" -c '
import json, sys
s = json.load(sys.stdin)
logical, disk, garbage = (s[k] / 1e6 for k in ("logical_bytes", "disk_bytes", "garbage_bytes"))
print(f"pool at the end: {logical:.0f} MB logical, {disk:.0f} MB on disk, {garbage:.0f} MB garbage")'
