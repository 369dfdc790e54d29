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
//! the last is durable in full and recovery scans only the last one. Recovery cuts only bytes
//! past what the metadata committed ([`Committed`]): damage below that is kept and reported.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use parking_lot::{Mutex, RwLock};

use crate::error::{io_error, Result, StoreError};
use crate::header::{PoolHeader, FIXED_LEN, MAX_PROPERTIES_LEN, POOL_FILE, POOL_TMP_FILE};
use crate::io::{DirLock, LockError, Storage, StorageDir, LOCK_FILE};
use crate::segment::{
    decode_entry_header, encode_entry_header_for, scan_entries, scan_segment, segment_file_name,
    DamagedEntry, EntryFormat, EntryTag, SegmentHeader, ENTRY_HEADER_LEN, MAX_PAYLOAD_LEN,
    SEGMENT_HEADER_LEN,
};

mod config;
mod open;
mod others;
mod read;
mod segments;

pub use config::{SegmentRange, StoreConfig, CLIENT_SHIFT};

use open::{
    create_own_segment, dead_bytes, entry_bytes, fix_tail, lock_dir, open_sealed_segment,
    read_pool_header, recover_last_segment, stats_of, LastSegment,
};

/// Default size at which the store moves on to a new segment (256 MiB).
pub const DEFAULT_SEGMENT_SIZE: u64 = 256 << 20;
/// Number of the first segment of a pool.
pub const FIRST_SEGMENT: u64 = 1;

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
    /// Bytes the entry takes in its segment, envelope included, for an entry of the format this
    /// build writes (format 2). Entries of segments of format 1 are 32 bytes shorter; the store
    /// accounts each segment by its own format.
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
    /// Segments whose header is damaged (too short, or it does not decode), with why: kept as
    /// they are, since every entry verifies on its own when read. (A header that decodes but
    /// names another pool or segment number refuses the open.)
    pub bad_headers: Vec<(u64, String)>,
    /// The last segment is damaged below what the metadata committed in it (its scan stopped
    /// there, or its header is damaged): nothing was cut, it was sealed as it is, and appends go
    /// to a new segment. Reading a damaged entry reports corruption; the others read as before.
    pub kept_damage: bool,
}

impl RecoveryReport {
    /// Nothing to recover: a pool without segment files.
    pub(super) fn nothing(segment: u64) -> RecoveryReport {
        RecoveryReport {
            segment,
            entries: 0,
            damaged: Vec::new(),
            discarded_bytes: 0,
            stopped_at: None,
            reinitialized: false,
            bad_headers: Vec::new(),
            kept_damage: false,
        }
    }
}

/// What the metadata committed in the store, handed to [`Store::open`] so that recovery cuts
/// only bytes nobody was ever told about.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Committed {
    /// Per segment, its last committed entry (the one that ends last). A segment not listed
    /// holds no committed entry. Recovery reads the last segment's, and computes where it ends
    /// from the segment's entry format.
    pub last_entries: BTreeMap<u64, Location>,
    /// The highest segment number committed entries point into: new segments are numbered
    /// above it, so the number of a missing segment file is never given to new entries.
    pub highest_segment: u64,
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
    /// The tag of each valid entry (`tags[i]` is that of `entries[i]`): the record it holds, if
    /// it says (entries of format 2 written for a record).
    pub tags: Vec<Option<EntryTag>>,
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
    /// The format of its entries (from its header's version).
    format: EntryFormat,
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
    /// The current segment's blocks are reserved up to here (0: nothing known reserved).
    reserved: u64,
    /// Cleared once the storage says it cannot reserve.
    reserving: bool,
}

/// How far ahead of its appends the open segment's blocks are reserved at a time.
const RESERVE_STEP: u64 = 8 << 20;

impl Appender {
    /// Reserves the current segment's blocks (see [`crate::Storage::reserve`]) one
    /// [`RESERVE_STEP`] at a time, up to the segment's size, so that an append ending at `to`
    /// writes into reserved blocks: a file system allocating page by page as the writes come
    /// costs about 40% more CPU per byte appended (docs/benchmarks.md).
    fn reserve_ahead(&mut self, to: u64, segment_size: u64) {
        if !self.reserving || to <= self.reserved {
            return;
        }
        let from = self.current.end.load(Ordering::Relaxed).max(self.reserved);
        let upto = (from + RESERVE_STEP).min(segment_size).max(to);
        match self.current.storage.reserve(from, upto - from) {
            Ok(()) => {}
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::Unsupported | std::io::ErrorKind::InvalidInput
                ) =>
            {
                self.reserving = false
            }
            // A full disk or a failing one: the append itself meets it, or fits anyway.
            Err(_) => {}
        }
        self.reserved = upto;
    }

    /// Gives back the blocks reserved past the current segment's end, before it is sealed or
    /// the store closes: a truncate to its own length, done only when the file is exactly as
    /// long as what was appended, so it changes no byte. Best effort: blocks left reserved cost
    /// only space, and only until garbage collection removes the segment.
    fn give_back_reserved(&mut self) {
        let end = self.current.end.load(Ordering::Relaxed);
        if self.reserved > end && self.current.storage.len().is_ok_and(|len| len == end) {
            let _ = self.current.storage.set_len(end);
        }
        self.reserved = 0;
    }
}

