//! SQLite engine: one table per row kind, WAL journal, one connection behind a mutex.
//!
//! Unsigned 64-bit numbers are stored bit-cast into SQLite's signed `INTEGER`; record indexes are
//! limited to `0..i64::MAX` by the semantic layer so their order is kept. Byte-string keys are
//! `BLOB`s, which SQLite orders with `memcmp` then length, the same order as `Vec<u8>`.

use std::ops::Range;
use std::path::Path;
use std::sync::{Mutex, MutexGuard};

use rusqlite::{params, Connection, OptionalExtension};

use crate::engine::{Dentry, FileKind, InodeRow, MetaEngine, RecordRef, Timespec, Txn};
use crate::error::{MetaError, Result};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 1;

/// SQLite `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL`: with WAL, a power loss may lose the last commits but never corrupts.
    #[default]
    Normal,
    /// `FULL`: every commit is durable when it returns.
    Full,
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

fn eng(e: rusqlite::Error) -> MetaError {
    MetaError::Engine(format!("sqlite: {e}"))
}

/// The SQLite engine.
pub struct SqliteEngine {
    conn: Mutex<Connection>,
}

impl std::fmt::Debug for SqliteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteEngine").finish_non_exhaustive()
    }
}

impl SqliteEngine {
    /// Opens (creating if needed) the database at `path`, creating or checking the schema.
    ///
    /// Fails with [`MetaError::SchemaTooNew`] if the database was written by a newer schema.
    pub fn open(path: &Path, opts: SqliteOptions) -> Result<Self> {
        let mut conn = Connection::open(path).map_err(eng)?;
        conn.busy_timeout(std::time::Duration::from_secs(10))
            .map_err(eng)?;
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(eng)?;
        let sync = match opts.synchronous {
            Synchronous::Normal => "NORMAL",
            Synchronous::Full => "FULL",
        };
        conn.execute_batch(&format!("PRAGMA synchronous={sync};"))
            .map_err(eng)?;

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
        tx.commit().map_err(eng)?;
        Ok(SqliteEngine {
            conn: Mutex::new(conn),
        })
    }

    fn begin(&self, writable: bool) -> Result<Box<dyn Txn + '_>> {
        let conn = self
            .conn
            .lock()
            .map_err(|_| MetaError::Engine("sqlite engine lock poisoned".into()))?;
        conn.execute_batch(if writable {
            "BEGIN IMMEDIATE"
        } else {
            "BEGIN DEFERRED"
        })
        .map_err(eng)?;
        Ok(Box::new(SqliteTxn {
            conn,
            writable,
            open: true,
        }))
    }
}

impl MetaEngine for SqliteEngine {
    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin(false)
    }

    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin(true)
    }
}

struct SqliteTxn<'a> {
    conn: MutexGuard<'a, Connection>,
    writable: bool,
    open: bool,
}

impl Drop for SqliteTxn<'_> {
    fn drop(&mut self) {
        if self.open {
            // Nothing useful can be done with a failed rollback here; SQLite also rolls back on
            // the next BEGIN failure path or when the connection closes.
            let _ = self.conn.execute_batch("ROLLBACK");
        }
    }
}

impl SqliteTxn<'_> {
    fn w(&self) -> Result<&Connection> {
        if self.writable {
            Ok(&self.conn)
        } else {
            Err(MetaError::Engine(
                "write attempted in a read-only transaction".into(),
            ))
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
            .conn
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
            .conn
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
            .conn
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
            .conn
            .prepare_cached("SELECT COUNT(*) FROM dentries WHERE parent = ?1")
            .map_err(eng)?
            .query_row(params![parent as i64], |r| r.get(0))
            .map_err(eng)?;
        Ok(n as u64)
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.conn
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
            .conn
            .prepare_cached("SELECT name FROM xattrs WHERE ino = ?1 ORDER BY name")
            .map_err(eng)?;
        let rows = st
            .query_map(params![ino as i64], |r| r.get(0))
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<Vec<u8>>>>()
            .map_err(eng)
    }

    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.conn
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
            .conn
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

    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>> {
        self.conn
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
            .conn
            .prepare_cached("SELECT name, value FROM props WHERE ino = ?1 ORDER BY name")
            .map_err(eng)?;
        let rows = st
            .query_map(params![ino as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(eng)?;
        rows.collect::<rusqlite::Result<Vec<_>>>().map_err(eng)
    }

    fn get_counter(&mut self, name: &str) -> Result<u64> {
        let v: Option<i64> = self
            .conn
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
        self.conn.execute_batch("COMMIT").map_err(eng)?;
        self.open = false;
        Ok(())
    }
}
