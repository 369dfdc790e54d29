//! The intent log (`<database>-intent`): the row changes of every write transaction of the open
//! group, one record per transaction, appended before the transaction returns.
//!
//! Write transactions are grouped: they run inside one long SQLite transaction, each under a
//! savepoint of its own, and SQLite commits the group a few times a second instead of once per
//! transaction (a commit writes every page the transaction touched to SQLite's log; a record here
//! is the changed rows, about a hundred bytes). A transaction is committed once its record is
//! written: the bytes are in the host's page cache, so they survive a killed process, and the
//! next open replays every record of a group SQLite did not commit. A power loss keeps what a
//! durable commit covered, as before; replay then applies an unbroken run of records that
//! continues the last group SQLite committed, and stops at the first one that does not, so the
//! result is the state as of some moment, never a mix (docs/design.md, "Group commit and the
//! intent log", gives the format byte by byte).

use std::path::{Path, PathBuf};

use crate::engine::{Dentry, FileKind, InodeRow, RecordRef, Timespec, Txn};
use crate::error::{MetaError, Result};
use crate::Attr;

/// First bytes of every record ("PIL1" little-endian): an all-zero page is never a record.
const MAGIC: u32 = u32::from_le_bytes(*b"PIL1");
/// Bytes before a record's body.
pub(super) const HEADER_LEN: usize = 24;
/// Largest body a record may claim; a longer length is damage, not a record.
const BODY_LIMIT: usize = 1 << 30;

const PUT_INODE: u8 = 1;
const DELETE_INODE: u8 = 2;
const PUT_DENTRY: u8 = 3;
const DELETE_DENTRY: u8 = 4;
const SET_XATTR: u8 = 5;
const DELETE_XATTR: u8 = 6;
const PUT_RECORD: u8 = 7;
const DELETE_RECORD: u8 = 8;
const DELETE_RECORDS_FROM: u8 = 9;
const SET_PROP: u8 = 10;
const DELETE_PROP: u8 = 11;
const SET_COUNTER: u8 = 12;

/// The path of the intent log of the database at `db`.
pub(super) fn path_for(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-intent");
    PathBuf::from(p)
}

/// Encodes row changes into a record body, in the order they were made.
#[derive(Debug, Default)]
pub(super) struct Redo(Vec<u8>);

impl Redo {
    /// An empty body with room for a CREATE's changes (two inode rows, an entry and a counter,
    /// about 250 bytes), so that noting them does not grow the buffer again and again.
    pub(super) fn new() -> Self {
        Redo(Vec::with_capacity(384))
    }

    fn u8(&mut self, v: u8) {
        self.0.push(v);
    }
    fn u32(&mut self, v: u32) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn u64(&mut self, v: u64) {
        self.0.extend_from_slice(&v.to_le_bytes());
    }
    fn bytes(&mut self, v: &[u8]) {
        self.u32(v.len() as u32);
        self.0.extend_from_slice(v);
    }
    fn time(&mut self, t: Timespec) {
        self.u64(t.secs as u64);
        self.u32(t.nsec);
    }