impl Segment {
    /// Bytes the entry at `loc` takes in this segment, envelope included.
    fn entry_len(&self, loc: Location) -> u64 {
        self.format.header_len() as u64 + u64::from(loc.len)
    }
}

/// An open pool: appends, syncs and reads entries.
pub struct Store {
    dir: Arc<dyn StorageDir>,
    header: PoolHeader,
    config: StoreConfig,
    segments: RwLock<BTreeMap<u64, Arc<Segment>>>,
    /// Segments of other writers of a shared pool, opened when first read.
    foreign: RwLock<BTreeMap<u64, Arc<Segment>>>,
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
        Self::open_locked(dir, config, header, lock, &Committed::default())
    }

    /// Reads the pool header (refusing a non-pool or a newer version), takes the pool's lock
    /// (refusing a pool in use: [`StoreError::InUse`]), opens every segment, recovers the last
    /// one and makes it ready for appends. The lock is held until the store is dropped.
    ///
    /// Recovery cuts only bytes past `committed` (and past the last entry that verifies): damage
    /// below it is kept and reported in [`Store::recovery`], never cut, and a damaged segment
    /// header does not stop the open.
    pub fn open(
        dir: Arc<dyn StorageDir>,
        config: StoreConfig,
        committed: &Committed,
    ) -> Result<Self> {
        // The header first: a directory that is not a pool gets no lock file. The header never
        // changes after creation, so reading it before locking is safe.
        let header = read_pool_header(dir.as_ref())?;
        let lock = lock_dir(dir.as_ref())?;
        Self::open_locked(dir, config, header, lock, committed)
    }

    /// Reads the pool header of `dir` without locking or changing anything (refusing a
    /// directory that is not a pool, or a newer version): what callers check before an open.
    pub fn read_header(dir: &dyn StorageDir) -> Result<PoolHeader> {
        read_pool_header(dir)
    }

    fn open_locked(
        dir: Arc<dyn StorageDir>,
        config: StoreConfig,
        header: PoolHeader,
        lock: DirLock,
        committed: &Committed,
    ) -> Result<Self> {
        let own = config.own_segments;
        let numbers: Vec<u64> = dir
            .list_segments()
            .map_err(|e| io_error(&dir.describe(), 0, "list", e))?
            .into_iter()
            .filter(|&n| own.contains(n))
            .collect();
        let mut segments = BTreeMap::new();
        let mut bad_headers = Vec::new();
        let (mut recovery, last) = match numbers.split_last() {
            None => (RecoveryReport::nothing(FIRST_SEGMENT), None),
            Some((&last, earlier)) => {
                for &n in earlier {
                    let seg = open_sealed_segment(dir.as_ref(), n, &header, &mut bad_headers)?;
                    segments.insert(n, seg);
                }
                let last_entry = committed.last_entries.get(&last).copied();
                let (seg, report) = recover_last_segment(dir.as_ref(), last, &header, last_entry)?;
                (report, Some(seg))
            }
        };
        bad_headers.append(&mut recovery.bad_headers);
        recovery.bad_headers = bad_headers;
        // Appends go on in the last segment unless it was sealed at damage, or committed entries
        // point into a higher-numbered segment whose file is missing.
        let highest_committed = if own.contains(committed.highest_segment) {
            committed.highest_segment
        } else {
            0
        };
        let after = numbers.last().copied().unwrap_or(0).max(highest_committed);
        let next = (after + 1).max(own.start);
        let current = match last {
            Some(LastSegment::Open(seg)) if seg.number >= highest_committed => seg,
            Some(LastSegment::Open(seg) | LastSegment::Sealed(seg)) => {
                segments.insert(seg.number, seg);
                create_own_segment(dir.as_ref(), next, own, &header)?
            }
            None => create_own_segment(dir.as_ref(), next, own, &header)?,
        };
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
            foreign: RwLock::new(BTreeMap::new()),
            appender: Mutex::new(Appender {
                current,
                dirty: false,
                tail_dirty: false,
                failed: None,
                reserved: 0,
                reserving: true,
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

    /// Appends one untagged entry holding `payload`; see [`Store::append_tagged`].
    pub fn append(&self, payload: &[u8]) -> Result<Location> {
        self.append_tagged(payload, None)
    }

    /// Appends one entry holding `payload`, tagged with the record it holds if `tag` is given,
    /// and returns where it lives. The entry is readable at once but durable only after the next
    /// [`Store::sync`]. On an error (ENOSPC, EIO) nothing becomes visible: the segment is cut
    /// back to its last good end, and appends work again once the cause is gone. Entries are
    /// always of format 2: an open segment of format 1 (an older pool) is sealed first.
    pub fn append_tagged(&self, payload: &[u8], tag: Option<&EntryTag>) -> Result<Location> {
        self.append_parts(&[payload], crc32fast::hash(payload), tag)
    }

    /// [`Store::append_tagged`] for a payload given as `parts`, written from where they are with
    /// the entry's header in one vectored write instead of being copied together first.
    /// `payload_crc` is the CRC-32 of the whole payload, for a caller that has it without
    /// reading the payload again; a wrong one makes the entry fail its check when read.
    pub fn append_parts(
        &self,
        parts: &[&[u8]],
        payload_crc: u32,
        tag: Option<&EntryTag>,
    ) -> Result<Location> {
        let payload_len: usize = parts.iter().map(|p| p.len()).sum();
        debug_assert_eq!(
            payload_crc,
            crc32fast::hash(&parts.concat()),
            "the CRC given is not the payload's"
        );
        if payload_len > MAX_PAYLOAD_LEN as usize {
            return Err(StoreError::TooLarge {
                len: payload_len,
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
        let entry_len = (ENTRY_HEADER_LEN + payload_len) as u64;
        let end = a.current.end.load(Ordering::Relaxed);
        let full = end > SEGMENT_HEADER_LEN && end + entry_len > self.config.segment_size;
        if full || a.current.format != EntryFormat::V2 {
            self.roll_locked(&mut a)?;
        }
        let seg = a.current.clone();
        let offset = seg.end.load(Ordering::Relaxed);
        a.reserve_ahead(offset + entry_len, self.config.segment_size);
        // The header and the payload's parts in one vectored write where the storage has one;
        // a crash or an error within it leaves a torn entry, the case of any short write.
        let header = encode_entry_header_for(payload_len, payload_crc, tag);
        let mut pieces: Vec<&[u8]> = Vec::with_capacity(parts.len() + 1);
        pieces.push(&header);
        pieces.extend_from_slice(parts);
        match seg.storage.write_parts_at(&pieces, offset) {
            Ok(()) => {
                seg.end.store(offset + entry_len, Ordering::Release);
                a.dirty = true;
                Ok(Location {
                    segment: seg.number,
                    offset,
                    len: payload_len as u32,
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
    ///
    /// A store poisoned by a failed sync instead cuts its open segment back to the durable
    /// position (best effort) and reports the failure: the entries past it may or may not have
    /// reached the disk, nothing committed names them, and the next open should not find them.
    pub fn close(&self) -> Result<()> {
        let (result, lock) = self.close_keeping_lock();
        drop(lock);
        result
    }

    /// [`Store::close`], handing the pool's lock to the caller instead of releasing it: work
    /// that must be over before anyone may take the pool (removing a shared client's local
    /// directory, which holds the lock file) is done under it, and the lock goes when the caller
    /// drops it.
    pub fn close_keeping_lock(&self) -> (Result<()>, Option<DirLock>) {
        let result = self.sync().map(|_| ());
        if self.is_failed() {
            self.cut_to_durable();
        } else {
            self.appender.lock().give_back_reserved();
        }
        self.refuse_appends();
        (result, self.lock.lock().take())
    }

    /// Cuts the open segment back to what the last successful sync covered. Never below it:
    /// the metadata commits only entries a successful sync covered, so everything it names
    /// stays. Errors are ignored: recovery at the next open cuts the same tail.
    fn cut_to_durable(&self) {
        let a = self.appender.lock();
        let durable = *self.durable.lock();
        let seg = a.current.clone();
        let keep = match durable.segment.cmp(&seg.number) {
            std::cmp::Ordering::Equal => durable.offset,
            // Rolled since: the segment's header was synced when it was created, nothing after.
            std::cmp::Ordering::Less => SEGMENT_HEADER_LEN,
            std::cmp::Ordering::Greater => return,
        };
        let longer = seg.storage.len().is_ok_and(|len| len > keep);
        if !longer || (seg.storage.set_len(keep).is_ok() && seg.storage.sync().is_ok()) {
            seg.end.fetch_min(keep, Ordering::AcqRel);
        }
    }

    /// Refuses appends from now on and releases the pool's lock without syncing anything: what
    /// a killed process leaves (for crash tests).
    pub fn abandon(&self) {
        self.refuse_appends();
        self.lock.lock().take();
    }

    fn refuse_appends(&self) {
        let mut a = self.appender.lock();
        if a.failed.is_none() {
            a.failed = Some("the pool was closed".into());
        }
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
}
