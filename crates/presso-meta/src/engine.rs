//! Engine primitives: the small transactional key/value-ish interface every storage engine
//! implements. All POSIX rules live in [`crate::MetaStore`]; an engine only stores rows.
//!
//! Contract for implementers:
//! - A transaction from [`MetaEngine::write`] or [`MetaEngine::write_durable`] is serializable
//!   with every other transaction of the same engine. Dropping it without [`Txn::commit`] must
//!   leave no trace.
//! - A transaction from [`MetaEngine::read`] sees a consistent snapshot that includes every
//!   transaction committed before it began; its mutating primitives return
//!   [`MetaError::EngineFailure`].
//!   Engines may run read transactions concurrently with each other and with one write
//!   transaction (the SQLite engine does; the memory engine lets readers share a lock that
//!   writers take exclusively). A thread must not begin a write transaction while it still holds
//!   a read transaction of the same engine: engines are free to make that wait forever.
//! - Listing primitives return rows in ascending key order, comparing byte strings
//!   lexicographically (shorter prefix first), exactly like `Ord` on `Vec<u8>` / `String`.
//! - Unsigned numbers must round-trip bit-exactly; inode numbers, record indexes, segment numbers
//!   and offsets below `i64::MAX` must also keep their order.
//! - Missing counters read as 0.
//! - A record is *non-inline* when [`RecordRef::inline`] is `None`: only those occupy segment
//!   space, and only those are listed by [`Txn::records_in_segment`] and counted by
//!   [`Txn::segment_usage`].

use std::collections::BTreeMap;
use std::ops::Range;

use crate::clients::CLIENTS_INO;
use crate::error::{MetaError, Result};
use crate::types::{Attr, ListAfter};

/// Inode number of the root directory.
pub const ROOT_INO: u64 = 1;

/// Pseudo inode number under which pool-wide properties are stored.
pub const POOL_INO: u64 = 0;

/// Counter holding the next inode number to hand out.
pub const COUNTER_NEXT_INODE: &str = "next_inode";
/// Counter: the number of the last transaction group committed (see
/// [`crate::MetaStore::apply_txg_numbered`]).
pub const COUNTER_LAST_TXG: &str = "last_txg";
/// Counter: the change tag, a value no earlier change had, set by every committed change of the
/// metadata but its statistics (see [`crate::MetaStore::change_tag`]).
pub const COUNTER_CHANGE_TAG: &str = "change_tag";
/// Counter holding the sum of `logical_len` of all records.
pub const COUNTER_LOGICAL: &str = "logical_bytes";
/// Counter holding the sum of `stored_len` of all records.
pub const COUNTER_STORED: &str = "stored_bytes";
/// Counter holding segment bytes that are no longer referenced by any record.
pub const COUNTER_GARBAGE: &str = "garbage_bytes";
/// Prefix of the statistics counters a pool keeps over its whole life
/// ([`MetaStore::add_statistics`](crate::MetaStore::add_statistics)); no other counter starts
/// with it.
pub const STATISTICS_PREFIX: &str = "stat.";

/// The type of an inode.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FileKind {
    /// Regular file.
    File,
    /// Directory.
    Dir,
    /// Symbolic link.
    Symlink,
    /// Named pipe.
    Fifo,
    /// Unix domain socket.
    Socket,
    /// Character device.
    CharDevice,
    /// Block device.
    BlockDevice,
}

impl FileKind {
    /// Stable on-disk code of this kind.
    pub fn code(self) -> u8 {
        match self {
            FileKind::File => 1,
            FileKind::Dir => 2,
            FileKind::Symlink => 3,
            FileKind::Fifo => 4,
            FileKind::Socket => 5,
            FileKind::CharDevice => 6,
            FileKind::BlockDevice => 7,
        }
    }

    /// Inverse of [`FileKind::code`].
    pub fn from_code(code: u8) -> Result<Self> {
        Ok(match code {
            1 => FileKind::File,
            2 => FileKind::Dir,
            3 => FileKind::Symlink,
            4 => FileKind::Fifo,
            5 => FileKind::Socket,
            6 => FileKind::CharDevice,
            7 => FileKind::BlockDevice,
            other => {
                return Err(MetaError::Corrupt(format!(
                    "unknown inode kind code {other}"
                )))
            }
        })
    }