    /// Whether nothing was changed.
    pub(super) fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    pub(super) fn put_inode(&mut self, row: &InodeRow) {
        let a = &row.attr;
        self.u8(PUT_INODE);
        self.u64(a.ino);
        self.u8(a.kind.code());
        self.u32(a.mode);
        self.u32(a.uid);
        self.u32(a.gid);
        self.u64(a.size);
        self.u32(a.nlink);
        self.time(a.atime);
        self.time(a.mtime);
        self.time(a.ctime);
        self.u64(a.rdev);
        self.u64(row.parent);
        match &row.target {
            Some(t) => {
                self.u8(1);
                self.bytes(t);
            }
            None => self.u8(0),
        }
    }
    pub(super) fn delete_inode(&mut self, ino: u64) {
        self.u8(DELETE_INODE);
        self.u64(ino);
    }
    pub(super) fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) {
        self.u8(PUT_DENTRY);
        self.u64(parent);
        self.bytes(name);
        self.u64(entry.ino);
        self.u8(entry.kind.code());
    }
    pub(super) fn delete_dentry(&mut self, parent: u64, name: &[u8]) {
        self.u8(DELETE_DENTRY);
        self.u64(parent);
        self.bytes(name);
    }
    pub(super) fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) {
        self.u8(SET_XATTR);
        self.u64(ino);
        self.bytes(name);
        self.bytes(value);
    }
    pub(super) fn delete_xattr(&mut self, ino: u64, name: &[u8]) {
        self.u8(DELETE_XATTR);
        self.u64(ino);
        self.bytes(name);
    }
    pub(super) fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) {
        self.u8(PUT_RECORD);
        self.u64(ino);
        self.u64(index);
        self.u64(rec.segment);
        self.u64(rec.offset);
        self.u32(rec.stored_len);
        self.u32(rec.logical_len);
        self.u8(rec.codec);
        self.u64(rec.checksum);
        match &rec.inline {
            Some(bytes) => {
                self.u8(1);
                self.bytes(bytes);
            }
            None => self.u8(0),
        }
    }
    pub(super) fn delete_record(&mut self, ino: u64, index: u64) {
        self.u8(DELETE_RECORD);
        self.u64(ino);
        self.u64(index);
    }
    pub(super) fn delete_records_from(&mut self, ino: u64, from: u64) {
        self.u8(DELETE_RECORDS_FROM);
        self.u64(ino);
        self.u64(from);
    }
    pub(super) fn set_prop(&mut self, ino: u64, name: &str, value: &str) {
        self.u8(SET_PROP);
        self.u64(ino);
        self.bytes(name.as_bytes());
        self.bytes(value.as_bytes());
    }
    pub(super) fn delete_prop(&mut self, ino: u64, name: &str) {
        self.u8(DELETE_PROP);
        self.u64(ino);
        self.bytes(name.as_bytes());
    }
    pub(super) fn set_counter(&mut self, name: &str, value: u64) {
        self.u8(SET_COUNTER);
        self.bytes(name.as_bytes());
        self.u64(value);
    }
}

/// One record's header fields: the group it belongs to and its place in the group.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct Position {
    /// The group (SQLite transaction) the record's changes belong to.
    pub group: u64,
    /// Records of the group before this one.
    pub op: u32,
}

/// A whole record: header, then body, with the checksum over both.
pub(super) fn encode_record(at: Position, body: &Redo) -> Vec<u8> {
    let mut out = Vec::with_capacity(HEADER_LEN + body.0.len());
    out.extend_from_slice(&MAGIC.to_le_bytes());
    out.extend_from_slice(&(body.0.len() as u32).to_le_bytes());
    out.extend_from_slice(&at.group.to_le_bytes());
    out.extend_from_slice(&at.op.to_le_bytes());
    out.extend_from_slice(&[0; 4]);
    out.extend_from_slice(&body.0);
    let crc = checksum(&out);
    out[20..24].copy_from_slice(&crc.to_le_bytes());
    out
}

/// CRC-32 of a record with its checksum field taken as zero.
fn checksum(record: &[u8]) -> u32 {
    let mut h = crc32fast::Hasher::new();
    h.update(&record[..20]);
    h.update(&[0; 4]);
    h.update(&record[HEADER_LEN..]);
    h.finalize()
}

/// The whole records at the start of `log`, in order, up to the first one that is torn, damaged
/// or not a record at all (a log is written in order, so nothing after that point is trusted).
pub(super) fn parse_records(log: &[u8]) -> Vec<(Position, &[u8])> {
    let mut out = Vec::new();
    let mut at = 0;
    while log.len() - at >= HEADER_LEN {
        let h = &log[at..at + HEADER_LEN];
        let word = |i: usize| u32::from_le_bytes(h[i..i + 4].try_into().unwrap_or_default());
        let len = word(4) as usize;
        if word(0) != MAGIC || len > BODY_LIMIT || log.len() - at - HEADER_LEN < len {
            break;
        }
        let record = &log[at..at + HEADER_LEN + len];
        if checksum(record) != word(20) {
            break;
        }
        let group = u64::from_le_bytes(h[8..16].try_into().unwrap_or_default());
        out.push((
            Position {
                group,
                op: word(16),
            },
            &record[HEADER_LEN..],
        ));
        at += HEADER_LEN + len;
    }
    out
}

