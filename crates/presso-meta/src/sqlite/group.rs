//! Group commit on the write connection: ordinary write transactions run inside one open SQLite
//! transaction, each under a savepoint taken at its first statement (its writes of inode rows,
//! names and counters wait in the cache until a statement could read them, [`super::cache`]),
//! and each is committed by appending its row changes to the intent log ([`super::intent`]).
//! SQLite commits the group when it is [`GROUP_AGE`] old or holds [`GROUP_OPS`] transactions, and
//! before anything that needs SQLite's own state complete: a durable transaction, a scan on a
//! read connection, a checkpoint, a copy, close.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, MutexGuard};
use std::time::{Duration, Instant};

use rusqlite::Connection;

use super::intent::{self, Position, Redo};
use super::intent_file::IntentLog;
use super::rows::{delete_inode_row, write_counter, write_dentry, write_inode};
use super::txn::{Handle, SqliteTxn};
use super::{control, eng_on, Synchronous, Writer};
use crate::engine::Txn;
use crate::error::{MetaError, Result};

/// Counter holding the number of the last group SQLite committed; the intent log's records of
/// later groups are what a crash left to replay.
pub const COUNTER_INTENT_GROUP: &str = "sqlite_intent_group";

/// A group older than this is committed at the end of its next transaction.
pub(super) const GROUP_AGE: Duration = Duration::from_millis(200);
/// A group of this many transactions is committed at once.
pub(super) const GROUP_OPS: u32 = 10_000;

/// The group state of a write connection that groups its transactions.
pub(super) struct Groups {
    /// The log the open group's transactions are committed to.
    pub(super) log: IntentLog,
    /// The last group SQLite committed.
    pub(super) committed: u64,
    /// The open group, if SQLite holds transactions not committed to its own file yet.
    pub(super) open: Option<OpenGroup>,
    /// Whether a group is open, readable without the writer's lock: a read that finds the writer
    /// busy may take a read connection only while this is false, since a read connection does
    /// not see the open group.
    pub(super) flag: Arc<AtomicBool>,
}

/// A group SQLite has not committed yet.
pub(super) struct OpenGroup {
    /// Transactions in it.
    ops: u32,
    started: Instant,
}

impl OpenGroup {
    /// A group just begun, empty.
    fn new() -> Self {
        OpenGroup {
            ops: 0,
            started: Instant::now(),
        }
    }
}

/// Name of the savepoint each grouped transaction runs under.
const SAVEPOINT: &str = "SAVEPOINT op";
const RELEASE: &str = "RELEASE op";
const ROLLBACK_TO: &str = "ROLLBACK TO op";

impl Writer {
    /// Refuses use of a write connection that lost its open group (see [`Writer::restore_group`]).
    pub(super) fn check_usable(&self) -> Result<()> {
        match &self.broken {
            Some(why) => Err(MetaError::Io(format!(
                "the metadata stopped after a failed commit ({why}); unmount and mount the pool \
                 again, which replays the intent log"
            ))),
            None => Ok(()),
        }
    }

    /// Whether a group is open on this connection.
    pub(super) fn in_group(&self) -> bool {
        self.groups.as_ref().is_some_and(|g| g.open.is_some())
    }

    /// Begins a grouped transaction: opens a group if none is. Its savepoint is taken at its
    /// first statement ([`Writer::begin_statements`]): one that only changes rows the cache
    /// holds runs none. The caller has rolled back a transaction a failed rollback left open,
    /// and set the `synchronous` level.
    pub(super) fn begin_grouped(&mut self) -> Result<()> {
        if self.in_group() && self.conn.is_autocommit() {
            // SQLite ended the group on its own (a statement failed badly): rebuild it.
            self.restore_group("the open group was rolled back by SQLite");
            self.check_usable()?;
        }
        let conn = &self.conn;
        let Some(groups) = self.groups.as_mut() else {
            return Err(MetaError::engine(
                "grouped write on an engine that does not group",
            ));
        };
        if groups.open.is_none() {
            control(conn, "BEGIN IMMEDIATE").map_err(eng_on(conn))?;
            groups.open = Some(OpenGroup::new());
            groups.flag.store(true, Ordering::SeqCst);
        }
        self.savepoint.set(false);
        self.rows.get_mut().settle_transaction();
        Ok(())
    }

    /// Readies the running grouped transaction for statements: takes its savepoint, then writes
    /// the pending rows under it, so that undoing the transaction makes them pending
    /// again. Called through a shared borrow, from the statement's first use of the connection.
    pub(super) fn begin_statements(&self) -> Result<()> {
        self.take_savepoint()?;
        self.write_pending(true)
    }

