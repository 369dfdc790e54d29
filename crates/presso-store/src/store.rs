//! The pool: a directory holding the header file and the segment files, and [`Store`], which
//! appends entries, syncs them, reads them back and recovers after a crash.
//!
//! Concurrency: one appender at a time (a mutex around the open segment's tail); readers never
//! take that mutex. They look the segment up under a short read lock of the segment map and read
//! with positional reads, so they run in parallel with each other and with the appender.
//!
//! Durability: `append` only writes. `sync` fsyncs and returns the durable [`Position`]; a
//! transaction group commits metadata that references frames only after the sync that covers
//! them. When a segment fills, it is synced before the next one is created, so every segment but
//! the last is durable in full and recovery scans only the last one.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{io_error, Result, StoreError};
use crate::header::{PoolHeader, FIXED_LEN, MAX_PROPERTIES_LEN, POOL_FILE, POOL_TMP_FILE};
use crate::io::{DirLock, LockError, Storage, StorageDir, LOCK_FILE};
use crate::segment::{
    decode_entry_header, encode_entry_header, scan_entries, scan_segment, segment_file_name,
    DamagedEntry, SegmentHeader, ENTRY_HEADER_LEN, MAX_PAYLOAD_LEN, SEGMENT_HEADER_LEN,
};

/// Default size at which the store moves on to a new segment (256 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 256 << 20;
/// Number of the first segment of a pool.
pub const FIRST_SEGMENT: u64 = 1;

/// Settings for opening a store (not stored in the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// An append that would take the open segment past this size goes to a new segment (an
    /// entry larger than this gets a segment of its own).
    pub segment_size: u64,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            segment_size: DEFAULT_SEGMENT_SIZE,
        }
    }
}

/// Where an entry lives: what the metadata records for a frame.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Location {
    /// Segment number.
    pub segment: u64,
    /// Offset of the entry's envelope in the segment file.
    pub offset: u64,
    /// Payload length (the frame's length).
    pub len: u32,
}

impl Location {
    /// Bytes the entry takes in its segment, envelope included.
    pub fn entry_len(&self) -> u64 {
        ENTRY_HEADER_LEN as u64 + u64::from(self.len)
    }
}

/// A point in the append stream: everything before it (in segment order) is covered.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Position {
    /// Segment number.
    pub segment: u64,
    /// Byte offset in that segment.
    pub offset: u64,
}

/// What recovery did when the store was opened.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecoveryReport {
    /// The segment that was scanned (the last one).
    pub segment: u64,
    /// Entries found in it (damaged ones included).
    pub entries: u64,
    /// Offsets of entries kept although their payload checksum fails (damage in the middle of the
    /// segment, followed by valid entries); reading them reports corruption.
    pub damaged: Vec<u64>,
    /// Bytes cut off its torn tail.
    pub discarded_bytes: u64,
    /// Why the scan stopped early, if it did (offset and reason).
    pub stopped_at: Option<(u64, String)>,
    /// The segment's header was incomplete (a crash while creating it) and was written again.
    pub reinitialized: bool,
}

/// What [`Store::entries`] found in one segment.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentEntries {
    /// Segment number.
    pub segment: u64,
    /// Entry bytes scanned (the segment header is not counted), as in [`SegmentStats`].
    pub total_bytes: u64,
    /// Valid entries, in file order.
    pub entries: Vec<Location>,
    /// Damaged stretches, in file order.
    pub damaged: Vec<DamagedEntry>,
}

/// Space accounting of one segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentStats {
    /// Segment number.
    pub segment: u64,
    /// Bytes of entries (envelopes included; the segment header is not counted).
    pub total_bytes: u64,
    /// Bytes of entries marked dead with [`Store::mark_dead`].
    pub dead_bytes: u64,
}

struct Segment {
    number: u64,
    name: String,
    storage: Arc<dyn Storage>,
    /// End of the last complete entry; readers see nothing past it.
    end: AtomicU64,
    dead: AtomicU64,
}

