//! Injected I/O faults of a [`SimDir`], and the counts of the calls its files received.
//!
//! Every knob is shared by the clones of one `SimDir` and applies to every file of it (reads can
//! also be aimed at one byte range of one file). A fault "until cleared" holds until
//! [`SimDir::clear_faults`]; a "next" fault is used up by the first call it fails. A crash
//! ([`SimDir::crash`], [`SimDir::crash_torn`]) disarms every fault but the space budget.
//!
//! Faults change nothing a failed call did not do: a failed write writes nothing, a failed read
//! reads nothing, a failed sync makes nothing durable. The one exception is
//! [`SimDir::fail_next_sync_forgetting`], which also drops the writes the sync did not make
//! durable (what Linux may do after a failed fsync: the pages it could not write are marked
//! clean or evicted, and the next fsync reports success with nothing left to write).

use std::ops::Range;

use super::SimDir;

/// Calls the files of a [`SimDir`] received, and the faults they hit.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct IoStats {
    /// `read_at` calls (the failed ones included).
    pub reads: u64,
    /// `write_at` calls (the failed ones included).
    pub writes: u64,
    /// `sync` calls (the failed ones included).
    pub syncs: u64,
    /// Reads failed by an injected fault.
    pub failed_reads: u64,
    /// Writes failed by an injected fault (a write cut short by the space budget not counted).
    pub failed_writes: u64,
    /// Syncs failed by an injected fault.
    pub failed_syncs: u64,
    /// Unsynced writes dropped by a failed sync that forgets them.
    pub forgotten_writes: u64,
}

/// Reads of `file` overlapping `range` fail with `errno`.
#[derive(Debug, Clone)]
struct ReadFault {
    file: String,
    range: Range<u64>,
    errno: i32,
}

/// What the files of a [`SimDir`] are told to fail.
#[derive(Debug, Default)]
pub(super) struct Faults {
    next_write: Option<i32>,
    writes: Option<i32>,
    /// The next sync's errno, and whether it forgets the writes it did not make durable.
    next_sync: Option<(i32, bool)>,
    syncs: Option<i32>,
    reads: Option<i32>,
    read_ranges: Vec<ReadFault>,
    /// Cap on the total live bytes of all files.
    pub(super) budget: Option<u64>,
}

impl Faults {
    /// The errno the next write fails with, if any (a "next" fault is used up).
    pub(super) fn write_error(&mut self) -> Option<i32> {
        self.next_write.take().or(self.writes)
    }

    /// The errno the next sync fails with and whether it forgets the unsynced writes.
    pub(super) fn sync_error(&mut self) -> Option<(i32, bool)> {
        self.next_sync
            .take()
            .or(self.syncs.map(|errno| (errno, false)))
    }

    /// The errno a read of `len` bytes of `file` at `offset` fails with, if any.
    pub(super) fn read_error(&self, file: &str, offset: u64, len: u64) -> Option<i32> {
        let end = offset.saturating_add(len.max(1));
        self.reads.or_else(|| {
            self.read_ranges
                .iter()
                .find(|f| f.file == file && f.range.start < end && offset < f.range.end)
                .map(|f| f.errno)
        })
    }

    /// Every injected error off; the space budget stays.
    pub(super) fn disarm(&mut self) {
        *self = Faults {
            budget: self.budget,
            ..Faults::default()
        };
    }
}

impl SimDir {
    /// The next `write_at` of any file fails with `errno` (nothing is written).
    pub fn fail_next_write(&self, errno: i32) {
        self.state.lock().faults.next_write = Some(errno);
    }

    /// Every `write_at` of any file fails with `errno` (nothing is written) until
    /// [`SimDir::clear_faults`]. Truncation (`set_len`) still works.
    pub fn fail_writes(&self, errno: i32) {
        self.state.lock().faults.writes = Some(errno);
    }

    /// The next `sync` of any file fails with `errno` (nothing becomes durable; the writes stay
    /// pending and a later sync can still make them durable).
    pub fn fail_next_sync(&self, errno: i32) {
        self.state.lock().faults.next_sync = Some((errno, false));
    }

    /// The next `sync` of any file fails with `errno` and drops that file's writes since its
    /// last successful sync, from reads too: what Linux may do after a failed fsync. A later
    /// sync of the file then succeeds with nothing to write, so whoever trusts it loses data.
    pub fn fail_next_sync_forgetting(&self, errno: i32) {
        self.state.lock().faults.next_sync = Some((errno, true));
    }

    /// Every `sync` of any file fails with `errno` (nothing becomes durable) until
    /// [`SimDir::clear_faults`].
    pub fn fail_syncs(&self, errno: i32) {
        self.state.lock().faults.syncs = Some(errno);
    }

    /// Every `read_at` of any file fails with `errno` until [`SimDir::clear_faults`].
    pub fn fail_reads(&self, errno: i32) {
        self.state.lock().faults.reads = Some(errno);
    }

    /// Every `read_at` of file `name` that touches a byte of `range` fails with `errno` until
    /// [`SimDir::clear_faults`] (a bad sector under one record); other reads work.
    pub fn fail_reads_in(&self, name: &str, range: Range<u64>, errno: i32) {
        self.state.lock().faults.read_ranges.push(ReadFault {
            file: name.to_string(),
            range,
            errno,
        });
    }

    /// Caps the total live size of all files (`None`: unlimited).
    pub fn set_space_budget(&self, bytes: Option<u64>) {
        self.state.lock().faults.budget = bytes;
    }

    /// Disarms all injected faults and lifts the space budget.
    pub fn clear_faults(&self) {
        self.state.lock().faults = Faults::default();
    }

    /// Number of `write_at` and `sync` calls so far.
    pub fn io_counts(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.stats.writes, st.stats.syncs)
    }

    /// The calls the files received so far, and the faults they hit.
    pub fn io_stats(&self) -> IoStats {
        self.state.lock().stats
    }
}
