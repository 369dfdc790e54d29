//! Opening a pool directory: its lock, its header, creating segments and recovering the last
//! one (cutting a torn tail past what the metadata committed, never damage below it).

use super::*;

/// Takes the pool directory's lock.
pub(super) fn lock_dir(dir: &dyn StorageDir) -> Result<DirLock> {
    dir.lock().map_err(|e| match e {
        LockError::Held { pid } => StoreError::InUse { pid },
        LockError::Io(e) => io_error(LOCK_FILE, 0, "lock", e),
    })
}

/// Entry bytes of a segment whose entries end at `end`. A file shorter than its header (damage
/// kept as it is at open) holds none.
pub(super) fn entry_bytes(end: u64) -> u64 {
    end.saturating_sub(SEGMENT_HEADER_LEN)
}

/// Dead bytes of segment `segment`, which holds `total` entry bytes of which `live` are live
/// (as the metadata counts them); more live bytes than it holds is
/// [`StoreError::LiveBytesTooLarge`].
pub(super) fn dead_bytes(segment: u64, total: u64, live: u64) -> Result<u64> {
    total
        .checked_sub(live)
        .ok_or(StoreError::LiveBytesTooLarge {
            segment,
            live,
            total,
        })
}

pub(super) fn stats_of(seg: &Segment) -> SegmentStats {
    SegmentStats {
        segment: seg.number,
        total_bytes: entry_bytes(seg.end.load(Ordering::Acquire)),
        dead_bytes: seg.dead.load(Ordering::Relaxed),
    }
}

/// Cuts bytes a failed append may have left past the segment's end.
pub(super) fn fix_tail(a: &mut Appender) -> Result<()> {
    if a.tail_dirty {
        let end = a.current.end.load(Ordering::Relaxed);
        a.current
            .storage
            .set_len(end)
            .map_err(|e| io_error(&a.current.name, end, "truncate", e))?;
        a.tail_dirty = false;
        // The truncate gave back the blocks reserved past the end too.
        a.reserved = 0;
    }
    Ok(())
}

pub(super) fn read_pool_header(dir: &dyn StorageDir) -> Result<PoolHeader> {
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
/// [`create_segment`] for a number that must be in `own`.
pub(super) fn create_own_segment(
    dir: &dyn StorageDir,
    number: u64,
    own: SegmentRange,
    pool: &PoolHeader,
) -> Result<Arc<Segment>> {
    if !own.contains(number) {
        return Err(StoreError::SegmentNumbersUsedUp {
            start: own.start,
            end: own.end,
        });
    }
    create_segment(dir, number, pool)
}

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
    let header = SegmentHeader::new(number, pool.uuid).encode();
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
        format: EntryFormat::V2,
        name,
        storage,
        end: AtomicU64::new(SEGMENT_HEADER_LEN),
        dead: AtomicU64::new(0),
    }))
}

fn check_segment_header(
    header: &SegmentHeader,
    name: &str,
    number: u64,
    pool: &PoolHeader,
) -> Result<()> {
    if header.number != number {
        return Err(StoreError::Corrupt {
            file: name.to_string(),
            offset: 8,
            reason: format!(
                "the segment header says segment {} (a file renamed or copied here); move the \
                 file out of this pool's directory",
                header.number
            ),
        });
    }
    if header.pool_uuid != pool.uuid {
        return Err(StoreError::Corrupt {
            file: name.to_string(),
            offset: 16,
            reason: "the segment belongs to another pool (its header names another pool id); \
                     move the file out of this pool's directory"
                .to_string(),
        });
    }
    Ok(())
}

/// Opens a segment before the last: durable in full, so nothing is scanned. A damaged header is
/// reported in `bad_headers` and the file kept as it is: every entry verifies on its own when
/// read, so the undamaged ones stay readable. A segment of another pool is refused.
pub(super) fn open_sealed_segment(
    dir: &dyn StorageDir,
    number: u64,
    pool: &PoolHeader,
    bad_headers: &mut Vec<(u64, String)>,
) -> Result<Arc<Segment>> {
    let name = segment_file_name(number);
    let storage = dir.open(&name).map_err(|e| io_error(&name, 0, "open", e))?;
    let len = storage.len().map_err(|e| io_error(&name, 0, "stat", e))?;
    let format = match verify_segment_header(storage.as_ref(), &name, number, pool, len)? {
        Ok(format) => format,
        Err(e) => {
            bad_headers.push((number, e));
            guess_format(storage.as_ref(), len)
        }
    };
    Ok(Arc::new(Segment {
        number,
        format,
        name,
        storage,
        end: AtomicU64::new(len),
        dead: AtomicU64::new(0),
    }))
}

