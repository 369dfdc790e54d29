//! The engine's read connections: at most [`READ_CONNECTIONS`], opened on first need with
//! `query_only`, taken by a read transaction and given back at its end; a thread that finds them
//! all busy waits for one to come back.

use std::path::PathBuf;
use std::sync::{Condvar, Mutex};

use rusqlite::Connection;

use super::{configure, connect, eng, poisoned, READ_CONNECTIONS};
use crate::error::Result;

/// Read connections not in use, and how many exist in total.
pub(super) struct Pool {
    pub(super) idle: Vec<Connection>,
    pub(super) open: usize,
    /// Threads waiting for a connection to come back (a notification costs a system call, so
    /// none is sent when nobody waits).
    pub(super) waiting: usize,
}

/// The read connections of the database at one path.
pub(super) struct Readers {
    /// Canonical, since connections open later, possibly after the working directory changed.
    path: PathBuf,
    pub(super) pool: Mutex<Pool>,
    returned: Condvar,
}

impl Readers {
    /// No connection yet to the database at `path`.
    pub(super) fn new(path: PathBuf) -> Readers {
        Readers {
            path,
            pool: Mutex::new(Pool {
                idle: Vec::new(),
                open: 0,
                waiting: 0,
            }),
            returned: Condvar::new(),
        }
    }

    fn open(&self) -> Result<Connection> {
        let conn = connect(&self.path, false)?;
        configure(&conn)?;
        conn.execute_batch("PRAGMA query_only=ON").map_err(eng)?;
        Ok(conn)
    }

    /// Takes an idle read connection, opens one if fewer than [`READ_CONNECTIONS`] exist, or
    /// waits for one to be returned.
    pub(super) fn take(&self) -> Result<Connection> {
        let mut pool = self.pool.lock().map_err(poisoned)?;
        loop {
            if let Some(c) = pool.idle.pop() {
                return Ok(c);
            }
            if pool.open < READ_CONNECTIONS {
                pool.open += 1;
                drop(pool);
                let opened = self.open();
                if opened.is_err() {
                    self.forget();
                }
                return opened;
            }
            pool.waiting += 1;
            pool = self.returned.wait(pool).map_err(poisoned)?;
            pool.waiting -= 1;
        }
    }

    /// Gives `conn` back for the next read.
    pub(super) fn give_back(&self, conn: Connection) {
        // A connection still inside a transaction (its rollback failed) is closed, not reused.
        if !conn.is_autocommit() {
            drop(conn);
            self.forget();
            return;
        }
        self.change(|pool| pool.idle.push(conn));
    }

    /// Counts out a connection that was taken and closed instead of given back.
    pub(super) fn forget(&self) {
        self.change(|pool| pool.open = pool.open.saturating_sub(1));
    }

    /// Closes the idle connections (at the engine's close, when none is in use).
    pub(super) fn close_idle(&self) -> Result<()> {
        self.pool.lock().map_err(poisoned)?.idle.clear();
        Ok(())
    }

    /// Applies `change` to the read connections and wakes a thread waiting for one, if any.
    fn change(&self, change: impl FnOnce(&mut Pool)) {
        match self.pool.lock() {
            Ok(mut pool) => {
                change(&mut pool);
                if pool.waiting > 0 {
                    self.returned.notify_one();
                }
            }
            Err(_) => self.returned.notify_all(),
        }
    }
}