/// The records of `log` that continue a database whose last committed group is `committed`:
/// the unbroken run of groups `committed + 1, committed + 2, …`, each from its op 0 on with no
/// op missing. Records of groups already committed are passed over (the log is cleared only
/// after a group commits, so a crash in between leaves them). A run that does not begin right
/// after `committed` (a power loss kept later records but not the commit before them) yields
/// nothing: replaying it would mix two moments.
pub(super) fn to_replay(log: &[u8], committed: u64) -> Vec<(Position, &[u8])> {
    let mut out: Vec<(Position, &[u8])> = Vec::new();
    for (pos, body) in parse_records(log) {
        if pos.group <= committed && out.is_empty() {
            continue;
        }
        let follows = match out.last() {
            None => pos.group == committed + 1 && pos.op == 0,
            Some((prev, _)) => {
                (pos.group == prev.group && pos.op == prev.op + 1)
                    || (pos.group == prev.group + 1 && pos.op == 0)
            }
        };
        if !follows {
            break;
        }
        out.push((pos, body));
    }
    out
}

/// Reads the body of a record back.
struct Reader<'a> {
    buf: &'a [u8],
}

impl Reader<'_> {
    fn take(&mut self, n: usize) -> Result<&[u8]> {
        if self.buf.len() < n {
            return Err(MetaError::Corrupt(
                "an intent log record ends inside a change".into(),
            ));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }
    fn u8(&mut self) -> Result<u8> {
        Ok(self.take(1)?[0])
    }
    fn u32(&mut self) -> Result<u32> {
        Ok(u32::from_le_bytes(
            self.take(4)?.try_into().unwrap_or_default(),
        ))
    }
    fn u64(&mut self) -> Result<u64> {
        Ok(u64::from_le_bytes(
            self.take(8)?.try_into().unwrap_or_default(),
        ))
    }
    fn bytes(&mut self) -> Result<Vec<u8>> {
        let n = self.u32()? as usize;
        Ok(self.take(n)?.to_vec())
    }
    fn text(&mut self) -> Result<String> {
        String::from_utf8(self.bytes()?).map_err(|_| {
            MetaError::Corrupt("an intent log record holds a name that is not UTF-8".into())
        })
    }
    fn time(&mut self) -> Result<Timespec> {
        Ok(Timespec {
            secs: self.u64()? as i64,
            nsec: self.u32()?,
        })
    }
    fn optional(&mut self) -> Result<Option<Vec<u8>>> {
        match self.u8()? {
            0 => Ok(None),
            1 => Ok(Some(self.bytes()?)),
            other => Err(MetaError::Corrupt(format!(
                "an intent log record has presence flag {other}"
            ))),
        }
    }
}

