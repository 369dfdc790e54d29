//! One PostgreSQL transaction and its implementation of the engine primitives.

use std::collections::BTreeMap;
use std::ops::Range;

use postgres::types::ToSql;
use postgres::Row;

use super::conn::{pg, Pooled};
use super::rows::{get, idx, inode_at, kind_at, location, record_at, u, u8_at};
use super::COUNTER_DURABLE_COMMITS;
use crate::engine::{
    listing_position, CodecSpace, Dentry, InodeRow, ListedDentry, RecordLocation, RecordRef,
    SegmentUsage, Txn,
};
use crate::error::{MetaError, Result};
use crate::ListAfter;

/// The engine's statements. Each is prepared once per connection, at its first use.
mod sql {
    pub const GET_INODE: &str = "SELECT ino, kind, mode, uid, gid, size, nlink, atime_s, \
        atime_ns, mtime_s, mtime_ns, ctime_s, ctime_ns, rdev, parent, target \
        FROM inodes WHERE ino = $1";
    pub const PUT_INODE: &str = "INSERT INTO inodes (ino, kind, mode, uid, gid, size, nlink, \
        atime_s, atime_ns, mtime_s, mtime_ns, ctime_s, ctime_ns, rdev, parent, target) \
        VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16) \
        ON CONFLICT (ino) DO UPDATE SET kind = EXCLUDED.kind, mode = EXCLUDED.mode, \
        uid = EXCLUDED.uid, gid = EXCLUDED.gid, size = EXCLUDED.size, nlink = EXCLUDED.nlink, \
        atime_s = EXCLUDED.atime_s, atime_ns = EXCLUDED.atime_ns, mtime_s = EXCLUDED.mtime_s, \
        mtime_ns = EXCLUDED.mtime_ns, ctime_s = EXCLUDED.ctime_s, ctime_ns = EXCLUDED.ctime_ns, \
        rdev = EXCLUDED.rdev, parent = EXCLUDED.parent, target = EXCLUDED.target";
    pub const DELETE_INODE: &str = "DELETE FROM inodes WHERE ino = $1";

    pub const GET_DENTRY: &str = "SELECT ino, kind FROM dentries WHERE parent = $1 AND name = $2";
    pub const PUT_DENTRY: &str = "INSERT INTO dentries (parent, name, ino, kind) \
        VALUES ($1, $2, $3, $4) \
        ON CONFLICT (parent, name) DO UPDATE SET ino = EXCLUDED.ino, kind = EXCLUDED.kind";
    pub const DELETE_DENTRY: &str = "DELETE FROM dentries WHERE parent = $1 AND name = $2";
    /// Entries of `$1` after `($2, $3)` in listing order (inode number, then name).
    pub const LIST_DENTRIES: &str = "SELECT name, ino, kind FROM dentries \
        WHERE parent = $1 AND ino >= $2 AND (ino > $2 OR name > $3) \
        ORDER BY ino, name LIMIT $4";
    /// Names of `parent` with their inode rows, the inode's columns first in the order
    /// `inode_at` reads them; `$cond` narrows the names, `$limit` is the limit's parameter.
    macro_rules! listed_with_inodes {
        ($cond:literal, $limit:literal) => {
            concat!(
                "SELECT i.ino, i.kind, i.mode, i.uid, i.gid, i.size, i.nlink, i.atime_s, ",
                "i.atime_ns, i.mtime_s, i.mtime_ns, i.ctime_s, i.ctime_ns, i.rdev, i.parent, ",
                "i.target, d.name, d.ino, d.kind ",
                "FROM dentries d LEFT JOIN inodes i ON i.ino = d.ino WHERE d.parent = $1",
                $cond,
                " ORDER BY d.ino, d.name LIMIT ",
                $limit
            )
        };
    }
    pub const LIST_WITH_INODES: &str =
        listed_with_inodes!(" AND d.ino >= $2 AND (d.ino > $2 OR d.name > $3)", "$4");
    pub const COUNT_DENTRIES: &str = "SELECT COUNT(*) FROM dentries WHERE parent = $1";

