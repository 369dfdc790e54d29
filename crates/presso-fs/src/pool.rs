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
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use presso_codec::frame::FrameHeader;
use presso_codec::{Encoded, Engine, EngineConfig, Offload};
use presso_meta::{MetaStore, RecordRef, TxgOp, POOL_INO};
use presso_store::{FsDir, Location, Store, StoreConfig, ENTRY_HEADER_LEN};

use crate::error::{FsError, Result};
use crate::props;

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
    /// Segment roll-over size.
    pub segment_size: u64,
}

impl Default for PoolOptions {
    fn default() -> Self {
        PoolOptions {
            txg_interval: Duration::from_secs(1),
            workers: presso_codec::default_workers(),
            segment_size: presso_store::DEFAULT_SEGMENT_SIZE,
        }
    }
}

/// Identifies a queued op for the file layer's bookkeeping when its group commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTag {
    /// File.
    pub ino: u64,
    /// Record index.
    pub index: u64,
    /// The file layer's generation of that record's contents.
    pub generation: u64,
}

type CommitHook = Box<dyn Fn(&[OpTag], u64) + Send + Sync>;
type PrepareHook = Box<dyn Fn(&Pool) + Send + Sync>;

#[derive(Default)]
struct TxgState {
    ops: Vec<TxgOp>,
    tags: Vec<OpTag>,
    /// Number of the open group; `committed` is the last one that reached the metadata.
    open: u64,
    committed: u64,
    requested: u64,
    durable: bool,
    /// The last failure and the group it hit.
    error: Option<(u64, String, i32)>,
    shutdown: bool,
}

/// Counters of the pool's own events (the engine keeps its own).
#[derive(Debug, Default)]
pub struct PoolCounters {
    /// Transaction groups committed.
    pub txgs: AtomicU64,
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
    /// Frames that failed verification on read.
    pub corruptions: AtomicU64,
}

/// An open pool.
pub struct Pool {
    path: PathBuf,
    store: Store,
    meta: MetaStore,
    engine: Engine,
    options: PoolOptions,
    txg: Mutex<TxgState>,
    txg_changed: Condvar,
    committer: Mutex<Option<JoinHandle<()>>>,
    on_commit: OnceLock<CommitHook>,
    before_commit: OnceLock<PrepareHook>,
    counters: PoolCounters,
    opened: Instant,
    maintenance: Mutex<()>,
}

impl std::fmt::Debug for Pool {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Pool").field("path", &self.path).finish()
    }
}

/// What opening a pool found and repaired.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenReport {
    /// Stored records (frames in segments) of orphaned files — unlinked while open when the
    /// pool last stopped — removed with them.
    pub orphan_records_purged: usize,
    /// Bytes cut from a torn segment tail.
    pub torn_bytes: u64,
}

impl Pool {
    /// Creates a pool in `path` (created if missing; it must not hold a pool) with properties
    /// given as `name=value` pairs, already validated by [`props::normalize`].
    pub fn create(path: &Path, properties: &[(String, String)]) -> Result<()> {
        for (name, value) in properties {
            props::normalize(name, value).map_err(FsError::Invalid)?;
        }
        let dir = FsDir::create_all(path)
            .map_err(|e| FsError::io(format!("cannot create {}", path.display()), e))?;
        let creation: BTreeMap<String, String> = properties.iter().cloned().collect();
        let store = Store::create(Arc::new(dir), creation, StoreConfig::default())?;
        let meta = MetaStore::open_sqlite(path.join(META_FILE))?;
        meta.init()?;
        for (name, value) in properties {
            meta.set_prop(POOL_INO, name, value)?;
        }
        drop(meta);
        drop(store);
        Ok(())
    }

