//! What `presso status` reports: the pool's space accounting and the engine's counters, as one
//! serialisable value.

use serde::{Deserialize, Serialize};

use presso_codec::{BackendKind, CodecId, StatsSnapshot};

use crate::error::Result;
use crate::lifetime::{CpuCost, Work};
use crate::pool::Pool;
use crate::vfs::{Unstored, Vfs};

/// Live records of one codec over the whole pool, from the metadata.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct CodecUsage {
    /// Codec name (`off` includes records stored raw because they did not compress).
    pub codec: String,
    /// Live records stored with it, inline ones included.
    pub records: u64,
    /// Their logical bytes.
    pub logical_bytes: u64,
    /// Their frame bytes.
    pub stored_bytes: u64,
    /// Logical ÷ stored.
    pub ratio: f64,
}

/// Throughput through the mount.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct Throughput {
    /// Bytes written since mount.
    pub written_bytes: u64,
    /// Bytes read since mount.
    pub read_bytes: u64,
    /// Write rate over the last ten seconds, bytes/s.
    pub write_bytes_per_sec: f64,
    /// Read rate over the last ten seconds, bytes/s.
    pub read_bytes_per_sec: f64,
}

/// One client of a shared pool, as its session shows it.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ClientStatus {
    /// The client's number.
    pub id: u64,
    /// The host it runs on.
    pub host: String,
    /// Its daemon's process id there.
    pub pid: u32,
    /// Seconds since its last heartbeat.
    pub silent_secs: i64,
}

/// A shared pool's clients, as the mount asked sees them.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct SharedStatus {
    /// This mount's client number.
    pub client: u64,
    /// Every registered client, this one included.
    pub clients: Vec<ClientStatus>,
}

/// Everything `presso status` shows.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Status {
    /// Pool directory.
    pub pool: String,
    /// Where it is mounted, if it is.
    pub mountpoint: Option<String>,
    /// Logical bytes of all files' records.
    pub logical_bytes: u64,
    /// Stored (frame) bytes of all live records.
    pub stored_bytes: u64,
    /// Bytes in segments that no record references any more (reclaimed by garbage collection).
    pub garbage_bytes: u64,
    /// Bytes of segment files on the host file system.
    pub disk_bytes: u64,
    /// Logical ÷ stored, over the whole pool.
    pub ratio: f64,
    /// Per codec, every live record of the pool (the engine's per-codec counters since open are
    /// under `engine.codecs`).
    pub codecs: Vec<CodecUsage>,
    /// Records compressed on the accelerator since open.
    pub records_offloaded: u64,
    /// Records compressed on the CPU since open.
    pub records_software: u64,
    /// Records that could have been offloaded but went to the CPU because it was busy.
    pub fallback_busy: u64,
    /// Records the accelerator failed and the CPU redid.
    pub fallback_failure: u64,
    /// Records sent to the CPU while the accelerator was marked unavailable.
    pub fallback_unavailable: u64,
    /// All-zero records stored as holes since open.
    pub holes: u64,
    /// Records stored raw because compressing them did not save enough, since open.
    pub stored_raw: u64,
    /// Records the compressibility pre-check skipped, since open.
    pub precheck_skips: u64,
    /// Records a codec failed on with an error (not a full budget), stored raw and counted in
    /// `stored_raw` too, since open. Anything but zero is worth a report.
    #[serde(default)]
    pub codec_errors: u64,
    /// Frames kept inline in the metadata since open.
    pub inline_records: u64,
    /// Checksum or decode failures met on reads since open.
    pub corruptions: u64,
    /// Transaction groups committed since open.
    pub txgs: u64,
    /// Durable commits since open (fsync, a directory's fsync, the durability sweep, unmount).
    pub durable_commits: u64,
    /// Whether the mount holds changes that are not durable yet (the durability sweep is due or
    /// running); false when not mounted.
    pub durability_pending: bool,
    /// Mount throughput (zero when not mounted).
    pub throughput: Throughput,
    /// Work done since the mount (zero when not mounted).
    #[serde(default)]
    pub work: Work,
    /// What it cost the CPU per byte.
    #[serde(default)]
    pub cost: CpuCost,
    /// Work done over the pool's life, this mount's included (as far as the last durability
    /// sweep for mounts that ended without an unmount).
    #[serde(default)]
    pub lifetime: Work,
    /// What that cost the CPU per byte.
    #[serde(default)]
    pub lifetime_cost: CpuCost,
    /// Bytes waiting for compression.
    pub dirty_bytes: u64,
    /// Written data that could not be stored (a full disk, an I/O error): kept in memory and
    /// retried; an unmount refuses to drop it unless forced.
    #[serde(default)]
    pub unstored: Unstored,
    /// Writes are refused (ENOSPC) for lack of free space on the disk holding the pool.
    #[serde(default)]
    pub space_low: bool,
    /// Writes refused since the mount (for space, or a record whose location cannot be looked
    /// up): their writers had the error, and nothing of them is stored.
    #[serde(default)]
    pub refused_writes: u64,
    /// Their bytes.
    #[serde(default)]
    pub refused_bytes: u64,
    /// CPU queues the kernel has sent requests through over io_uring since the mount; 0 when
    /// every request came through `/dev/fuse` (the kernel offers io_uring only with the `fuse`
    /// module's `enable_uring` parameter set) or not mounted.
    #[serde(default)]
    pub io_uring_queues: u64,
    /// The accelerator in use, if any.
    pub accelerator: Option<String>,
    /// The engine's full counters since open.
    pub engine: StatsSnapshot,
    /// For a shared pool: this client and the others (garbage and on-disk bytes above are this
    /// client's own segments').
    #[serde(default)]
    pub shared: Option<SharedStatus>,
}