    /// Takes the running grouped transaction's savepoint, the pending rows left pending.
    pub(super) fn take_savepoint(&self) -> Result<()> {
        control(&self.conn, SAVEPOINT).map_err(eng_on(&self.conn))?;
        self.savepoint.set(true);
        Ok(())
    }

    /// Writes the pending rows to SQLite; `undoable` when under the running transaction's
    /// savepoint. Stops at the first failure, leaving the rows not written pending.
    pub(super) fn write_pending(&self, undoable: bool) -> Result<()> {
        let mut cache = self.rows.borrow_mut();
        if cache.pending_len() == 0 {
            return Ok(());
        }
        let failed = eng_on(&self.conn);
        for (ino, row) in cache.inodes.pending_rows() {
            match &row {
                Some(row) => write_inode(&self.conn, row),
                None => delete_inode_row(&self.conn, ino).map(|_| ()),
            }
            .map_err(&failed)?;
            cache.inodes.written(&ino, undoable);
        }
        for ((parent, name), entry) in cache.names.pending_rows() {
            write_dentry(&self.conn, parent, &name, entry).map_err(&failed)?;
            cache.names.written(&(parent, name), undoable);
        }
        for (name, value) in cache.counters.pending_rows() {
            write_counter(&self.conn, &name, value).map_err(&failed)?;
            cache.counters.written(&name, undoable);
        }
        Ok(())
    }

    /// Commits a grouped transaction whose changes are `redo`: appends them to the intent log,
    /// then releases its savepoint, and commits the group if it is due. If the append fails the
    /// transaction is undone and the error returned; once it is in the log it is committed, and
    /// a failure to commit the group afterwards is the group's (see [`Writer::commit_group`]).
    pub(super) fn end_grouped(&mut self, redo: Redo) -> Result<()> {
        let Some(groups) = self.groups.as_mut() else {
            return Err(MetaError::engine(
                "grouped commit on an engine that does not group",
            ));
        };
        let Some(open) = groups.open.as_mut() else {
            return Err(MetaError::engine("grouped commit without an open group"));
        };
        if !redo.is_empty() {
            let at = Position {
                group: groups.committed + 1,
                op: open.ops,
            };
            if let Err(e) = groups.log.append(&intent::encode_record(at, &redo)) {
                self.abort_grouped();
                return Err(e);
            }
            open.ops += 1;
        }
        let due = open.ops >= GROUP_OPS || open.started.elapsed() >= GROUP_AGE;
        // Committed: its pending rows stay pending, now for a transaction in the log.
        self.rows.get_mut().settle_transaction();
        if self.savepoint.replace(false) {
            if let Err(e) = control(&self.conn, RELEASE) {
                self.restore_group(&format!("release of a transaction's savepoint failed: {e}"));
                return Ok(());
            }
        }
        if due {
            // The transaction is committed (its record is in the log) whatever happens to the
            // group: a failed group commit is restored from the log or stops the engine.
            let _ = self.commit_group();
        }
        Ok(())
    }

    /// Undoes a grouped transaction that is not committed, keeping the rest of its group.
    pub(super) fn abort_grouped(&mut self) {
        let statements_undone = self.savepoint.replace(false);
        if statements_undone {
            let undone =
                control(&self.conn, ROLLBACK_TO).and_then(|()| control(&self.conn, RELEASE));
            if let Err(e) = undone {
                self.restore_group(&format!("rollback of a transaction failed: {e}"));
                return;
            }
        }
        self.rows.get_mut().undo_transaction(statements_undone);
        if self.in_group() && self.conn.is_autocommit() {
            self.restore_group("the open group was rolled back by SQLite");
        }
    }

    /// Commits the open group to SQLite (with the connection's current `synchronous`), then
    /// empties the intent log. Nothing to do when no group is open. If the commit fails, the
    /// group is rebuilt from the log, so its transactions stay visible and are committed later.
    pub(super) fn commit_group(&mut self) -> Result<()> {
        let (number, empty) = match &self.groups {
            Some(Groups {
                open: Some(open),
                committed,
                ..
            }) => (committed + 1, open.ops == 0),
            _ => return Ok(()),
        };
        if empty {
            // No transaction of the group reached the log (reads, or transactions undone, began
            // it), so it holds no change: it ends without a write, which a full disk allows.
            if let Err(e) = self.rollback() {
                let e = eng_on(&self.conn)(e);
                self.restore_group(&e.to_string());
                return Err(e);
            }
            if let Some(groups) = self.groups.as_mut() {
                groups.open = None;
                groups.flag.store(false, Ordering::SeqCst);
            }
            return Ok(());
        }
        let committed = self
            .write_pending(false)
            .and_then(|()| {
                SqliteTxn::replaying(&self.conn).set_counter(COUNTER_INTENT_GROUP, number)
            })
            .and_then(|()| control(&self.conn, "COMMIT").map_err(eng_on(&self.conn)));
        if let Err(e) = committed {
            self.restore_group(&e.to_string());
            return Err(e);
        }
        let Some(groups) = self.groups.as_mut() else {
            return Ok(());
        };
        groups.committed = number;
        groups.open = None;
        groups.flag.store(false, Ordering::SeqCst);
        // A log left uncleared holds only committed records, which replay passes over.
        let _ = groups.log.clear();
        Ok(())
    }

