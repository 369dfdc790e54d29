#!/usr/bin/env bash
# Presso's evaluation suite: the QZFS experiments side by side with ext4, btrfs and ZFS (zfs-fuse).
# See usage() below, or bench/README.md.
set -euo pipefail

here=$(cd "$(dirname "$0")" && pwd)
repo=$(dirname "$here")

usage() {
    cat <<'EOF'
usage: bench/run.sh [--quick | --full] [options]

Sets up every target on image files under the work directory (ext4; the FUSE floor, the least a
FUSE file system costs here; btrfs with compress-force
zlib:3, zstd:1, zstd:3, lzo; zfs-fuse with compression off, lzjb, gzip-1, gzip-6, zle; Presso with
compression off, lz4, gzip-6 in software, gzip-6 on the ISA-L engine, zstd-3), runs the workloads
(FIO as in QZFS Figure 7, copying and cold-reading the real-data corpus, a genomics pipeline as in
Figures 9-10), measures throughput or time, each file system's own compression ratio and
system-wide CPU utilisation, tears everything down (also on failure and Ctrl-C) and writes
results.csv, summary.csv, PNG plots and report.md. A target that fails is recorded as failed and
the run goes on. Needs root (loop devices, mounts, drop_caches).

modes:
  --quick              one repetition, small sizes (64 MB corpus, 128 MiB per fio job, 5 s phases,
                       2 x 100k genomics reads): under 10 minutes on 2 cores
  --full               the default: 400 MB corpus, 1 GiB per fio job, phases of at most 10 s,
                       a 4-point block-size sweep, 2 x 500k genomics reads, 3 repetitions,
                       medians: about 80 minutes on 2 cores

options:
  --work DIR           images, corpus, genomics data, resource journal (default bench/work)
  --out DIR            results (default bench/results/MODE)
  --corpus DIR         use an existing corpus (text.tar, reads.fq, media.bin from
                       scripts/make-corpus.sh) instead of making one in the work directory
  --corpus-mb N        corpus size to make (quick 64, full 400)
  --targets GLOBS      comma-separated target names or globs (default all), e.g. 'ext4,zfs-*'
  --workloads LIST     any of fio,files,genomics (default all three)
  --reps N             repetitions per workload (the median is reported); repetitions are
                       rounds: each sets every target up afresh and runs one repetition on it,
                       so the targets alternate
  --fio-size SIZE      per fio job (e.g. 256m); --fio-runtime S caps each fio phase
  --presso PATH        the presso binary (default target/release/presso, built unless --no-build);
                       the FUSE floor is taken from examples/fuse_floor beside it
  --presso-target NAME=OPT,OPT
                       one more Presso target, e.g. presso-auto=compression=auto (repeatable)
  --no-install         do not apt-get the packages (fio zfs-fuse btrfs-progs btrfs-compsize
                       e2fsprogs samtools biobambam2 python3-matplotlib)
  --no-build           do not build presso and the FUSE floor (cargo build --release)
  --dry-run            print the targets, workloads and settings, and exit
  --teardown           undo whatever a killed run left (mounts, pools, loop devices, daemons)
  --report-only        rewrite report.md and the plots from OUT/results.csv
  -h, --help           this text

examples:
  bench/run.sh --quick                                  # everything, small, ~10 minutes
  bench/run.sh --quick --targets 'ext4,zfs-gzip-6,presso-*' --workloads fio
  bench/run.sh --full --corpus corpus --out docs/bench/full
  bench/run.sh --teardown                               # clean up after a kill -9
EOF
}

install=1
build=1
work="$here/work"
action=run
args=()
while [[ $# -gt 0 ]]; do
    case $1 in
        -h | --help) usage; exit 0 ;;
        --no-install) install=0 ;;
        --no-build) build=0 ;;
        --work) work=$2; args+=("$1" "$2"); shift ;;
        --work=*) work=${1#--work=}; args+=("$1") ;;
        --dry-run | --teardown | --report-only) action=${1#--}; args+=("$1") ;;
        *) args+=("$1") ;;
    esac
    shift
done

if [[ $action != dry-run && $(id -u) -ne 0 ]]; then
    echo "bench/run.sh: needs root (loop devices, mounts, drop_caches)" >&2
    exit 1
fi

if [[ $action == run && $install -eq 1 ]]; then
    bash "$repo/scripts/install-packages.sh" fio zfs-fuse btrfs-progs btrfs-compsize e2fsprogs \
        samtools biobambam2 python3-matplotlib
fi

# Debian's python3 has python3-matplotlib; another python3 earlier on PATH may not.
python=python3
if ! python3 -c 'import matplotlib' 2>/dev/null && [[ -x /usr/bin/python3 ]]; then
    python=/usr/bin/python3
fi

if [[ $action == run && $build -eq 1 ]]; then
    if command -v cargo >/dev/null; then
        echo "building presso (cargo build --release -p presso-cli, and the FUSE floor)" >&2
        (cd "$repo" && cargo build --release -p presso-cli 2>&1 | tail -n 3 &&
            cargo build --release -p presso-fs --example fuse_floor 2>&1 | tail -n 3) ||
            echo "warning: the presso build failed; its targets will be recorded as failed" >&2
    else
        echo "warning: no cargo; the Presso targets need target/release/presso (or --presso)" >&2
    fi
fi

# The runner tears down what it created; this trap is the second line of defence (a runner that
# was killed outright): it undoes whatever the resource journal still lists.
runner_pid=
cleanup() {
    local rc=$?
    trap - EXIT INT TERM
    if [[ -n $runner_pid ]] && kill -0 "$runner_pid" 2>/dev/null; then
        kill -TERM "$runner_pid" 2>/dev/null || true
        wait "$runner_pid" 2>/dev/null || true
    fi
    if [[ $action == run && -s $work/resources.jsonl ]]; then
        "$python" "$here/lib/bench.py" --teardown --work "$work" >/dev/null || rc=1
    fi
    exit "$rc"
}
trap cleanup EXIT
# The runner runs in the background so that a signal reaches this shell at once; it is passed on.
trap 'kill -TERM "$runner_pid" 2>/dev/null || true' INT TERM

"$python" "$here/lib/bench.py" "${args[@]}" &
runner_pid=$!
rc=0
while true; do
    wait "$runner_pid" && rc=0 || rc=$?
    # wait returns >128 when a trapped signal interrupted it; the runner may still be running.
    kill -0 "$runner_pid" 2>/dev/null || break
done
runner_pid=
exit "$rc"
