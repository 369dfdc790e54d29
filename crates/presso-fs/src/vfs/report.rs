//! What the file layer reports about itself: traffic and its recent rates, work done (since the
//! mount and over the pool's life), the record cache, the buffers in use and `statfs`.

use super::*;

impl Vfs {
    /// Bytes written and read through the file system since it was mounted, and the rates
    /// (bytes/s) over the last ten seconds (or since the mount, if that is less).
    pub fn traffic(&self) -> (u64, u64, f64, f64) {
        let written = self.traffic.written.load(Ordering::Relaxed);
        let read = self.traffic.read.load(Ordering::Relaxed);
        // From the oldest sample (at most ten ticks old; the first is the mount's) to now and the
        // counters now: bytes moved since the last tick count at once.
        let oldest = self.samples.lock().first().copied();
        let (rw, rr) = match oldest {
            Some((at, w0, r0)) => {
                let secs = at.elapsed().as_secs_f64().max(0.001);
                (
                    written.saturating_sub(w0) as f64 / secs,
                    read.saturating_sub(r0) as f64 / secs,
                )
            }
            None => (0.0, 0.0),
        };
        (written, read, rw, rr)
    }

    /// The work done since the mount: bytes through it, and the engine's and the pool's
    /// compression and decoding.
    pub fn work(&self) -> Work {
        Work {
            written_bytes: self.traffic.written.load(Ordering::Relaxed),
            read_bytes: self.traffic.read.load(Ordering::Relaxed),
            ..self.pool.work()
        }
    }

    /// The work done over the pool's life, this mount's included.
    pub fn lifetime_work(&self) -> Result<Work> {
        self.lifetime.totals(self.pool.meta(), self.work())
    }

    /// Record-cache counters.
    pub fn cache_stats(&self) -> CacheStats {
        self.cache.stats()
    }

    /// Bytes of records waiting for or in compression.
    pub fn dirty_bytes(&self) -> usize {
        *self.budget.bytes.lock()
    }

    /// File-system statistics: the host file system's blocks (the pool can use all of them).
    pub fn statfs(&self) -> StatFs {
        let (total, avail) = self.pool.space().unwrap_or((0, 0));
        StatFs {
            block_size: 4096,
            blocks: total / 4096,
            blocks_free: avail / 4096,
            blocks_avail: avail / 4096,
            files: 1 << 32,
            files_free: 1 << 31,
            name_max: presso_meta::NAME_MAX as u32,
        }
    }
}

/// What `statfs` reports.
#[derive(Debug, Clone, Copy)]
pub struct StatFs {
    /// Block size.
    pub block_size: u32,
    /// Total blocks.
    pub blocks: u64,
    /// Free blocks.
    pub blocks_free: u64,
    /// Blocks available to unprivileged users.
    pub blocks_avail: u64,
    /// Inodes (nominal; the pool has no fixed limit).
    pub files: u64,
    /// Free inodes (nominal).
    pub files_free: u64,
    /// Longest name.
    pub name_max: u32,
}
