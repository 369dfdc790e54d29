//! One SQLite transaction, on the write connection or on a pooled read connection: the handle,
//! how it ends, and the changes it notes for the intent log. Its implementation of the engine
//! primitives is in [`super::primitives`].

use std::sync::MutexGuard;

use rusqlite::Connection;

use super::cache::{Held, RowCache, PENDING_LIMIT};
use super::group::COUNTER_INTENT_GROUP;
use super::intent::Redo;
use super::{control, eng_on, SqliteEngine, Writer};
use crate::error::{MetaError, Result};

pub(super) enum Handle<'a> {
    Write(MutexGuard<'a, Writer>),
    /// A read on the write connection, in no transaction of its own
    /// ([`SqliteTxn::reading_on_writer`]).
    ReadOnWriter(MutexGuard<'a, Writer>),
    /// The connection is `None` only while it is being handed back in `drop`.
    Read(&'a SqliteEngine, Option<Connection>),
    /// Inside a transaction its owner began and ends: replaying the intent log.
    Replay(&'a Connection),
}

pub(super) struct SqliteTxn<'a> {
    pub(super) handle: Handle<'a>,
    pub(super) open: bool,
    /// Begun by [`crate::MetaEngine::write_durable`].
    pub(super) durable: bool,
    /// The changes of a grouped write transaction (see [`super::group`]), which runs under a
    /// savepoint of the open group and commits by appending them to the intent log.
    pub(super) redo: Option<Redo>,
}

impl Drop for SqliteTxn<'_> {
    fn drop(&mut self) {
        if self.redo.take().is_some() {
            if let Handle::Write(w) = &mut self.handle {
                w.abort_grouped();
            }
        } else if self.open {
            // A failed rollback is caught later: the write connection is rolled back at the
            // next BEGIN, a read connection is closed instead of reused. On the write
            // connection the cached inode rows go first (`Writer::rollback`).
            if let Handle::Write(w) = &mut self.handle {
                let _ = w.rollback();
            } else if let Ok(c) = self.c() {
                let _ = control(c, "ROLLBACK");
            }
        }
        if let Handle::Read(engine, conn) = &mut self.handle {
            if let Some(c) = conn.take() {
                engine.readers.give_back(c);
            }
        }
    }
}

impl SqliteTxn<'_> {
    /// The connection of this transaction, ready for any statement: on the write connection
    /// inside a group, the pending rows are written first (a grouped transaction takes its
    /// savepoint before them, a read writes them into the group); see [`super::cache`].
    pub(super) fn c(&self) -> Result<&Connection> {
        if let Handle::Write(w) | Handle::ReadOnWriter(w) = &self.handle {
            if self.redo.is_some() && !w.savepoint.get() {
                w.begin_statements()?;
            } else {
                // Under the savepoint when this transaction took one: rows held since then.
                w.write_pending(self.redo.is_some())?;
            }
            if w.rows.borrow().pending_len() > 0 {
                return Err(MetaError::engine(
                    "a statement would run before the pending rows are written",
                ));
            }
        }
        self.reader()
    }

    /// The connection, for a read that no pending row can affect: of one row by its key that
    /// the cache does not hold (an inode row, a directory entry, a counter), or of tables the
    /// cache never holds rows of (extended attributes, records, properties). Every other
    /// statement goes through [`SqliteTxn::c`].
    pub(super) fn reader(&self) -> Result<&Connection> {
        match &self.handle {
            Handle::Write(w) | Handle::ReadOnWriter(w) => Ok(&w.conn),
            Handle::Read(_, Some(c)) => Ok(c),
            Handle::Replay(c) => Ok(c),
            Handle::Read(_, None) => Err(MetaError::engine("read connection already returned")),
        }
    }

    /// The connection, for a write of a table whose rows the cache never holds (extended
    /// attributes, records, properties), which no pending row can affect: a grouped
    /// transaction's first such write takes its savepoint, leaving the pending rows pending.
    pub(super) fn unheld_writer(&self) -> Result<&Connection> {
        match &self.handle {
            Handle::Write(w) => {
                if self.redo.is_some() && !w.savepoint.get() {
                    w.take_savepoint()?;
                }
                Ok(&w.conn)
            }
            Handle::Replay(c) => Ok(c),
            Handle::Read(..) | Handle::ReadOnWriter(_) => Err(MetaError::engine(
                "write attempted in a read-only transaction",
            )),
        }
    }

    /// Converts a SQLite failure of this transaction (see [`eng_on`]).
    pub(super) fn err(&self) -> impl Fn(rusqlite::Error) -> MetaError + '_ {
        // The connection only explains the failure: taking it must not ready it for statements
        // (`c` would write the pending rows before a read that needs none).
        let conn = self.reader().ok();
        move |e| match conn {
            Some(c) => eng_on(c)(e),
            None => super::eng(e),
        }
    }

    /// The connection, if this is a write transaction, ready for any statement (see
    /// [`SqliteTxn::c`]).
    pub(super) fn w(&self) -> Result<&Connection> {
        match &self.handle {
            Handle::Write(_) | Handle::Replay(_) => self.c(),
            Handle::Read(..) | Handle::ReadOnWriter(_) => Err(MetaError::engine(
                "write attempted in a read-only transaction",
            )),
        }
    }

    /// The write connection's rows, when this transaction runs on the write connection.
    pub(super) fn rows(&mut self) -> Option<&mut RowCache> {
        match &mut self.handle {
            Handle::Write(w) | Handle::ReadOnWriter(w) => Some(w.rows.get_mut()),
            Handle::Read(..) | Handle::Replay(_) => None,
        }
    }

    /// The write connection's counters, for counter `name`: every counter but the group's own,
    /// which the group commit writes past the cache.
    pub(super) fn counters(&mut self, name: &str) -> Option<&mut Held<String, u64>> {
        if name == COUNTER_INTENT_GROUP {
            return None;
        }
        self.rows().map(|c| &mut c.counters)
    }

    /// The write connection's rows, to hold a row pending instead of writing it: when this is a
    /// grouped transaction and the cache has room for one more pending row.
    pub(super) fn holding(&mut self) -> Option<&mut RowCache> {
        let (Handle::Write(w), Some(_)) = (&mut self.handle, &self.redo) else {
            return None;
        };
        let cache = w.rows.get_mut();
        (cache.pending_len() < PENDING_LIMIT).then_some(cache)
    }

    /// Passes on the outcome of a statement on cached rows; a failure forgets the cached rows
    /// SQLite has, since SQLite may have rolled back more than the statement.
    pub(super) fn settle<T>(&mut self, outcome: Result<T>) -> Result<T> {
        if outcome.is_err() {
            if let Some(cache) = self.rows() {
                cache.forget_written();
            }
        }
        outcome
    }

    /// Notes a change for the intent log, if this transaction is grouped.
    pub(super) fn log(&mut self, change: impl FnOnce(&mut Redo)) {
        if let Some(redo) = self.redo.as_mut() {
            change(redo);
        }
    }
}