    /// Opens the pool in `path`: takes its lock (a pool in use elsewhere is refused), recovers
    /// the store, removes orphans, rebuilds segment accounting and starts the engine and the
    /// commit thread.
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
        let store = Store::open(
            Arc::new(dir),
            StoreConfig {
                segment_size: options.segment_size,
            },
        )?;
        let meta_path = path.join(META_FILE);
        if !meta_path.exists() {
            return Err(FsError::Invalid(format!(
                "{} has a pool header but no {META_FILE}: not a complete pool",
                path.display()
            )));
        }
        let meta = MetaStore::open_sqlite(&meta_path)?;
        meta.init()?;
        let mut report = OpenReport {
            torn_bytes: store.recovery().discarded_bytes,
            ..OpenReport::default()
        };
        let purged = meta.purge_orphans()?;
        report.orphan_records_purged = purged.len();
        refresh_live(&store, &meta)?;

        let offload = pool_prop(&meta, props::OFFLOAD)?
            .parse::<Offload>()
            .map_err(FsError::Invalid)?;
        let engine = Engine::new(EngineConfig {
            workers: options.workers.max(1),
            queue_depth: options.workers.max(1) * 8,
            offload,
            ..EngineConfig::default()
        })
        .map_err(|e| FsError::Invalid(e.to_string()))?;

