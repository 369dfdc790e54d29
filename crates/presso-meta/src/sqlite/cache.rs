//! The write connection's cache of inode rows.
//!
//! A namespace request reads the inode it changes (a SETATTR reads, then rewrites its inode; a
//! CREATE reads its directory twice), and that read is a statement of its own each time. The
//! cache answers those reads from the rows this connection wrote or read last.
//!
//! Invariant: every row held is what the write connection would read now, uncommitted changes
//! of its open transaction or group included. Only this connection writes the database (the
//! process holds it alone), inode rows change only through [`Txn::put_inode`] and
//! [`Txn::delete_inode`] (which update the cache), and every rollback on the connection empties
//! it first: a rollback is the one way the connection's view goes back. A statement that fails
//! empties it too, since SQLite may then have rolled back on its own.
//!
//! [`Txn::put_inode`]: crate::engine::Txn::put_inode
//! [`Txn::delete_inode`]: crate::engine::Txn::delete_inode

use std::collections::HashMap;

use crate::engine::InodeRow;

/// Most rows held; a full cache starts over (requests touch a few inodes each, mostly ones
/// touched just before, so recency within this many is what matters).
const CAPACITY: usize = 4096;

/// Inode rows by number, as the write connection sees them now.
#[derive(Default)]
pub(super) struct InodeCache {
    rows: HashMap<u64, InodeRow>,
}

impl InodeCache {
    /// The row of `ino`, if held.
    pub(super) fn get(&self, ino: u64) -> Option<InodeRow> {
        self.rows.get(&ino).cloned()
    }

    /// Holds `row` as the current row of its inode.
    pub(super) fn put(&mut self, row: &InodeRow) {
        if self.rows.len() >= CAPACITY && !self.rows.contains_key(&row.attr.ino) {
            self.rows.clear();
        }
        self.rows.insert(row.attr.ino, row.clone());
    }

    /// Forgets the row of `ino`.
    pub(super) fn remove(&mut self, ino: u64) {
        self.rows.remove(&ino);
    }

    /// Forgets every row: before a rollback, or after a statement failed.
    pub(super) fn clear(&mut self) {
        self.rows.clear();
    }

    /// How many rows are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }
}
