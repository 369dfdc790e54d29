//! A pool: the segment store, the metadata and the compression engine of one pool directory,
//! joined by transaction groups.
//!
//! # Commit protocol (the invariant every crash test checks)
//!
//! 1. A record's frame is appended to the open segment ([`Pool::store_encoded`]); nothing refers
//!    to it yet. Frames of at most [`INLINE_MAX`] bytes skip the store and travel inside the
//!    metadata op instead; all-zero records become holes (no frame at all).
//! 2. The metadata change that refers to it is queued as a [`TxgOp`] in the open transaction
//!    group.
//! 3. The commit thread closes the group at most every `txg_interval` (1 s), or at once when
//!    someone waits for durability (fsync): it first makes the store durable ([`Store::sync`]),
//!    then applies all queued ops in one metadata transaction.
//!
//! So metadata never refers to a frame that is not durable, and after a crash the pool opens at
//! the last committed group. Frames appended after it are unreferenced: space that scrub reports
//! and garbage collection reclaims. Torn segment tails are cut by the store's recovery.

use std::collections::BTreeMap;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use parking_lot::{Mutex, RwLock, RwLockReadGuard};
use presso_codec::{Engine, EngineConfig, Offload};
use presso_meta::{MetaStore, RecordRef, SegmentUsage, TxgOp, POOL_INO};
use presso_store::{FsDir, Location, StorageDir, Store, StoreConfig};

use crate::error::{FsError, Result};
use crate::props;

pub(crate) mod checks;
mod committer;
mod frames;
mod gone;
mod metacopy;
mod namespace;
mod opening;
mod shared;
mod txg;
mod unsynced;

pub use metacopy::COPY_FILE;
pub use opening::OpenReport;
use opening::{missing_segments, refresh_live};
pub use shared::{
    heartbeat_interval, without_password, ClientPlace, SharedClient, CLIENT_FILE,
    DEFAULT_CLIENT_TIMEOUT, DEFAULT_SERVER_TIMEOUT, HEARTBEAT_INTERVAL,
};

pub use txg::{Committed, Group, OpTag, TxgHold, Txgs};
pub use unsynced::Unsynced;

/// Frames up to this many bytes are kept inline in the metadata instead of a segment (ZFS embeds
/// up to 112 bytes in a block pointer).
pub const INLINE_MAX: usize = 112;
/// File name of the metadata database inside the pool directory.
pub const META_FILE: &str = "meta.db";

/// Settings for opening a pool (not stored in it).
#[derive(Debug, Clone)]
pub struct PoolOptions {
    /// Longest time queued metadata waits before its transaction group commits.
    pub txg_interval: Duration,
    /// Compression worker threads (default: all cores).
    pub workers: usize,
    /// Whether the accelerator compresses each record on the thread that submits it (a
    /// mount's request threads, after replying) instead of on threads of its own. A mount sets
    /// it when it has at least as many request channels as workers. Default false.
    pub offload_on_submitter: bool,
    /// Segment roll-over size; on a disk under 16 times as large, a sixteenth of the disk
    /// (16 MiB at least) instead.
    pub segment_size: u64,
    /// How often, while the pool changes, its metadata copy is refreshed (see [`COPY_FILE`]).
    pub metadata_copy_every: Duration,
    /// In a shared pool: how long a client may go without a heartbeat before the one holding
    /// the maintenance lease takes it for stopped and cleans up after it.
    pub client_timeout: Duration,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            txg_interval: Duration::from_secs(1),
            workers: presso_codec::default_workers(),
            offload_on_submitter: false,
            segment_size: presso_store::DEFAULT_SEGMENT_SIZE,
            metadata_copy_every: Duration::from_secs(300),
            client_timeout: shared::DEFAULT_CLIENT_TIMEOUT,
        }
    }
}

/// A frame appended but not yet named by a queued op: see [`Pool::store_encoded`]. It also
/// holds the open transaction group open (after the gate, in that order: garbage collection
/// waits for a commit while it holds the gate's write side).
pub struct PendingFrame<'a> {
    _gate: RwLockReadGuard<'a, ()>,
    _group: TxgHold<'a>,
}

