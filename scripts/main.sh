#!/usr/bin/env bash
# The main job, on an embedded default: builds Presso, fetches a corpus of real data (Linux source,
# Illumina FASTQ reads, already-compressed media) from Debian packages, and benchmarks the
# compression engine on it: ratio, speed and CPU cost of each codec and backend, and a
# recommended setting. (Once the pool and the mount land, this creates a pool, mounts it and copies
# the corpus in.)
#   scripts/main.sh                       (PRESSO_CORPUS_MB=100 sets the corpus size)
set -euo pipefail
cd "$(dirname "$0")/.."

bash scripts/install-packages.sh nasm autoconf automake libtool pkg-config make gcc zlib1g-dev

cargo build --release -p presso-cli
bash scripts/make-corpus.sh corpus "${PRESSO_CORPUS_MB:-100}"
target/release/presso bench corpus/text.tar corpus/reads.fq corpus/media.bin \
  --codecs lz4,gzip-1,gzip-6,zstd-1,zstd-3
