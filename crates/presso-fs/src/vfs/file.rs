//! The state of one open (or recently written) file: its record overlay, size and truncate
//! watermark; and the budget of record buffers.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use parking_lot::{Condvar, Mutex};
use presso_codec::{CodecSpec, JobOptions};
use presso_meta::{RecordRef, Timespec};

use super::unread::UnreadBase;
use crate::error::FsError;

pub(super) enum Slot {
    /// Being assembled by writes; not yet submitted. `covered`: how many of the record's first
    /// bytes a queued or committed version holds with the same contents or older ones, which a
    /// crash may show (see [`FileState::size_to_queue`]). `base`: the version written over,
    /// while the bytes of `buf` it fills (zeros until then) are not read yet.
    Dirty {
        buf: Vec<u8>,
        touched: Instant,
        covered: u64,
        base: Option<Box<UnreadBase>>,
    },
    /// Submitted to the engine.
    Compressing {
        generation: u64,
        data: Bytes,
        covered: u64,
    },
    /// Frame stored (or a hole, `None`), op queued, group not committed yet.
    Stored {
        generation: u64,
        rec: Option<RecordRef>,
    },
}

pub(super) struct FileState {
    pub(super) size: u64,
    pub(super) recordsize: u64,
    /// Whether `recordsize` is stored as the file's own property yet (at its first write).
    pub(super) recordsize_fixed: bool,
    pub(super) mtime: Timespec,
    pub(super) open: u32,
    pub(super) orphaned: bool,
    pub(super) overlay: BTreeMap<u64, Slot>,
    /// One watermark per truncate whose clearing ops have not committed yet: from its record
    /// index on, records without an overlay slot are holes, whatever the metadata still says.
    /// With the generation of the op whose commit ends it. Never merged: a record written after
    /// a truncate leaves the overlay only once its op commits, and by then (groups commit in
    /// order) that truncate's watermark is gone, so a merged, older-reaching watermark would hide
    /// newer committed records.
    pub(super) cleared: Vec<(u64, u64)>,
    pub(super) next_generation: u64,
    pub(super) inflight: usize,
    pub(super) error: Option<Arc<FsError>>,
    /// Records whose last attempt to be stored failed (a full disk, an I/O error): they stay
    /// Dirty and are retried; see [`super::Unstored`].
    pub(super) unstored: std::collections::BTreeSet<u64>,
    /// Why the last of them failed.
    pub(super) store_error: Option<String>,
    pub(super) size_dirty: bool,
    /// The size last queued to the metadata (at load: the committed one).
    pub(super) size_queued: u64,
    /// Whether the metadata was checked for bytes past the size (see `Vfs::trim_past_size`),
    /// which happens before the file first grows.
    pub(super) tail_checked: bool,
    /// Newest transaction group holding an op of this file; the node stays until it commits.
    pub(super) queued_in: u64,
    pub(super) last_read_end: u64,
    pub(super) readahead_until: u64,
    /// Committed record locations looked up lately, for reads.
    pub(super) recent: RecentRefs,
    pub(super) settings: Option<(u64, CodecSpec, JobOptions)>,
}

impl FileState {
    /// Whether everything of the file this client had is in the metadata, up to group
    /// `committed`: nothing buffered, compressing, stored but uncommitted, truncated or resized
    /// that the metadata does not have yet.
    pub(super) fn all_committed(&self, committed: u64) -> bool {
        self.overlay.is_empty()
            && self.cleared.is_empty()
            && self.inflight == 0
            && !self.size_dirty
            && self.queued_in <= committed
    }
}

/// The record index an [`OpTag`] carries when it ends a truncate rather than names a record.
pub(super) const CLEARING: u64 = u64::MAX;

impl FileState {
    /// Record `index`, Dirty, could not be stored (`why`, `error`): it stays Dirty, is named as
    /// unstored and retried at every flush, and the error goes once to the next write, close or
    /// fsync of the file. Returns that error.
    pub(super) fn store_failed(&mut self, index: u64, why: String, error: FsError) -> Arc<FsError> {
        self.unstored.insert(index);
        self.store_error = Some(why);
        let error = Arc::new(error);
        self.error = Some(error.clone());
        error
    }

    /// Whether record `index` was cleared by a truncate whose ops have not committed yet (the
    /// metadata may still hold its old reference; it must not be read).
    pub(super) fn is_cleared(&self, index: u64) -> bool {
        self.cleared.iter().any(|&(from, _)| index >= from)
    }

    /// The largest size that may be queued now: the size, but never past the first byte of a
    /// Dirty or Compressing record that no queued version holds. Otherwise a crash could commit
    /// the size without that record: zeros where written bytes were, or old bytes a truncate
    /// cut. Bytes below the size queued last stay covered by what was queued with it.
    pub(super) fn size_to_queue(&self) -> u64 {
        let rs = self.recordsize;
        self.overlay
            .range(self.size_queued / rs..)
            .filter_map(|(index, slot)| match slot {
                Slot::Dirty { covered, .. } | Slot::Compressing { covered, .. } => {
                    Some((index * rs + covered).max(self.size_queued))
                }
                Slot::Stored { .. } => None,
            })
            .fold(self.size, u64::min)
    }

    /// The lowest record index a pending truncate hides from (`u64::MAX` if none).
    pub(super) fn cleared_from(&self) -> u64 {
        self.cleared
            .iter()
            .map(|&(from, _)| from)
            .min()
            .unwrap_or(u64::MAX)
    }
}

/// An open (or recently written) regular file.
pub struct FileNode {
    pub(super) ino: u64,
    pub(super) state: Mutex<FileState>,
    pub(super) changed: Condvar,
}

