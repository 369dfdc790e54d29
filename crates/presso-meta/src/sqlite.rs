//! SQLite engine: one table per row kind, WAL journal; one write connection behind a mutex and a
//! small pool of read connections, so reads run concurrently with each other and with a writer.
//!
//! Unsigned 64-bit numbers are stored bit-cast into SQLite's signed `INTEGER`; record indexes are
//! limited to `0..i64::MAX` by the semantic layer so their order is kept. Byte-string keys are
//! `BLOB`s, which SQLite orders with `memcmp` then length, the same order as `Vec<u8>`.
//!
//! Concurrency: write transactions are serialized on the write connection (`BEGIN IMMEDIATE`).
//! Read transactions take a connection from the pool (at most [`READ_CONNECTIONS`], opened on
//! first need, `query_only`), waiting for one to come back when all are busy. In WAL mode a read
//! transaction's snapshot is fixed by its first statement and kept until it ends, so it is
//! consistent and includes every commit made before the transaction began.
//!
//! Durability: commits use the `synchronous` level the engine was opened with, except those of
//! [`MetaEngine::write_durable`] transactions, which run with `synchronous=FULL` (SQLite refuses
//! to change the level inside a transaction, so it is switched before `BEGIN` and switched back
//! before the next ordinary write). In WAL mode `FULL` syncs the log at commit, and because the
//! log is written in order, that also makes every earlier commit durable.

use std::collections::BTreeMap;
use std::ops::Range;
use std::path::{Path, PathBuf};
use std::sync::{Condvar, Mutex, MutexGuard};

use rusqlite::{params, Connection, OpenFlags, OptionalExtension};

use crate::engine::{
    CodecSpace, Dentry, FileKind, InodeRow, MetaEngine, RecordLocation, RecordRef, SegmentUsage,
    Timespec, Txn,
};
use crate::error::{MetaError, Result};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 1;

/// Most read connections the engine opens.
pub const READ_CONNECTIONS: usize = 4;

/// Counter bumped by every commit of a [`MetaEngine::write_durable`] transaction, so that the
/// commit always appends to the log and therefore syncs it.
pub const COUNTER_DURABLE_COMMITS: &str = "sqlite_durable_commits";

/// Prepared statements kept per connection: more than the engine has, so none is re-prepared.
const STATEMENT_CACHE: usize = 64;

/// SQLite `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL`: with WAL, a power loss may lose the last commits but never corrupts.
    #[default]
    Normal,
    /// `FULL`: every commit is durable when it returns.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "PRAGMA synchronous=NORMAL",
            Synchronous::Full => "PRAGMA synchronous=FULL",
        }
    }
}

/// Options for opening a SQLite metadata database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqliteOptions {
    /// Durability of commits.
    pub synchronous: Synchronous,
}