struct Appender {
    current: Arc<Segment>,
    /// The current segment has writes not yet synced.
    dirty: bool,
    /// A failed append may have left bytes past `current.end` that could not be truncated yet.
    tail_dirty: bool,
    /// Set after a failed sync; see [`StoreError::Failed`].
    failed: Option<String>,
}

/// An open pool: appends, syncs and reads entries.
pub struct Store {
    dir: Arc<dyn StorageDir>,
    header: PoolHeader,
    config: StoreConfig,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    appender: Mutex<Appender>,
    sync_lock: Mutex<()>,
    durable: Mutex<Position>,
    corruptions: AtomicU64,
    recovery: RecoveryReport,
    /// Last, so it is released only after every file of the pool is closed; or earlier, by
    /// [`Store::close`].
    lock: Mutex<Option<DirLock>>,
}

impl std::fmt::Debug for Store {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Store")
            .field("dir", &self.dir.describe())
            .field("uuid", &self.header.uuid)
            .field("config", &self.config)
            .finish_non_exhaustive()
    }
}

impl Store {
    /// Creates a pool in `dir` (which must hold no pool header and no segment files) and opens it.
    pub fn create(
        dir: Arc<dyn StorageDir>,
        properties: BTreeMap<String, String>,
        config: StoreConfig,
    ) -> Result<Self> {
        let header = PoolHeader::new(properties)?;
        let lock = lock_dir(dir.as_ref())?;
        let names = dir
            .list()
            .map_err(|e| io_error(&dir.describe(), 0, "list", e))?;
        if names.iter().any(|n| n == POOL_FILE) {
            return Err(StoreError::AlreadyExists {
                file: POOL_FILE.to_string(),
                reason: "a pool already exists in this directory",
            });
        }
        if let Some(&n) = dir
            .list_segments()
            .map_err(|e| io_error(&dir.describe(), 0, "list", e))?
            .first()
        {
            return Err(StoreError::AlreadyExists {
                file: segment_file_name(n),
                reason: "segment files without a pool header; refusing to create a pool over them",
            });
        }
        let bytes = header.encode();
        let tmp = POOL_TMP_FILE;
        if names.iter().any(|n| n == tmp) {
            dir.remove(tmp).map_err(|e| io_error(tmp, 0, "remove", e))?;
        }
        let file = dir.create(tmp).map_err(|e| io_error(tmp, 0, "create", e))?;
        file.write_at(&bytes, 0)
            .map_err(|e| io_error(tmp, 0, "write", e))?;
        file.sync().map_err(|e| io_error(tmp, 0, "sync", e))?;
        drop(file);
        dir.rename(tmp, POOL_FILE)
            .map_err(|e| io_error(POOL_FILE, 0, "rename", e))?;
        dir.sync_dir()
            .map_err(|e| io_error(&dir.describe(), 0, "sync directory", e))?;
        Self::open_locked(dir, config, header, lock)
    }

    /// Reads the pool header (refusing a non-pool or a newer version), takes the pool's lock
    /// (refusing a pool in use: [`StoreError::InUse`]), opens every segment, recovers the last
    /// one and makes it ready for appends. The lock is held until the store is dropped.
    pub fn open(dir: Arc<dyn StorageDir>, config: StoreConfig) -> Result<Self> {
        // The header first: a directory that is not a pool gets no lock file. The header never
        // changes after creation, so reading it before locking is safe.
        let header = read_pool_header(dir.as_ref())?;
        let lock = lock_dir(dir.as_ref())?;
        Self::open_locked(dir, config, header, lock)
    }

