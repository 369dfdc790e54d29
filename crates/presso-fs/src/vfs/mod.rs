//! POSIX file semantics over a [`Pool`]: open files, per-file record assembly, asynchronous
//! compression, the decompressed-record cache and readahead. The FUSE adapter only converts
//! arguments and calls in here.
//!
//! # A record's life on the write path
//!
//! ```text
//! write() ──copy──> Dirty(buffer)  ──record full, close, fsync, timeout──> Compressing(gen)
//!   ──engine worker: frame appended──> Stored(gen, ref) + op queued in the open txg
//!   ──group committed──> dropped from the overlay (the metadata now answers)
//! ```
//!
//! Every file with open handles or uncommitted records has a `FileNode` whose `overlay` holds
//! those records; reads look there first, so they see every write at once. Each submission gets
//! a new generation number; a completion whose generation is no longer the slot's (the record was
//! rewritten, truncated or its file removed meanwhile) is discarded and its frame counted dead, so
//! ops for one record reach the transaction group in write order.
//!
//! # Locks
//! `files` (the node map) may be taken before a node's `state`, never after. No lock is held
//! while submitting to the engine (its workers need the node lock to complete) or while calling
//! a metadata write that runs callbacks.

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{bounded, Sender};
use parking_lot::{Condvar, Mutex};
use presso_codec::{CodecSpec, Encoded, JobOptions, Offload, Record};
use presso_meta::{
    Attr, DirEntry, FileKind, LinkFate, ListAfter, MetaError, NewNode, RecordRef, SetAttr,
    Timespec, TxgOp, Unlinked, XattrFlags, ROOT_INO,
};

use crate::cache::{CacheStats, RecordCache};
use crate::error::{FsError, Result};
use crate::lifetime::{Lifetime, Work};
use crate::pool::{OpTag, Pool};
use crate::props;
use crate::reclaim::{ReclaimPolicy, Reclaimer};
use background::SpaceSeen;

mod background;
mod caller;
mod file;
mod listing;
#[cfg(test)]
mod listing_tests;
mod locks;
#[cfg(test)]
mod moved_tests;
mod namespace;
#[cfg(test)]
pub(crate) mod orphan_tests;
mod read;
mod report;
mod settings;
mod submission;
mod sweep;
mod unread;
mod unstored;
mod write;

use background::flusher;
pub use caller::Caller;
use file::{wait_compressed, wait_submitted, Budget, FileNode, FileState, Slot, CLEARING};
use listing::DirListing;
pub use locks::KernelLock;
pub use report::StatFs;
use submission::Job;
pub use submission::Submission;
pub use unstored::{Unstored, UnstoredFile};

/// Settings of the file layer.
#[derive(Debug, Clone)]
pub struct VfsConfig {
    /// Most bytes of records waiting for or in compression before writers wait.
    pub dirty_limit: usize,
    /// Capacity of the decompressed-record cache. The kernel's page cache keeps file data that
    /// was read; this cache serves reads of parts of a record and hands readahead to readers, so
    /// it can be small, and a small one reuses its memory instead of faulting in fresh pages
    /// (measured: 25% faster warm sequential reads at 64 MiB than at 256 MiB).
    pub cache_bytes: usize,
    /// Records decoded ahead of a sequential reader.
    pub readahead: usize,
    /// A partly written record untouched this long is compressed and committed anyway.
    pub flush_after: Duration,
    /// Everything the file layer received is durable (compressed, stored, segment and metadata
    /// synced) at most this long after it arrived: the durability sweep starts half of it after
    /// the oldest change not yet durable, leaving the other half for the sweep itself.
    pub sync_interval: Duration,
    /// Writes fail with ENOSPC while the host file system has less free space than this (after
    /// an automatic garbage collection pass, if there is garbage).
    pub min_free: u64,
    /// Automatic garbage collection while mounted; `None` leaves it to `presso gc`.
    pub reclaim: Option<ReclaimPolicy>,
}