    pub const GET_XATTR: &str = "SELECT value FROM xattrs WHERE ino = $1 AND name = $2";
    pub const SET_XATTR: &str = "INSERT INTO xattrs (ino, name, value) VALUES ($1, $2, $3) \
        ON CONFLICT (ino, name) DO UPDATE SET value = EXCLUDED.value";
    pub const DELETE_XATTR: &str = "DELETE FROM xattrs WHERE ino = $1 AND name = $2";
    pub const LIST_XATTRS: &str = "SELECT name FROM xattrs WHERE ino = $1 ORDER BY name";
    pub const XATTR_NAME_IN_USE: &str = "SELECT EXISTS (SELECT 1 FROM xattrs WHERE name = $1)";

    /// A record's columns after its key, in the order `record_at` reads them.
    macro_rules! record_cols {
        () => {
            "segment, seg_offset, stored_len, logical_len, codec, checksum, inline_data"
        };
    }
    /// Inserts or replaces record ($1, $2) with the columns $3..$9 (`RecordParams`).
    macro_rules! upsert_record {
        () => {
            concat!(
                "INSERT INTO records (ino, idx, ",
                record_cols!(),
                ") VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9) ",
                "ON CONFLICT (ino, idx) DO UPDATE SET segment = EXCLUDED.segment, ",
                "seg_offset = EXCLUDED.seg_offset, stored_len = EXCLUDED.stored_len, ",
                "logical_len = EXCLUDED.logical_len, codec = EXCLUDED.codec, ",
                "checksum = EXCLUDED.checksum, inline_data = EXCLUDED.inline_data"
            )
        };
    }
    /// `SELECT ino, idx, <record columns> FROM records` and `$rest`: rows `location` reads.
    macro_rules! select_locations {
        ($rest:literal) => {
            concat!("SELECT ino, idx, ", record_cols!(), " FROM records ", $rest)
        };
    }
    pub const GET_RECORD: &str = concat!(
        "SELECT ",
        record_cols!(),
        " FROM records WHERE ino = $1 AND idx = $2"
    );
    pub const PUT_RECORD: &str = upsert_record!();
    // Every part of one statement sees the same snapshot, so `old` is the row before the
    // upsert.
    pub const REPLACE_RECORD: &str = concat!(
        "WITH old AS (SELECT ",
        record_cols!(),
        " FROM records WHERE ino = $1 AND idx = $2), up AS (",
        upsert_record!(),
        ") SELECT * FROM old"
    );
    pub const DELETE_RECORD: &str = "DELETE FROM records WHERE ino = $1 AND idx = $2";
    pub const LIST_RECORDS: &str =
        select_locations!("WHERE ino = $1 AND idx >= $2 AND idx < $3 ORDER BY idx");
    pub const DELETE_RECORDS_FROM: &str = concat!(
        "DELETE FROM records WHERE ino = $1 AND idx >= $2 RETURNING ino, idx, ",
        record_cols!()
    );
    pub const SEGMENT_USAGE: &str = "SELECT segment, COUNT(*), SUM(stored_len)::BIGINT \
        FROM records WHERE inline_data IS NULL GROUP BY segment";
    pub const CODEC_USAGE: &str = "SELECT codec, COUNT(*), SUM(logical_len)::BIGINT, \
        SUM(stored_len)::BIGINT FROM records GROUP BY codec";
    pub const RECORDS_IN_SEGMENT: &str = select_locations!(
        "WHERE segment = $1 AND inline_data IS NULL ORDER BY seg_offset, ino, idx"
    );
    pub const SCAN_RECORDS: &str = select_locations!("ORDER BY ino, idx LIMIT $1");
    pub const SCAN_RECORDS_AFTER: &str =
        select_locations!("WHERE (ino, idx) > ($1, $2) ORDER BY ino, idx LIMIT $3");

