#!/usr/bin/env bash
# Installs the system packages the tests need, then runs every test: formatting, lints, the
# workspace's unit and integration tests, and bounded fuzzing runs of every fuzz target.
#   scripts/test.sh            (PRESSO_FUZZ_SECONDS=30 per fuzz target by default; 0 skips fuzzing)
set -euo pipefail
cd "$(dirname "$0")/.."

# ISA-L is built from source by isal-sys (autotools + nasm). The mount tests need FUSE, root, loop
# devices and the everyday tools they drive as clients.
bash scripts/install-packages.sh nasm autoconf automake libtool pkg-config make gcc zlib1g-dev \
  fuse3 libfuse3-dev git rsync tar diffutils coreutils e2fsprogs mount util-linux \
  python3 python3-matplotlib samtools
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
trap 'rm -f "$log" "$log.bench"' EXIT
cargo test -p presso-codec --no-default-features --lib 2>&1 | tee -a "$log"
cargo test --workspace 2>&1 | tee -a "$log"
# The evaluation harness's own logic (parsing, metrics, reports, teardown on failure).
python3 bench/tests/run_tests.py 2>&1 | tee "$log.bench"
tail -n 1 "$log.bench" | awk '/passed/ { printf "test result: ok. %d passed; %d failed; (evaluation harness)\n", $1, $3 }' >> "$log"
grep -q " 0 failed" <(tail -n 1 "$log.bench")

fuzz_seconds=${PRESSO_FUZZ_SECONDS:-30}
if [ "$fuzz_seconds" -gt 0 ]; then
  if cargo +nightly --version >/dev/null 2>&1; then
    command -v cargo-fuzz >/dev/null || cargo install cargo-fuzz --locked
    for target in frame_decode segment_recovery; do
      (cd fuzz && cargo +nightly fuzz run "$target" -- -max_total_time="$fuzz_seconds" 2>&1 | tail -n 3)
    done
  else
    echo "skipping the fuzzing run: it needs a nightly toolchain (rustup toolchain install nightly)"
  fi
fi

# One closing line over every test binary above.
awk '/^test result:/ { p += $4; f += $6 } END { printf "%d passed, %d failed\n", p, f }' "$log"