        let pool = Arc::new(Pool {
            path: path.to_path_buf(),
            store,
            meta,
            engine,
            options,
            txg: Mutex::new(TxgState {
                open: 1,
                ..TxgState::default()
            }),
            txg_changed: Condvar::new(),
            committer: Mutex::new(None),
            on_commit: OnceLock::new(),
            before_commit: OnceLock::new(),
            counters: PoolCounters::default(),
            opened: Instant::now(),
            maintenance: Mutex::new(()),
        });
        let weak = Arc::downgrade(&pool);
        let handle = std::thread::Builder::new()
            .name("presso-txg".into())
            .spawn(move || commit_loop(weak))
            .map_err(|e| FsError::io("cannot start the commit thread", e))?;
        *pool.committer.lock() = Some(handle);
        Ok((pool, report))
    }

    /// The pool directory.
    pub fn path(&self) -> &Path {
        &self.path
    }

    /// The metadata store.
    pub fn meta(&self) -> &MetaStore {
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

    /// Registers the file layer's hooks: `before` runs on the commit thread just before a group
    /// closes (to queue pending file sizes); `after` gets the tags of the ops of each committed
    /// group and its number. Set once.
    pub fn set_hooks(
        &self,
        before: impl Fn(&Pool) + Send + Sync + 'static,
        after: impl Fn(&[OpTag], u64) + Send + Sync + 'static,
    ) {
        let _ = self.before_commit.set(Box::new(before));
        let _ = self.on_commit.set(Box::new(after));
    }

    /// Effective value of property `name` for inode `ino` (inherited; the table default if
    /// nothing sets it).
    pub fn prop(&self, ino: u64, name: &str) -> Result<String> {
        Ok(self.get_prop(ino, name)?.0)
    }

    /// Effective value of a property and the inode it comes from (`None` = the default).
    pub fn get_prop(&self, ino: u64, name: &str) -> Result<(String, Option<u64>)> {
        let info = props::info(name).map_err(FsError::Invalid)?;
        Ok(match self.meta.get_prop_effective(ino, name)? {
            Some(p) => (p.value, Some(p.source)),
            None => (info.default.to_string(), None),
        })
    }

    /// Sets a property on a directory or the pool (inode 0) after checking it; returns the value
    /// in canonical spelling. Affects new writes only.
    pub fn set_prop(&self, ino: u64, name: &str, value: &str) -> Result<String> {
        let value = props::normalize(name, value).map_err(FsError::Invalid)?;
        if ino != POOL_INO && self.meta.getattr(ino)?.kind != presso_meta::FileKind::Dir {
            return Err(FsError::Invalid(format!(
                "properties are set on directories (and inherited below them); inode {ino} is not a directory"
            )));
        }
        self.meta.set_prop(ino, name, &value)?;
        Ok(value)
    }

    /// Stores a finished record: `None` for a hole, an inline reference for a tiny frame,
    /// otherwise a reference to the frame appended to the open segment (durable only after the
    /// next commit).
    pub fn store_encoded(&self, encoded: &Encoded) -> Result<Option<RecordRef>> {
        let header = FrameHeader::parse(&encoded.frame)
            .map_err(|e| FsError::Invalid(format!("the engine produced a bad frame: {e}")))?;
        if header.hole {
            self.counters.holes.fetch_add(1, Ordering::Relaxed);
            return Ok(None);
        }
        let stored_len = encoded.frame.len() as u32;
        if encoded.frame.len() <= INLINE_MAX {
            self.counters.frames_inline.fetch_add(1, Ordering::Relaxed);
            return Ok(Some(RecordRef {
                segment: 0,
                offset: 0,
                stored_len,
                logical_len: header.logical_len,
                codec: header.codec as u8,
                checksum: header.stored_hash,
                inline: Some(encoded.frame.clone()),
            }));
        }
        let loc = self.store.append(&encoded.frame)?;
        self.counters
            .frames_appended
            .fetch_add(1, Ordering::Relaxed);
        Ok(Some(RecordRef {
            segment: loc.segment,
            offset: loc.offset,
            stored_len,
            logical_len: header.logical_len,
            codec: header.codec as u8,
            checksum: header.stored_hash,
            inline: None,
        }))
    }

    /// Reads the frame `rec` refers to and checks it is the one the metadata recorded.
    pub fn read_frame(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Vec<u8>> {
        let frame = match &rec.inline {
            Some(frame) => frame.clone(),
            None => self.store.read(location(rec)).inspect_err(|_| {
                self.counters.corruptions.fetch_add(1, Ordering::Relaxed);
            })?,
        };
        match FrameHeader::parse(&frame) {
            Ok(h) if h.stored_hash == rec.checksum && h.logical_len == rec.logical_len => Ok(frame),
            Ok(_) => {
                self.counters.corruptions.fetch_add(1, Ordering::Relaxed);
                Err(FsError::Misdirected {
                    ino,
                    index,
                    segment: rec.segment,
                    offset: rec.offset,
                })
            }
            Err(source) => {
                self.counters.corruptions.fetch_add(1, Ordering::Relaxed);
                Err(FsError::CorruptFrame {
                    ino,
                    index,
                    segment: rec.segment,
                    offset: rec.offset,
                    source,
                })
            }
        }
    }

    /// Reads and decodes record `index` of `ino` from `rec`, verifying every checksum.
    /// A record stored as-is is a view into the frame read from the store, not a copy.
    pub fn read_record(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Bytes> {
        let frame = self.read_frame(ino, index, rec)?;
        let data = self
            .engine
            .decode_shared(Bytes::from(frame))
            .map_err(|source| {
                self.counters.corruptions.fetch_add(1, Ordering::Relaxed);
                FsError::CorruptFrame {
                    ino,
                    index,
                    segment: rec.segment,
                    offset: rec.offset,
                    source,
                }
            })?;
        self.counters.records_read.fetch_add(1, Ordering::Relaxed);
        Ok(data)
    }

    /// Recomputes every segment's live bytes from the metadata after committing what is queued.
    pub fn refresh_live(&self) -> Result<()> {
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

    /// Queues `op` in the open transaction group and returns that group's number.
    pub fn queue(&self, op: TxgOp, tag: Option<OpTag>) -> u64 {
        let mut txg = self.txg.lock();
        txg.ops.push(op);
        if let Some(tag) = tag {
            txg.tags.push(tag);
        }
        if txg.ops.len() == 1 {
            self.txg_changed.notify_all();
        }
        txg.open
    }

    /// Closes the open transaction group now and waits until it (and everything queued before
    /// this call) is committed; with `durable`, also durable against power loss.
    pub fn commit(&self, durable: bool) -> Result<()> {
        let mut txg = self.txg.lock();
        let target = txg.open;
        txg.requested = txg.requested.max(target);
        txg.durable |= durable;
        self.txg_changed.notify_all();
        while txg.committed < target {
            if txg.shutdown {
                return Err(FsError::Invalid("the pool is closing".into()));
            }
            self.txg_changed.wait(&mut txg);
        }
        // A failed group keeps its ops for the next one: the failure stands until a later
        // group commits them.
        match &txg.error {
            Some((at, message, errno)) if *at >= target => Err(commit_error(message, *errno)),
            _ => Ok(()),
        }
    }

    /// Commits everything, stops the commit thread and waits for the engine. The pool stays
    /// readable; further writes fail.
    pub fn close(&self) -> Result<()> {
        self.engine.wait_idle();
        let result = self.commit(true);
        self.txg.lock().shutdown = true;
        self.txg_changed.notify_all();
        if let Some(handle) = self.committer.lock().take() {
            let _ = handle.join();
        }
        result
    }

    fn commit_group(&self, ops: &[TxgOp], durable: bool) -> Result<()> {
        self.store.sync()?;
        if ops.is_empty() && !durable {
            return Ok(());
        }
        let outcome = self.meta.apply_txg(ops, durable)?;
        for rec in outcome.replaced.iter().chain(&outcome.not_applied) {
            self.discard(rec);
        }
        self.counters.txgs.fetch_add(1, Ordering::Relaxed);
        self.counters
            .ops
            .fetch_add(ops.len() as u64, Ordering::Relaxed);
        Ok(())
    }
}

impl Drop for Pool {
    fn drop(&mut self) {
        self.txg.lock().shutdown = true;
        self.txg_changed.notify_all();
    }
}

/// Sets every segment's live bytes from the metadata (exact: one GROUP BY over the records).
fn refresh_live(store: &Store, meta: &MetaStore) -> Result<()> {
    let usage = meta.segment_usage()?;
    for segment in store.segments() {
        let live = usage
            .get(&segment)
            .map_or(0, |u| u.stored_bytes + u.records * ENTRY_HEADER_LEN as u64);
        store.set_live_bytes(segment, live)?;
    }
    Ok(())
}

fn commit_error(message: &str, errno: i32) -> FsError {
    if errno == libc::ENOSPC {
        FsError::NoSpace
    } else {
        FsError::io(
            "transaction group commit failed",
            std::io::Error::other(message.to_string()),
        )
    }
}

fn pool_prop(meta: &MetaStore, name: &str) -> Result<String> {
    let info = props::info(name).map_err(FsError::Invalid)?;
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

fn commit_loop(pool: std::sync::Weak<Pool>) {
    loop {
        let Some(pool) = pool.upgrade() else { return };
        // Wait for work: a request, or queued ops older than the interval.
        let interval = pool.options.txg_interval;
        let deadline = Instant::now() + interval;
        {
            let mut txg = pool.txg.lock();
            loop {
                if txg.requested >= txg.open {
                    break;
                }
                if txg.shutdown && txg.ops.is_empty() {
                    return;
                }
                let now = Instant::now();
                if now >= deadline {
                    break;
                }
                pool.txg_changed.wait_for(&mut txg, deadline - now);
            }
        }
        // Let the file layer queue sizes of files written in this group.
        if let Some(hook) = pool.before_commit.get() {
            hook(&pool);
        }
        let (number, ops, tags, durable) = {
            let mut txg = pool.txg.lock();
            let number = txg.open;
            txg.open += 1;
            let durable = std::mem::take(&mut txg.durable);
            (
                number,
                std::mem::take(&mut txg.ops),
                std::mem::take(&mut txg.tags),
                durable,
            )
        };
        let result = pool.commit_group(&ops, durable);
        match result {
            Ok(()) => {
                if let Some(hook) = pool.on_commit.get() {
                    hook(&tags, number);
                }
                let mut txg = pool.txg.lock();
                txg.committed = number;
                pool.txg_changed.notify_all();
            }
            Err(e) => {
                // Put the ops back in front, in order: the frames they name are appended, and
                // applying them later is still correct. Waiters of this group see the error.
                let mut txg = pool.txg.lock();
                let mut back = ops;
                back.append(&mut txg.ops);
                txg.ops = back;
                let mut back_tags = tags;
                back_tags.append(&mut txg.tags);
                txg.tags = back_tags;
                txg.error = Some((number, e.to_string(), e.errno()));
                txg.committed = number;
                pool.txg_changed.notify_all();
                drop(txg);
                if pool.store.is_failed() {
                    return;
                }
                // Avoid a hot loop while the cause (a full disk) persists.
                std::thread::sleep(Duration::from_millis(200));
            }
        }
        drop(pool);
    }
}
