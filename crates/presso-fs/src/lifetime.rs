//! The work a pool has done — bytes through the mount, records compressed and decoded, and the CPU
//! time they took — counted since the mount and over the pool's whole life.
//!
//! The engine, the pool and the file layer count since they opened. At every [`Vfs::sync_all`]
//! (the durability sweep, unmount, `presso gc` and `presso scrub`) the file layer adds what
//! happened since the last time to the metadata's statistics counters, just before the durable
//! commit, so the lifetime figures are as durable as the data: a killed daemon loses at most the
//! work since its last sweep from them, never more.
//!
//! [`Vfs::sync_all`]: crate::vfs::Vfs::sync_all

use parking_lot::Mutex;
use serde::{Deserialize, Serialize};

use presso_codec::StatsSnapshot;
use presso_meta::MetaStore;

use crate::error::Result;

/// Work counted by the file system, since the mount or over the pool's life.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Work {
    /// Bytes written through the mount.
    pub written_bytes: u64,
    /// Bytes read through the mount.
    pub read_bytes: u64,
    /// Records the engine compressed (or stored raw or as holes).
    pub records_compressed: u64,
    /// Of those, records the accelerator compressed.
    pub records_offloaded: u64,
    /// Logical bytes the engine took in.
    pub compressed_bytes: u64,
    /// Frame bytes it gave back.
    pub frame_bytes: u64,
    /// CPU time spent compressing, nanoseconds (an accelerator's own time is not CPU time).
    pub compress_cpu_ns: u64,
    /// Records read back and decoded.
    pub records_decoded: u64,
    /// Their logical bytes.
    pub decoded_bytes: u64,
    /// CPU time spent reading and decoding them, nanoseconds.
    pub decode_cpu_ns: u64,
}

/// The metadata counter of each field of [`Work`], in field order.
const COUNTERS: [&str; 10] = [
    "stat.written_bytes",
    "stat.read_bytes",
    "stat.records_compressed",
    "stat.records_offloaded",
    "stat.compressed_bytes",
    "stat.frame_bytes",
    "stat.compress_cpu_ns",
    "stat.records_decoded",
    "stat.decoded_bytes",
    "stat.decode_cpu_ns",
];

impl Work {
    /// The compression side of the work, from the engine's counters since it started.
    pub fn of_engine(stats: &StatsSnapshot) -> Work {
        let backends = &stats.backends;
        Work {
            records_compressed: backends.iter().map(|b| b.records).sum(),
            records_offloaded: stats
                .backend(presso_codec::BackendKind::Accelerator)
                .records,
            compressed_bytes: backends.iter().map(|b| b.bytes_in).sum(),
            frame_bytes: backends.iter().map(|b| b.bytes_out).sum(),
            compress_cpu_ns: (backends.iter().map(|b| b.cpu_seconds).sum::<f64>() * 1e9) as u64,
            ..Work::default()
        }
    }

    fn to_array(self) -> [u64; 10] {
        [
            self.written_bytes,
            self.read_bytes,
            self.records_compressed,
            self.records_offloaded,
            self.compressed_bytes,
            self.frame_bytes,
            self.compress_cpu_ns,
            self.records_decoded,
            self.decoded_bytes,
            self.decode_cpu_ns,
        ]
    }

    fn from_array(v: [u64; 10]) -> Work {
        Work {
            written_bytes: v[0],
            read_bytes: v[1],
            records_compressed: v[2],
            records_offloaded: v[3],
            compressed_bytes: v[4],
            frame_bytes: v[5],
            compress_cpu_ns: v[6],
            records_decoded: v[7],
            decoded_bytes: v[8],
            decode_cpu_ns: v[9],
        }
    }

    fn zip(self, other: Work, f: impl Fn(u64, u64) -> u64) -> Work {
        let (a, b) = (self.to_array(), other.to_array());
        Work::from_array(std::array::from_fn(|i| f(a[i], b[i])))
    }