/// Counters of the pool's own events (the engine keeps its own).
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Transaction groups committed.
    pub txgs: AtomicU64,
    /// Durable commits (segment synced, metadata synced): fsync, the durability sweep, unmount.
    pub durable_commits: AtomicU64,
    /// Record-map ops committed.
    pub ops: AtomicU64,
    /// Frames appended to segments.
    pub frames_appended: AtomicU64,
    /// Frames kept inline in the metadata.
    pub frames_inline: AtomicU64,
    /// Records that were all zeros (holes).
    pub holes: AtomicU64,
    /// Records read back and decoded.
    pub records_read: AtomicU64,
    /// Logical bytes of the records decoded.
    pub decoded_bytes: AtomicU64,
    /// Thread CPU time spent reading and decoding them, nanoseconds.
    pub decode_cpu_ns: AtomicU64,
    /// Frames that failed verification on read.
    pub corruptions: AtomicU64,
    /// Groups committed with frames moved by garbage collection (counted as each commits,
    /// before the places the frames left can go).
    pub moves_committed: AtomicU64,
}

/// An open pool.
pub struct Pool {
    store: Store,
    meta: MetaStore,
    engine: Engine,
    options: PoolOptions,
    txgs: Txgs,
    unsynced: Arc<Unsynced>,
    committer: Mutex<Option<JoinHandle<()>>>,
    /// Read-held from a frame's append until its op is queued; see [`Pool::frames_settled`].
    pending_frames: RwLock<()>,
    counters: PoolCounters,
    opened: Instant,
    maintenance: Mutex<()>,
    /// The pool directory, where the metadata copy goes (SQLite pools opened by path only).
    copy_dir: std::sync::OnceLock<std::path::PathBuf>,
    /// Held while the metadata copy is written.
    copying: Mutex<()>,
    /// How long the last metadata copy took, in nanoseconds.
    copy_took: std::sync::atomic::AtomicU64,
    /// This mount's client session, for a pool shared by several clients.
    client: Option<SharedClient>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool")
            .field("dir", &self.store.describe())
            .finish()
    }
}

impl Pool {
    /// Creates a pool in the host directory `path` (created if missing; it must be empty) with
    /// SQLite metadata and properties given as `name=value` pairs, already validated by
    /// [`props::normalize`].
    pub fn create(path: &Path, properties: &[(String, String)]) -> Result<()> {
        Self::create_in(path, properties, false)
    }

    /// [`Pool::create`] in a directory that may hold other files (never a pool or part of one).
    pub fn create_beside_files(path: &Path, properties: &[(String, String)]) -> Result<()> {
        Self::create_in(path, properties, true)
    }

    fn create_in(path: &Path, properties: &[(String, String)], beside_files: bool) -> Result<()> {
        // Checked before the directory is made, so bad input leaves nothing behind.
        for (name, value) in properties {
            props::normalize(name, value).map_err(FsError::Property)?;
        }
        checks::check_creatable(path, beside_files)?;
        let dir = FsDir::create_all(path)
            .map_err(|e| FsError::io(format!("cannot create {}", path.display()), e))?;
        let meta = MetaStore::create_sqlite(path.join(META_FILE))?;
        Pool::create_with(Arc::new(dir), &meta, properties)
    }

    /// Creates a pool over any storage directory and metadata store (a simulated directory and
    /// the in-memory engine in tests).
    pub fn create_with(
        dir: Arc<dyn StorageDir>,
        meta: &MetaStore,
        properties: &[(String, String)],
    ) -> Result<()> {
        Self::create_on(dir, meta, &normalized(properties)?, StoreConfig::default())
    }

    /// [`Pool::create_with`] after the properties are normalized, with the store's settings.
    fn create_on(
        dir: Arc<dyn StorageDir>,
        meta: &MetaStore,
        properties: &[(String, String)],
        config: StoreConfig,
    ) -> Result<()> {
        let creation: BTreeMap<String, String> = properties.iter().cloned().collect();
        let store = Store::create(dir, creation, config)?;
        meta.init()?;
        meta.bind_pool(&checks::pool_id(store.header()))?;
        for (name, value) in properties {
            meta.set_prop(POOL_INO, name, value)?;
        }
        // Durable before create returns: a pool whose metadata a power cut took back to empty
        // would be refused at open.
        meta.apply_txg(&[], true)?;
        drop(store);
        Ok(())
    }