const SCHEMA: &str = "
CREATE TABLE inodes (
    ino INTEGER PRIMARY KEY,
    kind INTEGER NOT NULL,
    mode INTEGER NOT NULL,
    uid INTEGER NOT NULL,
    gid INTEGER NOT NULL,
    size INTEGER NOT NULL,
    nlink INTEGER NOT NULL,
    atime_s INTEGER NOT NULL,
    atime_ns INTEGER NOT NULL,
    mtime_s INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    ctime_s INTEGER NOT NULL,
    ctime_ns INTEGER NOT NULL,
    rdev INTEGER NOT NULL,
    parent INTEGER NOT NULL,
    target BLOB
);
CREATE TABLE dentries (
    parent INTEGER NOT NULL,
    name BLOB NOT NULL,
    ino INTEGER NOT NULL,
    kind INTEGER NOT NULL,
    PRIMARY KEY (parent, name)
) WITHOUT ROWID;
CREATE TABLE xattrs (
    ino INTEGER NOT NULL,
    name BLOB NOT NULL,
    value BLOB NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;
CREATE TABLE records (
    ino INTEGER NOT NULL,
    idx INTEGER NOT NULL,
    segment INTEGER NOT NULL,
    offset INTEGER NOT NULL,
    stored_len INTEGER NOT NULL,
    logical_len INTEGER NOT NULL,
    codec INTEGER NOT NULL,
    checksum INTEGER NOT NULL,
    inline_data BLOB,
    PRIMARY KEY (ino, idx)
) WITHOUT ROWID;
CREATE TABLE props (
    ino INTEGER NOT NULL,
    name TEXT NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (ino, name)
) WITHOUT ROWID;
CREATE TABLE counters (
    name TEXT PRIMARY KEY,
    value INTEGER NOT NULL
) WITHOUT ROWID;
";

/// Secondary indexes, created on every open so that version-1 databases written before they
/// existed get them too.
///
/// `records_by_segment` holds (segment, offset, stored_len) plus the primary key of non-inline
/// records: per-segment usage is one scan of it and listing a segment is one range of it. Its
/// last column, `inline_data`, is always NULL there (one byte per entry); it is listed only so
/// that SQLite sees the index covers the `inline_data IS NULL` term and never visits the table.
/// `inodes_orphans` holds only inodes with `nlink = 0`, so finding orphans costs nothing while
/// there are none.
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS records_by_segment
    ON records (segment, offset, stored_len, inline_data) WHERE inline_data IS NULL;
CREATE INDEX IF NOT EXISTS inodes_orphans ON inodes (ino) WHERE nlink = 0;
";

fn eng(e: rusqlite::Error) -> MetaError {
    MetaError::Engine(format!("sqlite: {e}"))
}

fn poisoned<T>(_: T) -> MetaError {
    MetaError::Engine("sqlite engine lock poisoned".into())
}

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(eng)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    Ok(())
}

/// The write connection and the `synchronous` level currently set on it.
struct Writer {
    conn: Connection,
    sync_now: Synchronous,
}

/// Read connections not in use, and how many exist in total.
struct Pool {
    idle: Vec<Connection>,
    open: usize,
}

/// The SQLite engine.
pub struct SqliteEngine {
    path: PathBuf,
    sync: Synchronous,
    writer: Mutex<Writer>,
    readers: Mutex<Pool>,
    returned: Condvar,
}

