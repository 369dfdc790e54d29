//! The write connection's cache of inode rows, and the rows it holds back from SQLite.
//!
//! A namespace request reads the inode it changes (a SETATTR reads, then rewrites its inode; a
//! CREATE reads its directory twice), and that read is a statement of its own each time. The
//! cache answers those reads from the rows this connection wrote or read last.
//!
//! Inside a group ([`super::group`]) a transaction's row writes are held here, *pending*, rather
//! than written to SQLite at once: a transaction is committed by its intent-log record, which
//! carries the row, so SQLite needs the row only before a statement that could read it. Pending
//! rows are written to SQLite before the first other statement of a transaction (which also
//! takes its savepoint then), before the first statement of a read in the group, and before the
//! group commits. A `tar x` SETATTR then costs no statement at all, and a file's three or four
//! SETATTRs cost one row write between them.
//!
//! Invariants:
//! - Every row held is what the write connection would read now, its open group's changes
//!   included, pending rows written. Only this connection writes the database (the process
//!   holds it alone) and inode rows change only through [`Txn::put_inode`] and
//!   [`Txn::delete_inode`], which keep the cache.
//! - No statement other than the read of one row that is not held runs while rows are pending;
//!   the transaction handle enforces this (`SqliteTxn::c`).
//! - Rows are pending only inside an open group, and only for transactions whose record is in
//!   the intent log or for the one running; so a crash loses nothing SQLite alone would keep.
//! - Undoing a transaction puts back what its changes replaced (the `undo` list) and forgets
//!   every row that is not pending, since SQLite's rows may have gone back.
//!
//! [`Txn::put_inode`]: crate::engine::Txn::put_inode
//! [`Txn::delete_inode`]: crate::engine::Txn::delete_inode

use std::collections::{HashMap, HashSet};

use crate::engine::InodeRow;

/// Most rows held; a full cache forgets its rows that are not pending (requests touch a few
/// inodes each, mostly ones touched just before, so recency within this many is what matters).
const CAPACITY: usize = 4096;

/// Most rows held pending; a transaction that would hold more writes them all instead.
pub(super) const PENDING_LIMIT: usize = 1024;

/// What a change of the running transaction replaced: the row held before (if any) and
/// whether it was pending.
struct Undo {
    ino: u64,
    row: Option<InodeRow>,
    pending: bool,
}

/// Inode rows by number, as the write connection sees them now.
#[derive(Default)]
pub(super) struct InodeCache {
    rows: HashMap<u64, InodeRow>,
    /// Rows held here that SQLite does not have yet.
    pending: HashSet<u64>,
    /// The running transaction's changes to pending rows, oldest first.
    undo: Vec<Undo>,
}

impl InodeCache {
    /// The row of `ino`, if held.
    pub(super) fn get(&self, ino: u64) -> Option<InodeRow> {
        self.rows.get(&ino).cloned()
    }

    /// Holds `row`, which SQLite has, as the current row of its inode.
    pub(super) fn put(&mut self, row: &InodeRow) {
        self.make_room(row.attr.ino);
        self.pending.remove(&row.attr.ino);
        self.rows.insert(row.attr.ino, row.clone());
    }

    /// Holds `row` as the current row of its inode, pending: SQLite does not have it yet.
    pub(super) fn hold(&mut self, row: &InodeRow) {
        let ino = row.attr.ino;
        self.make_room(ino);
        self.undo.push(Undo {
            ino,
            row: self.rows.get(&ino).cloned(),
            pending: self.pending.contains(&ino),
        });
        self.pending.insert(ino);
        self.rows.insert(ino, row.clone());
    }

    /// How many rows are pending.
    pub(super) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The pending rows, in inode order.
    pub(super) fn pending_rows(&self) -> Vec<InodeRow> {
        let mut inos: Vec<u64> = self.pending.iter().copied().collect();
        inos.sort_unstable();
        inos.iter()
            .filter_map(|i| self.rows.get(i).cloned())
            .collect()
    }

    /// Notes that SQLite now has the pending row of `ino`. Inside a transaction's savepoint
    /// (`undoable`), undoing the transaction makes the row pending again.
    pub(super) fn written(&mut self, ino: u64, undoable: bool) {
        if self.pending.remove(&ino) && undoable {
            self.undo.push(Undo {
                ino,
                row: self.rows.get(&ino).cloned(),
                pending: true,
            });
        }
    }

    /// Forgets the row of `ino`; SQLite has no pending row of it to keep (every pending row is
    /// written before a statement that deletes one).
    pub(super) fn remove(&mut self, ino: u64) {
        self.rows.remove(&ino);
        self.pending.remove(&ino);
    }

    /// A transaction begins or ends committed: what it changed stays.
    pub(super) fn settle_transaction(&mut self) {
        self.undo.clear();
    }

    /// The running transaction is undone: puts back what its changes replaced, then forgets
    /// every row that is not pending.
    pub(super) fn undo_transaction(&mut self) {
        while let Some(u) = self.undo.pop() {
            match u.row {
                Some(row) => self.rows.insert(u.ino, row),
                None => self.rows.remove(&u.ino),
            };
            if u.pending {
                self.pending.insert(u.ino);
            } else {
                self.pending.remove(&u.ino);
            }
        }
        self.forget_written();
    }

    /// Forgets every row SQLite has (after a failed statement, which may have undone more than
    /// itself); pending rows stay, SQLite never had them.
    pub(super) fn forget_written(&mut self) {
        let pending = &self.pending;
        self.rows.retain(|ino, _| pending.contains(ino));
    }

    /// Forgets every row, pending ones included: before a rollback of the whole group, which
    /// the intent log's replay follows, or at close.
    pub(super) fn clear(&mut self) {
        self.rows.clear();
        self.pending.clear();
        self.undo.clear();
    }

    /// Makes room for the row of `ino`: a full cache forgets the rows SQLite has.
    fn make_room(&mut self, ino: u64) {
        if self.rows.len() >= CAPACITY && !self.rows.contains_key(&ino) {
            self.forget_written();
        }
    }

    /// How many rows are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }
}