    /// Opens the pool in the host directory `path` with its SQLite metadata; see
    /// [`Pool::open_with`]. Metadata that is missing, empty or damaged is refused before
    /// anything in the pool changes.
    pub fn open(path: &Path, options: PoolOptions) -> Result<(Arc<Pool>, OpenReport)> {
        let dir = FsDir::open(path).map_err(|e| {
            FsError::io(
                format!(
                    "cannot open pool {} (create one with `presso create`)",
                    path.display()
                ),
                e,
            )
        })?;
        // Not a pool at all is the clearer message, so the header goes first.
        checks::read_header(&dir)?;
        checks::refuse_if_in_use(path)?;
        let meta = MetaStore::open_sqlite(path.join(META_FILE))
            .map_err(|e| checks::unusable_metadata(path, e))?;
        let (pool, report) = Pool::open_with(Arc::new(dir), meta, options)
            .map_err(|e| checks::with_copy_hint(path, e))?;
        let _ = pool.copy_dir.set(path.to_path_buf());
        Ok((pool, report))
    }

    /// Opens a pool over any storage directory and metadata store: takes its lock (a pool in use
    /// elsewhere is refused), recovers the store, removes orphans, rebuilds segment accounting
    /// and starts the engine and the commit thread.
    pub fn open_with(
        dir: Arc<dyn StorageDir>,
        meta: MetaStore,
        options: PoolOptions,
    ) -> Result<(Arc<Pool>, OpenReport)> {
        Self::open_as(dir, meta, options, None)
    }

    /// [`Pool::open_with`], as the client `client` of a shared pool when given: the store then
    /// appends to the client's own segments only, and nothing that belongs to the whole pool
    /// (other clients' segments, orphans) is recovered or removed at open.
    fn open_as(
        dir: Arc<dyn StorageDir>,
        meta: MetaStore,
        options: PoolOptions,
        client: Option<SharedClient>,
    ) -> Result<(Arc<Pool>, OpenReport)> {
        let (store, engine, report, last_txg) =
            match Self::prepare(dir, &meta, &options, client.as_ref()) {
                Ok(parts) => parts,
                Err(e) => {
                    if let Some(c) = &client {
                        c.end(&meta);
                    }
                    return Err(e);
                }
            };
        let pool = Arc::new(Pool {
            store,
            meta,
            engine,
            options,
            txgs: Txgs::starting_after(last_txg),
            unsynced: Arc::default(),
            committer: Mutex::new(None),
            pending_frames: RwLock::new(()),
            counters: PoolCounters::default(),
            opened: Instant::now(),
            maintenance: Mutex::new(()),
            copy_dir: std::sync::OnceLock::new(),
            copying: Mutex::new(()),
            copy_took: Default::default(),
            client,
        });
        if let Some(c) = &pool.client {
            if let Err(e) = c.start_heartbeat(&pool) {
                c.end(&pool.meta);
                return Err(e);
            }
        }
        let weak = Arc::downgrade(&pool);
        let handle = std::thread::Builder::new()
            .name("presso-txg".into())
            .spawn(move || committer::commit_loop(weak))
            .map_err(|e| FsError::io("cannot start the commit thread", e))?;
        *pool.committer.lock() = Some(handle);
        Ok((pool, report))
    }

    /// The checks and recovery of an open: the store, the engine, what the open found and the
    /// last committed transaction group.
    fn prepare(
        dir: Arc<dyn StorageDir>,
        meta: &MetaStore,
        options: &PoolOptions,
        client: Option<&SharedClient>,
    ) -> Result<(Store, Engine, OpenReport, u64)> {
        // Everything is checked before the store's recovery may change a segment.
        let id = checks::pool_id(&checks::read_header(dir.as_ref())?);
        checks::check_metadata(meta, dir.as_ref(), &id)?;
        let usage = meta.segment_usage()?;
        let (committed, own_segments) = match client {
            // A client is new at every mount: it has no segments to recover.
            Some(c) => (Default::default(), c.segments()),
            None => (
                checks::committed(meta, &usage, dir.as_ref())?,
                presso_store::SegmentRange::ALL,
            ),
        };
        let total = dir.space().map(|(total, _)| total);
        let store = Store::open(
            dir,
            StoreConfig {
                segment_size: opening::fitted_segment_size(options.segment_size, total),
                own_segments,
            },
            &committed,
        )?;
        if meta.pool_id()?.is_none() {
            meta.bind_pool(&id)?;
        }
        let recovery = store.recovery();
        let mut report = OpenReport {
            torn_bytes: recovery.discarded_bytes,
            damaged_segment_headers: recovery.bad_headers.clone(),
            damage_kept: recovery.kept_damage.then_some(recovery.segment),
            ..OpenReport::default()
        };
        if client.is_none() {
            // In a shared pool the other clients' segments are not the store's to list, and
            // their orphans are files they still have open.
            report.missing_segments = missing_segments(&store, &usage);
            report.orphan_records_purged = meta.purge_orphans()?.len();
        }
        refresh_live(&store, meta)?;

        let offload = pool_prop(meta, props::OFFLOAD)?
            .parse::<Offload>()
            .map_err(FsError::Property)?;
        let engine = Engine::new(EngineConfig {
            workers: options.workers.max(1),
            queue_depth: options.workers.max(1) * 8,
            offload,
            offload_on_submitter: options.offload_on_submitter,
            ..EngineConfig::default()
        })
        .map_err(|e| FsError::EngineStart(e.to_string()))?;
        Ok((store, engine, report, meta.last_txg()?))
    }