impl Default for VfsConfig {
    fn default() -> Self {
        VfsConfig {
            dirty_limit: 256 << 20,
            cache_bytes: 64 << 20,
            readahead: 16,
            flush_after: Duration::from_secs(2),
            sync_interval: DEFAULT_SYNC_INTERVAL,
            min_free: 64 << 20,
            reclaim: Some(ReclaimPolicy::default()),
        }
    }
}

/// The default of [`VfsConfig::sync_interval`]: 5 s, the interval at which ZFS commits its
/// transaction groups and ext4 its journal.
pub const DEFAULT_SYNC_INTERVAL: Duration = Duration::from_secs(5);

/// Bytes moved through the file system, for throughput figures.
#[derive(Debug, Default)]
struct Traffic {
    written: AtomicU64,
    read: AtomicU64,
    /// Writes refused since the mount, and their bytes ([`Vfs::note_refused_write`]).
    refused: AtomicU64,
    refused_bytes: AtomicU64,
}

/// Directories whose settings are kept (all are dropped when more would be).
const DIR_SETTINGS_KEPT: usize = 4096;

/// What a file created in a directory inherits from it, as of one `props_generation`.
#[derive(Debug, Clone, Copy)]
struct DirSettings {
    generation: u64,
    spec: CodecSpec,
    options: JobOptions,
    recordsize: u64,
}

/// The extended attribute holding a file's capabilities.
const FILE_CAPABILITY: &[u8] = b"security.capability";

/// The file layer of a mounted pool.
pub struct Vfs {
    pool: Arc<Pool>,
    files: Mutex<HashMap<u64, Arc<FileNode>>>,
    /// The file each open handle is of.
    handles: Mutex<HashMap<u64, u64>>,
    /// Files this client has asked the metadata to lock a range of (shared pools only): a close
    /// asks it to drop locks only of these, instead of a write transaction per close.
    locked_files: Mutex<HashSet<u64>>,
    listings: Mutex<HashMap<u64, DirListing>>,
    /// The key of the tags that tell names apart in listing cookies (`Vfs::tags`), drawn
    /// at random for each mount.
    listing_key: std::collections::hash_map::RandomState,
    next_fh: AtomicU64,
    cache: Arc<RecordCache>,
    budget: Arc<Budget>,
    config: VfsConfig,
    readahead: Sender<(u64, u64, RecordRef)>,
    low_space: AtomicBool,
    /// The last look at the free space, which a write may rely on instead of looking again.
    space_seen: Mutex<Option<SpaceSeen>>,
    /// Bumped by every property change and every rename to another directory: settings cached
    /// with an older value are recomputed.
    props_generation: AtomicU64,
    /// Settings of directories new files were created in.
    dir_settings: Mutex<HashMap<u64, DirSettings>>,
    /// Whether some file may have a `security.capability` attribute: false while none had one
    /// at the mount and none was set since, so the kernel's question before each file's first
    /// write (and the privilege drop of each chown) needs no metadata read.
    capabilities: AtomicBool,
    traffic: Traffic,
    samples: Mutex<Vec<(Instant, u64, u64)>>,
    stopping: AtomicBool,
    reclaimer: Option<Arc<Reclaimer>>,
    lifetime: Lifetime,
    /// CPU queues the kernel has sent requests through over io_uring.
    ring_queues: AtomicU64,
}