/// The format of the segment's entries (from its header's version), or `Ok(Err(reason))` when
/// the segment's header is damaged (too short, or it does not decode: magic, version, CRC-32).
/// A header that decodes but names another segment number or another pool is an error: that
/// file was put there, and its entries could verify while holding other data than the metadata
/// expects.
fn verify_segment_header(
    storage: &dyn Storage,
    name: &str,
    number: u64,
    pool: &PoolHeader,
    len: u64,
) -> Result<std::result::Result<EntryFormat, String>> {
    if len < SEGMENT_HEADER_LEN {
        return Ok(Err(format!(
            "{name}: shorter than a segment header ({len} bytes)"
        )));
    }
    let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
    storage
        .read_at(&mut h, 0)
        .map_err(|e| io_error(name, 0, "read", e))?;
    let header = match SegmentHeader::decode(&h, name) {
        Ok(header) => header,
        Err(e) => return Ok(Err(e.to_string())),
    };
    check_segment_header(&header, name, number, pool)?;
    Ok(Ok(EntryFormat::of_segment_version(header.version)))
}

/// The entry format of a segment whose header is damaged: that of its first entry, if its magic
/// is readable, else this build's.
fn guess_format(storage: &dyn Storage, len: u64) -> EntryFormat {
    let mut magic = [0u8; 4];
    if len >= SEGMENT_HEADER_LEN + 4
        && storage.read_at(&mut magic, SEGMENT_HEADER_LEN).is_ok()
        && magic == crate::segment::ENTRY_MAGIC
    {
        EntryFormat::V1
    } else {
        EntryFormat::V2
    }
}

/// Where recovery left the last segment.
pub(super) enum LastSegment {
    /// Ready for appends (its torn tail, if any, cut).
    Open(Arc<Segment>),
    /// Damaged below what the metadata committed in it: kept byte for byte, sealed; appends go
    /// to a new segment.
    Sealed(Arc<Segment>),
}

/// Opens the last segment and recovers it. Only bytes past both the last entry that verifies
/// and the end of `last_committed` (the metadata's last committed entry in it, if any) are
/// cut: those were never acknowledged. A scan that stops below that end found damage, not a
/// torn tail, and nothing is changed.
pub(super) fn recover_last_segment(
    dir: &dyn StorageDir,
    number: u64,
    pool: &PoolHeader,
    last_committed: Option<Location>,
) -> Result<(LastSegment, RecoveryReport)> {
    let name = segment_file_name(number);
    let storage = dir.open(&name).map_err(|e| io_error(&name, 0, "open", e))?;
    let len = storage.len().map_err(|e| io_error(&name, 0, "stat", e))?;
    let mut report = RecoveryReport::nothing(number);
    let verified = verify_segment_header(storage.as_ref(), &name, number, pool, len)?;
    let format = match &verified {
        Ok(format) => *format,
        Err(_) => guess_format(storage.as_ref(), len),
    };
    let committed_end = last_committed.map_or(0, |loc| {
        loc.offset + format.header_len() as u64 + u64::from(loc.len)
    });
    let segment = |storage, end| {
        Arc::new(Segment {
            number,
            format,
            name: name.clone(),
            storage,
            end: AtomicU64::new(end),
            dead: AtomicU64::new(0),
        })
    };
    if let Err(reason) = verified {
        if len <= SEGMENT_HEADER_LEN && committed_end == 0 {
            // A crash while the segment was being created: entries are written only after the
            // header is durable, so there is nothing to lose. Write the header again.
            write_fresh_header(storage.as_ref(), &name, number, pool)?;
            report.discarded_bytes = len;
            report.reinitialized = true;
            return Ok((
                LastSegment::Open(Arc::new(Segment {
                    number,
                    format: EntryFormat::V2,
                    name: name.clone(),
                    storage,
                    end: AtomicU64::new(SEGMENT_HEADER_LEN),
                    dead: AtomicU64::new(0),
                })),
                report,
            ));
        }
        // Entries follow a damaged header: damage, never a crash (the header is durable before
        // any entry is written). Keep everything.
        report.bad_headers.push((number, reason));
        report.kept_damage = true;
        return Ok((LastSegment::Sealed(segment(storage, len)), report));
    }
    let scan = scan_segment(storage.as_ref(), SEGMENT_HEADER_LEN, format)
        .map_err(|e| io_error(&name, SEGMENT_HEADER_LEN, "read", e))?;
    report.entries = scan.entries;
    report.damaged = scan.damaged;
    report.stopped_at = scan.stop.map(|(off, e)| (off, e.to_string()));
    if scan.good_end < committed_end {
        report.kept_damage = true;
        return Ok((LastSegment::Sealed(segment(storage, len)), report));
    }
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
    report.discarded_bytes = len - scan.good_end;
    Ok((LastSegment::Open(segment(storage, scan.good_end)), report))
}

fn write_fresh_header(
    storage: &dyn Storage,
    name: &str,
    number: u64,
    pool: &PoolHeader,
) -> Result<()> {
    let header = SegmentHeader::new(number, pool.uuid).encode();
    storage
        .set_len(0)
        .map_err(|e| io_error(name, 0, "truncate", e))?;
    storage
        .write_at(&header, 0)
        .map_err(|e| io_error(name, 0, "write", e))?;
    storage.sync().map_err(|e| io_error(name, 0, "sync", e))
}
