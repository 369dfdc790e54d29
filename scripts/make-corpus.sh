#!/usr/bin/env bash
# Builds a benchmark corpus of real public data from Debian packages, for `presso bench`.
#
#   scripts/make-corpus.sh DIR [SIZE_MB]     (SIZE_MB defaults to 400; 1 MB = 1,000,000 bytes)
#
# Makes, in DIR:
#   text.tar    the first SIZE_MB MB of the Linux 6.1 source tarball (source code: compresses well)
#   reads.fq    real Illumina FASTQ reads, repeated to at least SIZE_MB/2 MB (genomics)
#   media.bin   the xz-compressed kernel tarball itself, cut to SIZE_MB/2 MB (already compressed)
#   SHA256SUMS  checksums of the three files
#   .size       the SIZE_MB the files were made for
# Missing packages are installed with apt-get (needs root or sudo). Does nothing when DIR already
# holds the three files for the same SIZE_MB and they match SHA256SUMS.
set -euo pipefail

usage() {
    echo "usage: $0 DIR [SIZE_MB]" >&2
    exit 2
}

[[ $# -ge 1 && $# -le 2 ]] || usage
dir=$1
size_mb=${2:-400}
[[ $size_mb =~ ^[0-9]+$ && $size_mb -ge 2 ]] || {
    echo "$0: SIZE_MB must be a whole number of megabytes, at least 2 (got '$size_mb')" >&2
    exit 2
}

files=(text.tar reads.fq media.bin)
linux_xz=/usr/src/linux-source-6.1.tar.xz
fastq_gz=(
    /usr/share/doc/artfastqgenerator/examples/test1.fastq.gz
    /usr/share/doc/artfastqgenerator/examples/test2.fastq.gz
    /usr/share/doc/kallisto/test/reads_1.fastq.gz
    /usr/share/doc/kallisto/test/reads_2.fastq.gz
)

report() {
    echo "corpus in $dir (SIZE_MB=$size_mb):"
    for f in "${files[@]}"; do
        printf '  %-10s %12d bytes\n' "$f" "$(stat -c %s "$dir/$f")"
    done
    sed 's/^/  /' "$dir/SHA256SUMS"
}

up_to_date() {
    [[ -f $dir/.size && $(cat "$dir/.size") == "$size_mb" && -f $dir/SHA256SUMS ]] || return 1
    for f in "${files[@]}"; do
        [[ -f $dir/$f ]] || return 1
    done
    (cd "$dir" && sha256sum --check --quiet --strict SHA256SUMS >/dev/null 2>&1)
}

if up_to_date; then
    echo "up to date, nothing to do"
    report
    exit 0
fi

# Install the packages whose files are missing.
missing=()
[[ -f $linux_xz ]] || missing+=(linux-source-6.1)
[[ -f ${fastq_gz[0]} && -f ${fastq_gz[1]} ]] || missing+=(artfastqgenerator-examples)
[[ -f ${fastq_gz[2]} && -f ${fastq_gz[3]} ]] || missing+=(kallisto-examples)
command -v xz >/dev/null || missing+=(xz-utils)
if [[ ${#missing[@]} -gt 0 ]]; then
    bash "$(dirname "$0")/install-packages.sh" "${missing[@]}"
fi
for f in "$linux_xz" "${fastq_gz[@]}"; do
    [[ -f $f ]] || {
        echo "$0: $f is still missing after installing the packages" >&2
        exit 1
    }
done

mkdir -p "$dir"
# An interrupted run must not look complete.
rm -f "$dir/.size" "$dir/SHA256SUMS"
work=$(mktemp -d "$dir/.make-corpus.XXXXXX")
trap 'rm -rf "$work"' EXIT

text_bytes=$((size_mb * 1000000))
half_bytes=$((text_bytes / 2))

# text.tar: xz is cut off by SIGPIPE once head has enough, so the pipeline's status is not used;
# a short result is checked instead.
echo "making text.tar ($text_bytes bytes of the Linux 6.1 source)"
set +o pipefail
xz -dc "$linux_xz" | head -c "$text_bytes" >"$work/text.tar"
set -o pipefail
got=$(stat -c %s "$work/text.tar")
if [[ $got -lt $text_bytes ]]; then
    xz --test "$linux_xz"
    echo "note: the whole source tarball is only $got bytes; text.tar is all of it"
fi

echo "making reads.fq (FASTQ reads repeated to at least $half_bytes bytes)"
zcat "${fastq_gz[@]}" >"$work/reads.once"
[[ -s $work/reads.once ]] || {
    echo "$0: the FASTQ example files are empty" >&2
    exit 1
}
: >"$work/reads.fq"
while [[ $(stat -c %s "$work/reads.fq") -lt $half_bytes ]]; do
    cat "$work/reads.once" >>"$work/reads.fq"
done
rm "$work/reads.once"

echo "making media.bin (at most $half_bytes bytes of the xz tarball)"
head -c "$half_bytes" "$linux_xz" >"$work/media.bin"

for f in "${files[@]}"; do
    mv -f "$work/$f" "$dir/$f"
done
(cd "$dir" && sha256sum "${files[@]}" >SHA256SUMS)
echo "$size_mb" >"$dir/.size"
report