    pub const LIST_ORPHANS: &str = "SELECT ino FROM inodes WHERE nlink = 0 ORDER BY ino";

    pub const GET_PROP: &str = "SELECT value FROM props WHERE ino = $1 AND name = $2";
    pub const SET_PROP: &str = "INSERT INTO props (ino, name, value) VALUES ($1, $2, $3) \
        ON CONFLICT (ino, name) DO UPDATE SET value = EXCLUDED.value";
    pub const DELETE_PROP: &str = "DELETE FROM props WHERE ino = $1 AND name = $2";
    pub const LIST_PROPS: &str = "SELECT name, value FROM props WHERE ino = $1 ORDER BY name";

    pub const GET_COUNTER: &str = "SELECT value FROM counters WHERE name = $1";
    pub const SET_COUNTER: &str = "INSERT INTO counters (name, value) VALUES ($1, $2) \
        ON CONFLICT (name) DO UPDATE SET value = EXCLUDED.value";
    pub const BUMP_COUNTER: &str = "INSERT INTO counters (name, value) VALUES ($1, 1) \
        ON CONFLICT (name) DO UPDATE SET value = counters.value + 1";
}

pub(super) struct PgTxn<'a> {
    /// `None` once committed or discarded.
    conn: Option<Pooled<'a>>,
    write: bool,
    /// Begun by [`MetaEngine::write_durable`](crate::MetaEngine::write_durable).
    durable: bool,
    /// A statement failed: PostgreSQL has aborted the transaction, and a COMMIT would silently
    /// roll it back, so [`Txn::commit`] must fail instead.
    failed: bool,
}

impl<'a> PgTxn<'a> {
    pub(super) fn new(conn: Pooled<'a>, write: bool, durable: bool) -> Self {
        PgTxn {
            conn: Some(conn),
            write,
            durable,
            failed: false,
        }
    }

    fn conn(&mut self) -> Result<&mut Pooled<'a>> {
        self.conn
            .as_mut()
            .ok_or_else(|| MetaError::engine("postgres transaction already ended"))
    }

    fn writable(&self) -> Result<()> {
        if self.write {
            Ok(())
        } else {
            Err(MetaError::engine(
                "write attempted in a read-only transaction",
            ))
        }
    }

    /// Runs `statement` and returns its rows.
    fn rows(
        &mut self,
        statement: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Vec<Row>> {
        let conn = self.conn()?;
        let run = conn
            .prepare(statement)
            .and_then(|s| conn.client.query(&s, params).map_err(pg));
        self.note(run)
    }

    /// Runs `statement` and returns its row, if any.
    fn row(
        &mut self,
        statement: &'static str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<Option<Row>> {
        let conn = self.conn()?;
        let run = conn
            .prepare(statement)
            .and_then(|s| conn.client.query_opt(&s, params).map_err(pg));
        self.note(run)
    }

    /// Runs a writing `statement` and returns how many rows it changed.
    fn change(&mut self, statement: &'static str, params: &[&(dyn ToSql + Sync)]) -> Result<u64> {
        self.writable()?;
        let conn = self.conn()?;
        let run = conn
            .prepare(statement)
            .and_then(|s| conn.client.execute(&s, params).map_err(pg));
        self.note(run)
    }

    fn note<T>(&mut self, result: Result<T>) -> Result<T> {
        if result.is_err() {
            self.failed = true;
        }
        result
    }
}

impl Drop for PgTxn<'_> {
    fn drop(&mut self) {
        if let Some(mut conn) = self.conn.take() {
            // A connection whose rollback fails is in an unknown state: it is closed, not
            // reused.
            if conn.client.batch_execute("ROLLBACK").is_err() {
                conn.discard();
            }
        }
    }
}