impl Vfs {
    /// The file layer over `pool`; follows its Committed events and starts the readahead and
    /// flusher threads.
    pub fn new(pool: Arc<Pool>, config: VfsConfig) -> Arc<Vfs> {
        let (tx, rx) = bounded::<(u64, u64, RecordRef)>(256);
        let reclaimer = config
            .reclaim
            .map(|policy| Reclaimer::start(pool.clone(), policy));
        let vfs = Arc::new(Vfs {
            cache: Arc::new(RecordCache::new(config.cache_bytes)),
            budget: Arc::new(Budget {
                bytes: Mutex::new(0),
                room: Condvar::new(),
                limit: config.dirty_limit,
                failing: Mutex::new(None),
                making_room: Mutex::new(()),
            }),
            pool: pool.clone(),
            files: Mutex::new(HashMap::new()),
            handles: Mutex::new(HashMap::new()),
            locked_files: Mutex::new(HashSet::new()),
            listings: Mutex::new(HashMap::new()),
            listing_key: std::collections::hash_map::RandomState::new(),
            next_fh: AtomicU64::new(1),
            config,
            readahead: tx,
            low_space: AtomicBool::new(false),
            space_seen: Mutex::new(None),
            props_generation: AtomicU64::new(0),
            dir_settings: Mutex::new(HashMap::new()),
            // If the metadata cannot say, assume there may be some.
            capabilities: AtomicBool::new(pool.xattr_name_in_use(FILE_CAPABILITY).unwrap_or(true)),
            traffic: Traffic::default(),
            samples: Mutex::new(vec![(Instant::now(), 0, 0)]),
            stopping: AtomicBool::new(false),
            reclaimer,
            lifetime: Lifetime::default(),
            ring_queues: AtomicU64::new(0),
        });
        let workers = pool.options().workers.max(1);
        for i in 0..workers {
            let rx = rx.clone();
            let (pool, cache) = (pool.clone(), vfs.cache.clone());
            let _ = std::thread::Builder::new()
                .name(format!("presso-ra{i}"))
                .spawn(move || {
                    // Best effort at places that may be out of date by now: a failure is the
                    // reader's to meet, and to count if it is damage.
                    for (ino, index, rec) in rx {
                        let key = (rec.segment, rec.offset);
                        let _ =
                            cache.get_or_load(key, || pool.read_record_uncounted(ino, index, &rec));
                    }
                });
        }
        let events = pool.txgs().events();
        let weak = Arc::downgrade(&vfs);
        let _ = std::thread::Builder::new()
            .name("presso-committed".into())
            .spawn(move || {
                for group in events {
                    let Some(vfs) = weak.upgrade() else { return };
                    vfs.committed(&group.tags, group.number);
                }
            });
        let weak = Arc::downgrade(&vfs);
        let _ = std::thread::Builder::new()
            .name("presso-flush".into())
            .spawn(move || flusher(weak));
        let (weak, unsynced) = (Arc::downgrade(&vfs), pool.unsynced().clone());
        let delay = vfs.config.sync_interval / 2;
        let _ = std::thread::Builder::new()
            .name("presso-sweep".into())
            .spawn(move || sweep::sweeper(weak, unsynced, delay));
        vfs.check_space();
        vfs
    }

    /// The pool.
    pub fn pool(&self) -> &Arc<Pool> {
        &self.pool
    }

    // ---- open files

    pub(super) fn node(&self, ino: u64) -> Result<Arc<FileNode>> {
        if let Some(node) = self.files.lock().get(&ino) {
            return Ok(node.clone());
        }
        let attr = self.pool.getattr(ino)?;
        self.node_of(attr)
    }

    /// The node of the regular file whose committed attributes are `attr` (the one already in
    /// memory, if any): for a file just created, whose attributes the creation returned.
    pub(super) fn node_of(&self, attr: Attr) -> Result<Arc<FileNode>> {
        self.node_with(attr, None)
    }

    /// [`Vfs::node_of`]; `inherited` is the record size the file inherits when the caller knows
    /// that the file has none of its own (it was just created), which saves the lookup.
    fn node_with(&self, attr: Attr, inherited: Option<u64>) -> Result<Arc<FileNode>> {
        let ino = attr.ino;
        if let Some(node) = self.files.lock().get(&ino) {
            return Ok(node.clone());
        }
        match attr.kind {
            FileKind::File => {}
            FileKind::Dir => return Err(MetaError::IsDir.into()),
            _ => return Err(FsError::BadArgument("not a regular file")),
        }
        // A file's record size is fixed (stored as its own property) at its first write, so
        // later property changes never change how its records map to offsets. Until then it
        // follows the inherited value, and opening or reading it writes nothing.
        // The effective value is the file's own when it has one, so one lookup tells both.
        let (recordsize, recordsize_fixed) = match inherited {
            Some(recordsize) => (recordsize, false),
            None => {
                let (recordsize, source) = self.pool.get_prop(ino, props::RECORDSIZE)?;
                (settings::recordsize_of(&recordsize)?, source == Some(ino))
            }
        };
        let node = Arc::new(FileNode {
            ino,
            state: Mutex::new(FileState {
                size: attr.size,
                recordsize,
                recordsize_fixed,
                mtime: attr.mtime,
                open: 0,
                orphaned: false,
                overlay: BTreeMap::new(),
                cleared: Vec::new(),
                next_generation: 1,
                inflight: 0,
                error: None,
                unstored: Default::default(),
                store_error: None,
                size_dirty: false,
                size_queued: attr.size,
                tail_checked: false,
                queued_in: 0,
                last_read_end: u64::MAX,
                readahead_until: 0,
                recent: Default::default(),
                settings: None,
            }),
            changed: Condvar::new(),
        });
        Ok(self.files.lock().entry(ino).or_insert(node).clone())
    }