    /// This mount's client session when the pool is shared by several clients.
    pub fn client(&self) -> Option<&SharedClient> {
        self.client.as_ref()
    }

    /// The pool directory, for messages.
    pub fn describe(&self) -> String {
        self.store.describe()
    }

    /// Total and available bytes where the pool lives, if known.
    pub fn space(&self) -> Option<(u64, u64)> {
        self.store.space()
    }

    /// The metadata store, for the pool's own maintenance (GC, scrub, status); the file layer
    /// goes through the pool's methods.
    pub(crate) fn meta(&self) -> &MetaStore {
        &self.meta
    }

    /// The segment store.
    pub fn store(&self) -> &Store {
        &self.store
    }

    /// The compression engine.
    pub fn engine(&self) -> &Engine {
        &self.engine
    }

    /// The pool's own counters.
    pub fn counters(&self) -> &PoolCounters {
        &self.counters
    }

    /// When the pool was opened.
    pub fn opened(&self) -> Instant {
        self.opened
    }

    /// The options the pool was opened with.
    pub fn options(&self) -> &PoolOptions {
        &self.options
    }

    /// Effective value of property `name` for inode `ino` (inherited; the table default if
    /// nothing sets it).
    pub fn prop(&self, ino: u64, name: &str) -> Result<String> {
        Ok(self.get_prop(ino, name)?.0)
    }

    /// Effective value of a property and the inode it comes from (`None` = the default).
    pub fn get_prop(&self, ino: u64, name: &str) -> Result<(String, Option<u64>)> {
        let info = props::info(name).map_err(FsError::Property)?;
        Ok(match self.meta.get_prop_effective(ino, name)? {
            Some(p) => (p.value, Some(p.source)),
            None => (info.default.to_string(), None),
        })
    }

    /// [`Pool::get_prop`] of each of `names`, in order, read in one metadata transaction.
    pub fn get_props(&self, ino: u64, names: &[&str]) -> Result<Vec<(String, Option<u64>)>> {
        let infos = names
            .iter()
            .map(|name| props::info(name).map_err(FsError::Property))
            .collect::<Result<Vec<_>>>()?;
        let found = self.meta.get_props_effective(ino, names)?;
        Ok(infos
            .into_iter()
            .zip(found)
            .map(|(info, p)| match p {
                Some(p) => (p.value, Some(p.source)),
                None => (info.default.to_string(), None),
            })
            .collect())
    }

    /// Sets a property on a directory or the pool (inode 0) after checking it; returns the value
    /// in canonical spelling. Affects new writes only.
    pub fn set_prop(&self, ino: u64, name: &str, value: &str) -> Result<String> {
        let value = props::normalize(name, value).map_err(FsError::Property)?;
        if ino != POOL_INO && self.meta.getattr(ino)?.kind != presso_meta::FileKind::Dir {
            return Err(FsError::Property(format!(
                "properties are set on directories (and inherited below them); inode {ino} is not a directory"
            )));
        }
        self.meta.set_prop(ino, name, &value)?;
        self.unsynced.note();
        Ok(value)
    }

    /// Recomputes every segment's live bytes from the metadata after committing what is queued;
    /// returns the live records of every segment the metadata counts (in a shared pool, other
    /// clients' segments too).
    pub fn refresh_live(&self) -> Result<BTreeMap<u64, SegmentUsage>> {
        self.commit(true)?;
        refresh_live(&self.store, &self.meta)
    }