    /// The `S_IF*` bits of this kind.
    pub fn type_bits(self) -> u32 {
        // Spelled out because `mode_t` differs in width between platforms.
        match self {
            FileKind::File => 0o100000,
            FileKind::Dir => 0o040000,
            FileKind::Symlink => 0o120000,
            FileKind::Fifo => 0o010000,
            FileKind::Socket => 0o140000,
            FileKind::CharDevice => 0o020000,
            FileKind::BlockDevice => 0o060000,
        }
    }
}

/// A point in time: seconds since the Unix epoch plus nanoseconds (`0..1_000_000_000`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Default)]
pub struct Timespec {
    /// Seconds since the epoch (may be negative).
    pub secs: i64,
    /// Nanoseconds within the second.
    pub nsec: u32,
}

impl Timespec {
    /// The current wall-clock time.
    pub fn now() -> Self {
        match std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH) {
            Ok(d) => Timespec {
                secs: d.as_secs() as i64,
                nsec: d.subsec_nanos(),
            },
            Err(_) => Timespec::default(),
        }
    }
}

/// One inode as stored by an engine: the attributes the file-system layer sees plus the fields
/// only the semantic layer uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InodeRow {
    /// Inode number, type, permissions, owner, size, link count, times and device number.
    pub attr: Attr,
    /// Parent directory: exact for directories; for other inodes the directory of the name it was
    /// created under or last renamed to (used only for property inheritance). 0 for the root.
    pub parent: u64,
    /// Symlink target, for symlinks only.
    pub target: Option<Vec<u8>>,
}

/// The value of a directory entry.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Dentry {
    /// Child inode number.
    pub ino: u64,
    /// Child inode type (cached so readdir needs no inode reads).
    pub kind: FileKind,
}

/// Where the bytes of one record of a file live.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct RecordRef {
    /// Segment number in the store.
    pub segment: u64,
    /// Byte offset inside the segment.
    pub offset: u64,
    /// Compressed (stored) length in bytes.
    pub stored_len: u32,
    /// Uncompressed (logical) length in bytes.
    pub logical_len: u32,
    /// Codec identifier.
    pub codec: u8,
    /// Checksum of the stored bytes.
    pub checksum: u64,
    /// Small records may be kept inline in the metadata instead of a segment.
    pub inline: Option<Vec<u8>>,
}

impl RecordRef {
    /// Whether the record's bytes live in a segment (not inline in the metadata).
    pub fn in_segment(&self) -> bool {
        self.inline.is_none()
    }
}

/// Live non-inline records of one segment, as counted by [`Txn::segment_usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SegmentUsage {
    /// Number of records pointing into the segment.
    pub records: u64,
    /// Sum of their `stored_len`.
    pub stored_bytes: u64,
}

/// Live records stored with one codec, as counted by [`Txn::codec_usage`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CodecSpace {
    /// Number of records (inline ones included).
    pub records: u64,
    /// Sum of their `logical_len`.
    pub logical_bytes: u64,
    /// Sum of their `stored_len`.
    pub stored_bytes: u64,
}

/// One record of one file, with the place it belongs to.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordLocation {
    /// The file.
    pub ino: u64,
    /// The record index within the file.
    pub index: u64,
    /// Where the record's bytes are.
    pub rec: RecordRef,
}

/// The `(ino, name)` a listing continues after, as SQL parameters: before every entry when
/// `None` (no entry names inode 0, and no name is empty). Inode numbers are below 2^63, so they
/// keep their order as signed integers.
pub(crate) fn listing_position<'a>(after: Option<ListAfter<'a>>) -> (i64, &'a [u8]) {
    after.map_or((0, &[][..]), |a| (a.ino as i64, a.name))
}