impl Status {
    /// Gathers the status of `pool`, with the file layer's figures if it is mounted.
    pub fn gather(pool: &Pool, vfs: Option<&Vfs>, mountpoint: Option<String>) -> Result<Status> {
        let space = pool.meta().space()?;
        let engine = pool.engine().stats();
        let codecs = pool
            .meta()
            .codec_usage()?
            .into_iter()
            .map(|(id, u)| CodecUsage {
                codec: CodecId::from_u8(id).map_or_else(
                    || format!("unknown codec {id}"),
                    |c| c.info().name.to_string(),
                ),
                records: u.records,
                logical_bytes: u.logical_bytes,
                stored_bytes: u.stored_bytes,
                ratio: ratio(u.logical_bytes, u.stored_bytes),
            })
            .collect();
        let sum = |f: fn(&presso_codec::stats::CodecSnapshot) -> u64| -> u64 {
            engine.codecs.iter().map(f).sum()
        };
        let counters = pool.counters();
        let load = |a: &std::sync::atomic::AtomicU64| a.load(std::sync::atomic::Ordering::Relaxed);
        let throughput = vfs.map_or_else(Throughput::default, |v| {
            let (written, read, w, r) = v.traffic();
            Throughput {
                written_bytes: written,
                read_bytes: read,
                write_bytes_per_sec: w,
                read_bytes_per_sec: r,
            }
        });
        let work = vfs.map_or_else(Work::default, Vfs::work);
        let refused = vfs.map_or((0, 0), Vfs::refused_writes);
        let lifetime = match vfs {
            Some(v) => v.lifetime_work()?,
            None => Work::stored(pool.meta())?,
        };
        let shared = match pool.client() {
            Some(c) => {
                let now = presso_meta::Timespec::now().secs;
                let clients = pool
                    .meta()
                    .clients()?
                    .into_iter()
                    .map(|s| ClientStatus {
                        id: s.id,
                        host: s.host,
                        pid: s.pid,
                        silent_secs: now.saturating_sub(s.heartbeat),
                    })
                    .collect();
                Some(SharedStatus {
                    client: c.id(),
                    clients,
                })
            }
            None => None,
        };
        Ok(Status {
            pool: pool.describe(),
            mountpoint,
            logical_bytes: space.logical,
            stored_bytes: space.stored,
            garbage_bytes: pool.store().dead_bytes(),
            disk_bytes: pool.store().disk_usage(),
            ratio: ratio(space.logical, space.stored),
            codecs,
            records_offloaded: engine.backend(BackendKind::Accelerator).records,
            records_software: engine.backend(BackendKind::Software).records,
            fallback_busy: engine.fallbacks.busy,
            fallback_failure: engine.fallbacks.failure,
            fallback_unavailable: engine.fallbacks.unavailable,
            holes: sum(|c| c.holes),
            stored_raw: sum(|c| c.stored_raw),
            precheck_skips: sum(|c| c.precheck_skips),
            codec_errors: sum(|c| c.errors),
            inline_records: load(&counters.frames_inline),
            corruptions: load(&counters.corruptions),
            txgs: load(&counters.txgs),
            durable_commits: load(&counters.durable_commits),
            durability_pending: vfs.is_some_and(Vfs::durability_pending),
            throughput,
            cost: work.cost(),
            work,
            lifetime_cost: lifetime.cost(),
            lifetime,
            dirty_bytes: vfs.map_or(0, |v| v.dirty_bytes() as u64),
            unstored: vfs.map_or_else(Unstored::default, |v| v.unstored()),
            space_low: vfs.is_some_and(|v| v.space_low()),
            refused_writes: refused.0,
            refused_bytes: refused.1,
            io_uring_queues: vfs.map_or(0, Vfs::ring_queues),
            accelerator: engine.accelerator.name.clone(),
            engine,
            shared,
        })
    }
}

/// `logical ÷ stored`, 1.0 for an empty pool.
pub fn ratio(logical: u64, stored: u64) -> f64 {
    if stored == 0 {
        1.0
    } else {
        logical as f64 / stored as f64
    }
}
