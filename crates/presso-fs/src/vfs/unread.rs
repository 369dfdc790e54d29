//! The older version of a record under a partial overwrite, read only when needed.
//!
//! A write into part of a stored record needs the record's other bytes before the record can be
//! stored again. Reading them at the write made every partial overwrite wait for the disk
//! (a sequential overwrite in 4 KiB writes, which the kernel's writeback sends in pieces that
//! rarely start at a record's start, read a quarter of what it wrote). So the record's Dirty
//! buffer starts as zeros and remembers what it was written over: the bytes the writes leave are
//! read from that version when the record is next read, stored or cut, and never if the writes
//! cover it whole.

use std::ops::Range;

use presso_meta::RecordRef;

/// What a Dirty record was written over and has not read yet.
#[derive(Debug, Clone)]
pub(super) struct UnreadBase {
    /// The version written over: the record's committed or queued frame.
    pub(super) rec: RecordRef,
    /// How many of the record's first bytes come from `rec` where not written: the file's size
    /// within the record when its buffer was made (past it the record holds zeros, whatever
    /// `rec` holds).
    limit: usize,
    /// The byte ranges written since, sorted, disjoint and not touching.
    written: Vec<Range<usize>>,
}

impl UnreadBase {
    /// A base for the first `limit` bytes of a record, from `rec`, nothing written over yet.
    pub(super) fn new(rec: RecordRef, limit: usize) -> Self {
        UnreadBase {
            rec,
            limit,
            written: Vec::new(),
        }
    }

    /// Notes that `range` of the buffer was written; whether the writes now cover every byte
    /// the base would give (then it need never be read).
    pub(super) fn note_written(&mut self, range: Range<usize>) -> bool {
        if !range.is_empty() {
            // Every range that touches or overlaps the new one is merged into it.
            let first = self.written.partition_point(|r| r.end < range.start);
            let last = self.written.partition_point(|r| r.start <= range.end);
            let merged = if first < last {
                self.written[first].start.min(range.start)
                    ..self.written[last - 1].end.max(range.end)
            } else {
                range
            };
            self.written.splice(first..last, [merged]);
        }
        self.gaps().next().is_none()
    }

    /// The record cut to its first `keep` bytes: the base gives none past them any more.
    /// Whether nothing is left for it to give.
    pub(super) fn cut(&mut self, keep: usize) -> bool {
        self.limit = self.limit.min(keep);
        self.gaps().next().is_none()
    }

    /// The ranges of the buffer the base fills: below `limit`, not written.
    pub(super) fn gaps(&self) -> impl Iterator<Item = Range<usize>> + '_ {
        let ends = self.written.iter().map(|r| r.start).chain([usize::MAX]);
        let starts = [0].into_iter().chain(self.written.iter().map(|r| r.end));
        starts
            .zip(ends)
            .map(|(start, end)| start.min(self.limit)..end.min(self.limit))
            .filter(|gap| !gap.is_empty())
    }

    /// Fills the gaps of `buf` from `older`, the base's bytes (as many as it holds; a shorter
    /// version leaves zeros past its end).
    pub(super) fn fill(&self, buf: &mut [u8], older: &[u8]) {
        for gap in self.gaps() {
            let end = gap.end.min(older.len()).min(buf.len());
            if gap.start < end {
                buf[gap.start..end].copy_from_slice(&older[gap.start..end]);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn base(limit: usize) -> UnreadBase {
        let rec = RecordRef {
            segment: 1,
            offset: 0,
            stored_len: 16,
            logical_len: 16,
            codec: 0,
            checksum: 0,
            inline: None,
        };
        UnreadBase::new(rec, limit)
    }

    fn pairs(ranges: impl Iterator<Item = Range<usize>>) -> Vec<(usize, usize)> {
        ranges.map(|r| (r.start, r.end)).collect()
    }

    fn gaps(b: &UnreadBase) -> Vec<(usize, usize)> {
        pairs(b.gaps())
    }

    fn written(b: &UnreadBase) -> Vec<(usize, usize)> {
        pairs(b.written.iter().cloned())
    }

    #[test]
    fn pieces_in_any_order_cover_the_record_once_they_meet() {
        let mut b = base(16);
        assert_eq!(gaps(&b), [(0, 16)]);
        assert!(!b.note_written(4..8));
        assert_eq!(gaps(&b), [(0, 4), (8, 16)]);
        assert!(!b.note_written(12..20));
        assert_eq!(gaps(&b), [(0, 4), (8, 12)]);
        assert!(!b.note_written(0..2));
        assert_eq!(gaps(&b), [(2, 4), (8, 12)]);
        // Touching ranges merge; an empty write changes nothing.
        assert!(!b.note_written(2..4));
        assert!(!b.note_written(9..9));
        assert_eq!(written(&b), [(0, 8), (12, 20)]);
        assert!(b.note_written(7..13));
        assert_eq!(written(&b), [(0, 20)]);
    }

    #[test]
    fn a_write_over_several_ranges_merges_them_all() {
        let mut b = base(100);
        for r in [10..20, 30..40, 50..60, 70..80] {
            b.note_written(r);
        }
        assert!(!b.note_written(15..75));
        assert_eq!(written(&b), [(10, 80)]);
        assert_eq!(gaps(&b), [(0, 10), (80, 100)]);
    }

    #[test]
    fn past_the_limit_nothing_is_needed() {
        let mut b = base(10);
        assert!(b.note_written(0..10));
        let mut b = base(0);
        assert_eq!(gaps(&b), []);
        assert!(b.note_written(5..6));
    }

    #[test]
    fn a_cut_takes_back_what_the_base_gives_past_it() {
        let mut b = base(16);
        b.note_written(0..4);
        assert!(!b.cut(10));
        assert_eq!(gaps(&b), [(4, 10)]);
        // A write past the cut covers nothing the base gives.
        assert!(!b.note_written(10..16));
        assert_eq!(gaps(&b), [(4, 10)]);
        assert!(b.cut(4));
    }

    #[test]
    fn fill_copies_the_gaps_only_and_leaves_zeros_past_a_shorter_version() {
        let mut b = base(8);
        b.note_written(2..4);
        let mut buf = vec![0, 0, 7, 7, 0, 0, 0, 0, 0, 0];
        b.fill(&mut buf, &[1, 1, 1, 1, 1, 1]);
        assert_eq!(buf, [1, 1, 7, 7, 1, 1, 0, 0, 0, 0]);
    }
}