/// The parameters $1..$9 of a record's upsert: its key, then its columns.
struct RecordParams<'a> {
    ino: i64,
    index: i64,
    segment: i64,
    offset: i64,
    stored_len: i64,
    logical_len: i64,
    codec: i16,
    checksum: i64,
    inline: &'a Option<Vec<u8>>,
}

impl<'a> RecordParams<'a> {
    fn new(ino: u64, index: u64, rec: &'a RecordRef) -> Self {
        RecordParams {
            ino: ino as i64,
            index: idx(index),
            segment: rec.segment as i64,
            offset: rec.offset as i64,
            stored_len: i64::from(rec.stored_len),
            logical_len: i64::from(rec.logical_len),
            codec: i16::from(rec.codec),
            checksum: rec.checksum as i64,
            inline: &rec.inline,
        }
    }

    fn all(&self) -> [&(dyn ToSql + Sync); 9] {
        [
            &self.ino,
            &self.index,
            &self.segment,
            &self.offset,
            &self.stored_len,
            &self.logical_len,
            &self.codec,
            &self.checksum,
            self.inline,
        ]
    }
}

fn limit(n: usize) -> i64 {
    i64::try_from(n).unwrap_or(i64::MAX)
}

fn dentry_at(r: &Row, name: usize) -> Result<(Vec<u8>, Dentry)> {
    Ok((
        get(r, name)?,
        Dentry {
            ino: u(r, name + 1)?,
            kind: kind_at(r, name + 2)?,
        },
    ))
}