    fn open_locked(
        dir: Arc<dyn StorageDir>,
        config: StoreConfig,
        header: PoolHeader,
        lock: DirLock,
    ) -> Result<Self> {
        let numbers = dir
            .list_segments()
            .map_err(|e| io_error(&dir.describe(), 0, "list", e))?;
        let mut segments = BTreeMap::new();
        let recovery;
        let current;
        match numbers.split_last() {
            None => {
                let seg = create_segment(dir.as_ref(), FIRST_SEGMENT, &header)?;
                recovery = RecoveryReport {
                    segment: FIRST_SEGMENT,
                    entries: 0,
                    damaged: Vec::new(),
                    discarded_bytes: 0,
                    stopped_at: None,
                    reinitialized: false,
                };
                current = seg;
            }
            Some((&last, earlier)) => {
                for &n in earlier {
                    let seg = open_sealed_segment(dir.as_ref(), n, &header)?;
                    segments.insert(n, seg);
                }
                let (seg, report) = recover_last_segment(dir.as_ref(), last, &header)?;
                recovery = report;
                current = seg;
            }
        }
        segments.insert(current.number, current.clone());
        let durable = Position {
            segment: current.number,
            offset: current.end.load(Ordering::Acquire),
        };
        Ok(Self {
            dir,
            header,
            config,
            segments: RwLock::new(segments),
            appender: Mutex::new(Appender {
                current,
                dirty: false,
                tail_dirty: false,
                failed: None,
            }),
            sync_lock: Mutex::new(()),
            durable: Mutex::new(durable),
            corruptions: AtomicU64::new(0),
            recovery,
            lock: Mutex::new(Some(lock)),
        })
    }

    /// The pool header.
    pub fn header(&self) -> &PoolHeader {
        &self.header
    }

    /// What recovery did at open.
    pub fn recovery(&self) -> &RecoveryReport {
        &self.recovery
    }

    /// The settings the store was opened with.
    pub fn config(&self) -> StoreConfig {
        self.config
    }

    /// Appends one entry holding `payload` and returns where it lives. The entry is readable at
    /// once but durable only after the next [`Store::sync`]. On an error (ENOSPC, EIO) nothing
    /// becomes visible: the segment is cut back to its last good end, and appends work again once
    /// the cause is gone.
    pub fn append(&self, payload: &[u8]) -> Result<Location> {
        if payload.len() > MAX_PAYLOAD_LEN as usize {
            return Err(StoreError::TooLarge {
                len: payload.len(),
                max: MAX_PAYLOAD_LEN,
            });
        }
        let mut a = self.appender.lock();
        if let Some(reason) = &a.failed {
            return Err(StoreError::Failed {
                reason: reason.clone(),
            });
        }
        fix_tail(&mut a)?;
        let entry_len = (ENTRY_HEADER_LEN + payload.len()) as u64;
        let end = a.current.end.load(Ordering::Relaxed);
        if end > SEGMENT_HEADER_LEN && end + entry_len > self.config.segment_size {
            self.roll_locked(&mut a)?;
        }
        let seg = a.current.clone();
        let offset = seg.end.load(Ordering::Relaxed);
        // Two writes instead of copying the payload behind its header: a crash or an error
        // between them leaves a torn entry, which is the same case as a short single write.
        let written = seg
            .storage
            .write_at(&encode_entry_header(payload), offset)
            .and_then(|()| {
                seg.storage
                    .write_at(payload, offset + ENTRY_HEADER_LEN as u64)
            });
        match written {
            Ok(()) => {
                seg.end.store(offset + entry_len, Ordering::Release);
                a.dirty = true;
                Ok(Location {
                    segment: seg.number,
                    offset,
                    len: payload.len() as u32,
                })
            }
            Err(e) => {
                a.tail_dirty = true;
                // Best effort now; if the truncate fails too, the next append or sync retries.
                let _ = fix_tail(&mut a);
                Err(io_error(&seg.name, offset, "write", e))
            }
        }
    }

    /// Makes everything durable, refuses appends from now on and releases the pool's lock, so
    /// the pool can be opened again (by this process or another) while this value still lives
    /// for readers that finish their work.
    pub fn close(&self) -> Result<()> {
        let result = self.sync().map(|_| ());
        self.abandon();
        result
    }

    /// Refuses appends from now on and releases the pool's lock without syncing anything: what
    /// a killed process leaves (for crash tests).
    pub fn abandon(&self) {
        let mut a = self.appender.lock();
        if a.failed.is_none() {
            a.failed = Some("the pool was closed".into());
        }
        drop(a);
        self.lock.lock().take();
    }

