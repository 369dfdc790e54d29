//! The write connection's cache of rows read by key, and the rows it holds back from SQLite.
//!
//! A namespace request reads the rows it changes (a SETATTR reads, then rewrites its inode; a
//! CREATE reads its directory, asks whether the name is free and reads the next inode number),
//! and each of those reads is a statement of its own. The cache answers them from the rows this
//! connection wrote or read last: inode rows by number, directory entries by parent and name
//! (an entry known to be absent too), and counters by name.
//!
//! Inside a group ([`super::group`]) a transaction's writes of these rows, deletions included,
//! are held here, *pending*, rather than written to SQLite at once: a transaction is committed
//! by its intent-log record, which carries the changes, so SQLite needs them only before a
//! statement that could read them. Pending rows are written to SQLite before any other
//! statement of a transaction (the first of which also takes its savepoint), before the first
//! statement of a read in the group, and before the group commits. A `tar x` CREATE then runs
//! no statement but the reads of a name and a number that are not held, its SETATTRs none at
//! all, an UNLINK only those on its records, attributes and properties, and the rows a file's
//! requests rewrite reach SQLite once, with the group.
//!
//! Invariants:
//! - Every row held is what the write connection would read now, its open group's changes
//!   included, pending rows written. Only this connection writes the database (the process
//!   holds it alone), and inode rows, entries and counters change only through the
//!   transaction's primitives (`Txn::put_inode`, `Txn::put_dentry`, `Txn::set_counter` and
//!   their deletes), which keep the cache; the group's own counter is the one exception and is
//!   never held ([`super::group::COUNTER_INTENT_GROUP`]).
//! - While rows are pending, no statement runs but those that no pending row can affect: the
//!   read of one row by its key that is not held, and reads and writes of the tables whose rows
//!   are never held (extended attributes, records, properties). The transaction handle
//!   enforces this (`SqliteTxn::c`, `SqliteTxn::reader`, `SqliteTxn::unheld_writer`).
//! - Rows are pending only inside an open group, and only for transactions whose record is in
//!   the intent log or for the one running; so a crash loses nothing SQLite alone would keep.
//! - Undoing a transaction puts back what its changes replaced (the `undo` lists) and, if it ran
//!   a statement, forgets every row that is not pending, since SQLite's rows may have gone back.
//!   A transaction runs statements that write only under its savepoint, so one that never took
//!   it changed nothing in SQLite.

use std::borrow::Borrow;
use std::collections::{HashMap, HashSet};
use std::hash::Hash;

use crate::engine::{Dentry, InodeRow};

/// Most rows of one kind held; a full table forgets its rows that are not pending (requests
/// touch a few rows each, mostly ones touched just before, so recency within this many is what
/// matters).
const CAPACITY: usize = 4096;

/// Most rows held pending, all kinds together; a transaction that would hold more writes them
/// instead.
pub(super) const PENDING_LIMIT: usize = 1024;

/// A directory entry's key: the directory's inode number and the name.
pub(super) type NameKey = (u64, Vec<u8>);

/// What a change of the running transaction replaced: the row held before (if any) and
/// whether it was pending.
struct Undo<K, V> {
    key: K,
    row: Option<V>,
    pending: bool,
}

/// Rows of one kind by key, as the write connection sees them now.
pub(super) struct Held<K, V> {
    rows: HashMap<K, V>,
    /// Rows held here that SQLite does not have yet.
    pending: HashSet<K>,
    /// The running transaction's changes to pending rows, oldest first.
    undo: Vec<Undo<K, V>>,
}

impl<K, V> Default for Held<K, V> {
    fn default() -> Self {
        Held {
            rows: HashMap::new(),
            pending: HashSet::new(),
            undo: Vec::new(),
        }
    }
}