    /// After a failure that may have lost the open group's changes in SQLite: rolls back, then
    /// opens the group again and replays its transactions from the intent log. If even that
    /// fails, the engine stops (every later use fails and says why); the log keeps the group
    /// for the next open.
    fn restore_group(&mut self, why: &str) {
        let restored = self.replay_open_group();
        if let Err(e) = restored {
            self.broken = Some(format!("{why}; replaying the open group failed: {e}"));
        }
    }

    fn replay_open_group(&mut self) -> Result<()> {
        // The replay below writes rows past the cache; every pending row is in the log.
        self.rows.get_mut().clear();
        self.savepoint.set(false);
        let conn = &self.conn;
        let Some(groups) = self.groups.as_mut() else {
            return Ok(());
        };
        if !conn.is_autocommit() {
            control(conn, "ROLLBACK").map_err(eng_on(conn))?;
        }
        groups.open = None;
        let held = groups.log.read_back()?;
        let records = intent::to_replay(&held, groups.committed);
        control(conn, "BEGIN IMMEDIATE").map_err(eng_on(conn))?;
        groups.open = Some(OpenGroup::new());
        let mut tx = SqliteTxn::replaying(conn);
        for (pos, body) in &records {
            if pos.group != groups.committed + 1 {
                break;
            }
            intent::apply(&mut tx, body)?;
            if let Some(open) = groups.open.as_mut() {
                open.ops = pos.op + 1;
            }
        }
        Ok(())
    }
}

/// Replays, at open, the intent log's records that continue the last group SQLite committed,
/// commits them with `synchronous=FULL`, then empties the log (see [`intent::to_replay`]).
/// Returns the log and the last committed group.
pub(super) fn replay_at_open(
    conn: &Connection,
    path: &std::path::Path,
    sync: Synchronous,
) -> Result<(IntentLog, u64)> {
    let (mut log, held) = IntentLog::open(&intent::path_for(path))?;
    let mut committed = SqliteTxn::replaying(conn).get_counter(COUNTER_INTENT_GROUP)?;
    let records = intent::to_replay(&held, committed);
    if !records.is_empty() {
        conn.execute_batch(Synchronous::Full.pragma())
            .map_err(eng_on(conn))?;
        control(conn, "BEGIN IMMEDIATE").map_err(eng_on(conn))?;
        let applied = (|| {
            let mut tx = SqliteTxn::replaying(conn);
            for (_, body) in &records {
                intent::apply(&mut tx, body)?;
            }
            let last = records.last().map_or(committed, |(p, _)| p.group);
            tx.set_counter(COUNTER_INTENT_GROUP, last)?;
            control(conn, "COMMIT").map_err(eng_on(conn))?;
            Ok(last)
        })();
        match applied {
            Ok(last) => committed = last,
            Err(e) => {
                let _ = control(conn, "ROLLBACK");
                return Err(e);
            }
        }
        conn.execute_batch(sync.pragma()).map_err(eng_on(conn))?;
    }
    if !held.is_empty() {
        log.clear()?;
        log.sync()?;
    }
    Ok((log, committed))
}

impl<'a> SqliteTxn<'a> {
    /// A transaction handle on `conn` inside a transaction the caller began and ends, whose
    /// changes are not logged: for replaying the intent log and numbering a group.
    pub(super) fn replaying(conn: &'a Connection) -> Self {
        SqliteTxn {
            handle: Handle::Replay(conn),
            open: false,
            durable: false,
            redo: None,
        }
    }

    /// A read on the write connection `w`, which begins no transaction of its own and so neither
    /// commits nor rolls one back. Inside the open group it reads in the group's transaction,
    /// the pending rows written into it before its first statement ([`SqliteTxn::c`]). Outside
    /// one each statement reads in a transaction of its own, and all of them see one state:
    /// only this connection writes the database, and the read holds it until it ends. That
    /// saves the BEGIN and COMMIT that were a fifth of a GETATTR's metadata time.
    pub(super) fn reading_on_writer(w: MutexGuard<'a, Writer>) -> Self {
        SqliteTxn {
            handle: Handle::ReadOnWriter(w),
            open: false,
            durable: false,
            redo: None,
        }
    }
}