    /// Makes every entry appended so far durable and returns the durable position. Concurrent
    /// calls are serialised; appends continue while the fsync runs.
    ///
    /// A failed fsync poisons the store ([`StoreError::Failed`]) until it is reopened: after such
    /// a failure the kernel may have dropped the dirty pages, and retrying cannot tell.
    pub fn sync(&self) -> Result<Position> {
        let _serial = self.sync_lock.lock();
        let (to_sync, pos) = {
            let mut a = self.appender.lock();
            if let Some(reason) = &a.failed {
                return Err(StoreError::Failed {
                    reason: reason.clone(),
                });
            }
            let _ = fix_tail(&mut a);
            let pos = Position {
                segment: a.current.number,
                offset: a.current.end.load(Ordering::Relaxed),
            };
            let dirty = std::mem::replace(&mut a.dirty, false);
            (dirty.then(|| a.current.clone()), pos)
        };
        if let Some(seg) = to_sync {
            if let Err(e) = seg.storage.sync() {
                let err = io_error(&seg.name, pos.offset, "sync", e);
                self.appender.lock().failed = Some(err.to_string());
                return Err(err);
            }
        }
        let mut durable = self.durable.lock();
        *durable = (*durable).max(pos);
        Ok(*durable)
    }

    /// Whether a failed sync has stopped writes (see [`StoreError::Failed`]).
    pub fn is_failed(&self) -> bool {
        self.appender.lock().failed.is_some()
    }

    /// The position the last successful sync covered.
    pub fn durable_position(&self) -> Position {
        *self.durable.lock()
    }

    /// Reads and verifies the entry at `loc`, returning its payload. A damaged entry is a
    /// [`StoreError::CorruptEntry`] naming segment and offset, and is counted.
    pub fn read(&self, loc: Location) -> Result<Vec<u8>> {
        let bad = |reason| StoreError::BadLocation {
            segment: loc.segment,
            offset: loc.offset,
            len: loc.len,
            reason,
        };
        let seg = self.segment(loc.segment)?;
        let end = seg.end.load(Ordering::Acquire);
        if loc.len > MAX_PAYLOAD_LEN {
            return Err(bad("payload length over the maximum"));
        }
        if loc.offset < SEGMENT_HEADER_LEN || loc.offset.saturating_add(loc.entry_len()) > end {
            return Err(bad("outside the segment's entries"));
        }
        let mut h = [0u8; ENTRY_HEADER_LEN];
        seg.storage
            .read_at(&mut h, loc.offset)
            .map_err(|e| io_error(&seg.name, loc.offset, "read", e))?;
        let header = decode_entry_header(&h).map_err(|e| self.corrupt(loc, e.to_string()))?;
        if header.payload_len != loc.len {
            return Err(self.corrupt(
                loc,
                format!(
                    "entry holds {} payload bytes, the location says {}",
                    header.payload_len, loc.len
                ),
            ));
        }
        let at = loc.offset + ENTRY_HEADER_LEN as u64;
        let payload = seg
            .storage
            .read_vec_at(loc.len as usize, at)
            .map_err(|e| io_error(&seg.name, at, "read", e))?;
        if crc32fast::hash(&payload) != header.payload_crc {
            return Err(self.corrupt(loc, "payload CRC-32 mismatch".to_string()));
        }
        Ok(payload)
    }

    fn corrupt(&self, loc: Location, reason: String) -> StoreError {
        self.corruptions.fetch_add(1, Ordering::Relaxed);
        StoreError::CorruptEntry {
            segment: loc.segment,
            offset: loc.offset,
            reason,
        }
    }

    /// Number of corrupt entries [`Store::read`] has met since open.
    pub fn corruptions(&self) -> u64 {
        self.corruptions.load(Ordering::Relaxed)
    }