impl std::fmt::Debug for SqliteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteEngine")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteEngine {
    /// Opens (creating if needed) the database at `path`, creating or checking the schema.
    ///
    /// Fails with [`MetaError::SchemaTooNew`] if the database was written by a newer schema.
    /// `path` must name a file (read transactions use their own connections to it).
    pub fn open(path: &Path, opts: SqliteOptions) -> Result<Self> {
        let mut conn = Connection::open(path).map_err(eng)?;
        configure(&conn)?;
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(eng)?;
        conn.execute_batch(opts.synchronous.pragma()).map_err(eng)?;

        let tx = conn
            .transaction_with_behavior(rusqlite::TransactionBehavior::Immediate)
            .map_err(eng)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS meta_version (
                id INTEGER PRIMARY KEY CHECK (id = 0),
                version INTEGER NOT NULL
            );",
        )
        .map_err(eng)?;
        let found: Option<i64> = tx
            .query_row("SELECT version FROM meta_version WHERE id = 0", [], |r| {
                r.get(0)
            })
            .optional()
            .map_err(eng)?;
        match found {
            None => {
                tx.execute_batch(SCHEMA).map_err(eng)?;
                tx.execute(
                    "INSERT INTO meta_version (id, version) VALUES (0, ?1)",
                    params![SCHEMA_VERSION],
                )
                .map_err(eng)?;
            }
            Some(v) if v == i64::from(SCHEMA_VERSION) => {}
            Some(v) if v > i64::from(SCHEMA_VERSION) => {
                return Err(MetaError::SchemaTooNew {
                    found: u32::try_from(v).unwrap_or(u32::MAX),
                    supported: SCHEMA_VERSION,
                });
            }
            Some(v) => {
                return Err(MetaError::Engine(format!(
                    "unsupported old schema version {v} (no migration available)"
                )));
            }
        }
        tx.execute_batch(INDEXES).map_err(eng)?;
        tx.commit().map_err(eng)?;
        // Read connections are opened later, possibly after the working directory changed.
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(SqliteEngine {
            path,
            sync: opts.synchronous,
            writer: Mutex::new(Writer {
                conn,
                sync_now: opts.synchronous,
            }),
            readers: Mutex::new(Pool {
                idle: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
        })
    }

    fn open_reader(&self) -> Result<Connection> {
        let conn = Connection::open_with_flags(
            &self.path,
            OpenFlags::SQLITE_OPEN_READ_WRITE
                | OpenFlags::SQLITE_OPEN_URI
                | OpenFlags::SQLITE_OPEN_NO_MUTEX,
        )
        .map_err(eng)?;
        configure(&conn)?;
        conn.execute_batch("PRAGMA query_only=ON").map_err(eng)?;
        Ok(conn)
    }

    /// Takes an idle read connection, opens one if fewer than [`READ_CONNECTIONS`] exist, or
    /// waits for one to be returned.
    fn take_reader(&self) -> Result<Connection> {
        let mut pool = self.readers.lock().map_err(poisoned)?;
        loop {
            if let Some(c) = pool.idle.pop() {
                return Ok(c);
            }
            if pool.open < READ_CONNECTIONS {
                pool.open += 1;
                drop(pool);
                let opened = self.open_reader();
                if opened.is_err() {
                    self.forget_reader();
                }
                return opened;
            }
            pool = self.returned.wait(pool).map_err(poisoned)?;
        }
    }

    fn give_back(&self, conn: Connection) {
        // A connection still inside a transaction (its rollback failed) is closed, not reused.
        if !conn.is_autocommit() {
            drop(conn);
            self.forget_reader();
            return;
        }
        if let Ok(mut pool) = self.readers.lock() {
            pool.idle.push(conn);
        }
        self.returned.notify_one();
    }

    fn forget_reader(&self) {
        if let Ok(mut pool) = self.readers.lock() {
            pool.open = pool.open.saturating_sub(1);
        }
        self.returned.notify_one();
    }

    fn begin_read(&self) -> Result<SqliteTxn<'_>> {
        let conn = self.take_reader()?;
        if let Err(e) = conn.execute_batch("BEGIN DEFERRED") {
            self.give_back(conn);
            return Err(eng(e));
        }
        Ok(SqliteTxn {
            handle: Handle::Read(self, Some(conn)),
            open: true,
            durable: false,
        })
    }

    fn begin_write(&self, durable: bool) -> Result<SqliteTxn<'_>> {
        let mut w = self.writer.lock().map_err(poisoned)?;
        if !w.conn.is_autocommit() {
            // Left open by a failed rollback; nothing of it may survive.
            w.conn.execute_batch("ROLLBACK").map_err(eng)?;
        }
        let want = if durable {
            Synchronous::Full
        } else {
            self.sync
        };
        if w.sync_now != want {
            w.conn.execute_batch(want.pragma()).map_err(eng)?;
            w.sync_now = want;
        }
        w.conn.execute_batch("BEGIN IMMEDIATE").map_err(eng)?;
        Ok(SqliteTxn {
            handle: Handle::Write(w),
            open: true,
            durable,
        })
    }
}

impl MetaEngine for SqliteEngine {
    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_read()?))
    }

    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_write(false)?))
    }

    fn write_durable(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_write(true)?))
    }
}

enum Handle<'a> {
    Write(MutexGuard<'a, Writer>),
    /// The connection is `None` only while it is being handed back in `drop`.
    Read(&'a SqliteEngine, Option<Connection>),
}

struct SqliteTxn<'a> {
    handle: Handle<'a>,
    open: bool,
    /// Begun by [`MetaEngine::write_durable`].
    durable: bool,
}

impl Drop for SqliteTxn<'_> {
    fn drop(&mut self) {
        if self.open {
            if let Ok(c) = self.c() {
                // A failed rollback is caught later: the write connection is rolled back at the
                // next BEGIN, a read connection is closed instead of reused.
                let _ = c.execute_batch("ROLLBACK");
            }
        }
        if let Handle::Read(engine, conn) = &mut self.handle {
            if let Some(c) = conn.take() {
                engine.give_back(c);
            }
        }
    }
}

