//! The operations of the exerciser: self-contained values (file, offsets, lengths, a data seed)
//! so that any subsequence of a log can be replayed, their seeded generation, and the data a
//! write puts down.

use crate::common::Rng;
use crate::configs::Config;

/// How many files every run creates at its start and works on.
pub const FILES: u8 = 4;

/// An fallocate(2) mode the exerciser tries.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Falloc {
    /// Mode 0: extends the size past the end, leaves the bytes.
    Allocate,
    /// `KEEP_SIZE`: changes nothing visible.
    KeepSize,
    /// `PUNCH_HOLE | KEEP_SIZE`: zeros inside the file, the size kept.
    PunchHole,
    /// `ZERO_RANGE`: zeros, extending the file.
    ZeroRange,
    /// `ZERO_RANGE | KEEP_SIZE`: zeros inside the file only.
    ZeroRangeKeepSize,
    /// `PUNCH_HOLE` without `KEEP_SIZE`: refused (EOPNOTSUPP) by the kernel.
    PunchAlone,
    /// `COLLAPSE_RANGE`: not supported (EOPNOTSUPP), the file unchanged.
    Collapse,
    /// `INSERT_RANGE`: not supported (EOPNOTSUPP), the file unchanged.
    Insert,
}

impl Falloc {
    /// The mode bits.
    pub fn mode(self) -> i32 {
        match self {
            Falloc::Allocate => 0,
            Falloc::KeepSize => libc::FALLOC_FL_KEEP_SIZE,
            Falloc::PunchHole => libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            Falloc::ZeroRange => libc::FALLOC_FL_ZERO_RANGE,
            Falloc::ZeroRangeKeepSize => libc::FALLOC_FL_ZERO_RANGE | libc::FALLOC_FL_KEEP_SIZE,
            Falloc::PunchAlone => libc::FALLOC_FL_PUNCH_HOLE,
            Falloc::Collapse => libc::FALLOC_FL_COLLAPSE_RANGE,
            Falloc::Insert => libc::FALLOC_FL_INSERT_RANGE,
        }
    }

    /// Whether the mode is supported (otherwise it must fail with EOPNOTSUPP).
    pub fn supported(self) -> bool {
        !matches!(self, Falloc::PunchAlone | Falloc::Collapse | Falloc::Insert)
    }
}

/// One step of a run.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Op {
    /// pwrite(2) of `data(seed, offset, len)`.
    Write {
        file: u8,
        offset: u64,
        len: u64,
        seed: u64,
    },
    /// pread(2), checked byte for byte (and the size by fstat).
    Read { file: u8, offset: u64, len: u64 },
    /// ftruncate(2), down or up.
    Truncate { file: u8, size: u64 },
    /// close(2), then open(2) with `O_TRUNC`.
    OpenTrunc { file: u8 },
    /// fallocate(2).
    Fallocate {
        file: u8,
        mode: Falloc,
        offset: u64,
        len: u64,
    },
    /// A `MAP_SHARED` read of the file, checked; `offset` and `len` are taken modulo the size
    /// of the moment (no mapping past the end of the file).
    MmapRead { file: u8, offset: u64, len: u64 },
    /// A `MAP_SHARED` write of `data(seed, ..)` and `msync(MS_SYNC)`, within the size (as for
    /// [`Op::MmapRead`]).
    MmapWrite {
        file: u8,
        offset: u64,
        len: u64,
        seed: u64,
    },
    /// copy_file_range(2) from `from` to `to` (one file or two; overlapping ranges of one file
    /// must fail with EINVAL).
    CopyRange {
        from: u8,
        to: u8,
        src: u64,
        dst: u64,
        len: u64,
    },
    /// fsync(2).
    Fsync { file: u8 },
    /// fdatasync(2).
    Fdatasync { file: u8 },
    /// close(2) and open(2) again.
    Reopen { file: u8 },
    /// Unmount cleanly and mount again; then every file is checked.
    Remount,
    /// `echo 3 > /proc/sys/vm/drop_caches`; then every file is checked.
    DropCaches,
    /// `kill -9` of the daemon, `fusermount3 -uz`, mount again; then what was fsync'd is
    /// checked.
    Kill,
}

impl Op {
    /// Whether the operation is one of the slow ones (a few per run).
    pub fn expensive(&self) -> bool {
        matches!(self, Op::Remount | Op::DropCaches | Op::Kill)
    }
}

const TEXT: &[u8] = b"2024-05-07T12:31:09.412Z INFO [pid 1042] GET /api/v1/items status 200 \
    bytes 5120 latency 12ms cache hit upstream worker queue depth 3 session token expired; \
    POST /api/v1/users 201 retry scheduler compaction segment flushed committed\n";