    /// Counts the entry at `loc` as garbage (its record was replaced or freed). Accounting only:
    /// the bytes stay until garbage collection rewrites the segment. The counts live in memory;
    /// after a restart the caller re-marks from its metadata.
    pub fn mark_dead(&self, loc: Location) -> Result<()> {
        let seg = self.segment(loc.segment)?;
        let end = seg.end.load(Ordering::Acquire);
        if loc.offset < SEGMENT_HEADER_LEN || loc.offset.saturating_add(loc.entry_len()) > end {
            return Err(StoreError::BadLocation {
                segment: loc.segment,
                offset: loc.offset,
                len: loc.len,
                reason: "outside the segment's entries",
            });
        }
        let total = end - SEGMENT_HEADER_LEN;
        let _ = seg
            .dead
            .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |d| {
                Some((d + loc.entry_len()).min(total))
            });
        Ok(())
    }

    /// Share of a segment's entry bytes that are still live (1.0 for an empty segment), or
    /// `None` if there is no such segment.
    pub fn live_fraction(&self, segment: u64) -> Option<f64> {
        let s = self.segment_stats(segment)?;
        if s.total_bytes == 0 {
            return Some(1.0);
        }
        Some((s.total_bytes - s.dead_bytes) as f64 / s.total_bytes as f64)
    }

    /// Space accounting of one segment.
    pub fn segment_stats(&self, segment: u64) -> Option<SegmentStats> {
        let seg = self.segments.read().get(&segment).cloned()?;
        Some(stats_of(&seg))
    }

    /// Space accounting of every segment, ascending.
    pub fn all_segment_stats(&self) -> Vec<SegmentStats> {
        self.segments.read().values().map(|s| stats_of(s)).collect()
    }

    /// Bytes of entries marked dead over all segments: what garbage collection can reclaim.
    pub fn dead_bytes(&self) -> u64 {
        self.segments
            .read()
            .values()
            .map(|s| s.dead.load(Ordering::Relaxed))
            .sum()
    }

    /// The position the next append goes to (not yet durable).
    pub fn append_position(&self) -> Position {
        let a = self.appender.lock();
        Position {
            segment: a.current.number,
            offset: a.current.end.load(Ordering::Relaxed),
        }
    }

    /// Numbers of all segments, ascending (the last is the one open for appends).
    pub fn segments(&self) -> Vec<u64> {
        self.segments.read().keys().copied().collect()
    }

    /// Number of the segment open for appends.
    pub fn current_segment(&self) -> u64 {
        self.appender.lock().current.number
    }

    /// Seals the segment open for appends — syncs it in full — and starts a new one; returns the
    /// sealed segment's number. Garbage collection rolls before collecting the open segment,
    /// which [`Store::remove_segment`] refuses.
    pub fn roll(&self) -> Result<u64> {
        let mut a = self.appender.lock();
        if let Some(reason) = &a.failed {
            return Err(StoreError::Failed {
                reason: reason.clone(),
            });
        }
        fix_tail(&mut a)?;
        let sealed = a.current.number;
        self.roll_locked(&mut a)?;
        Ok(sealed)
    }

    /// Deletes a sealed segment's file, durably (the directory is synced after the unlink). The
    /// caller must have made sure no committed metadata references it any more.
    ///
    /// The segment leaves the store before the file goes: reads started afterwards fail with
    /// [`StoreError::NoSuchSegment`], while reads already under way finish, since the open
    /// file survives its unlink. The open segment is refused with
    /// [`StoreError::CurrentSegment`]. If the unlink fails the segment stays in the store; if
    /// the directory sync fails the file may come back after a crash, as a segment no metadata
    /// references (garbage that scrub finds and GC removes again).
    pub fn remove_segment(&self, segment: u64) -> Result<()> {
        let seg = {
            // The appender lock keeps a roll from making `segment` current meanwhile.
            let a = self.appender.lock();
            if a.current.number == segment {
                return Err(StoreError::CurrentSegment { segment });
            }
            self.segments
                .write()
                .remove(&segment)
                .ok_or(StoreError::NoSuchSegment { segment })?
        };
        if let Err(e) = self.dir.remove(&seg.name) {
            let err = io_error(&seg.name, 0, "remove", e);
            self.segments.write().insert(segment, seg);
            return Err(err);
        }
        self.dir
            .sync_dir()
            .map_err(|e| io_error(&self.dir.describe(), 0, "sync directory", e))
    }

    /// Scans a segment from its first entry to its end, verifying every envelope and payload,
    /// for scrub and garbage collection. Valid entries come back as [`Location`]s, damage as
    /// [`DamagedEntry`]s; after an unreadable envelope the scan finds the next valid one and
    /// goes on (see [`scan_entries`]). For the open segment the scan covers the entries appended
    /// when it starts. A damaged segment header is an error ([`StoreError::Corrupt`]): the pool
    /// would not open again with it.
    pub fn entries(&self, segment: u64) -> Result<SegmentEntries> {
        let seg = self.segment(segment)?;
        let end = seg.end.load(Ordering::Acquire);
        check_segment_header(seg.storage.as_ref(), &seg.name, segment, &self.header)?;
        let scan = scan_entries(seg.storage.as_ref(), SEGMENT_HEADER_LEN, end)
            .map_err(|e| io_error(&seg.name, SEGMENT_HEADER_LEN, "read", e))?;
        Ok(SegmentEntries {
            segment,
            total_bytes: end - SEGMENT_HEADER_LEN,
            entries: scan
                .entries
                .into_iter()
                .map(|(offset, len)| Location {
                    segment,
                    offset,
                    len,
                })
                .collect(),
            damaged: scan.damaged,
        })
    }

    /// Sets how many of a segment's entry bytes are live, as counted from the metadata after
    /// open (the dead counts live in memory only): the dead bytes become the segment's total
    /// entry bytes minus `live_entry_bytes`. The live bytes of a set of entries are the sum of
    /// their [`Location::entry_len`], i.e. payload bytes plus [`ENTRY_HEADER_LEN`] per entry.
    /// More live bytes than the segment holds is [`StoreError::LiveBytesTooLarge`].
    pub fn set_live_bytes(&self, segment: u64, live_entry_bytes: u64) -> Result<()> {
        let seg = self.segment(segment)?;
        let total = seg.end.load(Ordering::Acquire) - SEGMENT_HEADER_LEN;
        if live_entry_bytes > total {
            return Err(StoreError::LiveBytesTooLarge {
                segment,
                live: live_entry_bytes,
                total,
            });
        }
        seg.dead.store(total - live_entry_bytes, Ordering::Relaxed);
        Ok(())
    }

    /// Bytes of all segment files, segment headers included (the pool header and lock file are
    /// not counted).
    pub fn disk_usage(&self) -> u64 {
        self.segments
            .read()
            .values()
            .map(|s| s.end.load(Ordering::Acquire))
            .sum()
    }

    /// Total and available bytes where the pool's files live, if the directory knows
    /// ([`StorageDir::space`]).
    pub fn space(&self) -> Option<(u64, u64)> {
        self.dir.space()
    }

    /// The pool directory, for messages.
    pub fn describe(&self) -> String {
        self.dir.describe()
    }

    fn segment(&self, segment: u64) -> Result<Arc<Segment>> {
        self.segments
            .read()
            .get(&segment)
            .cloned()
            .ok_or(StoreError::NoSuchSegment { segment })
    }

    /// Seals the current segment (synced in full) and starts the next one.
    fn roll_locked(&self, a: &mut Appender) -> Result<()> {
        let old = a.current.clone();
        let end = old.end.load(Ordering::Relaxed);
        // Sync even when nothing is dirty here: a concurrent `Store::sync` may have taken the
        // dirty flag and still be in its fsync. Every segment but the last must be durable in
        // full before the next one exists, since recovery scans only the last.
        if let Err(e) = old.storage.sync() {
            let err = io_error(&old.name, end, "sync", e);
            a.failed = Some(err.to_string());
            return Err(err);
        }
        a.dirty = false;
        {
            let mut durable = self.durable.lock();
            *durable = (*durable).max(Position {
                segment: old.number,
                offset: end,
            });
        }
        let seg = create_segment(self.dir.as_ref(), old.number + 1, &self.header)?;
        self.segments.write().insert(seg.number, seg.clone());
        a.current = seg;
        Ok(())
    }
}