    /// Opens a regular file and returns a handle number.
    pub fn open(&self, ino: u64) -> Result<u64> {
        let node = self.node(ino)?;
        if self.pool.client().is_some() {
            self.refresh_size(&node)?;
        }
        Ok(self.opened(&node))
    }

    /// In a shared pool, takes the committed size of a file this client holds nothing
    /// unsaved of (it is open here already, so its node stayed): another client may have
    /// changed it, and an open must see what was closed before it (close-to-open). Its record
    /// map is read from the metadata anyway when nothing unsaved covers a record.
    fn refresh_size(&self, node: &Arc<FileNode>) -> Result<()> {
        let committed = self.pool.getattr(node.ino)?.size;
        let group = self.pool.txgs().last_committed();
        let mut st = node.state.lock();
        if st.all_committed(group) {
            st.size = committed;
        }
        Ok(())
    }

    /// Opens the regular file just created in directory `parent` with attributes `attr` (as
    /// [`Vfs::make_node`] returned them), without reading them back.
    pub fn open_created(&self, parent: u64, attr: &Attr) -> Result<u64> {
        // On failure the node looks its record size up itself, and the first write looks the
        // codec settings up again and reports the error.
        let settings = self.settings_of_new_file(parent).ok();
        let node = self.node_with(attr.clone(), settings.as_ref().map(|s| s.recordsize))?;
        {
            let mut st = node.state.lock();
            // A new file has no records, so none lies past its size: its first write need not
            // look.
            st.tail_checked = true;
            if let (None, Some(s)) = (&st.settings, &settings) {
                st.settings = Some((s.generation, s.spec, s.options));
            }
        }
        Ok(self.opened(&node))
    }

    fn opened(&self, node: &Arc<FileNode>) -> u64 {
        // The handle first: a file counted open always has one (`open_set`).
        let fh = self.next_fh.fetch_add(1, Ordering::Relaxed);
        self.handles.lock().insert(fh, node.ino);
        // A file counted open always has its node in the map, where a name change looks to
        // tell an open orphan from a closed one. A group commit since the node was made may
        // have forgotten it (not open yet): it goes back, or the node made since counts the
        // open. Counted under the map's lock, which the forgetting holds.
        let mut files = self.files.lock();
        let live = files.entry(node.ino).or_insert_with(|| node.clone());
        live.state.lock().open += 1;
        fh
    }

    /// `close()` of one descriptor: reports a failed earlier write of the file once. The file's
    /// partial records stay buffers until the last close of its handle (RELEASE), the flusher's
    /// tick or an fsync: each child of a program writing the file closes its copy of the
    /// descriptor as it exits, and storing the last record at every such close stored it over
    /// and over. In a shared pool it commits the file before it returns, so that a client
    /// opening it next reads all of it (close-to-open).
    pub fn flush(&self, ino: u64) -> Result<()> {
        if self.pool.client().is_some() {
            return self.commit_file(ino, false);
        }
        let Some(node) = self.files.lock().get(&ino).cloned() else {
            return Ok(());
        };
        let error = node.state.lock().error.take();
        error.map_or(Ok(()), |e| Err(FsError::Deferred(e)))
    }

    /// The last close of a handle.
    pub fn release(&self, ino: u64, fh: u64) -> Result<()> {
        self.release_deferred(ino, fh).map(Submission::submit)
    }