/// Applies the changes of one record body to `tx`, in order.
pub(super) fn apply(tx: &mut dyn Txn, body: &[u8]) -> Result<()> {
    let mut r = Reader { buf: body };
    while !r.buf.is_empty() {
        match r.u8()? {
            PUT_INODE => {
                let attr = Attr {
                    ino: r.u64()?,
                    kind: FileKind::from_code(r.u8()?)?,
                    mode: r.u32()?,
                    uid: r.u32()?,
                    gid: r.u32()?,
                    size: r.u64()?,
                    nlink: r.u32()?,
                    atime: r.time()?,
                    mtime: r.time()?,
                    ctime: r.time()?,
                    rdev: r.u64()?,
                };
                let parent = r.u64()?;
                let target = r.optional()?;
                tx.put_inode(&InodeRow {
                    attr,
                    parent,
                    target,
                })?;
            }
            DELETE_INODE => {
                tx.delete_inode(r.u64()?)?;
            }
            PUT_DENTRY => {
                let (parent, name) = (r.u64()?, r.bytes()?);
                let ino = r.u64()?;
                let kind = FileKind::from_code(r.u8()?)?;
                tx.put_dentry(parent, &name, Dentry { ino, kind })?;
            }
            DELETE_DENTRY => {
                let (parent, name) = (r.u64()?, r.bytes()?);
                tx.delete_dentry(parent, &name)?;
            }
            SET_XATTR => {
                let (ino, name, value) = (r.u64()?, r.bytes()?, r.bytes()?);
                tx.set_xattr(ino, &name, &value)?;
            }
            DELETE_XATTR => {
                let (ino, name) = (r.u64()?, r.bytes()?);
                tx.delete_xattr(ino, &name)?;
            }
            PUT_RECORD => {
                let (ino, index) = (r.u64()?, r.u64()?);
                let rec = RecordRef {
                    segment: r.u64()?,
                    offset: r.u64()?,
                    stored_len: r.u32()?,
                    logical_len: r.u32()?,
                    codec: r.u8()?,
                    checksum: r.u64()?,
                    inline: r.optional()?,
                };
                tx.put_record(ino, index, &rec)?;
            }
            DELETE_RECORD => {
                let (ino, index) = (r.u64()?, r.u64()?);
                tx.delete_record(ino, index)?;
            }
            DELETE_RECORDS_FROM => {
                let (ino, from) = (r.u64()?, r.u64()?);
                tx.delete_records_from(ino, from)?;
            }
            SET_PROP => {
                let (ino, name, value) = (r.u64()?, r.text()?, r.text()?);
                tx.set_prop(ino, &name, &value)?;
            }
            DELETE_PROP => {
                let (ino, name) = (r.u64()?, r.text()?);
                tx.delete_prop(ino, &name)?;
            }
            SET_COUNTER => {
                let (name, value) = (r.text()?, r.u64()?);
                tx.set_counter(&name, value)?;
            }
            other => {
                return Err(MetaError::Corrupt(format!(
                    "an intent log record holds an unknown change kind {other}"
                )))
            }
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn body(n: u8) -> Redo {
        let mut r = Redo::default();
        r.set_counter("c", u64::from(n));
        r
    }

    fn log_of(records: &[(u64, u32)]) -> Vec<u8> {
        let mut log = Vec::new();
        for (i, &(group, op)) in records.iter().enumerate() {
            log.extend(encode_record(Position { group, op }, &body(i as u8)));
        }
        log
    }

    fn groups(log: &[u8], committed: u64) -> Vec<(u64, u32)> {
        to_replay(log, committed)
            .into_iter()
            .map(|(p, _)| (p.group, p.op))
            .collect()
    }

    #[test]
    fn replay_continues_the_committed_group_and_stops_at_a_break() {
        let log = log_of(&[(4, 0), (4, 1), (5, 0), (5, 1), (6, 0)]);
        assert_eq!(groups(&log, 4), vec![(5, 0), (5, 1), (6, 0)]);
        assert_eq!(
            groups(&log, 3),
            vec![(4, 0), (4, 1), (5, 0), (5, 1), (6, 0)]
        );
        assert_eq!(groups(&log, 6), vec![]);
        // A log that starts past the group after the committed one would mix two moments.
        assert_eq!(groups(&log, 2), vec![]);
        // A missing op ends the run.
        let gap = log_of(&[(5, 0), (5, 2), (6, 0)]);
        assert_eq!(groups(&gap, 4), vec![(5, 0)]);
        let skipped_group = log_of(&[(5, 0), (7, 0)]);
        assert_eq!(groups(&skipped_group, 4), vec![(5, 0)]);
    }

    #[test]
    fn a_torn_or_damaged_record_ends_the_log() {
        let log = log_of(&[(1, 0), (1, 1), (1, 2)]);
        let one = log.len() / 3;
        for cut in 0..log.len() {
            assert_eq!(parse_records(&log[..cut]).len(), cut / one, "cut at {cut}");
        }
        for flip in 0..log.len() {
            let mut bad = log.clone();
            bad[flip] ^= 0x10;
            assert_eq!(parse_records(&bad).len(), flip / one, "flip at {flip}");
        }
        assert!(parse_records(&[0; 4096]).is_empty());
    }
}