/// Takes the pool directory's lock.
fn lock_dir(dir: &dyn StorageDir) -> Result<DirLock> {
    dir.lock().map_err(|e| match e {
        LockError::Held { pid } => StoreError::InUse { pid },
        LockError::Io(e) => io_error(LOCK_FILE, 0, "lock", e),
    })
}

fn stats_of(seg: &Segment) -> SegmentStats {
    SegmentStats {
        segment: seg.number,
        total_bytes: seg.end.load(Ordering::Acquire) - SEGMENT_HEADER_LEN,
        dead_bytes: seg.dead.load(Ordering::Relaxed),
    }
}

/// Cuts bytes a failed append may have left past the segment's end.
fn fix_tail(a: &mut Appender) -> Result<()> {
    if a.tail_dirty {
        let end = a.current.end.load(Ordering::Relaxed);
        a.current
            .storage
            .set_len(end)
            .map_err(|e| io_error(&a.current.name, end, "truncate", e))?;
        a.tail_dirty = false;
    }
    Ok(())
}

fn read_pool_header(dir: &dyn StorageDir) -> Result<PoolHeader> {
    let file = match dir.open(POOL_FILE) {
        Ok(f) => f,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
            return Err(StoreError::NotAPool {
                file: format!("{}/{POOL_FILE}", dir.describe()),
                reason: "no pool header file".to_string(),
            })
        }
        Err(e) => return Err(io_error(POOL_FILE, 0, "open", e)),
    };
    let len = file.len().map_err(|e| io_error(POOL_FILE, 0, "stat", e))?;
    let max = (FIXED_LEN + MAX_PROPERTIES_LEN) as u64;
    // Read at most one byte more than the largest valid header, so a huge file is refused by
    // decode without reading all of it.
    let mut bytes = vec![0u8; len.min(max + 1) as usize];
    file.read_at(&mut bytes, 0)
        .map_err(|e| io_error(POOL_FILE, 0, "read", e))?;
    PoolHeader::decode(&bytes, POOL_FILE)
}