impl<K: Hash + Eq + Ord + Clone, V: Clone> Held<K, V> {
    /// The row of `key`, if held (`key` in any form the key borrows as: a counter by `&str`).
    pub(super) fn get<Q>(&self, key: &Q) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.rows.get(key).cloned()
    }

    /// Holds `row`, which SQLite has, as the current row of `key`.
    pub(super) fn put(&mut self, key: K, row: V) {
        self.make_room(&key);
        self.pending.remove(&key);
        self.rows.insert(key, row);
    }

    /// Holds `row` as the current row of `key`, pending: SQLite does not have it yet.
    pub(super) fn hold(&mut self, key: K, row: V) {
        self.make_room(&key);
        self.undo.push(Undo {
            key: key.clone(),
            row: self.rows.get(&key).cloned(),
            pending: self.pending.contains(&key),
        });
        self.pending.insert(key.clone());
        self.rows.insert(key, row);
    }

    /// How many rows are pending.
    pub(super) fn pending_len(&self) -> usize {
        self.pending.len()
    }

    /// The pending rows, in key order.
    pub(super) fn pending_rows(&self) -> Vec<(K, V)> {
        let mut keys: Vec<&K> = self.pending.iter().collect();
        keys.sort_unstable();
        keys.into_iter()
            .filter_map(|k| self.rows.get(k).map(|v| (k.clone(), v.clone())))
            .collect()
    }

    /// Notes that SQLite now has the pending row of `key`. Inside a transaction's savepoint
    /// (`undoable`), undoing the transaction makes the row pending again.
    pub(super) fn written(&mut self, key: &K, undoable: bool) {
        if self.pending.remove(key) && undoable {
            self.undo.push(Undo {
                key: key.clone(),
                row: self.rows.get(key).cloned(),
                pending: true,
            });
        }
    }

    /// A transaction begins or ends committed: what it changed stays.
    fn settle_transaction(&mut self) {
        self.undo.clear();
    }

    /// The running transaction is undone: puts back what its changes replaced, then, if SQLite
    /// undid statements of it too (`statements_undone`), forgets every row that is not pending.
    fn undo_transaction(&mut self, statements_undone: bool) {
        while let Some(u) = self.undo.pop() {
            match u.row {
                Some(row) => self.rows.insert(u.key.clone(), row),
                None => self.rows.remove(&u.key),
            };
            if u.pending {
                self.pending.insert(u.key);
            } else {
                self.pending.remove(&u.key);
            }
        }
        if statements_undone {
            self.forget_written();
        }
    }

    /// Forgets every row SQLite has; pending rows stay, SQLite never had them.
    fn forget_written(&mut self) {
        let pending = &self.pending;
        self.rows.retain(|k, _| pending.contains(k));
    }

    /// Forgets every row, pending ones included.
    fn clear(&mut self) {
        self.rows.clear();
        self.pending.clear();
        self.undo.clear();
    }

    /// Makes room for the row of `key`: a full table forgets the rows SQLite has.
    fn make_room(&mut self, key: &K) {
        if self.rows.len() >= CAPACITY && !self.rows.contains_key(key) {
            self.forget_written();
        }
    }

    /// How many rows are held.
    #[cfg(test)]
    pub(super) fn len(&self) -> usize {
        self.rows.len()
    }
}

/// The rows the write connection holds, by kind.
#[derive(Default)]
pub(super) struct RowCache {
    /// Inode rows by number; `None` when the inode is known not to exist.
    pub(super) inodes: Held<u64, Option<InodeRow>>,
    /// Directory entries by parent and name; `None` when the entry is known to be absent.
    pub(super) names: Held<NameKey, Option<Dentry>>,
    /// Counters by name.
    pub(super) counters: Held<String, u64>,
}

impl RowCache {
    /// How many rows are pending, all kinds together.
    pub(super) fn pending_len(&self) -> usize {
        self.inodes.pending_len() + self.names.pending_len() + self.counters.pending_len()
    }

    /// A transaction begins or ends committed: what it changed stays.
    pub(super) fn settle_transaction(&mut self) {
        self.inodes.settle_transaction();
        self.names.settle_transaction();
        self.counters.settle_transaction();
    }

    /// The running transaction is undone: puts back what its changes replaced, then, if SQLite
    /// undid statements of it too (`statements_undone`: it had taken its savepoint), forgets
    /// every row that is not pending. Without a statement SQLite's rows are as they were, and
    /// keeping them keeps an undone transaction's cost its own: the kernel's times-only SETATTR
    /// of a file removed since fails so, and an `rm` of many written files brings many.
    pub(super) fn undo_transaction(&mut self, statements_undone: bool) {
        self.inodes.undo_transaction(statements_undone);
        self.names.undo_transaction(statements_undone);
        self.counters.undo_transaction(statements_undone);
    }

    /// Forgets every row SQLite has (after a failed statement, which may have undone more than
    /// itself); pending rows stay, SQLite never had them.
    pub(super) fn forget_written(&mut self) {
        self.inodes.forget_written();
        self.names.forget_written();
        self.counters.forget_written();
    }

    /// Forgets every row, pending ones included: before a rollback of the whole group, which
    /// the intent log's replay follows, or at close.
    pub(super) fn clear(&mut self) {
        self.inodes.clear();
        self.names.clear();
        self.counters.clear();
    }
}