impl SqliteTxn<'_> {
    /// The connection of this transaction.
    fn c(&self) -> Result<&Connection> {
        match &self.handle {
            Handle::Write(w) => Ok(&w.conn),
            Handle::Read(_, Some(c)) => Ok(c),
            Handle::Read(_, None) => {
                Err(MetaError::Engine("read connection already returned".into()))
            }
        }
    }

    /// The connection, if this is a write transaction.
    fn w(&self) -> Result<&Connection> {
        match &self.handle {
            Handle::Write(w) => Ok(&w.conn),
            Handle::Read(..) => Err(MetaError::Engine(
                "write attempted in a read-only transaction".into(),
            )),
        }
    }
}

fn ts(s: i64, ns: i64) -> Timespec {
    Timespec {
        secs: s,
        nsec: ns as u32,
    }
}

fn row_to_inode(r: &rusqlite::Row<'_>) -> rusqlite::Result<(InodeRow, u8)> {
    let kind: u8 = r.get(1)?;
    Ok((
        InodeRow {
            ino: r.get::<_, i64>(0)? as u64,
            kind: FileKind::File,
            mode: r.get(2)?,
            uid: r.get(3)?,
            gid: r.get(4)?,
            size: r.get::<_, i64>(5)? as u64,
            nlink: r.get(6)?,
            atime: ts(r.get(7)?, r.get(8)?),
            mtime: ts(r.get(9)?, r.get(10)?),
            ctime: ts(r.get(11)?, r.get(12)?),
            rdev: r.get::<_, i64>(13)? as u64,
            parent: r.get::<_, i64>(14)? as u64,
            target: r.get(15)?,
        },
        kind,
    ))
}

