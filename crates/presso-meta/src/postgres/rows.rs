//! Conversions between PostgreSQL rows and engine rows. A stored value that does not fit its
//! field is [`MetaError::Corrupt`].

use postgres::types::FromSql;
use postgres::Row;

use super::conn::bad_row;
use crate::engine::{FileKind, InodeRow, RecordLocation, RecordRef, Timespec};
use crate::error::{MetaError, Result};
use crate::Attr;

/// Column `i` of `r`.
pub(super) fn get<'a, T: FromSql<'a>>(r: &'a Row, i: usize) -> Result<T> {
    r.try_get(i).map_err(bad_row)
}

/// Column `i`, a `BIGINT` holding an unsigned number bit-cast.
pub(super) fn u(r: &Row, i: usize) -> Result<u64> {
    Ok(get::<i64>(r, i)? as u64)
}

/// Column `i`, a `BIGINT` holding a `u32`.
pub(super) fn u32_at(r: &Row, i: usize) -> Result<u32> {
    let v: i64 = get(r, i)?;
    u32::try_from(v).map_err(|_| MetaError::Corrupt(format!("postgres: {v} in column {i}")))
}

/// Column `i`, a `SMALLINT` holding a `u8`.
pub(super) fn u8_at(r: &Row, i: usize) -> Result<u8> {
    let v: i16 = get(r, i)?;
    u8::try_from(v).map_err(|_| MetaError::Corrupt(format!("postgres: {v} in column {i}")))
}

/// The kind code in column `i`.
pub(super) fn kind_at(r: &Row, i: usize) -> Result<FileKind> {
    FileKind::from_code(u8_at(r, i)?)
}

/// The time in columns `i` (seconds) and `i + 1` (nanoseconds, `0..1_000_000_000`).
fn ts(r: &Row, i: usize) -> Result<Timespec> {
    let ns: i64 = get(r, i + 1)?;
    let nsec = u32::try_from(ns)
        .ok()
        .filter(|&n| n < 1_000_000_000)
        .ok_or_else(|| MetaError::Corrupt(format!("postgres: {ns} nanoseconds")))?;
    Ok(Timespec {
        secs: get(r, i)?,
        nsec,
    })
}

/// The inode row in columns `base..base + 16`: ino, kind, mode, uid, gid, size, nlink, atime
/// (seconds, nanoseconds), mtime, ctime, rdev, parent, target.
pub(super) fn inode_at(r: &Row, base: usize) -> Result<InodeRow> {
    Ok(InodeRow {
        attr: Attr {
            ino: u(r, base)?,
            kind: kind_at(r, base + 1)?,
            mode: u32_at(r, base + 2)?,
            uid: u32_at(r, base + 3)?,
            gid: u32_at(r, base + 4)?,
            size: u(r, base + 5)?,
            nlink: u32_at(r, base + 6)?,
            atime: ts(r, base + 7)?,
            mtime: ts(r, base + 9)?,
            ctime: ts(r, base + 11)?,
            rdev: u(r, base + 13)?,
        },
        parent: u(r, base + 14)?,
        target: get(r, base + 15)?,
    })
}

/// The record in columns `base..base + 7`: segment, seg_offset, stored_len, logical_len, codec,
/// checksum, inline_data.
pub(super) fn record_at(r: &Row, base: usize) -> Result<RecordRef> {
    Ok(RecordRef {
        segment: u(r, base)?,
        offset: u(r, base + 1)?,
        stored_len: u32_at(r, base + 2)?,
        logical_len: u32_at(r, base + 3)?,
        codec: u8_at(r, base + 4)?,
        checksum: u(r, base + 5)?,
        inline: get(r, base + 6)?,
    })
}

/// A row of `SELECT ino, idx, segment, seg_offset, stored_len, logical_len, codec, checksum,
/// inline_data`.
pub(super) fn location(r: &Row) -> Result<RecordLocation> {
    Ok(RecordLocation {
        ino: u(r, 0)?,
        index: u(r, 1)?,
        rec: record_at(r, 2)?,
    })
}

/// Clamps a record index into the signed range (indexes at or above `i64::MAX` are refused by
/// the semantic layer, so clamping only affects open-ended range bounds).
pub(super) fn idx(i: u64) -> i64 {
    i.min(i64::MAX as u64) as i64
}