    /// What the pool's metadata holds: the work of every earlier mount, as far as its last
    /// sweep.
    pub fn stored(meta: &MetaStore) -> Result<Work> {
        let values = meta.statistics(&COUNTERS)?;
        let mut array = [0u64; 10];
        array.copy_from_slice(&values);
        Ok(Work::from_array(array))
    }

    /// What this work cost the CPU, per byte.
    pub fn cost(&self) -> CpuCost {
        let per_gb = |ns: u64, bytes: u64| {
            if bytes == 0 {
                0.0
            } else {
                ns as f64 / 1e9 / (bytes as f64 / 1e9)
            }
        };
        let saved = self.compressed_bytes as f64 - self.frame_bytes as f64;
        CpuCost {
            compress_cpu_s_per_gb: per_gb(self.compress_cpu_ns, self.compressed_bytes),
            decode_cpu_s_per_gb: per_gb(self.decode_cpu_ns, self.decoded_bytes),
            saved_mb_per_cpu_s: if self.compress_cpu_ns == 0 {
                0.0
            } else {
                saved / 1e6 / (self.compress_cpu_ns as f64 / 1e9)
            },
        }
    }
}

/// CPU time per byte: what compression costs the machine (the figure to compare codecs and
/// engines by; ratio ÷ CPU utilisation ranks by ratio alone when the CPU is busy).
#[derive(Debug, Clone, Copy, Default, PartialEq, Serialize, Deserialize)]
pub struct CpuCost {
    /// CPU seconds spent compressing per 10^9 logical bytes (0 when nothing was compressed).
    pub compress_cpu_s_per_gb: f64,
    /// CPU seconds spent reading and decoding per 10^9 logical bytes (0 when nothing was read).
    pub decode_cpu_s_per_gb: f64,
    /// MB (10^6 bytes) of storage saved (logical − frame bytes) per CPU second of compression.
    pub saved_mb_per_cpu_s: f64,
}

/// The since-mount work already added to the pool's statistics.
#[derive(Debug, Default)]
pub struct Lifetime {
    added: Mutex<Work>,
}

impl Lifetime {
    /// Adds the work done since the last call (`now` is the since-mount total) to the pool's
    /// statistics, in one metadata transaction.
    pub fn save(&self, meta: &MetaStore, now: Work) -> Result<()> {
        let mut added = self.added.lock();
        let delta = now.zip(*added, u64::saturating_sub).to_array();
        let adds: Vec<(&str, u64)> = COUNTERS.iter().copied().zip(delta).collect();
        meta.add_statistics(&adds)?;
        *added = now;
        Ok(())
    }

    /// The pool's lifetime work: what its statistics hold plus what `now` (the since-mount total)
    /// has not added to them yet.
    pub fn totals(&self, meta: &MetaStore, now: Work) -> Result<Work> {
        let added = self.added.lock();
        let pending = now.zip(*added, u64::saturating_sub);
        Ok(Work::stored(meta)?.zip(pending, u64::saturating_add))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cost_is_cpu_time_per_byte() {
        let work = Work {
            compressed_bytes: 2_000_000_000,
            frame_bytes: 500_000_000,
            compress_cpu_ns: 3_000_000_000,
            decoded_bytes: 1_000_000_000,
            decode_cpu_ns: 500_000_000,
            ..Work::default()
        };
        let cost = work.cost();
        assert_eq!(cost.compress_cpu_s_per_gb, 1.5);
        assert_eq!(cost.decode_cpu_s_per_gb, 0.5);
        assert_eq!(cost.saved_mb_per_cpu_s, 500.0);
        assert_eq!(Work::default().cost(), CpuCost::default());
    }

    #[test]
    fn every_counter_is_a_statistics_counter_of_its_own() {
        let mut names = COUNTERS.to_vec();
        names.sort_unstable();
        names.dedup();
        assert_eq!(names.len(), COUNTERS.len());
        assert!(COUNTERS
            .iter()
            .all(|n| n.starts_with(presso_meta::STATISTICS_PREFIX)));
    }
}