    /// Held by garbage collection while it runs, so an automatic pass and `presso gc` never
    /// collect the same segments at once.
    pub fn maintenance_lock(&self) -> parking_lot::MutexGuard<'_, ()> {
        self.maintenance.lock()
    }

    /// Counts a frame that will never be referenced (stale or refused) as dead space.
    pub fn discard(&self, rec: &RecordRef) {
        if rec.inline.is_none() {
            // The segment may already be gone (collected); nothing to account then.
            let _ = self.store.mark_dead(location(rec));
        }
    }

    /// The transaction groups: queue ops there, ask for commits, learn what committed.
    pub fn txgs(&self) -> &Txgs {
        &self.txgs
    }

    /// Changes not yet durable: noted by every change, taken by the file layer's durability
    /// sweep.
    pub fn unsynced(&self) -> &Arc<Unsynced> {
        &self.unsynced
    }

    /// Closes the open transaction group now and waits until it (and everything queued before
    /// this call) is committed; with `durable`, also durable against power loss.
    pub fn commit(&self, durable: bool) -> Result<()> {
        self.txgs.commit(durable)
    }

    /// Commits everything, stops the commit thread, waits for the engine and releases the pool
    /// lock. The pool stays readable; further writes fail.
    pub fn close(&self) -> Result<()> {
        self.engine.wait_idle();
        let result = self.commit(true);
        self.txgs.shut_down();
        self.join_committer();
        if result.is_ok() {
            if let Err(e) = self.refresh_metadata_copy() {
                crate::log!("presso: cannot refresh the metadata copy at close: {e}");
            }
        }
        if let Some(c) = &self.client {
            c.end(&self.meta);
        }
        // The database file alone is then complete: a copy without its log loses nothing.
        let result = result.and_then(|()| Ok(self.meta.close()?));
        let (closed, lock) = self.store.close_keeping_lock();
        let result = result.and(closed.map_err(FsError::from));
        if let Some(c) = &self.client {
            // Everything it held is in the object store now, or was never committed. Removed
            // under the pool's lock, which `presso unmount` waits for: once the lock is free,
            // nothing of the client is left on this machine.
            c.remove_local_dir();
        }
        drop(lock);
        result
    }

    /// Stops the commit thread at once, committing nothing more, and releases the pool lock:
    /// what a killed daemon leaves behind (for crash tests). Queued ops are dropped.
    pub fn halt(&self) {
        self.txgs.halt();
        self.join_committer();
        if let Some(c) = &self.client {
            c.stop_heartbeat();
        }
        // A killed process loses its lock with it.
        self.store.abandon();
    }

    fn join_committer(&self) {
        if let Some(handle) = self.committer.lock().take() {
            let _ = handle.join();
        }
    }

    fn commit_group(&self, number: u64, ops: &[TxgOp], durable: bool) -> Result<()> {
        self.store.sync()?;
        if ops.is_empty() && !durable {
            return Ok(());
        }
        let outcome = self.meta.apply_txg_numbered(number, ops, durable)?;
        for rec in outcome.replaced.iter().chain(&outcome.not_applied) {
            self.discard(rec);
        }
        // Counted once the metadata names the new places, before anyone can remove the old ones
        // (garbage collection removes a segment only after the commit it waits for returns).
        if ops.iter().any(|op| matches!(op, TxgOp::MoveRecord { .. })) {
            self.counters.moves_committed.fetch_add(1, Ordering::SeqCst);
        }
        self.counters.txgs.fetch_add(1, Ordering::Relaxed);
        if durable {
            self.counters
                .durable_commits
                .fetch_add(1, Ordering::Relaxed);
        }
        self.counters
            .ops
            .fetch_add(ops.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.txgs.shut_down();
    }
}

/// `name=value` pairs in canonical spelling, or the first one that is not a valid property.
fn normalized(properties: &[(String, String)]) -> Result<Vec<(String, String)>> {
    properties
        .iter()
        .map(|(name, value)| Ok((name.clone(), props::normalize(name, value)?)))
        .collect::<std::result::Result<Vec<_>, String>>()
        .map_err(FsError::Property)
}

fn pool_prop(meta: &MetaStore, name: &str) -> Result<String> {
    let info = props::info(name).map_err(FsError::Property)?;
    Ok(meta
        .get_prop(POOL_INO, name)?
        .unwrap_or_else(|| info.default.to_string()))
}

/// The store location of a non-inline record.
pub fn location(rec: &RecordRef) -> Location {
    Location {
        segment: rec.segment,
        offset: rec.offset,
        len: rec.stored_len,
    }
}
