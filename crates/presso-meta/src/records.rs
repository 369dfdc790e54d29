//! The record map of regular files and the pool-wide views over it (segment usage, segment
//! listings, scrub scans).

use std::collections::BTreeMap;
use std::ops::{Bound, Range, RangeBounds};

use crate::accounting::{account_dropped, Delta};
use crate::engine::{FileKind, InodeRow, RecordLocation, RecordRef, SegmentUsage, Txn};
use crate::error::{MetaError, Result};
use crate::namespace::inode;
use crate::{MetaStore, RECORD_INDEX_LIMIT};

/// Refuses a record reference the record map cannot hold.
pub(crate) fn check_record(index: u64, rec: &RecordRef) -> Result<()> {
    if index >= RECORD_INDEX_LIMIT {
        return Err(MetaError::invalid("record index too large"));
    }
    if let Some(data) = &rec.inline {
        if data.len() != rec.stored_len as usize {
            return Err(MetaError::invalid("inline data length != stored_len"));
        }
    }
    Ok(())
}

fn to_range(r: impl RangeBounds<u64>) -> Range<u64> {
    let start = match r.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match r.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    start..end.min(RECORD_INDEX_LIMIT)
}

impl MetaStore {
    fn file(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
        let row = inode(tx, ino)?;
        match row.attr.kind {
            FileKind::File => Ok(row),
            FileKind::Dir => Err(MetaError::IsDir),
            _ => Err(MetaError::invalid("records on a non-regular file")),
        }
    }

    /// Points record `index` of file `ino` at `rec`, returning the reference it replaced (whose
    /// stored bytes are now counted as garbage unless it was inline or identical to `rec`).
    pub fn set_record(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Option<RecordRef>> {
        check_record(index, rec)?;
        self.write(|tx| {
            Self::file(tx, ino)?;
            let old = tx.get_record(ino, index)?;
            if old.as_ref() == Some(rec) {
                return Ok(old);
            }
            tx.put_record(ino, index, rec)?;
            let mut delta = Delta::default();
            delta.take(rec);
            if let Some(old) = &old {
                delta.drop_ref(old);
            }
            delta.apply(tx)?;
            Ok(old)
        })
    }

    /// Record `index` of file `ino`, if set.
    pub fn get_record(&self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.read(|tx| {
            Self::file(tx, ino)?;
            if index >= RECORD_INDEX_LIMIT {
                return Ok(None);
            }
            tx.get_record(ino, index)
        })
    }

    /// Records of file `ino` whose index lies in `range`, in index order.
    pub fn records(&self, ino: u64, range: impl RangeBounds<u64>) -> Result<Vec<(u64, RecordRef)>> {
        let range = to_range(range);
        self.read(|tx| {
            Self::file(tx, ino)?;
            if range.start >= range.end {
                return Ok(Vec::new());
            }
            tx.list_records(ino, range)
        })
    }

    /// Removes every record of `ino` with index `>= from`, returning them; their bytes leave the
    /// logical/stored totals and non-inline ones become garbage.
    pub fn truncate_records(&self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        self.write(|tx| {
            Self::file(tx, ino)?;
            let removed = tx.delete_records_from(ino, from)?;
            account_dropped(tx, removed.iter().map(|(_, r)| r))?;
            Ok(removed)
        })
    }

    /// Number and stored bytes of the non-inline records pointing into each segment (segments
    /// nothing points into are absent), to rebuild the store's live/dead accounting at open.
    pub fn segment_usage(&self) -> Result<BTreeMap<u64, SegmentUsage>> {
        self.read_scan(|tx| tx.segment_usage())
    }

    /// Every non-inline record pointing into `segment`, ordered by (offset, ino, index): what
    /// garbage collection must move before the segment can go.
    pub fn records_in_segment(&self, segment: u64) -> Result<Vec<RecordLocation>> {
        self.read_scan(|tx| tx.records_in_segment(segment))
    }

    /// Up to `limit` records of all files (inline ones included) in (ino, index) order, starting
    /// strictly after `after`; pass the last returned (ino, index) to continue. For scrub.
    pub fn scan_records(
        &self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<RecordLocation>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Inode numbers are handed out upwards from 2 and never reach 2^63, where the SQLite
        // engine's signed keys would stop sorting like u64.
        if after.is_some_and(|(ino, _)| ino > i64::MAX as u64) {
            return Ok(Vec::new());
        }
        self.read_scan(|tx| tx.scan_records(after, limit))
    }
}
