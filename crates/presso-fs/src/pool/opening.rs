//! What opening a pool found (its report), and the segment accounting rebuilt from the
//! metadata at open.

use std::collections::BTreeMap;

use presso_meta::{MetaStore, SegmentUsage};
use presso_store::Store;

use crate::error::Result;

/// What opening a pool found and repaired.
#[derive(Debug, Clone, Default, serde::Serialize)]
pub struct OpenReport {
    /// Stored records (frames in segments) of orphaned files — unlinked while open when the
    /// pool last stopped — removed with them.
    pub orphan_records_purged: usize,
    /// Bytes cut from a torn segment tail.
    pub torn_bytes: u64,
    /// Segments whose header is damaged (number and why): kept, their records read as before.
    pub damaged_segment_headers: Vec<(u64, String)>,
    /// The last segment, damaged below what the metadata committed in it: kept as it is
    /// (nothing cut), sealed; its damaged records read as I/O errors and scrub names them.
    pub damage_kept: Option<u64>,
    /// Segments committed records point into whose files are missing: those records read as
    /// I/O errors and scrub names them.
    pub missing_segments: Vec<u64>,
}

impl OpenReport {
    /// Whether the pool holds damage found at open (scrub names the records it touches).
    pub fn found_damage(&self) -> bool {
        !self.damaged_segment_headers.is_empty()
            || self.damage_kept.is_some()
            || !self.missing_segments.is_empty()
    }
}

/// Segments committed records point into that the store has no file for.
pub(super) fn missing_segments(store: &Store, usage: &BTreeMap<u64, SegmentUsage>) -> Vec<u64> {
    let present: std::collections::HashSet<u64> = store.segments().into_iter().collect();
    usage
        .keys()
        .copied()
        .filter(|s| !present.contains(s))
        .collect()
}

/// Sets every segment's live bytes from the metadata (exact: one GROUP BY over the records),
/// and returns the live records of every segment the metadata counts, other writers' too.
pub(super) fn refresh_live(store: &Store, meta: &MetaStore) -> Result<BTreeMap<u64, SegmentUsage>> {
    let usage = meta.segment_usage()?;
    for segment in store.segments() {
        let (records, bytes) = usage
            .get(&segment)
            .map_or((0, 0), |u| (u.records, u.stored_bytes));
        store.set_live_records(segment, records, bytes)?;
    }
    Ok(usage)
}

/// Segments on a disk of `total` bytes hold at most this share of it...
const SEGMENTS_PER_DISK: u64 = 16;
/// ...unless that would make them smaller than this.
const MIN_FITTED_SEGMENT: u64 = 16 << 20;

/// The roll-over size of the pool's segments: `requested`, or less on a disk of `total` bytes
/// where it would be more than a sixteenth of the disk (16 MiB at least). Collection frees a
/// segment only once it has copied the segment's live records, and a pass for room needs that
/// much free space beside the writes going on: one segment as large as the disk holds old and
/// new versions alike, and every pass copies all the live data. Small segments hold each
/// overwrite's garbage mostly in segments with nothing live, removed without a copy.
pub(super) fn fitted_segment_size(requested: u64, total: Option<u64>) -> u64 {
    match total {
        Some(total) => requested.min((total / SEGMENTS_PER_DISK).max(MIN_FITTED_SEGMENT)),
        None => requested,
    }
}

#[cfg(test)]
mod tests {
    use super::fitted_segment_size;

    #[test]
    fn segments_shrink_to_a_sixteenth_of_a_small_disk_only() {
        const MIB: u64 = 1 << 20;
        let default = presso_store::DEFAULT_SEGMENT_SIZE;
        assert_eq!(fitted_segment_size(default, None), default);
        assert_eq!(fitted_segment_size(default, Some(1 << 40)), default);
        assert_eq!(fitted_segment_size(default, Some(1024 * MIB)), 64 * MIB);
        assert_eq!(fitted_segment_size(default, Some(100 * MIB)), 16 * MIB);
        // A smaller size asked for is kept.
        assert_eq!(fitted_segment_size(4 * MIB, Some(100 * MIB)), 4 * MIB);
    }
}
