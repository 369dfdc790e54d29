//! Conversions between SQLite rows and engine rows, and the SQL text shared by several queries.

use crate::engine::{Dentry, FileKind, InodeRow, RecordLocation, RecordRef, Timespec};
use crate::Attr;

/// The time in columns `secs` and `secs + 1` (seconds, nanoseconds). Nanoseconds outside
/// `0..1_000_000_000` are a conversion failure (the database is damaged).
pub(super) fn ts(r: &rusqlite::Row<'_>, secs: usize) -> rusqlite::Result<Timespec> {
    let ns: i64 = r.get(secs + 1)?;
    let nsec = u32::try_from(ns)
        .ok()
        .filter(|&n| n < 1_000_000_000)
        .ok_or(rusqlite::Error::IntegralValueOutOfRange(secs + 1, ns))?;
    Ok(Timespec {
        secs: r.get(secs)?,
        nsec,
    })
}

/// Writes `row` as its inode's row: the statement that writes inode rows.
pub(super) fn write_inode(conn: &rusqlite::Connection, row: &InodeRow) -> rusqlite::Result<()> {
    conn.prepare_cached(
        "INSERT OR REPLACE INTO inodes (ino, kind, mode, uid, gid, size, nlink, atime_s,
            atime_ns, mtime_s, mtime_ns, ctime_s, ctime_ns, rdev, parent, target)
         VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9, ?10, ?11, ?12, ?13, ?14, ?15, ?16)",
    )?
    .execute(rusqlite::params![
        row.attr.ino as i64,
        row.attr.kind.code(),
        row.attr.mode,
        row.attr.uid,
        row.attr.gid,
        row.attr.size as i64,
        row.attr.nlink,
        row.attr.atime.secs,
        row.attr.atime.nsec,
        row.attr.mtime.secs,
        row.attr.mtime.nsec,
        row.attr.ctime.secs,
        row.attr.ctime.nsec,
        row.attr.rdev as i64,
        row.parent as i64,
        row.target,
    ])
    .map(|_| ())
}

/// Deletes the row of inode `ino`: the statement that deletes inode rows. Returns how many rows
/// it deleted.
pub(super) fn delete_inode_row(conn: &rusqlite::Connection, ino: u64) -> rusqlite::Result<usize> {
    conn.prepare_cached("DELETE FROM inodes WHERE ino = ?1")?
        .execute(rusqlite::params![ino as i64])
}

/// Writes directory entry `parent`/`name` as `entry`, or deletes it when `None`: the statements
/// that write entries. Returns how many rows changed.
pub(super) fn write_dentry(
    conn: &rusqlite::Connection,
    parent: u64,
    name: &[u8],
    entry: Option<Dentry>,
) -> rusqlite::Result<usize> {
    match entry {
        Some(d) => conn
            .prepare_cached(
                "INSERT OR REPLACE INTO dentries (parent, name, ino, kind) VALUES (?1, ?2, ?3, ?4)",
            )?
            .execute(rusqlite::params![
                parent as i64,
                name,
                d.ino as i64,
                d.kind.code()
            ]),
        None => conn
            .prepare_cached("DELETE FROM dentries WHERE parent = ?1 AND name = ?2")?
            .execute(rusqlite::params![parent as i64, name]),
    }
}

/// Writes counter `name` as `value`: the statement that writes counters.
pub(super) fn write_counter(
    conn: &rusqlite::Connection,
    name: &str,
    value: u64,
) -> rusqlite::Result<()> {
    conn.prepare_cached("INSERT OR REPLACE INTO counters (name, value) VALUES (?1, ?2)")?
        .execute(rusqlite::params![name, value as i64])
        .map(|_| ())
}

pub(super) fn row_to_inode(r: &rusqlite::Row<'_>) -> rusqlite::Result<(InodeRow, u8)> {
    let kind: u8 = r.get(1)?;
    Ok((
        InodeRow {
            attr: Attr {
                ino: r.get::<_, i64>(0)? as u64,
                kind: FileKind::File,
                mode: r.get(2)?,
                uid: r.get(3)?,
                gid: r.get(4)?,
                size: r.get::<_, i64>(5)? as u64,
                nlink: r.get(6)?,
                atime: ts(r, 7)?,
                mtime: ts(r, 9)?,
                ctime: ts(r, 11)?,
                rdev: r.get::<_, i64>(13)? as u64,
            },
            parent: r.get::<_, i64>(14)? as u64,
            target: r.get(15)?,
        },
        kind,
    ))
}

pub(super) fn row_to_record(r: &rusqlite::Row<'_>, base: usize) -> rusqlite::Result<RecordRef> {
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

pub(super) const SEGMENT_USAGE_SQL: &str = "SELECT segment, COUNT(*), SUM(stored_len) FROM records
    WHERE inline_data IS NULL GROUP BY segment";

pub(super) const CODEC_USAGE_SQL: &str =
    "SELECT codec, COUNT(*), SUM(logical_len), SUM(stored_len) FROM records GROUP BY codec";

pub(super) const LIST_ORPHANS_SQL: &str = "SELECT ino FROM inodes WHERE nlink = 0 ORDER BY ino";

pub(super) fn records_in_segment_sql() -> String {
    format!(
        "SELECT ino, {RECORD_COLS} FROM records
         WHERE segment = ?1 AND inline_data IS NULL ORDER BY offset, ino, idx"
    )
}

/// A row of `SELECT ino, {RECORD_COLS}`.
pub(super) fn row_to_location(r: &rusqlite::Row<'_>) -> rusqlite::Result<RecordLocation> {
    Ok(RecordLocation {
        ino: r.get::<_, i64>(0)? as u64,
        index: r.get::<_, i64>(1)? as u64,
        rec: row_to_record(r, 2)?,
    })
}

/// Clamps a record index into SQLite's signed range (indexes at or above `i64::MAX` are refused by
/// the semantic layer, so clamping only affects open-ended range bounds).
pub(super) fn idx(i: u64) -> i64 {
    i.min(i64::MAX as u64) as i64
}

pub(super) const RECORD_COLS: &str =
    "idx, segment, offset, stored_len, logical_len, codec, checksum, inline_data";