fn row_to_record(r: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<RecordRef> {
    Ok(RecordRef {
        segment: r.get::<_, i64>(base)? as u64,
        offset: r.get::<_, i64>(base + 1)? as u64,
        stored_len: r.get(base + 2)?,
        logical_len: r.get(base + 3)?,
        codec: r.get(base + 4)?,
        checksum: r.get::<_, i64>(base + 5)? as u64,
        inline: r.get(base + 6)?,
    })
}

const SEGMENT_USAGE_SQL: &str = "SELECT segment, COUNT(*), SUM(stored_len) FROM records
    WHERE inline_data IS NULL GROUP BY segment";

const CODEC_USAGE_SQL: &str =
    "SELECT codec, COUNT(*), SUM(logical_len), SUM(stored_len) FROM records GROUP BY codec";

const LIST_ORPHANS_SQL: &str = "SELECT ino FROM inodes WHERE nlink = 0 ORDER BY ino";

fn records_in_segment_sql() -> String {
    format!(
        "SELECT ino, {RECORD_COLS} FROM records
         WHERE segment = ?1 AND inline_data IS NULL ORDER BY offset, ino, idx"
    )
}

/// A row of `SELECT ino, {RECORD_COLS}`.
fn row_to_location(r: &rusqlite::Row<'_>) -> rusqlite::Result<RecordLocation> {
    Ok(RecordLocation {
        ino: r.get::<_, i64>(0)? as u64,
        index: r.get::<_, i64>(1)? as u64,
        rec: row_to_record(r, 2)?,
    })
}

/// Clamps a record index into SQLite's signed range (indexes at or above `i64::MAX` are refused by
/// the semantic layer, so clamping only affects open-ended range bounds).
fn idx(i: u64) -> i64 {
    i.min(i64::MAX as u64) as i64
}

const RECORD_COLS: &str =
    "idx, segment, offset, stored_len, logical_len, codec, checksum, inline_data";

impl Txn for SqliteTxn<'_> {
    fn get_inode(&mut self, ino: u64) -> Result<Option<InodeRow>> {
        let mut st = self
            .c()?
            .prepare_cached(
                "SELECT ino, kind, mode, uid, gid, size, nlink, atime_s, atime_ns, mtime_s,
                        mtime_ns, ctime_s, ctime_ns, rdev, parent, target
                 FROM inodes WHERE ino = ?1",
            )
            .map_err(eng)?;
        let got = st
            .query_row(params![ino as i64], row_to_inode)
            .optional()
            .map_err(eng)?;
        match got {
            None => Ok(None),
            Some((mut row, kind)) => {
                row.kind = FileKind::from_code(kind)?;
                Ok(Some(row))
            }
        }
    }

    fn put_inode(&mut self, row: &InodeRow) -> Result<()> {
        let conn = self.w()?;
        let mut st = conn
            .prepare_cached(
                "INSERT OR REPLACE INTO inodes (ino, kind, mode, uid, gid, size, nlink, atime_s,
                    atime_ns, mtime_s, mtime_ns, ctime_s, ctime_ns, rdev, parent, target)
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
            )
            .map_err(eng)?;
        st.execute(params![
            row.ino as i64,
            row.kind.code(),
            row.mode,
            row.uid,
            row.gid,
            row.size as i64,
            row.nlink,
            row.atime.secs,
            row.atime.nsec,
            row.mtime.secs,
            row.mtime.nsec,
            row.ctime.secs,
            row.ctime.nsec,
            row.rdev as i64,
            row.parent as i64,
            row.target,
        ])
        .map_err(eng)?;
        Ok(())
    }

    fn delete_inode(&mut self, ino: u64) -> Result<bool> {
        let n = self
            .w()?
            .prepare_cached("DELETE FROM inodes WHERE ino = ?1")
            .map_err(eng)?
            .execute(params![ino as i64])
            .map_err(eng)?;
        Ok(n > 0)
    }

    fn get_dentry(&mut self, parent: u64, name: &[u8]) -> Result<Option<Dentry>> {
        let got: Option<(i64, u8)> = self
            .c()?
            .prepare_cached("SELECT ino, kind FROM dentries WHERE parent = ?1 AND name = ?2")
            .map_err(eng)?
            .query_row(params![parent as i64, name], |r| Ok((r.get(0)?, r.get(1)?)))
            .optional()
            .map_err(eng)?;
        got.map(|(ino, k)| {
            Ok(Dentry {
                ino: ino as u64,
                kind: FileKind::from_code(k)?,
            })
        })
        .transpose()
    }

    fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) -> Result<()> {
        self.w()?
            .prepare_cached(
                "INSERT OR REPLACE INTO dentries (parent, name, ino, kind) VALUES (?1, ?2, ?3, ?4)",
            )
            .map_err(eng)?
            .execute(params![
                parent as i64,
                name,
                entry.ino as i64,
                entry.kind.code()
            ])
            .map_err(eng)?;
        Ok(())
    }

    fn delete_dentry(&mut self, parent: u64, name: &[u8]) -> Result<bool> {
        let n = self
            .w()?
            .prepare_cached("DELETE FROM dentries WHERE parent = ?1 AND name = ?2")
            .map_err(eng)?
            .execute(params![parent as i64, name])
            .map_err(eng)?;
        Ok(n > 0)
    }

    fn list_dentries(
        &mut self,
        parent: u64,
        after: Option<&[u8]>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let mut st = self
            .c()?
            .prepare_cached(
                "SELECT name, ino, kind FROM dentries
                 WHERE parent = ?1 AND (?2 IS NULL OR name > ?2)
                 ORDER BY name LIMIT ?3",
            )
            .map_err(eng)?;
        let rows = st
            .query_map(params![parent as i64, after, limit], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, u8>(2)?,
                ))
            })
            .map_err(eng)?;
        let mut out = Vec::new();
        for row in rows {
            let (name, ino, k) = row.map_err(eng)?;
            out.push((
                name,
                Dentry {
                    ino: ino as u64,
                    kind: FileKind::from_code(k)?,
                },
            ));
        }
        Ok(out)
    }

    fn count_dentries(&mut self, parent: u64) -> Result<u64> {
        let n: i64 = self
            .c()?
            .prepare_cached("SELECT COUNT(*) FROM dentries WHERE parent = ?1")
            .map_err(eng)?
            .query_row(params![parent as i64], |r| r.get(0))
            .map_err(eng)?;
        Ok(n as u64)
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.c()?
            .prepare_cached("SELECT value FROM xattrs WHERE ino = ?1 AND name = ?2")
            .map_err(eng)?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()
            .map_err(eng)
    }

    fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        self.w()?
            .prepare_cached("INSERT OR REPLACE INTO xattrs (ino, name, value) VALUES (?1, ?2, ?3)")
            .map_err(eng)?
            .execute(params![ino as i64, name, value])
            .map_err(eng)?;
        Ok(())
    }

    fn delete_xattr(&mut self, ino: u64, name: &[u8]) -> Result<bool> {
        let n = self
            .w()?
            .prepare_cached("DELETE FROM xattrs WHERE ino = ?1 AND name = ?2")
            .map_err(eng)?
            .execute(params![ino as i64, name])
            .map_err(eng)?;
        Ok(n > 0)
    }

    fn list_xattrs(&mut self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let mut st = self
            .c()?
            .prepare_cached("SELECT name FROM xattrs WHERE ino = ?1 ORDER BY name")
            .map_err(eng)?;
        let rows = st
            .query_map(params![ino as i64], |r| r.get(0))
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<Vec<u8>>>>()
            .map_err(eng)
    }

    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.c()?
            .prepare_cached(&format!(
                "SELECT {RECORD_COLS} FROM records WHERE ino = ?1 AND idx = ?2"
            ))
            .map_err(eng)?
            .query_row(params![ino as i64, idx(index)], |r| row_to_record(r, 1))
            .optional()
            .map_err(eng)
    }

    fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) -> Result<()> {
        self.w()?
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO records (ino, {RECORD_COLS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))
            .map_err(eng)?
            .execute(params![
                ino as i64,
                idx(index),
                rec.segment as i64,
                rec.offset as i64,
                rec.stored_len,
                rec.logical_len,
                rec.codec,
                rec.checksum as i64,
                rec.inline,
            ])
            .map_err(eng)?;
        Ok(())
    }

    fn delete_record(&mut self, ino: u64, index: u64) -> Result<bool> {
        let n = self
            .w()?
            .prepare_cached("DELETE FROM records WHERE ino = ?1 AND idx = ?2")
            .map_err(eng)?
            .execute(params![ino as i64, idx(index)])
            .map_err(eng)?;
        Ok(n > 0)
    }

    fn list_records(&mut self, ino: u64, range: Range<u64>) -> Result<Vec<(u64, RecordRef)>> {
        let mut st = self
            .c()?
            .prepare_cached(&format!(
                "SELECT {RECORD_COLS} FROM records
                 WHERE ino = ?1 AND idx >= ?2 AND idx < ?3 ORDER BY idx"
            ))
            .map_err(eng)?;
        let rows = st
            .query_map(params![ino as i64, idx(range.start), idx(range.end)], |r| {
                Ok((r.get::<_, i64>(0)? as u64, row_to_record(r, 1)?))
            })
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(eng)
    }

    fn delete_records_from(&mut self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        self.w()?;
        let out = self.list_records(ino, from..u64::MAX)?;
        self.w()?
            .prepare_cached("DELETE FROM records WHERE ino = ?1 AND idx >= ?2")
            .map_err(eng)?
            .execute(params![ino as i64, idx(from)])
            .map_err(eng)?;
        Ok(out)
    }

    fn segment_usage(&mut self) -> Result<BTreeMap<u64, SegmentUsage>> {
        let mut st = self.c()?.prepare_cached(SEGMENT_USAGE_SQL).map_err(eng)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, i64>(0)? as u64,
                    SegmentUsage {
                        records: r.get::<_, i64>(1)? as u64,
                        stored_bytes: r.get::<_, i64>(2)? as u64,
                    },
                ))
            })
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(eng)
    }

    fn codec_usage(&mut self) -> Result<BTreeMap<u8, CodecSpace>> {
        let mut st = self.c()?.prepare_cached(CODEC_USAGE_SQL).map_err(eng)?;
        let rows = st
            .query_map([], |r| {
                Ok((
                    r.get::<_, u8>(0)?,
                    CodecSpace {
                        records: r.get::<_, i64>(1)? as u64,
                        logical_bytes: r.get::<_, i64>(2)? as u64,
                        stored_bytes: r.get::<_, i64>(3)? as u64,
                    },
                ))
            })
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(eng)
    }

    fn records_in_segment(&mut self, segment: u64) -> Result<Vec<RecordLocation>> {
        let mut st = self
            .c()?
            .prepare_cached(&records_in_segment_sql())
            .map_err(eng)?;
        let rows = st
            .query_map(params![segment as i64], row_to_location)
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(eng)
    }

    fn scan_records(
        &mut self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<RecordLocation>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let conn = self.c()?;
        let rows = match after {
            None => conn
                .prepare_cached(&format!(
                    "SELECT ino, {RECORD_COLS} FROM records ORDER BY ino, idx LIMIT ?1"
                ))
                .map_err(eng)?
                .query_map(params![limit], row_to_location)
                .map_err(eng)?
                .collect::<rusqlite::Result<Vec<_>>>(),
            Some((ino, index)) => conn
                .prepare_cached(&format!(
                    "SELECT ino, {RECORD_COLS} FROM records
                     WHERE (ino, idx) > (?1, ?2) ORDER BY ino, idx LIMIT ?3"
                ))
                .map_err(eng)?
                .query_map(params![ino as i64, idx(index), limit], row_to_location)
                .map_err(eng)?
                .collect::<rusqlite::Result<Vec<_>>>(),
        };
        rows.map_err(eng)
    }

    fn list_orphans(&mut self) -> Result<Vec<u64>> {
        let mut st = self.c()?.prepare_cached(LIST_ORPHANS_SQL).map_err(eng)?;
        let rows = st
            .query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(eng)
    }

    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>> {
        self.c()?
            .prepare_cached("SELECT value FROM props WHERE ino = ?1 AND name = ?2")
            .map_err(eng)?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()
            .map_err(eng)
    }

    fn set_prop(&mut self, ino: u64, name: &str, value: &str) -> Result<()> {
        self.w()?
            .prepare_cached("INSERT OR REPLACE INTO props (ino, name, value) VALUES (?1, ?2, ?3)")
            .map_err(eng)?
            .execute(params![ino as i64, name, value])
            .map_err(eng)?;
        Ok(())
    }

    fn delete_prop(&mut self, ino: u64, name: &str) -> Result<bool> {
        let n = self
            .w()?
            .prepare_cached("DELETE FROM props WHERE ino = ?1 AND name = ?2")
            .map_err(eng)?
            .execute(params![ino as i64, name])
            .map_err(eng)?;
        Ok(n > 0)
    }

    fn list_props(&mut self, ino: u64) -> Result<Vec<(String, String)>> {
        let mut st = self
            .c()?
            .prepare_cached("SELECT name, value FROM props WHERE ino = ?1 ORDER BY name")
            .map_err(eng)?;
        let rows = st
            .query_map(params![ino as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(eng)
    }

    fn get_counter(&mut self, name: &str) -> Result<u64> {
        let v: Option<i64> = self
            .c()?
            .prepare_cached("SELECT value FROM counters WHERE name = ?1")
            .map_err(eng)?
            .query_row(params![name], |r| r.get(0))
            .optional()
            .map_err(eng)?;
        Ok(v.unwrap_or(0) as u64)
    }

    fn set_counter(&mut self, name: &str, value: u64) -> Result<()> {
        self.w()?
            .prepare_cached("INSERT OR REPLACE INTO counters (name, value) VALUES (?1, ?2)")
            .map_err(eng)?
            .execute(params![name, value as i64])
            .map_err(eng)?;
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        if self.durable {
            // A transaction that wrote nothing appends nothing to the log, and then its commit
            // syncs nothing either; this write makes sure the log (and every earlier commit in it)
            // is synced.
            self.w()?
                .prepare_cached(
                    "INSERT INTO counters (name, value) VALUES (?1, 1)
                     ON CONFLICT (name) DO UPDATE SET value = value + 1",
                )
                .map_err(eng)?
                .execute(params![COUNTER_DURABLE_COMMITS])
                .map_err(eng)?;
        }
        self.c()?.execute_batch("COMMIT").map_err(eng)?;
        self.open = false;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct TempDb(PathBuf);

    impl TempDb {
        fn new(tag: &str) -> Self {
            let nanos = std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .map(|d| d.subsec_nanos())
                .unwrap_or(0);
            TempDb(std::env::temp_dir().join(format!(
                "presso-meta-unit-{tag}-{}-{nanos}.db",
                std::process::id()
            )))
        }
    }

    impl Drop for TempDb {
        fn drop(&mut self) {
            for suffix in ["", "-wal", "-shm"] {
                let mut p = self.0.as_os_str().to_owned();
                p.push(suffix);
                let _ = std::fs::remove_file(p);
            }
        }
    }

    fn pragma_synchronous(tx: &SqliteTxn<'_>) -> i64 {
        tx.c()
            .unwrap()
            .query_row("PRAGMA synchronous", [], |r| r.get(0))
            .unwrap()
    }

    #[test]
    fn durable_writes_switch_to_full_and_back() {
        let db = TempDb::new("sync");
        let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
        let tx = e.begin_write(false).unwrap();
        assert_eq!(pragma_synchronous(&tx), 1, "NORMAL");
        drop(tx);
        let tx = e.begin_write(true).unwrap();
        assert_eq!(pragma_synchronous(&tx), 2, "FULL");
        Box::new(tx).commit().unwrap();
        let mut tx = e.begin_write(false).unwrap();
        assert_eq!(pragma_synchronous(&tx), 1, "back to NORMAL");
        // the empty durable transaction still wrote (and so synced) the log
        assert_eq!(tx.get_counter(COUNTER_DURABLE_COMMITS).unwrap(), 1);
        drop(tx);

        // an engine opened with FULL stays FULL
        drop(e);
        let e = SqliteEngine::open(
            &db.0,
            SqliteOptions {
                synchronous: Synchronous::Full,
            },
        )
        .unwrap();
        for durable in [true, false] {
            let tx = e.begin_write(durable).unwrap();
            assert_eq!(pragma_synchronous(&tx), 2);
        }
    }

    fn plan(tx: &SqliteTxn<'_>, sql: &str) -> String {
        let c = tx.c().unwrap();
        let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
        let args = vec![7i64; st.parameter_count()];
        let rows = st
            .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
            .unwrap();
        rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
    }

    #[test]
    fn queries_use_the_secondary_indexes() {
        let db = TempDb::new("plan");
        let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
        let tx = e.begin_read().unwrap();
        let p = plan(&tx, SEGMENT_USAGE_SQL);
        assert!(p.contains("COVERING INDEX records_by_segment"), "{p}");
        let p = plan(&tx, &records_in_segment_sql());
        assert!(p.contains("records_by_segment (segment=?)"), "{p}");
        let p = plan(&tx, LIST_ORPHANS_SQL);
        assert!(p.contains("inodes_orphans"), "{p}");
        assert!(!p.contains("TEMP B-TREE"), "{p}");
    }

    #[test]
    fn read_connections_are_pooled_and_capped() {
        let db = TempDb::new("pool");
        let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
        {
            let held: Vec<_> = (0..READ_CONNECTIONS)
                .map(|_| e.begin_read().unwrap())
                .collect();
            assert_eq!(e.readers.lock().unwrap().open, READ_CONNECTIONS);
            assert!(e.readers.lock().unwrap().idle.is_empty());
            drop(held);
        }
        assert_eq!(e.readers.lock().unwrap().idle.len(), READ_CONNECTIONS);
        std::thread::scope(|s| {
            for _ in 0..3 * READ_CONNECTIONS {
                s.spawn(|| {
                    for _ in 0..50 {
                        let mut tx = e.begin_read().unwrap();
                        assert_eq!(tx.get_counter("x").unwrap(), 0);
                    }
                });
            }
        });
        let pool = e.readers.lock().unwrap();
        assert_eq!(pool.open, READ_CONNECTIONS);
        assert_eq!(pool.idle.len(), READ_CONNECTIONS);
    }
}
