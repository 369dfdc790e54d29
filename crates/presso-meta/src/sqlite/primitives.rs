//! The engine primitives ([`Txn`]) of a SQLite transaction, one statement (or a few) each.

use std::collections::BTreeMap;
use std::ops::Range;

use rusqlite::{params, OptionalExtension};

use super::rows::{
    delete_inode_row, idx, records_in_segment_sql, row_to_inode, row_to_location, row_to_record,
    write_counter, write_dentry, write_inode, CODEC_USAGE_SQL, LIST_ORPHANS_SQL, RECORD_COLS,
    SEGMENT_USAGE_SQL,
};
use super::txn::{Handle, SqliteTxn};
use super::{control, COUNTER_DURABLE_COMMITS};
use crate::engine::{
    listing_position, CodecSpace, Dentry, FileKind, InodeRow, ListedDentry, RecordLocation,
    RecordRef, SegmentUsage, Txn,
};
use crate::error::{MetaError, Result};
use crate::ListAfter;

impl Txn for SqliteTxn<'_> {
    fn get_inode(&mut self, ino: u64) -> Result<Option<InodeRow>> {
        if let Some(held) = self.rows().and_then(|c| c.inodes.get(&ino)) {
            return Ok(held);
        }
        // A row not held is not pending, so SQLite's is current: this read needs neither the
        // pending rows written nor the transaction's savepoint.
        let got = self
            .reader()?
            .prepare_cached(
                "SELECT ino, kind, mode, uid, gid, size, nlink, atime_s, atime_ns, mtime_s,
                        mtime_ns, ctime_s, ctime_ns, rdev, parent, target
                 FROM inodes WHERE ino = ?1",
            )
            .map_err(self.err())
            .and_then(|mut st| {
                st.query_row(params![ino as i64], row_to_inode)
                    .optional()
                    .map_err(self.err())
            });
        let row = match self.settle(got)? {
            None => None,
            Some((mut row, kind)) => {
                row.attr.kind = FileKind::from_code(kind)?;
                Some(row)
            }
        };
        if let Some(cache) = self.rows() {
            cache.inodes.put(ino, row.clone());
        }
        Ok(row)
    }

    fn put_inode(&mut self, row: &InodeRow) -> Result<()> {
        self.log(|r| r.put_inode(row));
        if let Some(cache) = self.holding() {
            cache.inodes.hold(row.attr.ino, Some(row.clone()));
            return Ok(());
        }
        let done = write_inode(self.w()?, row).map_err(self.err());
        self.settle(done)?;
        if let Some(cache) = self.rows() {
            cache.inodes.put(row.attr.ino, Some(row.clone()));
        }
        Ok(())
    }

    fn delete_inode(&mut self, ino: u64) -> Result<bool> {
        self.log(|r| r.delete_inode(ino));
        if self.holding().is_some() {
            let existed = self.get_inode(ino)?.is_some();
            if let Some(cache) = self.holding() {
                cache.inodes.hold(ino, None);
                return Ok(existed);
            }
        }
        let done = delete_inode_row(self.w()?, ino).map_err(self.err());
        let deleted = self.settle(done)?;
        if let Some(cache) = self.rows() {
            cache.inodes.put(ino, None);
        }
        Ok(deleted > 0)
    }

    fn get_dentry(&mut self, parent: u64, name: &[u8]) -> Result<Option<Dentry>> {
        let key = (parent, name.to_vec());
        if let Some(held) = self.rows().and_then(|c| c.names.get(&key)) {
            return Ok(held);
        }
        // An entry not held is not pending, so SQLite's is current (see `get_inode`).
        let got: Result<Option<(i64, u8)>> = self
            .reader()?
            .prepare_cached("SELECT ino, kind FROM dentries WHERE parent = ?1 AND name = ?2")
            .map_err(self.err())
            .and_then(|mut st| {
                st.query_row(params![parent as i64, name], |r| Ok((r.get(0)?, r.get(1)?)))
                    .optional()
                    .map_err(self.err())
            });
        let entry = match self.settle(got)? {
            Some((ino, k)) => Some(Dentry {
                ino: ino as u64,
                kind: FileKind::from_code(k)?,
            }),
            None => None,
        };
        if let Some(cache) = self.rows() {
            cache.names.put(key, entry);
        }
        Ok(entry)
    }

    fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) -> Result<()> {
        self.log(|r| r.put_dentry(parent, name, entry));
        let key = (parent, name.to_vec());
        if let Some(cache) = self.holding() {
            cache.names.hold(key, Some(entry));
            return Ok(());
        }
        let done = write_dentry(self.w()?, parent, name, Some(entry)).map_err(self.err());
        self.settle(done)?;
        if let Some(cache) = self.rows() {
            cache.names.put(key, Some(entry));
        }
        Ok(())
    }

    fn delete_dentry(&mut self, parent: u64, name: &[u8]) -> Result<bool> {
        self.log(|r| r.delete_dentry(parent, name));
        if self.holding().is_some() {
            let existed = self.get_dentry(parent, name)?.is_some();
            if let Some(cache) = self.holding() {
                cache.names.hold((parent, name.to_vec()), None);
                return Ok(existed);
            }
        }
        let done = write_dentry(self.w()?, parent, name, None).map_err(self.err());
        let n = self.settle(done)?;
        if let Some(cache) = self.rows() {
            cache.names.put((parent, name.to_vec()), None);
        }
        Ok(n > 0)
    }

    fn list_dentries(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        let (ino, name) = listing_position(after);
        let mut st = self
            .c()?
            .prepare_cached(
                "SELECT name, ino, kind FROM dentries
                 WHERE parent = ?1 AND ino >= ?2 AND (ino > ?2 OR name > ?3)
                 ORDER BY ino, name LIMIT ?4",
            )
            .map_err(self.err())?;
        let rows = st
            .query_map(params![parent as i64, ino, name, limit], |r| {
                Ok((
                    r.get::<_, Vec<u8>>(0)?,
                    r.get::<_, i64>(1)?,
                    r.get::<_, u8>(2)?,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (name, ino, k) = row.map_err(self.err())?;
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

    fn list_dentries_with_inodes(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<ListedDentry>> {
        let limit = i64::try_from(limit).unwrap_or(i64::MAX);
        // The inode's columns first, in the order `row_to_inode` reads them.
        let mut st = self
            .c()?
            .prepare_cached(
                "SELECT i.ino, i.kind, i.mode, i.uid, i.gid, i.size, i.nlink, i.atime_s,
                        i.atime_ns, i.mtime_s, i.mtime_ns, i.ctime_s, i.ctime_ns, i.rdev,
                        i.parent, i.target, d.name, d.ino, d.kind
                 FROM dentries d LEFT JOIN inodes i ON i.ino = d.ino
                 WHERE d.parent = ?1 AND d.ino >= ?2 AND (d.ino > ?2 OR d.name > ?3)
                 ORDER BY d.ino, d.name LIMIT ?4",
            )
            .map_err(self.err())?;
        let (ino, name) = listing_position(after);
        let rows = st
            .query_map(params![parent as i64, ino, name, limit], |r| {
                let inode = match r.get::<_, Option<i64>>(0)? {
                    Some(_) => Some(row_to_inode(r)?),
                    None => None,
                };
                Ok((
                    r.get::<_, Vec<u8>>(16)?,
                    r.get::<_, i64>(17)?,
                    r.get::<_, u8>(18)?,
                    inode,
                ))
            })
            .map_err(self.err())?;
        let mut out = Vec::new();
        for row in rows {
            let (name, ino, k, inode) = row.map_err(self.err())?;
            let inode = match inode {
                Some((mut row, kind)) => {
                    row.attr.kind = FileKind::from_code(kind)?;
                    Some(row)
                }
                None => None,
            };
            let dentry = Dentry {
                ino: ino as u64,
                kind: FileKind::from_code(k)?,
            };
            out.push((name, dentry, inode));
        }
        Ok(out)
    }

    fn count_dentries(&mut self, parent: u64) -> Result<u64> {
        let n: i64 = self
            .c()?
            .prepare_cached("SELECT COUNT(*) FROM dentries WHERE parent = ?1")
            .map_err(self.err())?
            .query_row(params![parent as i64], |r| r.get(0))
            .map_err(self.err())?;
        Ok(n as u64)
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        self.reader()?
            .prepare_cached("SELECT value FROM xattrs WHERE ino = ?1 AND name = ?2")
            .map_err(self.err())?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()
            .map_err(self.err())
    }

    fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        self.log(|r| r.set_xattr(ino, name, value));
        self.unheld_writer()?
            .prepare_cached("INSERT OR REPLACE INTO xattrs (ino, name, value) VALUES (?1, ?2, ?3)")
            .map_err(self.err())?
            .execute(params![ino as i64, name, value])
            .map_err(self.err())?;
        Ok(())
    }

    fn delete_xattr(&mut self, ino: u64, name: &[u8]) -> Result<bool> {
        self.log(|r| r.delete_xattr(ino, name));
        let n = self
            .unheld_writer()?
            .prepare_cached("DELETE FROM xattrs WHERE ino = ?1 AND name = ?2")
            .map_err(self.err())?
            .execute(params![ino as i64, name])
            .map_err(self.err())?;
        Ok(n > 0)
    }

    fn list_xattrs(&mut self, ino: u64) -> Result<Vec<Vec<u8>>> {
        let mut st = self
            .reader()?
            .prepare_cached("SELECT name FROM xattrs WHERE ino = ?1 ORDER BY name")
            .map_err(self.err())?;
        let rows = st
            .query_map(params![ino as i64], |r| r.get(0))
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<Vec<Vec<u8>>>>()
            .map_err(self.err())
    }

    fn xattr_name_in_use(&mut self, name: &[u8]) -> Result<bool> {
        self.reader()?
            .prepare_cached("SELECT EXISTS (SELECT 1 FROM xattrs WHERE name = ?1)")
            .map_err(self.err())?
            .query_row(params![name], |r| r.get(0))
            .map_err(self.err())
    }

    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.reader()?
            .prepare_cached(&format!(
                "SELECT {RECORD_COLS} FROM records WHERE ino = ?1 AND idx = ?2"
            ))
            .map_err(self.err())?
            .query_row(params![ino as i64, idx(index)], |r| row_to_record(r, 1))
            .optional()
            .map_err(self.err())
    }

    fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) -> Result<()> {
        self.log(|r| r.put_record(ino, index, rec));
        self.unheld_writer()?
            .prepare_cached(&format!(
                "INSERT OR REPLACE INTO records (ino, {RECORD_COLS})
                 VALUES (?1, ?2, ?3, ?4, ?5, ?6, ?7, ?8, ?9)"
            ))
            .map_err(self.err())?
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
            .map_err(self.err())?;
        Ok(())
    }

    fn delete_record(&mut self, ino: u64, index: u64) -> Result<bool> {
        self.log(|r| r.delete_record(ino, index));
        let n = self
            .unheld_writer()?
            .prepare_cached("DELETE FROM records WHERE ino = ?1 AND idx = ?2")
            .map_err(self.err())?
            .execute(params![ino as i64, idx(index)])
            .map_err(self.err())?;
        Ok(n > 0)
    }

    fn list_records(&mut self, ino: u64, range: Range<u64>) -> Result<Vec<(u64, RecordRef)>> {
        let mut st = self
            .reader()?
            .prepare_cached(&format!(
                "SELECT {RECORD_COLS} FROM records
                 WHERE ino = ?1 AND idx >= ?2 AND idx < ?3 ORDER BY idx"
            ))
            .map_err(self.err())?;
        let rows = st
            .query_map(params![ino as i64, idx(range.start), idx(range.end)], |r| {
                Ok((r.get::<_, i64>(0)? as u64, row_to_record(r, 1)?))
            })
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())
    }

    fn delete_records_from(&mut self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        self.log(|r| r.delete_records_from(ino, from));
        self.unheld_writer()?;
        let out = self.list_records(ino, from..u64::MAX)?;
        self.unheld_writer()?
            .prepare_cached("DELETE FROM records WHERE ino = ?1 AND idx >= ?2")
            .map_err(self.err())?
            .execute(params![ino as i64, idx(from)])
            .map_err(self.err())?;
        Ok(out)
    }

    fn segment_usage(&mut self) -> Result<BTreeMap<u64, SegmentUsage>> {
        let mut st = self
            .c()?
            .prepare_cached(SEGMENT_USAGE_SQL)
            .map_err(self.err())?;
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
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(self.err())
    }

    fn codec_usage(&mut self) -> Result<BTreeMap<u8, CodecSpace>> {
        let mut st = self
            .c()?
            .prepare_cached(CODEC_USAGE_SQL)
            .map_err(self.err())?;
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
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<BTreeMap<_, _>>>()
            .map_err(self.err())
    }

    fn records_in_segment(&mut self, segment: u64) -> Result<Vec<RecordLocation>> {
        let mut st = self
            .c()?
            .prepare_cached(&records_in_segment_sql())
            .map_err(self.err())?;
        let rows = st
            .query_map(params![segment as i64], row_to_location)
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())
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
                .map_err(self.err())?
                .query_map(params![limit], row_to_location)
                .map_err(self.err())?
                .collect::<rusqlite::Result<Vec<_>>>(),
            Some((ino, index)) => conn
                .prepare_cached(&format!(
                    "SELECT ino, {RECORD_COLS} FROM records
                     WHERE (ino, idx) > (?1, ?2) ORDER BY ino, idx LIMIT ?3"
                ))
                .map_err(self.err())?
                .query_map(params![ino as i64, idx(index), limit], row_to_location)
                .map_err(self.err())?
                .collect::<rusqlite::Result<Vec<_>>>(),
        };
        rows.map_err(self.err())
    }

    fn list_orphans(&mut self) -> Result<Vec<u64>> {
        let mut st = self
            .c()?
            .prepare_cached(LIST_ORPHANS_SQL)
            .map_err(self.err())?;
        let rows = st
            .query_map([], |r| Ok(r.get::<_, i64>(0)? as u64))
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())
    }

    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>> {
        self.reader()?
            .prepare_cached("SELECT value FROM props WHERE ino = ?1 AND name = ?2")
            .map_err(self.err())?
            .query_row(params![ino as i64, name], |r| r.get(0))
            .optional()
            .map_err(self.err())
    }

    fn set_prop(&mut self, ino: u64, name: &str, value: &str) -> Result<()> {
        self.log(|r| r.set_prop(ino, name, value));
        self.unheld_writer()?
            .prepare_cached("INSERT OR REPLACE INTO props (ino, name, value) VALUES (?1, ?2, ?3)")
            .map_err(self.err())?
            .execute(params![ino as i64, name, value])
            .map_err(self.err())?;
        Ok(())
    }

    fn delete_prop(&mut self, ino: u64, name: &str) -> Result<bool> {
        self.log(|r| r.delete_prop(ino, name));
        let n = self
            .unheld_writer()?
            .prepare_cached("DELETE FROM props WHERE ino = ?1 AND name = ?2")
            .map_err(self.err())?
            .execute(params![ino as i64, name])
            .map_err(self.err())?;
        Ok(n > 0)
    }

    fn list_props(&mut self, ino: u64) -> Result<Vec<(String, String)>> {
        let mut st = self
            .reader()?
            .prepare_cached("SELECT name, value FROM props WHERE ino = ?1 ORDER BY name")
            .map_err(self.err())?;
        let rows = st
            .query_map(params![ino as i64], |r| Ok((r.get(0)?, r.get(1)?)))
            .map_err(self.err())?;
        rows.collect::<rusqlite::Result<Vec<_>>>()
            .map_err(self.err())
    }

    fn get_counter(&mut self, name: &str) -> Result<u64> {
        if let Some(value) = self.counters(name).and_then(|c| c.get(name)) {
            return Ok(value);
        }
        // A counter not held is not pending, so SQLite's is current (see `get_inode`).
        let got: Result<Option<i64>> = self
            .reader()?
            .prepare_cached("SELECT value FROM counters WHERE name = ?1")
            .map_err(self.err())
            .and_then(|mut st| {
                st.query_row(params![name], |r| r.get(0))
                    .optional()
                    .map_err(self.err())
            });
        let value = self.settle(got)?.unwrap_or(0) as u64;
        if let Some(cache) = self.counters(name) {
            cache.put(name.to_owned(), value);
        }
        Ok(value)
    }

    fn set_counter(&mut self, name: &str, value: u64) -> Result<()> {
        self.log(|r| r.set_counter(name, value));
        if self.counters(name).is_some() {
            if let Some(cache) = self.holding() {
                cache.counters.hold(name.to_owned(), value);
                return Ok(());
            }
        }
        let done = write_counter(self.w()?, name, value).map_err(self.err());
        self.settle(done)?;
        if let Some(cache) = self.counters(name) {
            cache.put(name.to_owned(), value);
        }
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        if let Some(redo) = self.redo.take() {
            // The savepoint is ended here, whatever the outcome; the group is not this handle's.
            self.open = false;
            return match &mut self.handle {
                Handle::Write(w) => w.end_grouped(redo),
                _ => Err(MetaError::engine(
                    "a grouped transaction off the write connection",
                )),
            };
        }
        if !self.open {
            // A read inside the open group, or a replay: the transaction is not this handle's.
            return Ok(());
        }
        if self.durable {
            // A transaction that wrote nothing appends nothing to the log, and then its commit
            // syncs nothing either; this write makes sure the log (and every earlier commit in it)
            // is synced.
            self.w()?
                .prepare_cached(
                    "INSERT INTO counters (name, value) VALUES (?1, 1)
                     ON CONFLICT (name) DO UPDATE SET value = value + 1",
                )
                .map_err(self.err())?
                .execute(params![COUNTER_DURABLE_COMMITS])
                .map_err(self.err())?;
        }
        control(self.c()?, "COMMIT").map_err(self.err())?;
        self.open = false;
        Ok(())
    }
}