impl Txn for PgTxn<'_> {
    fn get_inode(&mut self, ino: u64) -> Result<Option<InodeRow>> {
        self.row(sql::GET_INODE, &[&(ino as i64)])?
            .map(|r| inode_at(&r, 0))
            .transpose()
    }

    fn put_inode(&mut self, row: &InodeRow) -> Result<()> {
        let a = &row.attr;
        self.change(
            sql::PUT_INODE,
            &[
                &(a.ino as i64),
                &i16::from(a.kind.code()),
                &i64::from(a.mode),
                &i64::from(a.uid),
                &i64::from(a.gid),
                &(a.size as i64),
                &i64::from(a.nlink),
                &a.atime.secs,
                &i64::from(a.atime.nsec),
                &a.mtime.secs,
                &i64::from(a.mtime.nsec),
                &a.ctime.secs,
                &i64::from(a.ctime.nsec),
                &(a.rdev as i64),
                &(row.parent as i64),
                &row.target,
            ],
        )?;
        Ok(())
    }

    fn delete_inode(&mut self, ino: u64) -> Result<bool> {
        Ok(self.change(sql::DELETE_INODE, &[&(ino as i64)])? > 0)
    }

    fn get_dentry(&mut self, parent: u64, name: &[u8]) -> Result<Option<Dentry>> {
        self.row(sql::GET_DENTRY, &[&(parent as i64), &name])?
            .map(|r| {
                Ok(Dentry {
                    ino: u(&r, 0)?,
                    kind: kind_at(&r, 1)?,
                })
            })
            .transpose()
    }

    fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) -> Result<()> {
        self.change(
            sql::PUT_DENTRY,
            &[
                &(parent as i64),
                &name,
                &(entry.ino as i64),
                &i16::from(entry.kind.code()),
            ],
        )?;
        Ok(())
    }

    fn delete_dentry(&mut self, parent: u64, name: &[u8]) -> Result<bool> {
        Ok(self.change(sql::DELETE_DENTRY, &[&(parent as i64), &name])? > 0)
    }

    fn list_dentries(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        n: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>> {
        let (ino, name) = listing_position(after);
        let rows = self.rows(
            sql::LIST_DENTRIES,
            &[&(parent as i64), &ino, &name, &limit(n)],
        )?;
        rows.iter().map(|r| dentry_at(r, 0)).collect()
    }

    fn list_dentries_with_inodes(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        n: usize,
    ) -> Result<Vec<ListedDentry>> {
        let (ino, name) = listing_position(after);
        let rows = self.rows(
            sql::LIST_WITH_INODES,
            &[&(parent as i64), &ino, &name, &limit(n)],
        )?;
        rows.iter()
            .map(|r| {
                let inode = match get::<Option<i64>>(r, 0)? {
                    Some(_) => Some(inode_at(r, 0)?),
                    None => None,
                };
                let (name, dentry) = dentry_at(r, 16)?;
                Ok((name, dentry, inode))
            })
            .collect()
    }

    fn count_dentries(&mut self, parent: u64) -> Result<u64> {
        let rows = self.rows(sql::COUNT_DENTRIES, &[&(parent as i64)])?;
        match rows.first() {
            Some(r) => u(r, 0),
            None => Ok(0),
        }
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.row(sql::GET_XATTR, &[&(ino as i64), &name])?
            .map(|r| get(&r, 0))
            .transpose()
    }

    fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        self.change(sql::SET_XATTR, &[&(ino as i64), &name, &value])?;
        Ok(())
    }

    fn delete_xattr(&mut self, ino: u64, name: &[u8]) -> Result<bool> {
        Ok(self.change(sql::DELETE_XATTR, &[&(ino as i64), &name])? > 0)
    }

    fn list_xattrs(&mut self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let rows = self.rows(sql::LIST_XATTRS, &[&(ino as i64)])?;
        rows.iter().map(|r| get(r, 0)).collect()
    }

    fn xattr_name_in_use(&mut self, name: &[u8]) -> Result<bool> {
        let rows = self.rows(sql::XATTR_NAME_IN_USE, &[&name])?;
        match rows.first() {
            Some(r) => get(r, 0),
            None => Ok(false),
        }
    }

    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.row(sql::GET_RECORD, &[&(ino as i64), &idx(index)])?
            .map(|r| record_at(&r, 0))
            .transpose()
    }

    fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) -> Result<()> {
        let p = RecordParams::new(ino, index, rec);
        self.change(sql::PUT_RECORD, &p.all())?;
        Ok(())
    }

    fn replace_record(
        &mut self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
    ) -> Result<Option<RecordRef>> {
        self.writable()?;
        let p = RecordParams::new(ino, index, rec);
        self.row(sql::REPLACE_RECORD, &p.all())?
            .map(|r| record_at(&r, 0))
            .transpose()
    }

    fn delete_record(&mut self, ino: u64, index: u64) -> Result<bool> {
        Ok(self.change(sql::DELETE_RECORD, &[&(ino as i64), &idx(index)])? > 0)
    }

    fn list_records(&mut self, ino: u64, range: Range<u64>) -> Result<Vec<(u64, RecordRef)>> {
        let rows = self.rows(
            sql::LIST_RECORDS,
            &[&(ino as i64), &idx(range.start), &idx(range.end)],
        )?;
        rows.iter()
            .map(|r| Ok((u(r, 1)?, record_at(r, 2)?)))
            .collect()
    }

    fn delete_records_from(&mut self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        self.writable()?;
        let rows = self.rows(sql::DELETE_RECORDS_FROM, &[&(ino as i64), &idx(from)])?;
        let mut out = rows
            .iter()
            .map(|r| Ok((u(r, 1)?, record_at(r, 2)?)))
            .collect::<Result<Vec<_>>>()?;
        // RETURNING gives no order.
        out.sort_by_key(|(i, _)| *i);
        Ok(out)
    }

    fn segment_usage(&mut self) -> Result<BTreeMap<u64, SegmentUsage>> {
        let rows = self.rows(sql::SEGMENT_USAGE, &[])?;
        rows.iter()
            .map(|r| {
                Ok((
                    u(r, 0)?,
                    SegmentUsage {
                        records: u(r, 1)?,
                        stored_bytes: u(r, 2)?,
                    },
                ))
            })
            .collect()
    }

    fn codec_usage(&mut self) -> Result<BTreeMap<u8, CodecSpace>> {
        let rows = self.rows(sql::CODEC_USAGE, &[])?;
        rows.iter()
            .map(|r| {
                Ok((
                    u8_at(r, 0)?,
                    CodecSpace {
                        records: u(r, 1)?,
                        logical_bytes: u(r, 2)?,
                        stored_bytes: u(r, 3)?,
                    },
                ))
            })
            .collect()
    }

    fn records_in_segment(&mut self, segment: u64) -> Result<Vec<RecordLocation>> {
        let rows = self.rows(sql::RECORDS_IN_SEGMENT, &[&(segment as i64)])?;
        rows.iter().map(location).collect()
    }

    fn scan_records(&mut self, after: Option<(u64, u64)>, n: usize) -> Result<Vec<RecordLocation>> {
        let rows = match after {
            None => self.rows(sql::SCAN_RECORDS, &[&limit(n)])?,
            Some((ino, index)) => self.rows(
                sql::SCAN_RECORDS_AFTER,
                &[&(ino as i64), &idx(index), &limit(n)],
            )?,
        };
        rows.iter().map(location).collect()
    }

    fn list_orphans(&mut self) -> Result<Vec<u64>> {
        let rows = self.rows(sql::LIST_ORPHANS, &[])?;
        rows.iter().map(|r| u(r, 0)).collect()
    }

    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>> {
        self.row(sql::GET_PROP, &[&(ino as i64), &name])?
            .map(|r| get(&r, 0))
            .transpose()
    }

    fn set_prop(&mut self, ino: u64, name: &str, value: &str) -> Result<()> {
        self.change(sql::SET_PROP, &[&(ino as i64), &name, &value])?;
        Ok(())
    }

    fn delete_prop(&mut self, ino: u64, name: &str) -> Result<bool> {
        Ok(self.change(sql::DELETE_PROP, &[&(ino as i64), &name])? > 0)
    }

    fn list_props(&mut self, ino: u64) -> Result<Vec<(String, String)>> {
        let rows = self.rows(sql::LIST_PROPS, &[&(ino as i64)])?;
        rows.iter().map(|r| Ok((get(r, 0)?, get(r, 1)?))).collect()
    }

    fn get_counter(&mut self, name: &str) -> Result<u64> {
        match self.row(sql::GET_COUNTER, &[&name])? {
            Some(r) => u(&r, 0),
            None => Ok(0),
        }
    }

    fn set_counter(&mut self, name: &str, value: u64) -> Result<()> {
        self.change(sql::SET_COUNTER, &[&name, &(value as i64)])?;
        Ok(())
    }

    fn keeps_codec_counters(&self) -> bool {
        // Every counter is a statement on the server: three more per codec on every unlink cost
        // more than the server's scan at `presso status`.
        false
    }

    fn keeps_change_tag(&self) -> bool {
        // A shared pool keeps no copy of its metadata, and the tag would be one more statement
        // on the server in every transaction, on a row every client writes.
        false
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        if self.failed {
            // Dropping rolls back.
            return Err(MetaError::engine(
                "postgres: a statement of this transaction failed; nothing was committed",
            ));
        }
        if self.durable {
            // A transaction that wrote nothing commits without waiting for the server's log;
            // this write makes the commit wait for it, and so for every commit before it.
            self.change(sql::BUMP_COUNTER, &[&COUNTER_DURABLE_COMMITS])?;
        }
        let mut conn = self
            .conn
            .take()
            .ok_or_else(|| MetaError::engine("postgres transaction already ended"))?;
        match conn.client.batch_execute("COMMIT") {
            Ok(()) => Ok(()),
            Err(e) => {
                // The outcome of a COMMIT whose answer was lost is unknown; the connection is
                // not reused.
                let err = pg(e);
                conn.discard();
                Err(err)
            }
        }
    }
}