fn mix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9E37_79B9_7F4A_7C15);
    x = (x ^ (x >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    x ^ (x >> 31)
}

/// The bytes a write of `seed` puts at `offset..offset + len`. The seed picks a kind: zeros
/// (which become holes), log-like text, random bytes, or 512-byte blocks of either, so the
/// codecs compress somewhat; the bytes depend on the absolute offset, so misplaced ones are
/// seen.
pub fn data(seed: u64, offset: u64, len: u64) -> Vec<u8> {
    let shift = (seed >> 3) % TEXT.len() as u64;
    let text = |pos: u64| TEXT[((pos + shift) % TEXT.len() as u64) as usize];
    let random = |pos: u64| (mix(pos ^ seed.rotate_left(17)) >> 24) as u8;
    (offset..offset + len)
        .map(|pos| match seed % 8 {
            0 => 0,
            1..=3 => text(pos),
            4 | 5 => random(pos),
            _ if mix((pos / 512) ^ seed).is_multiple_of(2) => text(pos),
            _ => random(pos),
        })
        .collect()
}

/// `count` random operations for `config`, each valid or harmless in any state (so a shrunk
/// log still runs). Remounts, kills and cache drops are rare: a few per 7,000 operations.
pub fn generate(rng: &mut Rng, config: &Config, count: usize) -> Vec<Op> {
    let rs = config.recordsize;
    let span = config.span();
    let file = |rng: &mut Rng| rng.below(FILES as u64) as u8;
    // At or next to record boundaries (where truncation and record assembly meet), or anywhere.
    let offset = |rng: &mut Rng| -> u64 {
        match rng.below(4) {
            0 => (rng.below(span / rs + 1) * rs + 1).saturating_sub(rng.below(3)),
            _ => rng.below(span),
        }
    };
    // One byte to three records, mostly small (large ones cost the most time at 1M records).
    let len = |rng: &mut Rng| -> u64 {
        match rng.below(32) {
            0 | 1 => 1,
            2 => rs,
            3 => rng.range(1, 3 * rs + 1),
            4 | 5 => rng.range(1, rs + rs / 2 + 1),
            _ => rng.range(1, 4096.min(rs) + 1),
        }
    };
    (0..count)
        .map(|_| {
            match rng.below(10_000) {
                0..=4 => return Op::Remount,
                5..=9 => return Op::Kill,
                10..=14 => return Op::DropCaches,
                _ => {}
            }
            match rng.below(100) {
                0..=25 => Op::Write {
                    file: file(rng),
                    offset: offset(rng),
                    len: len(rng),
                    seed: rng.next_u64(),
                },
                // Whole records at record boundaries.
                26 | 27 => Op::Write {
                    file: file(rng),
                    offset: rng.below(span / rs + 1) * rs,
                    len: rng.range(1, 4) * rs,
                    seed: rng.next_u64(),
                },
                28..=49 => Op::Read {
                    file: file(rng),
                    offset: offset(rng),
                    len: len(rng),
                },
                50..=55 => Op::Truncate {
                    file: file(rng),
                    size: match rng.below(4) {
                        0 => 0,
                        1 => rng.below(span / rs + 1) * rs,
                        _ => offset(rng),
                    },
                },
                56 => Op::OpenTrunc { file: file(rng) },
                57..=62 => Op::Fallocate {
                    file: file(rng),
                    mode: match rng.below(16) {
                        0..=2 => Falloc::Allocate,
                        3 | 4 => Falloc::KeepSize,
                        5..=8 => Falloc::PunchHole,
                        9..=11 => Falloc::ZeroRange,
                        12 | 13 => Falloc::ZeroRangeKeepSize,
                        14 => Falloc::PunchAlone,
                        _ if rng.below(2) == 0 => Falloc::Collapse,
                        _ => Falloc::Insert,
                    },
                    offset: offset(rng),
                    len: len(rng),
                },
                63..=66 => Op::MmapRead {
                    file: file(rng),
                    offset: rng.next_u64(),
                    len: len(rng),
                },
                67..=70 => Op::MmapWrite {
                    file: file(rng),
                    offset: rng.next_u64(),
                    len: len(rng),
                    seed: rng.next_u64(),
                },
                71..=76 => Op::CopyRange {
                    from: file(rng),
                    to: file(rng),
                    src: offset(rng),
                    dst: offset(rng),
                    len: len(rng),
                },
                77..=80 => Op::Fsync { file: file(rng) },
                81..=83 => Op::Fdatasync { file: file(rng) },
                84..=88 => Op::Reopen { file: file(rng) },
                // The whole file, now and then.
                89 | 90 => Op::Read {
                    file: file(rng),
                    offset: 0,
                    len: span + 3 * rs,
                },
                _ => Op::Write {
                    file: file(rng),
                    offset: offset(rng),
                    len: rng.range(1, 512),
                    seed: rng.next_u64(),
                },
            }
        })
        .collect()
}