/// Creates segment `number`: header written and synced, directory synced. On failure the
/// partial file is removed.
fn create_segment(dir: &dyn StorageDir, number: u64, pool: &PoolHeader) -> Result<Arc<Segment>> {
    let name = segment_file_name(number);
    let storage = match dir.create(&name) {
        Ok(s) => s,
        Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
            // A leftover of an earlier failed creation (never held entries: it is past the end).
            dir.remove(&name)
                .map_err(|e| io_error(&name, 0, "remove", e))?;
            dir.create(&name)
                .map_err(|e| io_error(&name, 0, "create", e))?
        }
        Err(e) => return Err(io_error(&name, 0, "create", e)),
    };
    let header = SegmentHeader {
        number,
        pool_uuid: pool.uuid,
    }
    .encode();
    let res = storage
        .write_at(&header, 0)
        .map_err(|e| io_error(&name, 0, "write", e))
        .and_then(|()| storage.sync().map_err(|e| io_error(&name, 0, "sync", e)))
        .and_then(|()| {
            dir.sync_dir()
                .map_err(|e| io_error(&dir.describe(), 0, "sync directory", e))
        });
    if let Err(e) = res {
        drop(storage);
        let _ = dir.remove(&name);
        return Err(e);
    }
    Ok(Arc::new(Segment {
        number,
        name,
        storage,
        end: AtomicU64::new(SEGMENT_HEADER_LEN),
        dead: AtomicU64::new(0),
    }))
}

fn check_segment_header(
    storage: &dyn Storage,
    name: &str,
    number: u64,
    pool: &PoolHeader,
) -> Result<()> {
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    storage
        .read_at(&mut h, 0)
        .map_err(|e| io_error(name, 0, "read", e))?;
    let header = SegmentHeader::decode(&h, name)?;
    if header.number != number {
        return Err(StoreError::Corrupt {
            file: name.to_string(),
            offset: 8,
            reason: format!("segment header says segment {}", header.number),
        });
    }
    if header.pool_uuid != pool.uuid {
        return Err(StoreError::Corrupt {
            file: name.to_string(),
            offset: 16,
            reason: "segment belongs to another pool".to_string(),
        });
    }
    Ok(())
}

