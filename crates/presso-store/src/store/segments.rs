//! Per-segment operations of an open store: live-space accounting, statistics, rolling to a new
//! segment, removing a collected one and listing its entries.

use super::*;

impl Store {
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
        if loc.offset < SEGMENT_HEADER_LEN || loc.offset.saturating_add(seg.entry_len(loc)) > end {
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
                Some((d + seg.entry_len(loc)).min(total))
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
    /// when it starts. The segment header is not checked: open reported a damaged one
    /// ([`RecoveryReport::bad_headers`]), and every entry verifies on its own.
    pub fn entries(&self, segment: u64) -> Result<SegmentEntries> {
        let seg = self.segment(segment)?;
        let end = seg.end.load(Ordering::Acquire);
        let scan = scan_entries(seg.storage.as_ref(), SEGMENT_HEADER_LEN, end, seg.format)
            .map_err(|e| io_error(&seg.name, SEGMENT_HEADER_LEN, "read", e))?;
        Ok(SegmentEntries {
            segment,
            total_bytes: entry_bytes(end),
            entries: scan
                .entries
                .iter()
                .map(|e| Location {
                    segment,
                    offset: e.offset,
                    len: e.len,
                })
                .collect(),
            tags: scan.entries.iter().map(|e| e.tag).collect(),
            damaged: scan.damaged,
        })
    }

    /// Sets a segment's live bytes from the live entries the metadata counts in it: `records`
    /// entries holding `payload_bytes` payload bytes in all, each with an envelope of the
    /// segment's format. See [`Store::set_live_bytes`].
    pub fn set_live_records(&self, segment: u64, records: u64, payload_bytes: u64) -> Result<()> {
        let header_len = self.segment(segment)?.format.header_len() as u64;
        self.set_live_bytes(segment, payload_bytes + records * header_len)
    }

    /// Sets how many of a segment's entry bytes are live, as counted from the metadata after
    /// open (the dead counts live in memory only): the dead bytes become the segment's total
    /// entry bytes minus `live_entry_bytes`. The live bytes of a set of entries are the sum of
    /// their entry lengths, i.e. payload bytes plus one envelope header (of the segment's format)
    /// per entry.
    /// More live bytes than the segment holds is [`StoreError::LiveBytesTooLarge`].
    pub fn set_live_bytes(&self, segment: u64, live_entry_bytes: u64) -> Result<()> {
        let seg = self.segment(segment)?;
        let total = entry_bytes(seg.end.load(Ordering::Acquire));
        let dead = dead_bytes(segment, total, live_entry_bytes)?;
        seg.dead.store(dead, Ordering::Relaxed);
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

    pub(super) fn segment(&self, segment: u64) -> Result<Arc<Segment>> {
        self.segments
            .read()
            .get(&segment)
            .cloned()
            .ok_or(StoreError::NoSuchSegment { segment })
    }

    /// Seals the current segment (synced in full) and starts the next one.
    pub(super) fn roll_locked(&self, a: &mut Appender) -> Result<()> {
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
        a.give_back_reserved();
        {
            let mut durable = self.durable.lock();
            *durable = (*durable).max(Position {
                segment: old.number,
                offset: end,
            });
        }
        let seg = create_own_segment(
            self.dir.as_ref(),
            old.number + 1,
            self.config.own_segments,
            &self.header,
        )?;
        self.segments.write().insert(seg.number, seg.clone());
        a.current = seg;
        Ok(())
    }
}