    /// Makes the file's data and metadata durable.
    pub fn fsync(&self, ino: u64) -> Result<()> {
        self.commit_file(ino, true)
    }

    /// Commits the file's data and metadata, durably with `durable`.
    fn commit_file(&self, ino: u64, durable: bool) -> Result<()> {
        if let Some(node) = self.files.lock().get(&ino).cloned() {
            self.submit_dirty(&node);
            let mut st = wait_compressed(&node);
            if let Some(error) = st.error.take() {
                return Err(FsError::Deferred(error));
            }
            if st.size_dirty {
                self.queue_size(&node, &mut st);
            }
        }
        self.pool.commit(durable)
    }

    /// fsync of a directory: makes every name made, changed or removed so far durable. Names
    /// commit to the metadata at once (not durably), and a durable commit makes every earlier
    /// commit durable with it.
    pub fn fsync_dir(&self) -> Result<()> {
        self.pool.commit(true)
    }

    /// Commits everything written so far (every file), durably: partial records are
    /// compressed and stored, sizes queued, then one durable commit.
    pub fn sync_all(&self) -> Result<()> {
        let nodes: Vec<_> = self.files.lock().values().cloned().collect();
        // Submit every file's records before waiting for any, so they compress in parallel.
        let marks: Vec<u64> = nodes.iter().map(|node| self.submit_dirty(node)).collect();
        // Only for the records submitted up to now: a writer that keeps a file's engine queue
        // busy must not keep this waiting.
        for (node, mark) in nodes.iter().zip(marks) {
            drop(wait_submitted(node, mark));
        }
        self.queue_sizes();
        // Statistics, not data: a failure to count is reported, never a failed sync.
        if let Err(e) = self.lifetime.save(self.pool.meta(), self.work()) {
            crate::log!("presso: the pool's lifetime statistics were not saved: {e}");
        }
        self.pool.commit(true)
    }

    /// Hands every Dirty record of `node` to the engine; returns the generation every record
    /// submitted so far is below.
    pub(super) fn submit_dirty(&self, node: &Arc<FileNode>) -> u64 {
        let (jobs, mark) = {
            let mut st = node.state.lock();
            let jobs = self.take_dirty(node, &mut st, |_| true);
            (jobs, st.next_generation)
        };
        self.submit(node, jobs);
        mark
    }

    /// Whether something the file layer received is not durable yet (the durability sweep is
    /// due or running).
    pub fn durability_pending(&self) -> bool {
        self.pool.unsynced().pending()
    }

    /// Counts a CPU queue the kernel sent its first request through over io_uring.
    pub fn count_ring_queue(&self) {
        self.ring_queues.fetch_add(1, Ordering::Relaxed);
    }

    /// CPU queues the kernel has sent requests through over io_uring (0: every request came
    /// through `/dev/fuse`).
    pub fn ring_queues(&self) -> u64 {
        self.ring_queues.load(Ordering::Relaxed)
    }

    /// Flushes everything, commits it durably and stops background work. Fails if anything
    /// could not be committed, or could not be stored at all ([`FsError::Unstored`]: that data
    /// is lost with the file layer).
    pub fn shutdown(&self) -> Result<()> {
        self.stop_background();
        let result = self.sync_all().and_then(|()| self.all_stored());
        self.pool.close().and(result)
    }

    /// Stops background work at once, flushing and committing nothing: what a killed daemon
    /// leaves behind (for crash tests). The file layer answers nothing useful afterwards.
    pub fn halt(&self) {
        self.stop_background();
        self.pool.halt();
    }

    /// Stops the flusher, the durability sweep and the automatic collector.
    fn stop_background(&self) {
        self.stopping.store(true, Ordering::SeqCst);
        self.pool.unsynced().stop();
        if let Some(reclaimer) = &self.reclaimer {
            reclaimer.stop();
        }
    }
}

impl Drop for Vfs {
    fn drop(&mut self) {
        self.pool.unsynced().stop();
        // The collector holds the pool, not the file layer: joining it here cannot wait on us.
        if let Some(reclaimer) = &self.reclaimer {
            reclaimer.stop();
        }
    }
}