/// A storage engine: hands out transactions.
pub trait MetaEngine: Send + Sync {
    /// Begins a read-only transaction.
    fn read(&self) -> Result<Box<dyn Txn + '_>>;
    /// Begins a read-only transaction for a read that may visit many rows (a whole-pool count,
    /// a segment's records, a scan). An engine that serves short reads where they can hold up a
    /// writer (SQLite: on the write connection while it is idle) serves this one apart, so a
    /// long read never makes writers wait. [`MetaEngine::read`] by default.
    fn read_scan(&self) -> Result<Box<dyn Txn + '_>> {
        self.read()
    }
    /// Begins a read-write transaction. Dropping it without commit rolls it back.
    fn write(&self) -> Result<Box<dyn Txn + '_>>;
    /// Like [`MetaEngine::write`], but once [`Txn::commit`] returns, the transaction and every
    /// transaction committed before it survive a power loss (whatever durability the engine was
    /// opened with).
    fn write_durable(&self) -> Result<Box<dyn Txn + '_>>;
    /// Begins a write transaction ([`MetaEngine::write_durable`] if `durable`) for client
    /// `client` of a shared pool (0: none), refused with [`MetaError::SessionEnded`] if the
    /// client's session row is gone, as checked inside the transaction. Engines that can fold
    /// the check into the statements that begin a transaction do so (PostgreSQL: no extra
    /// round trip).
    fn write_as(&self, durable: bool, client: u64) -> Result<Box<dyn Txn + '_>> {
        let mut tx = match durable {
            true => self.write_durable()?,
            false => self.write()?,
        };
        if client != 0 && tx.get_prop(CLIENTS_INO, &client.to_string())?.is_none() {
            return Err(MetaError::SessionEnded(client));
        }
        Ok(tx)
    }
    /// Makes every transaction committed so far survive a power loss, as the commit of a
    /// [`MetaEngine::write_durable`] transaction does, without a transaction of its own where the
    /// engine can: then it writes nothing new, and works on a full disk. `Ok(false)`: this
    /// engine cannot, and the caller commits an empty durable transaction instead.
    fn sync_committed(&self) -> Result<bool> {
        Ok(false)
    }
    /// Folds everything committed into the engine's main file, so the file alone is complete
    /// (SQLite: a truncating checkpoint of the write-ahead log). Nothing to do by default.
    fn checkpoint(&self) -> Result<()> {
        Ok(())
    }
    /// Writes a consistent copy of everything committed to a new file at `path` (SQLite: `VACUUM
    /// INTO`, a database that opens on its own), while writers go on; the caller makes it
    /// durable. `Ok(false)`: the engine keeps no files and wrote nothing.
    fn copy_to(&self, path: &std::path::Path) -> Result<bool> {
        let _ = path;
        Ok(false)
    }
    /// Reads counter `name` of a copy [`MetaEngine::copy_to`] wrote at `path`, without changing
    /// the file: `Ok(None)` if the copy has no such counter, or this engine writes no copies.
    fn counter_in_copy(&self, path: &std::path::Path, name: &str) -> Result<Option<u64>> {
        let _ = (path, name);
        Ok(None)
    }
    /// Checks the structure of a copy [`MetaEngine::copy_to`] wrote at `path`, without changing
    /// the file: `Ok(None)` if it opens and is sound (or this engine writes no copies), else
    /// what is wrong with it.
    fn check_copy(&self, path: &std::path::Path) -> Result<Option<String>> {
        let _ = path;
        Ok(None)
    }
    /// Checkpoints, then closes the engine's files (SQLite: its connections, which removes the
    /// log and its index). Nothing may use the engine afterwards. Nothing to do by default.
    fn close(&self) -> Result<()> {
        self.checkpoint()
    }
}

/// A directory entry's name, the entry, and the inode row it names (`None` if missing).
pub type ListedDentry = (Vec<u8>, Dentry, Option<InodeRow>);

/// The primitives of one transaction. Deleting a missing row is not an error; the `bool` results
/// say whether a row existed.
pub trait Txn {
    /// Reads an inode row.
    fn get_inode(&mut self, ino: u64) -> Result<Option<InodeRow>>;
    /// Inserts or replaces an inode row.
    fn put_inode(&mut self, row: &InodeRow) -> Result<()>;
    /// Deletes an inode row.
    fn delete_inode(&mut self, ino: u64) -> Result<bool>;

