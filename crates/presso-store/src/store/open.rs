//! Opening a pool directory: its lock, its header, creating segments and recovering the last
//! one (cutting a torn tail).

use super::*;

/// Takes the pool directory's lock.
pub(super) fn lock_dir(dir: &dyn StorageDir) -> Result<DirLock> {
    dir.lock().map_err(|e| match e {
        LockError::Held { pid } => StoreError::InUse { pid },
        LockError::Io(e) => io_error(LOCK_FILE, 0, "lock", e),
    })
}

pub(super) fn stats_of(seg: &Segment) -> SegmentStats {
    SegmentStats {
        segment: seg.number,
        total_bytes: seg.end.load(Ordering::Acquire) - SEGMENT_HEADER_LEN,
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
pub(super) fn create_segment(
    dir: &dyn StorageDir,
    number: u64,
    pool: &PoolHeader,
) -> Result<Arc<Segment>> {
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

pub(super) fn check_segment_header(
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
pub(super) fn open_sealed_segment(
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
pub(super) fn recover_last_segment(
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
