# Shared by the mount benchmarks (sourced, not run): an ext4 file system on a loop device with
# direct I/O (like a disk: no second page cache on the host file system below it), timing and
# median helpers, and the cleanup of every mount under the work directory.
#
# The caller sets `work` (the work directory), takes the binary with `presso=$(presso_binary)`
# (PRESSO_BIN=FILE, or this tree's release build, built here), then calls `make_disk SIZE_BYTES`;
# `disk` is then the mounted ext4 and `loopdev` its device.

disk=$work/disk
img=$work/ext4.img
loopdev=""

# Guest halt polling (Linux's cpuidle-haltpoll in KVM and Firecracker guests): with it off, an
# idle vCPU halts and each wake-up goes through the hypervisor, and every FUSE round trip has two
# (the daemon's, then the caller's). docs/benchmarks.md shows what it changes. PRESSO_HALT_POLL_NS
# sets it for the run (restored on exit); `halt_poll_note` tells the setting for the results.
halt_poll=/sys/module/haltpoll/parameters/guest_halt_poll_ns
halt_poll_saved=""
if [ -n "${PRESSO_HALT_POLL_NS:-}" ]; then
  [ -w "$halt_poll" ] || { echo "PRESSO_HALT_POLL_NS: no guest halt polling here ($halt_poll)" >&2; exit 1; }
  halt_poll_saved=$(cat "$halt_poll")
  trap cleanup EXIT INT TERM
  echo "$PRESSO_HALT_POLL_NS" > "$halt_poll"
fi
# FUSE over io_uring (Linux 6.14 on): the fuse module offers it at INIT only with its
# enable_uring parameter set, and Presso then takes requests from one queue per CPU.
# PRESSO_FUSE_URING=on|off sets the parameter for the run (restored on exit); mounts made before
# keep what they had. `uring_note` tells the setting for the results.
uring_param=/sys/module/fuse/parameters/enable_uring
uring_saved=""
if [ -n "${PRESSO_FUSE_URING:-}" ]; then
  [ -w "$uring_param" ] || { echo "PRESSO_FUSE_URING: this kernel has no FUSE over io_uring ($uring_param)" >&2; exit 1; }
  case $PRESSO_FUSE_URING in on) want=Y ;; off) want=N ;; *) echo "PRESSO_FUSE_URING: on or off" >&2; exit 1 ;; esac
  uring_saved=$(cat "$uring_param")
  trap cleanup EXIT INT TERM
  echo "$want" > "$uring_param"
fi
uring_note() {
  if [ -r "$uring_param" ] && [ "$(cat "$uring_param")" = Y ]; then
    echo "FUSE over io_uring offered"
  else
    echo "FUSE over io_uring not offered"
  fi
}
halt_poll_note() {
  if [ -r "$halt_poll" ]; then
    echo "guest halt polling: $(cat "$halt_poll") ns"
  else
    echo "no guest halt polling (bare metal, or another idle driver)"
  fi
}

# The presso binary to measure: PRESSO_BIN if set, else this tree's release build.
presso_binary() {
  if [ -n "${PRESSO_BIN:-}" ]; then
    realpath "$PRESSO_BIN"
  else
    cargo build --release -q -p presso-cli >&2
    echo "$PWD/target/release/presso"
  fi
}

now() { date +%s.%N; }
drop() { sync; echo 3 > /proc/sys/vm/drop_caches; }
median() { sort -g | awk '{ v[NR] = $1 } END { print (NR % 2) ? v[(NR + 1) / 2] : (v[NR / 2] + v[NR / 2 + 1]) / 2 }'; }

cleanup() {
  for m in "$work"/mnt-*; do
    grep -qs " $m " /proc/self/mountinfo && { "$presso" unmount "$m" >/dev/null 2>&1 || fusermount3 -uz "$m" || umount -l "$m" || true; }
  done
  grep -qs " $disk " /proc/self/mountinfo && umount "$disk"
  [ -n "$loopdev" ] && losetup -d "$loopdev" 2>/dev/null || true
  rm -f "$img"
  [ -z "$halt_poll_saved" ] || echo "$halt_poll_saved" > "$halt_poll"
  [ -z "$uring_saved" ] || echo "$uring_saved" > "$uring_param"
}

# make_disk BYTES: a fresh ext4 of at least BYTES (whole MiB: a loop device with direct I/O
# ignores a partial last sector) mounted at $disk; removed again on exit.
make_disk() {
  mkdir -p "$work"
  trap cleanup EXIT INT TERM
  truncate -s $(( ($1 + (1 << 20) - 1) >> 20 << 20 )) "$img"
  mkfs.ext4 -q -F "$img"
  loopdev=$(losetup --direct-io=on --find --show "$img")
  mkdir -p "$disk"
  mount "$loopdev" "$disk"
}