/// Opens a segment before the last: durable in full, so only its header is checked.
fn open_sealed_segment(
    dir: &dyn StorageDir,
    number: u64,
    pool: &PoolHeader,
) -> Result<Arc<Segment>> {
    let name = segment_file_name(number);
    let storage = dir.open(&name).map_err(|e| io_error(&name, 0, "open", e))?;
    let len = storage.len().map_err(|e| io_error(&name, 0, "stat", e))?;
    if len < SEGMENT_HEADER_LEN {
        return Err(StoreError::Corrupt {
            file: name,
            offset: len,
            reason: "sealed segment shorter than its header".to_string(),
        });
    }
    check_segment_header(storage.as_ref(), &name, number, pool)?;
    Ok(Arc::new(Segment {
        number,
        name,
        storage,
        end: AtomicU64::new(len),
        dead: AtomicU64::new(0),
    }))
}

/// Opens the last segment, cuts its torn tail and syncs it.
fn recover_last_segment(
    dir: &dyn StorageDir,
    number: u64,
    pool: &PoolHeader,
) -> Result<(Arc<Segment>, RecoveryReport)> {
    let name = segment_file_name(number);
    let storage = dir.open(&name).map_err(|e| io_error(&name, 0, "open", e))?;
    let len = storage.len().map_err(|e| io_error(&name, 0, "stat", e))?;
    let header_ok = if len >= SEGMENT_HEADER_LEN {
        let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
        storage
            .read_at(&mut h, 0)
            .map_err(|e| io_error(&name, 0, "read", e))?;
        SegmentHeader::decode(&h, &name).is_ok()
    } else {
        false
    };
    if !header_ok && len <= SEGMENT_HEADER_LEN {
        // A crash while the segment was being created: entries are written only after the header
        // is durable, so there is nothing to lose. Write the header again.
        let header = SegmentHeader {
            number,
            pool_uuid: pool.uuid,
        }
        .encode();
        storage
            .set_len(0)
            .map_err(|e| io_error(&name, 0, "truncate", e))?;
        storage
            .write_at(&header, 0)
            .map_err(|e| io_error(&name, 0, "write", e))?;
        storage.sync().map_err(|e| io_error(&name, 0, "sync", e))?;
        let report = RecoveryReport {
            segment: number,
            entries: 0,
            damaged: Vec::new(),
            discarded_bytes: len,
            stopped_at: None,
            reinitialized: true,
        };
        let seg = Segment {
            number,
            name,
            storage,
            end: AtomicU64::new(SEGMENT_HEADER_LEN),
            dead: AtomicU64::new(0),
        };
        return Ok((Arc::new(seg), report));
    }
    check_segment_header(storage.as_ref(), &name, number, pool)?;
    let scan = scan_segment(storage.as_ref(), SEGMENT_HEADER_LEN)
        .map_err(|e| io_error(&name, SEGMENT_HEADER_LEN, "read", e))?;
    if scan.good_end < len {
        storage
            .set_len(scan.good_end)
            .map_err(|e| io_error(&name, scan.good_end, "truncate", e))?;
    }
    // Sync even without a cut: entries that survived a crash only in the page cache become
    // durable before anything is appended after them.
    storage
        .sync()
        .map_err(|e| io_error(&name, scan.good_end, "sync", e))?;
    let report = RecoveryReport {
        segment: number,
        entries: scan.entries,
        damaged: scan.damaged,
        discarded_bytes: len - scan.good_end,
        stopped_at: scan.stop.map(|(off, e)| (off, e.to_string())),
        reinitialized: false,
    };
    let seg = Segment {
        number,
        name,
        storage,
        end: AtomicU64::new(scan.good_end),
        dead: AtomicU64::new(0),
    };
    Ok((Arc::new(seg), report))
}