/// Bytes of record buffers held by Dirty and Compressing slots.
pub(super) struct Budget {
    pub(super) bytes: Mutex<usize>,
    pub(super) room: Condvar,
    pub(super) limit: usize,
    /// The last failure to store a record, while no record was stored since: records that
    /// cannot be stored keep their buffers, so room may never come.
    pub(super) failing: Mutex<Option<Arc<FsError>>>,
    /// Held by the one writer looking for records to store when the buffers are full
    /// (`Vfs::make_room`).
    pub(super) making_room: Mutex<()>,
}

impl Budget {
    pub(super) fn take(&self, n: usize) {
        *self.bytes.lock() += n;
    }

    pub(super) fn give(&self, n: usize) {
        let mut bytes = self.bytes.lock();
        *bytes = bytes.saturating_sub(n);
        if *bytes < self.limit {
            self.room.notify_all();
        }
    }

    /// Whether the buffers are at or over the limit.
    pub(super) fn is_full(&self) -> bool {
        *self.bytes.lock() >= self.limit
    }

    /// Waits until the buffers are under the limit. While they are full and storing records
    /// fails, fails with that failure instead: the buffers may never empty (a disk returning
    /// EIO, a store poisoned by a failed sync), and a writer must not wait forever.
    pub(super) fn wait_for_room(&self) -> Result<(), Arc<FsError>> {
        let mut bytes = self.bytes.lock();
        while *bytes >= self.limit {
            if let Some(error) = self.failing.lock().clone() {
                return Err(error);
            }
            self.room.wait(&mut bytes);
        }
        Ok(())
    }

    /// Storing a record failed: writers waiting for room hear of it.
    pub(super) fn store_failed(&self, error: Arc<FsError>) {
        *self.failing.lock() = Some(error);
        // Under the bytes lock: a writer between its check and its wait cannot miss this.
        let _bytes = self.bytes.lock();
        self.room.notify_all();
    }

    /// A record was stored in a segment: storing works (again).
    pub(super) fn store_worked(&self) {
        self.failing.lock().take();
    }
}

/// Waits until none of `node`'s records is in compression and returns its locked state.
pub(super) fn wait_compressed(node: &FileNode) -> parking_lot::MutexGuard<'_, FileState> {
    let mut st = node.state.lock();
    while st.inflight > 0 {
        node.changed.wait(&mut st);
    }
    st
}

/// Waits until no record of `node` submitted with a generation below `mark` is still in
/// compression (each has been stored and its op queued, or was rewritten, truncated away or
/// failed meanwhile) and returns its locked state. Records submitted later do not count.
pub(super) fn wait_submitted(node: &FileNode, mark: u64) -> parking_lot::MutexGuard<'_, FileState> {
    let mut st = node.state.lock();
    while st
        .overlay
        .values()
        .any(|s| matches!(s, Slot::Compressing { generation, .. } if *generation < mark))
    {
        node.changed.wait(&mut st);
    }
    st
}

/// Committed locations of records of the file looked up lately (by reads and readahead), so
/// that a sequential reader asks the metadata once per readahead batch instead of twice per
/// request.
///
/// Invariant: a location kept here is the metadata's answer for its record wherever reads
/// consult it, which is only where the metadata answers (no overlay slot, no truncate
/// watermark). The metadata's answer for such a record changes only when a group commits a
/// change the overlay or a watermark held until then, and [`Vfs::committed`] calls
/// [`RecentRefs::forget`] before that slot or watermark goes. A lookup made outside the file's
/// lock is kept only if no `forget` came in between (its epoch). Garbage collection moves frames
/// without the file layer; the pool counts each group of moves as it commits, before the places
/// they left can go ([`Pool::moves_committed`]), and locations kept from before a change of that
/// count are forgotten. A move between a look here and the read of the frame is found again by
/// [`Vfs::load`], as for any location looked up before a move. Shared pools keep nothing here:
/// other clients change their records.
///
/// [`Vfs::committed`]: super::Vfs::committed
/// [`Vfs::load`]: super::Vfs::load
/// [`Pool::moves_committed`]: crate::pool::Pool::moves_committed
#[derive(Debug, Default)]
pub(super) struct RecentRefs {
    refs: BTreeMap<u64, RecordRef>,
    epoch: u64,
    /// The pool's count of committed moves when the locations were kept.
    moves: u64,
}

impl RecentRefs {
    /// Most locations kept; the lowest record indexes go first (readers move forward).
    const LIMIT: usize = 64;

    /// The location of record `index`, if kept.
    pub(super) fn get(&self, index: u64) -> Option<&RecordRef> {
        self.refs.get(&index)
    }

    /// The epoch a lookup starting now must show to [`RecentRefs::keep`].
    pub(super) fn epoch(&self) -> u64 {
        self.epoch
    }

    /// Forgets every location: the metadata's answers may change.
    pub(super) fn forget(&mut self) {
        self.refs.clear();
        self.epoch += 1;
    }

    /// Forgets every location if garbage collection has committed moves since they were kept
    /// (`moves`: [`Pool::moves_committed`] now).
    ///
    /// [`Pool::moves_committed`]: crate::pool::Pool::moves_committed
    pub(super) fn follow_moves(&mut self, moves: u64) {
        if moves != self.moves {
            self.forget();
            self.moves = moves;
        }
    }

    /// Keeps the locations a lookup started at `epoch` found, unless something was forgotten
    /// since (`moves` as for [`RecentRefs::follow_moves`]).
    pub(super) fn keep(
        &mut self,
        epoch: u64,
        moves: u64,
        found: impl IntoIterator<Item = (u64, RecordRef)>,
    ) {
        self.follow_moves(moves);
        if epoch != self.epoch {
            return;
        }
        self.refs.extend(found);
        while self.refs.len() > Self::LIMIT {
            self.refs.pop_first();
        }
    }
}