    /// Reads a directory entry.
    fn get_dentry(&mut self, parent: u64, name: &[u8]) -> Result<Option<Dentry>>;
    /// Inserts or replaces a directory entry.
    fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) -> Result<()>;
    /// Deletes a directory entry.
    fn delete_dentry(&mut self, parent: u64, name: &[u8]) -> Result<bool>;
    /// Lists up to `limit` entries of `parent` after `after` (from the start if `None`), in
    /// listing order (see [`ListAfter`]): by the inode number each names, then by name; fewer
    /// only when no more follow.
    fn list_dentries(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>>;
    /// [`Txn::list_dentries`] with the inode row each entry names (`None` when there is none,
    /// which only damaged metadata has). An engine may read both in one query.
    fn list_dentries_with_inodes(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<ListedDentry>> {
        let entries = self.list_dentries(parent, after, limit)?;
        entries
            .into_iter()
            .map(|(name, d)| Ok((name, d, self.get_inode(d.ino)?)))
            .collect()
    }
    /// Number of entries of `parent`.
    fn count_dentries(&mut self, parent: u64) -> Result<u64>;

    /// Reads an extended attribute.
    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>>;
    /// Inserts or replaces an extended attribute.
    fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) -> Result<()>;
    /// Deletes an extended attribute.
    fn delete_xattr(&mut self, ino: u64, name: &[u8]) -> Result<bool>;
    /// Names of all extended attributes of `ino`, in order.
    fn list_xattrs(&mut self, ino: u64) -> Result<Vec<Vec<u8>>>;
    /// Whether any inode has an extended attribute called `name`.
    fn xattr_name_in_use(&mut self, name: &[u8]) -> Result<bool>;

    /// Reads one record reference.
    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>>;
    /// Inserts or replaces one record reference.
    fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) -> Result<()>;
    /// Inserts or replaces one record reference, returning the one it replaced. An engine may
    /// do both in one statement (a round trip less on a server); by default it reads, then
    /// writes if the record differs.
    fn replace_record(
        &mut self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
    ) -> Result<Option<RecordRef>> {
        let old = self.get_record(ino, index)?;
        if old.as_ref() != Some(rec) {
            self.put_record(ino, index, rec)?;
        }
        Ok(old)
    }
    /// Deletes one record reference.
    fn delete_record(&mut self, ino: u64, index: u64) -> Result<bool>;
    /// Records of `ino` with index in `range`, in index order.
    fn list_records(&mut self, ino: u64, range: Range<u64>) -> Result<Vec<(u64, RecordRef)>>;
    /// Deletes every record of `ino` with index `>= from`, returning them in index order.
    fn delete_records_from(&mut self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>>;

    /// Non-inline record count and stored bytes per segment; segments without records are absent.
    fn segment_usage(&mut self) -> Result<BTreeMap<u64, SegmentUsage>>;
    /// Record count, logical and stored bytes per codec id over every record, inline ones
    /// included; codecs without records are absent.
    fn codec_usage(&mut self) -> Result<BTreeMap<u8, CodecSpace>>;
    /// Every non-inline record pointing into `segment`, ordered by (offset, ino, index).
    fn records_in_segment(&mut self, segment: u64) -> Result<Vec<RecordLocation>>;
    /// Up to `limit` records of all files (inline ones included) whose (ino, index) sorts strictly
    /// after `after`, in (ino, index) order.
    fn scan_records(
        &mut self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<RecordLocation>>;

    /// Inode numbers of all inodes whose `nlink` is 0, ascending.
    fn list_orphans(&mut self) -> Result<Vec<u64>>;

    /// Reads a property (`ino` 0 = pool).
    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>>;
    /// Inserts or replaces a property.
    fn set_prop(&mut self, ino: u64, name: &str, value: &str) -> Result<()>;
    /// Deletes a property.
    fn delete_prop(&mut self, ino: u64, name: &str) -> Result<bool>;
    /// All properties set directly on `ino`, in name order.
    fn list_props(&mut self, ino: u64) -> Result<Vec<(String, String)>>;

    /// Reads a counter (missing = 0).
    fn get_counter(&mut self, name: &str) -> Result<u64>;
    /// Sets a counter.
    fn set_counter(&mut self, name: &str, value: u64) -> Result<()>;
    /// Whether record changes also keep the per-codec counters that
    /// [`MetaStore::codec_usage`](crate::MetaStore::codec_usage) reads instead of scanning every
    /// record. Engines whose counters cost a round trip each say no, and scan.
    fn keeps_codec_counters(&self) -> bool {
        true
    }
    /// Whether changes set the change tag ([`COUNTER_CHANGE_TAG`]), which tells a copy of the
    /// metadata that is still current from one that is not. Engines that write no copies and
    /// whose counters cost a round trip each say no.
    fn keeps_change_tag(&self) -> bool {
        true
    }

    /// Commits the transaction.
    fn commit(self: Box<Self>) -> Result<()>;
}
