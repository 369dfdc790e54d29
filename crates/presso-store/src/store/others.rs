//! The segments of the other writers of a shared pool: opened read-only when first read, and,
//! for the one collecting after a writer that is gone, listed, measured and removed.

use super::*;

impl Store {
    /// The segment holding `loc`, for reading: one of this store's, or one of another writer of
    /// a shared pool, opened when first read and looked at again when `loc` reaches past the
    /// end it had then (that writer has appended since).
    pub(super) fn readable_segment(&self, loc: Location) -> Result<Arc<Segment>> {
        if self.config.own_segments.contains(loc.segment) {
            return self.segment(loc.segment);
        }
        let seg = self.other_segment(loc.segment)?;
        let wanted = loc.offset.saturating_add(seg.entry_len(loc));
        if seg.end.load(Ordering::Acquire) < wanted {
            grown_to_file(&seg)?;
        }
        Ok(seg)
    }

    /// Another writer's segment `number`, opened read-only on first use.
    fn other_segment(&self, number: u64) -> Result<Arc<Segment>> {
        if let Some(seg) = self.foreign.read().get(&number) {
            return Ok(seg.clone());
        }
        let mut bad = Vec::new();
        let seg = open_sealed_segment(self.dir.as_ref(), number, &self.header, &mut bad).map_err(
            |e| match e {
                StoreError::Io { source, .. } if source.kind() == std::io::ErrorKind::NotFound => {
                    StoreError::NoSuchSegment { segment: number }
                }
                e => e,
            },
        )?;
        if let Some((_, reason)) = bad.pop() {
            return Err(StoreError::CorruptEntry {
                segment: number,
                offset: 0,
                reason,
            });
        }
        Ok(self.foreign.write().entry(number).or_insert(seg).clone())
    }

    /// Numbers of the segments in the pool directory that are not this store's own (all of
    /// them but its own range, in a shared pool; none otherwise), ascending, as the directory
    /// lists them now.
    pub fn other_segments(&self) -> Result<Vec<u64>> {
        let mut numbers = self
            .dir
            .list_segments()
            .map_err(|e| io_error(&self.dir.describe(), 0, "list", e))?;
        numbers.retain(|&n| !self.config.own_segments.contains(n));
        Ok(numbers)
    }

    /// Space accounting of another writer's segment, given the live entries the metadata counts
    /// in it (`live_records` entries holding `live_payload` payload bytes, each with an envelope
    /// of the segment's format, as in [`Store::set_live_records`]): its total is what the
    /// directory holds of it now.
    pub fn other_segment_stats(
        &self,
        segment: u64,
        live_records: u64,
        live_payload: u64,
    ) -> Result<SegmentStats> {
        let seg = self.other_segment(segment)?;
        grown_to_file(&seg)?;
        let total = entry_bytes(seg.end.load(Ordering::Acquire));
        let live = live_payload + live_records * seg.format.header_len() as u64;
        Ok(SegmentStats {
            segment,
            total_bytes: total,
            dead_bytes: dead_bytes(segment, total, live)?,
        })
    }

    /// Removes another writer's segment, durably. Only for a writer that is gone for good and
    /// can no longer commit anything (in a shared pool: a client whose session has ended), and
    /// only once no committed metadata references the segment. Removing one already gone
    /// succeeds; this store's own segments are refused ([`StoreError::OwnSegment`]).
    pub fn remove_other_segment(&self, segment: u64) -> Result<()> {
        if self.config.own_segments.contains(segment) {
            return Err(StoreError::OwnSegment { segment });
        }
        self.foreign.write().remove(&segment);
        match self.dir.remove_segment(segment) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(io_error(&segment_file_name(segment), 0, "remove", e));
            }
            _ => {}
        }
        self.dir
            .sync_dir()
            .map_err(|e| io_error(&self.dir.describe(), 0, "sync directory", e))
    }
}

/// Moves another writer's segment's end up to its file's length now (that writer may have
/// appended since it was opened).
fn grown_to_file(seg: &Segment) -> Result<()> {
    let len = seg
        .storage
        .len()
        .map_err(|e| io_error(&seg.name, 0, "stat", e))?;
    seg.end.fetch_max(len, Ordering::AcqRel);
    Ok(())
}
