//! The SQLite schema: tables, secondary indexes and the version check run at every open.

use rusqlite::{params, Connection, OptionalExtension};

use super::eng;
use crate::error::{MetaError, Result};

/// The schema version this build writes and understands.
pub const SCHEMA_VERSION: u32 = 1;

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
/// there are none. `dentries_by_ino` keeps each directory's entries in listing order (by inode
/// number, then name: see [`ListAfter`](crate::ListAfter)); new inodes take ever larger numbers,
/// so creating names appends to it.
const INDEXES: &str = "
CREATE INDEX IF NOT EXISTS records_by_segment
    ON records (segment, offset, stored_len, inline_data) WHERE inline_data IS NULL;
CREATE INDEX IF NOT EXISTS inodes_orphans ON inodes (ino) WHERE nlink = 0;
CREATE INDEX IF NOT EXISTS dentries_by_ino ON dentries (parent, ino, name);
";

/// Checks, reading only, that an existing database holds Presso's schema (see
/// [`super::SqliteEngine::open`] for the errors).
pub(super) fn check_version(conn: &Connection, path: &std::path::Path) -> Result<()> {
    let has_table: bool = conn
        .query_row(
            "SELECT EXISTS (SELECT 1 FROM sqlite_master WHERE type = 'table' AND name = 'meta_version')",
            [],
            |r| r.get(0),
        )
        .map_err(eng)?;
    if !has_table {
        return Err(MetaError::NotInitialized(format!(
            "{} is a database without Presso's metadata",
            path.display()
        )));
    }
    Ok(())
}

/// Creates the schema in a new database, or checks the version of an existing one, and creates
/// missing secondary indexes; all in one immediate transaction.
pub(super) fn create_or_check(conn: &mut Connection) -> Result<()> {
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
            return Err(MetaError::engine(format!(
                "unsupported old schema version {v} (no migration available)"
            )));
        }
    }
    tx.execute_batch(INDEXES).map_err(eng)?;
    tx.commit().map_err(eng)?;
    Ok(())
}
