//! presso-meta: the metadata layer of Presso — inodes, directories, extended attributes, the
//! per-file record map (which compressed record of which segment holds which part of a file),
//! ZFS-like inheritable properties and space accounting.
//!
//! # Layout
//!
//! The crate follows "one trait, one semantic layer, small engine primitives, one conformance
//! suite":
//!
//! - [`engine`]: the [`MetaEngine`] / [`Txn`] traits — small, transactional row primitives
//!   (get/put/delete inode, dentry, xattr, record, property, counter). Engines know nothing about
//!   POSIX.
//! - [`MetaStore`] (this file): every POSIX rule (name validation, link counts, rename
//!   replacement rules, loop detection, orphans, xattr flags, accounting, property inheritance) is
//!   implemented exactly once, over the primitives, each operation in one write transaction.
//! - Engines: [`sqlite::SqliteEngine`] (durable, WAL) and [`memory::MemoryEngine`] (reference
//!   model and test engine).
//! - `tests/conformance.rs`: one suite run against every engine, plus a property test checking
//!   that engines agree with each other.
//!
//! # Dependencies
//!
//! This crate must not depend on `presso-codec` or `presso-store`: it stores record references
//! as plain numbers and never reads segment data. Its public API does not expose engine types
//! (no rusqlite types); errors are [`MetaError`], mapped to errno by [`MetaError::errno`] at the
//! FUSE boundary.
//!
//! # Adding an engine
//!
//! 1. Implement [`MetaEngine`] and [`Txn`] in a new module, honouring the contract in the
//!    [`engine`] module docs (serializable write transactions, rollback on drop, ordered
//!    listings, bit-exact `u64`s).
//! 2. Add a constructor on [`MetaStore`] (or use [`MetaStore::new`] with a boxed engine).
//! 3. Add one line to the engine list in `tests/conformance.rs`, to the model-equivalence
//!    property test and to the accounting property test. Nothing else changes.
//!
//! # Semantics worth knowing
//!
//! - Inode 1 is the root (created by [`MetaStore::init`]); inode numbers are never reused.
//! - Directory `nlink` is `2 + number of subdirectories`.
//! - When the last name of a non-directory goes away, the inode is removed in the same
//!   transaction unless the caller's `is_open` callback says it is still open; it is then an
//!   orphan (`nlink == 0`) until [`MetaStore::forget`]. Orphans left by a crash are removed by
//!   [`MetaStore::purge_orphans`] at pool open (engines index inodes with `nlink == 0`).
//! - Properties: every inode row carries a `parent` pointer — exact for directories; for other
//!   inodes the directory of the name under which it was created or to which it was last renamed.
//!   Files copy nothing at creation; [`MetaStore::get_prop_effective`] walks
//!   inode → parent → … → root → pool (inode 0) and returns the first value found. If a file's
//!   parent directory no longer exists (a hard link outlived it), the walk continues at the root.
//! - The record map does not follow `setattr(size)`: the file-system layer truncates records
//!   explicitly with [`MetaStore::truncate_records`].
//! - Transaction groups: [`MetaStore::apply_txg`] applies a batch of record-map and size updates
//!   in one write transaction, skipping (not failing) updates of files that were removed
//!   meanwhile, and optionally makes the commit durable.
//!
//! # Space accounting
//!
//! `logical` and `stored` are the sums over live records (inline ones included); `garbage` counts
//! segment bytes no record points at any more and that were not yet given back with
//! [`MetaStore::release_garbage`]. Every non-inline frame the caller hands to the metadata
//! (through [`MetaStore::set_record`] or [`MetaStore::apply_txg`]) is counted exactly once, so at
//! every commit
//!
//! ```text
//! Σ segment_usage().stored_bytes + garbage == bytes of non-inline frames handed over − released
//! ```
//!
//! (handing over the frame a record already points at changes nothing).

pub mod engine;
mod error;
pub mod memory;
pub mod sqlite;

use std::collections::{BTreeMap, HashMap};
use std::ops::{Bound, Range, RangeBounds};
use std::path::Path;

pub use engine::{
    CodecSpace, Dentry, FileKind, InodeRow, MetaEngine, RecordLocation, RecordRef, SegmentUsage,
    Timespec, Txn, POOL_INO, ROOT_INO,
};
pub use error::{MetaError, Result};
pub use sqlite::{SqliteOptions, Synchronous, SCHEMA_VERSION};

use engine::{COUNTER_GARBAGE, COUNTER_LOGICAL, COUNTER_NEXT_INODE, COUNTER_STORED};

/// Longest accepted file, xattr or property name, in bytes.
pub const NAME_MAX: usize = 255;
/// Longest accepted symlink target, in bytes.
pub const SYMLINK_MAX: usize = 4096;
/// Largest accepted extended attribute value, in bytes.
pub const XATTR_VALUE_MAX: usize = 65536;
/// Record indexes must be below this value.
pub const RECORD_INDEX_LIMIT: u64 = i64::MAX as u64;

/// Attributes of an inode, as reported to the file-system layer.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Attr {
    /// Inode number.
    pub ino: u64,
    /// Inode type.
    pub kind: FileKind,
    /// Permission bits (no type bits; see [`Attr::st_mode`]).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Logical size in bytes (target length for symlinks, 0 for directories).
    pub size: u64,
    /// Link count.
    pub nlink: u32,
    /// Last access.
    pub atime: Timespec,
    /// Last modification.
    pub mtime: Timespec,
    /// Last status change.
    pub ctime: Timespec,
    /// Device number for device nodes.
    pub rdev: u64,
}

impl Attr {
    /// Type bits plus permission bits, as in `stat.st_mode`.
    pub fn st_mode(&self) -> u32 {
        self.kind.type_bits() | self.mode
    }
}

impl From<&InodeRow> for Attr {
    fn from(r: &InodeRow) -> Self {
        Attr {
            ino: r.ino,
            kind: r.kind,
            mode: r.mode,
            uid: r.uid,
            gid: r.gid,
            size: r.size,
            nlink: r.nlink,
            atime: r.atime,
            mtime: r.mtime,
            ctime: r.ctime,
            rdev: r.rdev,
        }
    }
}

/// One entry returned by [`MetaStore::readdir`] (`.` and `..` are not stored).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DirEntry {
    /// Entry name.
    pub name: Vec<u8>,
    /// Child inode.
    pub ino: u64,
    /// Child type.
    pub kind: FileKind,
}

/// What happened to an inode that lost a name.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum LinkFate {
    /// It still has other names.
    Linked,
    /// It has no names left but is still open; call [`MetaStore::forget`] when it is closed.
    Orphaned,
    /// It was removed together with its records, xattrs and properties.
    Removed,
}

/// Result of [`MetaStore::unlink`], and of a [`MetaStore::rename`] that replaced a target.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Unlinked {
    /// The inode that lost a name.
    pub ino: u64,
    /// Its type.
    pub kind: FileKind,
    /// What became of it.
    pub fate: LinkFate,
}

/// Changes for [`MetaStore::setattr`]; `None` fields are left alone. `ctime` is always updated.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct SetAttr {
    /// New permission bits (masked with `0o7777`).
    pub mode: Option<u32>,
    /// New owner.
    pub uid: Option<u32>,
    /// New group.
    pub gid: Option<u32>,
    /// New size (regular files only). Sets `mtime` to now unless `mtime` is given.
    pub size: Option<u64>,
    /// New access time.
    pub atime: Option<Timespec>,
    /// New modification time.
    pub mtime: Option<Timespec>,
}

/// `setxattr` flags.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum XattrFlags {
    /// Create or replace.
    #[default]
    Any,
    /// Fail with [`MetaError::Exists`] if the attribute exists (`XATTR_CREATE`).
    Create,
    /// Fail with [`MetaError::NoAttribute`] if it does not (`XATTR_REPLACE`).
    Replace,
}

impl XattrFlags {
    /// From the raw `setxattr(2)` flags.
    pub fn from_raw(flags: i32) -> Result<Self> {
        match flags {
            0 => Ok(XattrFlags::Any),
            libc::XATTR_CREATE => Ok(XattrFlags::Create),
            libc::XATTR_REPLACE => Ok(XattrFlags::Replace),
            _ => Err(MetaError::invalid("bad xattr flags")),
        }
    }
}

/// A property value and the inode it was found on (0 = pool), like ZFS's `SOURCE` column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EffectiveProp {
    /// The value.
    pub value: String,
    /// Where it was set.
    pub source: u64,
}

/// Space accounting totals.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SpaceUsage {
    /// Sum of `logical_len` of all live records.
    pub logical: u64,
    /// Sum of `stored_len` of all live records (inline ones included).
    pub stored: u64,
    /// Segment bytes of records that were replaced, truncated or freed and not yet reclaimed.
    pub garbage: u64,
}

/// One change of a transaction group; see [`MetaStore::apply_txg`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum TxgOp {
    /// Points record `index` of file `ino` at `rec`, with the accounting of
    /// [`MetaStore::set_record`]; the replaced non-inline reference is reported in
    /// [`TxgOutcome::replaced`].
    SetRecord {
        /// The file.
        ino: u64,
        /// The record index (below [`RECORD_INDEX_LIMIT`]).
        index: u64,
        /// The new reference.
        rec: RecordRef,
    },
    /// Removes record `index` of file `ino` if present, leaving a hole. Its bytes leave the
    /// logical/stored totals; a non-inline one becomes garbage and is reported in
    /// [`TxgOutcome::replaced`].
    ClearRecord {
        /// The file.
        ino: u64,
        /// The record index (below [`RECORD_INDEX_LIMIT`]).
        index: u64,
    },
    /// Compare-and-swap for garbage collection: points record `index` of file `ino` at `rec` (a
    /// copy of the same logical content) only if it currently points at the non-inline frame at
    /// (`from_segment`, `from_offset`). The old frame then becomes garbage; otherwise `rec` is
    /// reported in [`TxgOutcome::not_applied`].
    MoveRecord {
        /// The file.
        ino: u64,
        /// The record index (below [`RECORD_INDEX_LIMIT`]).
        index: u64,
        /// Segment the record is expected to point into.
        from_segment: u64,
        /// Offset the record is expected to point at.
        from_offset: u64,
        /// The new reference.
        rec: RecordRef,
    },
    /// Sets a regular file's size and modification time; `ctime` becomes the later of its current
    /// value and `mtime`. Records are not touched.
    SetSize {
        /// The file.
        ino: u64,
        /// The new size in bytes.
        size: u64,
        /// The new modification time.
        mtime: Timespec,
    },
}

/// What [`MetaStore::apply_txg`] did with the frames it was given and the ones it dropped.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TxgOutcome {
    /// Non-inline references that no record points at any more (replaced, cleared or moved
    /// away), in op order. Their bytes were added to the garbage counter; the caller marks their
    /// store entries dead.
    pub replaced: Vec<RecordRef>,
    /// Non-inline references of `SetRecord`/`MoveRecord` ops that were skipped (file gone or not
    /// a regular file, or a `MoveRecord` whose record had changed), in op order. Their bytes were
    /// added to the garbage counter too; the caller marks their store entries dead.
    pub not_applied: Vec<RecordRef>,
}

/// Counter changes collected over a transaction group and written once at its end.
#[derive(Debug, Default)]
struct Delta {
    logical_add: u64,
    logical_sub: u64,
    stored_add: u64,
    stored_sub: u64,
    garbage_add: u64,
}

impl Delta {
    /// A record starts being referenced.
    fn take(&mut self, r: &RecordRef) {
        self.logical_add = self.logical_add.saturating_add(u64::from(r.logical_len));
        self.stored_add = self.stored_add.saturating_add(u64::from(r.stored_len));
    }

    /// A record stops being referenced; its segment bytes (if any) become garbage.
    fn drop_ref(&mut self, r: &RecordRef) {
        self.logical_sub = self.logical_sub.saturating_add(u64::from(r.logical_len));
        self.stored_sub = self.stored_sub.saturating_add(u64::from(r.stored_len));
        self.waste(r);
    }

    /// A frame was handed over but never referenced: straight to garbage.
    fn waste(&mut self, r: &RecordRef) {
        if r.in_segment() {
            self.garbage_add = self.garbage_add.saturating_add(u64::from(r.stored_len));
        }
    }

    fn apply(&self, tx: &mut dyn Txn) -> Result<()> {
        if self.logical_add != 0 || self.logical_sub != 0 {
            add_counter(tx, COUNTER_LOGICAL, self.logical_add, self.logical_sub)?;
        }
        if self.stored_add != 0 || self.stored_sub != 0 {
            add_counter(tx, COUNTER_STORED, self.stored_add, self.stored_sub)?;
        }
        if self.garbage_add != 0 {
            add_counter(tx, COUNTER_GARBAGE, self.garbage_add, 0)?;
        }
        Ok(())
    }
}

/// The metadata store: POSIX semantics over any [`MetaEngine`].
pub struct MetaStore {
    engine: Box<dyn MetaEngine>,
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore").finish_non_exhaustive()
    }
}

// ---------------------------------------------------------------------------------------------
// helpers over the primitives

fn check_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(MetaError::invalid("empty name"));
    }
    if name == b"." || name == b".." {
        return Err(MetaError::invalid("name is . or .."));
    }
    if name.iter().any(|&b| b == b'/' || b == 0) {
        return Err(MetaError::invalid("name contains '/' or NUL"));
    }
    if name.len() > NAME_MAX {
        return Err(MetaError::NameTooLong);
    }
    Ok(())
}

fn check_attr_name(name: &[u8]) -> Result<()> {
    if name.is_empty() {
        return Err(MetaError::invalid("empty attribute name"));
    }
    if name.contains(&0) {
        return Err(MetaError::invalid("attribute name contains NUL"));
    }
    if name.len() > NAME_MAX {
        return Err(MetaError::NameTooLong);
    }
    Ok(())
}

fn inode(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
    tx.get_inode(ino)?.ok_or(MetaError::NotFound)
}

fn dir(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
    let row = inode(tx, ino)?;
    if row.kind != FileKind::Dir {
        return Err(MetaError::NotDir);
    }
    Ok(row)
}

fn alloc_ino(tx: &mut dyn Txn) -> Result<u64> {
    let next = tx.get_counter(COUNTER_NEXT_INODE)?.max(ROOT_INO + 1);
    tx.set_counter(COUNTER_NEXT_INODE, next + 1)?;
    Ok(next)
}

/// Adds `delta` to a directory's link count and stamps its mtime/ctime.
fn adjust_dir(tx: &mut dyn Txn, ino: u64, delta: i64, now: Timespec) -> Result<()> {
    let mut row = dir(tx, ino)?;
    let n = i64::from(row.nlink) + delta;
    row.nlink = u32::try_from(n).map_err(|_| MetaError::TooManyLinks)?;
    row.mtime = now;
    row.ctime = now;
    tx.put_inode(&row)
}

fn add_counter(tx: &mut dyn Txn, name: &str, add: u64, sub: u64) -> Result<()> {
    let v = tx.get_counter(name)?;
    tx.set_counter(name, v.saturating_add(add).saturating_sub(sub))
}

/// Accounts for records that stopped being referenced.
fn account_dropped<'a>(
    tx: &mut dyn Txn,
    recs: impl IntoIterator<Item = &'a RecordRef>,
) -> Result<()> {
    let (mut logical, mut stored, mut garbage) = (0u64, 0u64, 0u64);
    for r in recs {
        logical += u64::from(r.logical_len);
        stored += u64::from(r.stored_len);
        if r.inline.is_none() {
            garbage += u64::from(r.stored_len);
        }
    }
    if logical == 0 && stored == 0 {
        return Ok(());
    }
    add_counter(tx, COUNTER_LOGICAL, 0, logical)?;
    add_counter(tx, COUNTER_STORED, 0, stored)?;
    add_counter(tx, COUNTER_GARBAGE, garbage, 0)
}

/// Removes an inode with everything hanging off it (records, xattrs, properties), returning its
/// records.
fn purge(tx: &mut dyn Txn, ino: u64) -> Result<Vec<(u64, RecordRef)>> {
    let recs = tx.delete_records_from(ino, 0)?;
    account_dropped(tx, recs.iter().map(|(_, r)| r))?;
    for name in tx.list_xattrs(ino)? {
        tx.delete_xattr(ino, &name)?;
    }
    for (name, _) in tx.list_props(ino)? {
        tx.delete_prop(ino, &name)?;
    }
    tx.delete_inode(ino)?;
    Ok(recs)
}

/// Drops one link of a non-directory whose name was already removed.
fn drop_link(
    tx: &mut dyn Txn,
    mut row: InodeRow,
    is_open: &dyn Fn(u64) -> bool,
    now: Timespec,
) -> Result<Unlinked> {
    row.nlink = row.nlink.saturating_sub(1);
    row.ctime = now;
    let fate = if row.nlink > 0 {
        tx.put_inode(&row)?;
        LinkFate::Linked
    } else if is_open(row.ino) {
        tx.put_inode(&row)?;
        LinkFate::Orphaned
    } else {
        purge(tx, row.ino)?;
        LinkFate::Removed
    };
    Ok(Unlinked {
        ino: row.ino,
        kind: row.kind,
        fate,
    })
}

/// Refuses a record reference the record map cannot hold.
fn check_record(index: u64, rec: &RecordRef) -> Result<()> {
    if index >= RECORD_INDEX_LIMIT {
        return Err(MetaError::invalid("record index too large"));
    }
    if let Some(data) = &rec.inline {
        if data.len() != rec.stored_len as usize {
            return Err(MetaError::invalid("inline data length != stored_len"));
        }
    }
    Ok(())
}

fn check_txg_op(op: &TxgOp) -> Result<()> {
    match op {
        TxgOp::SetRecord { index, rec, .. } | TxgOp::MoveRecord { index, rec, .. } => {
            check_record(*index, rec)
        }
        TxgOp::ClearRecord { index, .. } if *index >= RECORD_INDEX_LIMIT => {
            Err(MetaError::invalid("record index too large"))
        }
        TxgOp::ClearRecord { .. } | TxgOp::SetSize { .. } => Ok(()),
    }
}

/// Whether `ino` exists and is a regular file, remembered in `files`. Sound for one transaction
/// group because none of its ops creates, removes or retypes an inode.
fn is_file(tx: &mut dyn Txn, files: &mut HashMap<u64, bool>, ino: u64) -> Result<bool> {
    if let Some(&known) = files.get(&ino) {
        return Ok(known);
    }
    let yes = tx
        .get_inode(ino)?
        .is_some_and(|row| row.kind == FileKind::File);
    files.insert(ino, yes);
    Ok(yes)
}

/// Applies the ops of one transaction group inside `tx`; see [`MetaStore::apply_txg`].
fn apply_ops(tx: &mut dyn Txn, ops: &[TxgOp]) -> Result<TxgOutcome> {
    let mut out = TxgOutcome::default();
    let mut delta = Delta::default();
    let mut files = HashMap::new();
    let skip = |delta: &mut Delta, out: &mut TxgOutcome, rec: &RecordRef| {
        delta.waste(rec);
        if rec.in_segment() {
            out.not_applied.push(rec.clone());
        }
    };
    for op in ops {
        match op {
            TxgOp::SetRecord { ino, index, rec } => {
                if !is_file(tx, &mut files, *ino)? {
                    skip(&mut delta, &mut out, rec);
                    continue;
                }
                let old = tx.get_record(*ino, *index)?;
                if old.as_ref() == Some(rec) {
                    continue;
                }
                tx.put_record(*ino, *index, rec)?;
                delta.take(rec);
                if let Some(old) = old {
                    delta.drop_ref(&old);
                    if old.in_segment() {
                        out.replaced.push(old);
                    }
                }
            }
            TxgOp::ClearRecord { ino, index } => {
                if !is_file(tx, &mut files, *ino)? {
                    continue;
                }
                if let Some(old) = tx.get_record(*ino, *index)? {
                    tx.delete_record(*ino, *index)?;
                    delta.drop_ref(&old);
                    if old.in_segment() {
                        out.replaced.push(old);
                    }
                }
            }
            TxgOp::MoveRecord {
                ino,
                index,
                from_segment,
                from_offset,
                rec,
            } => {
                let cur = if is_file(tx, &mut files, *ino)? {
                    tx.get_record(*ino, *index)?
                } else {
                    None
                };
                match cur {
                    Some(cur)
                        if cur.in_segment()
                            && cur.segment == *from_segment
                            && cur.offset == *from_offset =>
                    {
                        if cur != *rec {
                            tx.put_record(*ino, *index, rec)?;
                            delta.take(rec);
                            delta.drop_ref(&cur);
                            out.replaced.push(cur);
                        }
                    }
                    _ => skip(&mut delta, &mut out, rec),
                }
            }
            TxgOp::SetSize { ino, size, mtime } => {
                let Some(mut row) = tx.get_inode(*ino)? else {
                    files.insert(*ino, false);
                    continue;
                };
                files.insert(*ino, row.kind == FileKind::File);
                if row.kind != FileKind::File {
                    continue;
                }
                row.size = *size;
                row.mtime = *mtime;
                row.ctime = row.ctime.max(*mtime);
                tx.put_inode(&row)?;
            }
        }
    }
    delta.apply(tx)?;
    Ok(out)
}

fn to_range(r: impl RangeBounds<u64>) -> Range<u64> {
    let start = match r.start_bound() {
        Bound::Included(&s) => s,
        Bound::Excluded(&s) => s.saturating_add(1),
        Bound::Unbounded => 0,
    };
    let end = match r.end_bound() {
        Bound::Included(&e) => e.saturating_add(1),
        Bound::Excluded(&e) => e,
        Bound::Unbounded => u64::MAX,
    };
    start..end.min(RECORD_INDEX_LIMIT)
}

// ---------------------------------------------------------------------------------------------

impl MetaStore {
    /// Wraps an engine.
    pub fn new(engine: Box<dyn MetaEngine>) -> Self {
        MetaStore { engine }
    }

    /// Opens (creating if needed) a SQLite database with default options.
    pub fn open_sqlite(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_sqlite_with(path, SqliteOptions::default())
    }

    /// Opens (creating if needed) a SQLite database.
    pub fn open_sqlite_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        Ok(Self::new(Box::new(sqlite::SqliteEngine::open(
            path.as_ref(),
            opts,
        )?)))
    }

    /// A fresh in-memory store (not initialized; call [`MetaStore::init`]).
    pub fn in_memory() -> Self {
        Self::new(Box::new(memory::MemoryEngine::new()))
    }

    fn read<R>(&self, f: impl FnOnce(&mut dyn Txn) -> Result<R>) -> Result<R> {
        let mut tx = self.engine.read()?;
        let r = f(&mut *tx)?;
        tx.commit()?;
        Ok(r)
    }

    fn write<R>(&self, f: impl FnOnce(&mut dyn Txn) -> Result<R>) -> Result<R> {
        let mut tx = self.engine.write()?;
        let r = f(&mut *tx)?;
        tx.commit()?;
        Ok(r)
    }

    /// Creates the root directory (inode 1, mode 0755, owned by 0:0) if it does not exist yet.
    /// Idempotent.
    pub fn init(&self) -> Result<()> {
        self.write(|tx| {
            if tx.get_inode(ROOT_INO)?.is_some() {
                return Ok(());
            }
            let now = Timespec::now();
            tx.put_inode(&InodeRow {
                ino: ROOT_INO,
                kind: FileKind::Dir,
                mode: 0o755,
                uid: 0,
                gid: 0,
                size: 0,
                nlink: 2,
                atime: now,
                mtime: now,
                ctime: now,
                rdev: 0,
                parent: 0,
                target: None,
            })?;
            // `alloc_ino` never hands out numbers at or below the root, so no counter setup.
            Ok(())
        })
    }

    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        check_name(name)?;
        self.read(|tx| {
            dir(tx, parent)?;
            let d = tx.get_dentry(parent, name)?.ok_or(MetaError::NotFound)?;
            Ok(Attr::from(&inode(tx, d.ino)?))
        })
    }

    /// Attributes of an inode.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.read(|tx| Ok(Attr::from(&inode(tx, ino)?)))
    }

    /// The parent of a directory (the root is its own parent), for `..`.
    pub fn dir_parent(&self, ino: u64) -> Result<u64> {
        self.read(|tx| {
            let row = dir(tx, ino)?;
            Ok(if ino == ROOT_INO {
                ROOT_INO
            } else {
                row.parent
            })
        })
    }

    #[allow(clippy::too_many_arguments)]
    fn make_node(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
        target: Option<&[u8]>,
    ) -> Result<Attr> {
        check_name(name)?;
        self.write(|tx| {
            dir(tx, parent)?;
            if tx.get_dentry(parent, name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let now = Timespec::now();
            let ino = alloc_ino(tx)?;
            let is_dir = kind == FileKind::Dir;
            let row = InodeRow {
                ino,
                kind,
                mode: mode & 0o7777,
                uid,
                gid,
                size: target.map_or(0, |t| t.len() as u64),
                nlink: if is_dir { 2 } else { 1 },
                atime: now,
                mtime: now,
                ctime: now,
                rdev,
                parent,
                target: target.map(<[u8]>::to_vec),
            };
            adjust_dir(tx, parent, i64::from(is_dir), now)?;
            tx.put_inode(&row)?;
            tx.put_dentry(parent, name, Dentry { ino, kind })?;
            Ok(Attr::from(&row))
        })
    }

    /// Creates a regular file.
    pub fn create(&self, parent: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(parent, name, FileKind::File, mode, uid, gid, 0, None)
    }

    /// Creates a directory.
    pub fn mkdir(&self, parent: u64, name: &[u8], mode: u32, uid: u32, gid: u32) -> Result<Attr> {
        self.make_node(parent, name, FileKind::Dir, mode, uid, gid, 0, None)
    }

    /// Creates a special file (fifo, socket or device node); use [`MetaStore::create`],
    /// [`MetaStore::mkdir`] and [`MetaStore::symlink`] for the other kinds.
    #[allow(clippy::too_many_arguments)]
    pub fn mknod(
        &self,
        parent: u64,
        name: &[u8],
        kind: FileKind,
        mode: u32,
        uid: u32,
        gid: u32,
        rdev: u64,
    ) -> Result<Attr> {
        match kind {
            FileKind::Fifo | FileKind::Socket | FileKind::CharDevice | FileKind::BlockDevice => {
                self.make_node(parent, name, kind, mode, uid, gid, rdev, None)
            }
            FileKind::File => self.create(parent, name, mode, uid, gid),
            FileKind::Dir | FileKind::Symlink => Err(MetaError::invalid("mknod of dir/symlink")),
        }
    }

    /// Creates a symbolic link (mode 0777) pointing at `target`.
    pub fn symlink(
        &self,
        parent: u64,
        name: &[u8],
        target: &[u8],
        uid: u32,
        gid: u32,
    ) -> Result<Attr> {
        if target.is_empty() || target.contains(&0) {
            return Err(MetaError::invalid("empty symlink target or NUL in target"));
        }
        if target.len() > SYMLINK_MAX {
            return Err(MetaError::NameTooLong);
        }
        self.make_node(
            parent,
            name,
            FileKind::Symlink,
            0o777,
            uid,
            gid,
            0,
            Some(target),
        )
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.read(|tx| {
            let row = inode(tx, ino)?;
            match (row.kind, row.target) {
                (FileKind::Symlink, Some(t)) => Ok(t),
                _ => Err(MetaError::invalid("not a symlink")),
            }
        })
    }

    /// Adds a hard link `new_parent/new_name` to `ino` (not allowed for directories).
    pub fn link(&self, ino: u64, new_parent: u64, new_name: &[u8]) -> Result<Attr> {
        check_name(new_name)?;
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            if row.kind == FileKind::Dir {
                return Err(MetaError::NotPermitted);
            }
            if row.nlink == 0 {
                return Err(MetaError::NotFound);
            }
            dir(tx, new_parent)?;
            if tx.get_dentry(new_parent, new_name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let now = Timespec::now();
            row.nlink = row.nlink.checked_add(1).ok_or(MetaError::TooManyLinks)?;
            row.ctime = now;
            tx.put_inode(&row)?;
            tx.put_dentry(
                new_parent,
                new_name,
                Dentry {
                    ino,
                    kind: row.kind,
                },
            )?;
            adjust_dir(tx, new_parent, 0, now)?;
            Ok(Attr::from(&row))
        })
    }

    /// Removes a non-directory name. If it was the last link, the inode is removed in the same
    /// transaction unless `is_open(ino)` returns true, in which case it becomes an orphan.
    pub fn unlink(
        &self,
        parent: u64,
        name: &[u8],
        is_open: &dyn Fn(u64) -> bool,
    ) -> Result<Unlinked> {
        check_name(name)?;
        self.write(|tx| {
            dir(tx, parent)?;
            let d = tx.get_dentry(parent, name)?.ok_or(MetaError::NotFound)?;
            if d.kind == FileKind::Dir {
                return Err(MetaError::IsDir);
            }
            let row = inode(tx, d.ino)?;
            let now = Timespec::now();
            tx.delete_dentry(parent, name)?;
            adjust_dir(tx, parent, 0, now)?;
            drop_link(tx, row, is_open, now)
        })
    }

    /// Removes an orphan (an inode with no names left) with its records, xattrs and properties.
    /// Returns false (and does nothing) if the inode does not exist or still has names.
    pub fn forget(&self, ino: u64) -> Result<bool> {
        self.write(|tx| match tx.get_inode(ino)? {
            Some(row) if row.nlink == 0 && row.kind != FileKind::Dir => {
                purge(tx, ino)?;
                Ok(true)
            }
            _ => Ok(false),
        })
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        check_name(name)?;
        self.write(|tx| {
            dir(tx, parent)?;
            let d = tx.get_dentry(parent, name)?.ok_or(MetaError::NotFound)?;
            if d.kind != FileKind::Dir {
                return Err(MetaError::NotDir);
            }
            if tx.count_dentries(d.ino)? > 0 {
                return Err(MetaError::NotEmpty);
            }
            tx.delete_dentry(parent, name)?;
            adjust_dir(tx, parent, -1, Timespec::now())?;
            purge(tx, d.ino)?;
            Ok(())
        })
    }

    /// Renames `old_parent/old_name` to `new_parent/new_name`, atomically replacing an existing
    /// target when POSIX allows it (file over file, directory over empty directory). Returns what
    /// happened to the replaced target, if any; `is_open` decides as for [`MetaStore::unlink`].
    pub fn rename(
        &self,
        old_parent: u64,
        old_name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        is_open: &dyn Fn(u64) -> bool,
    ) -> Result<Option<Unlinked>> {
        self.rename_with(old_parent, old_name, new_parent, new_name, true, is_open)
    }

    /// [`MetaStore::rename`] that fails with [`MetaError::Exists`] when the target exists, checked
    /// in the same transaction (`renameat2(RENAME_NOREPLACE)`).
    pub fn rename_noreplace(
        &self,
        old_parent: u64,
        old_name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<()> {
        let replaced =
            self.rename_with(old_parent, old_name, new_parent, new_name, false, &|_| true)?;
        debug_assert!(replaced.is_none(), "nothing is replaced without replace");
        Ok(())
    }

    fn rename_with(
        &self,
        old_parent: u64,
        old_name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        replace: bool,
        is_open: &dyn Fn(u64) -> bool,
    ) -> Result<Option<Unlinked>> {
        check_name(old_name)?;
        check_name(new_name)?;
        self.write(|tx| {
            dir(tx, old_parent)?;
            dir(tx, new_parent)?;
            let src = tx
                .get_dentry(old_parent, old_name)?
                .ok_or(MetaError::NotFound)?;
            if !replace && tx.get_dentry(new_parent, new_name)?.is_some() {
                return Err(MetaError::Exists);
            }
            if old_parent == new_parent && old_name == new_name {
                return Ok(None);
            }
            let src_is_dir = src.kind == FileKind::Dir;
            if src_is_dir {
                // Refuse to move a directory below itself: walk up from the destination.
                let mut cur = new_parent;
                loop {
                    if cur == src.ino {
                        return Err(MetaError::CrossDirectoryLoop);
                    }
                    if cur == ROOT_INO || cur == 0 {
                        break;
                    }
                    cur = dir(tx, cur)?.parent;
                }
            }
            let dst = tx.get_dentry(new_parent, new_name)?;
            if let Some(dst) = dst {
                if dst.ino == src.ino {
                    // Two names of the same inode: POSIX says do nothing.
                    return Ok(None);
                }
                match (src_is_dir, dst.kind == FileKind::Dir) {
                    (true, false) => return Err(MetaError::NotDir),
                    (false, true) => return Err(MetaError::IsDir),
                    (true, true) if tx.count_dentries(dst.ino)? > 0 => {
                        return Err(MetaError::NotEmpty)
                    }
                    _ => {}
                }
            }

            let now = Timespec::now();
            tx.delete_dentry(old_parent, old_name)?;
            let replaced = match dst {
                None => None,
                Some(dst) => {
                    tx.delete_dentry(new_parent, new_name)?;
                    if dst.kind == FileKind::Dir {
                        adjust_dir(tx, new_parent, -1, now)?;
                        purge(tx, dst.ino)?;
                        Some(Unlinked {
                            ino: dst.ino,
                            kind: dst.kind,
                            fate: LinkFate::Removed,
                        })
                    } else {
                        let row = inode(tx, dst.ino)?;
                        Some(drop_link(tx, row, is_open, now)?)
                    }
                }
            };
            tx.put_dentry(new_parent, new_name, src)?;
            let mut moved = inode(tx, src.ino)?;
            moved.parent = new_parent;
            moved.ctime = now;
            tx.put_inode(&moved)?;
            let delta = i64::from(src_is_dir && old_parent != new_parent);
            adjust_dir(tx, old_parent, -delta, now)?;
            adjust_dir(tx, new_parent, delta, now)?;
            Ok(replaced)
        })
    }

    /// Up to `limit` entries of directory `ino` whose names sort after `after` (byte order).
    /// Pass the last returned name as `after` to continue.
    pub fn readdir(&self, ino: u64, after: Option<&[u8]>, limit: usize) -> Result<Vec<DirEntry>> {
        self.read(|tx| {
            dir(tx, ino)?;
            Ok(tx
                .list_dentries(ino, after, limit)?
                .into_iter()
                .map(|(name, d)| DirEntry {
                    name,
                    ino: d.ino,
                    kind: d.kind,
                })
                .collect())
        })
    }

    /// Changes attributes; `ctime` becomes now.
    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr> {
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            let now = Timespec::now();
            if let Some(size) = set.size {
                match row.kind {
                    FileKind::File => {}
                    FileKind::Dir => return Err(MetaError::IsDir),
                    _ => return Err(MetaError::invalid("size change on a non-regular file")),
                }
                row.size = size;
                row.mtime = now;
            }
            if let Some(mode) = set.mode {
                row.mode = mode & 0o7777;
            }
            if let Some(uid) = set.uid {
                row.uid = uid;
            }
            if let Some(gid) = set.gid {
                row.gid = gid;
            }
            if let Some(t) = set.atime {
                row.atime = t;
            }
            if let Some(t) = set.mtime {
                row.mtime = t;
            }
            row.ctime = now;
            tx.put_inode(&row)?;
            Ok(Attr::from(&row))
        })
    }

    // ---- extended attributes

    /// Reads an extended attribute.
    pub fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        check_attr_name(name)?;
        self.read(|tx| {
            inode(tx, ino)?;
            tx.get_xattr(ino, name)?.ok_or(MetaError::NoAttribute)
        })
    }

    /// Sets an extended attribute, honouring `flags`.
    pub fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        check_attr_name(name)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(MetaError::ValueTooLarge);
        }
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            let exists = tx.get_xattr(ino, name)?.is_some();
            match flags {
                XattrFlags::Create if exists => return Err(MetaError::Exists),
                XattrFlags::Replace if !exists => return Err(MetaError::NoAttribute),
                _ => {}
            }
            tx.set_xattr(ino, name, value)?;
            row.ctime = Timespec::now();
            tx.put_inode(&row)
        })
    }

    /// Names of all extended attributes of `ino`, in byte order.
    pub fn list_xattrs(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        self.read(|tx| {
            inode(tx, ino)?;
            tx.list_xattrs(ino)
        })
    }

    /// Removes an extended attribute.
    pub fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        check_attr_name(name)?;
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            if !tx.delete_xattr(ino, name)? {
                return Err(MetaError::NoAttribute);
            }
            row.ctime = Timespec::now();
            tx.put_inode(&row)
        })
    }

    // ---- record map

    fn file(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
        let row = inode(tx, ino)?;
        match row.kind {
            FileKind::File => Ok(row),
            FileKind::Dir => Err(MetaError::IsDir),
            _ => Err(MetaError::invalid("records on a non-regular file")),
        }
    }

    /// Points record `index` of file `ino` at `rec`, returning the reference it replaced (whose
    /// stored bytes are now counted as garbage unless it was inline or identical to `rec`).
    pub fn set_record(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Option<RecordRef>> {
        check_record(index, rec)?;
        self.write(|tx| {
            Self::file(tx, ino)?;
            let old = tx.get_record(ino, index)?;
            if old.as_ref() == Some(rec) {
                return Ok(old);
            }
            tx.put_record(ino, index, rec)?;
            add_counter(tx, COUNTER_LOGICAL, u64::from(rec.logical_len), 0)?;
            add_counter(tx, COUNTER_STORED, u64::from(rec.stored_len), 0)?;
            account_dropped(tx, old.as_ref())?;
            Ok(old)
        })
    }

    /// Record `index` of file `ino`, if set.
    pub fn get_record(&self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        self.read(|tx| {
            Self::file(tx, ino)?;
            if index >= RECORD_INDEX_LIMIT {
                return Ok(None);
            }
            tx.get_record(ino, index)
        })
    }

    /// Records of file `ino` whose index lies in `range`, in index order.
    pub fn records(&self, ino: u64, range: impl RangeBounds<u64>) -> Result<Vec<(u64, RecordRef)>> {
        let range = to_range(range);
        self.read(|tx| {
            Self::file(tx, ino)?;
            if range.start >= range.end {
                return Ok(Vec::new());
            }
            tx.list_records(ino, range)
        })
    }

    /// Removes every record of `ino` with index `>= from`, returning them; their bytes leave the
    /// logical/stored totals and non-inline ones become garbage.
    pub fn truncate_records(&self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        self.write(|tx| {
            Self::file(tx, ino)?;
            let removed = tx.delete_records_from(ino, from)?;
            account_dropped(tx, removed.iter().map(|(_, r)| r))?;
            Ok(removed)
        })
    }

    /// Current space accounting totals.
    pub fn space(&self) -> Result<SpaceUsage> {
        self.read(|tx| {
            Ok(SpaceUsage {
                logical: tx.get_counter(COUNTER_LOGICAL)?,
                stored: tx.get_counter(COUNTER_STORED)?,
                garbage: tx.get_counter(COUNTER_GARBAGE)?,
            })
        })
    }

    /// Tells the accounting that `bytes` of garbage were reclaimed (e.g. by segment compaction).
    pub fn release_garbage(&self, bytes: u64) -> Result<()> {
        self.write(|tx| add_counter(tx, COUNTER_GARBAGE, 0, bytes))
    }

    // ---- transaction groups, garbage collection, scrub

    /// Applies a transaction group: every op of `ops`, in order, in one write transaction, so a
    /// crash keeps all of them or none.
    ///
    /// - Ops on an inode that no longer exists or is not a regular file are skipped, not errors
    ///   (the file may have been removed while its data was in flight).
    /// - Accounting is that of [`MetaStore::set_record`] / [`MetaStore::truncate_records`], op by
    ///   op. Non-inline frames that end up referenced by no record — the old frames of replaced,
    ///   cleared and moved records ([`TxgOutcome::replaced`]) and the new frames of skipped
    ///   `SetRecord`/`MoveRecord` ops ([`TxgOutcome::not_applied`]) — are all added to the
    ///   garbage counter here; the caller only marks their store entries dead. That keeps
    ///   "live stored bytes in segments + garbage == frame bytes handed over − released" exact
    ///   (see the crate docs).
    /// - With `durable`, the commit (and every commit before it) survives a power loss once this
    ///   returns; otherwise it has the durability the store was opened with. The SQLite engine
    ///   commits this transaction with `synchronous=FULL`.
    ///
    /// Fails without applying anything if an op is malformed (record index at or above
    /// [`RECORD_INDEX_LIMIT`], inline data whose length is not `stored_len`).
    pub fn apply_txg(&self, ops: &[TxgOp], durable: bool) -> Result<TxgOutcome> {
        for op in ops {
            check_txg_op(op)?;
        }
        let mut tx = if durable {
            self.engine.write_durable()?
        } else {
            self.engine.write()?
        };
        let out = apply_ops(&mut *tx, ops)?;
        tx.commit()?;
        Ok(out)
    }

    /// Number and stored bytes of the non-inline records pointing into each segment (segments
    /// nothing points into are absent), to rebuild the store's live/dead accounting at open.
    pub fn segment_usage(&self) -> Result<BTreeMap<u64, SegmentUsage>> {
        self.read(|tx| tx.segment_usage())
    }

    /// Number, logical and stored bytes of the records of each codec id over the whole pool
    /// (codecs without records are absent): the per-codec ratio `presso status` shows.
    pub fn codec_usage(&self) -> Result<BTreeMap<u8, CodecSpace>> {
        self.read(|tx| tx.codec_usage())
    }

    /// Every non-inline record pointing into `segment`, ordered by (offset, ino, index): what
    /// garbage collection must move before the segment can go.
    pub fn records_in_segment(&self, segment: u64) -> Result<Vec<RecordLocation>> {
        self.read(|tx| tx.records_in_segment(segment))
    }

    /// Up to `limit` records of all files (inline ones included) in (ino, index) order, starting
    /// strictly after `after`; pass the last returned (ino, index) to continue. For scrub.
    pub fn scan_records(
        &self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<RecordLocation>> {
        if limit == 0 {
            return Ok(Vec::new());
        }
        // Inode numbers are handed out upwards from 2 and never reach 2^63, where the SQLite
        // engine's signed keys would stop sorting like u64.
        if after.is_some_and(|(ino, _)| ino > i64::MAX as u64) {
            return Ok(Vec::new());
        }
        self.read(|tx| tx.scan_records(after, limit))
    }

    /// Removes every orphan — a non-directory inode with no names left (`nlink == 0`), such as a
    /// file unlinked while open whose [`MetaStore::forget`] a crash prevented — with its records,
    /// xattrs and properties, accounting exactly like `forget`. Returns the removed non-inline
    /// records, whose bytes are now garbage; the caller marks their store entries dead.
    ///
    /// Meant for pool open, before any file is open: it also removes orphans that are still open.
    /// Engines index inodes with `nlink == 0`, so this costs nothing when there are none.
    pub fn purge_orphans(&self) -> Result<Vec<RecordRef>> {
        self.write(|tx| {
            let mut freed = Vec::new();
            for ino in tx.list_orphans()? {
                let orphan = ino != ROOT_INO
                    && tx
                        .get_inode(ino)?
                        .is_some_and(|row| row.nlink == 0 && row.kind != FileKind::Dir);
                if !orphan {
                    continue;
                }
                let recs = purge(tx, ino)?;
                freed.extend(
                    recs.into_iter()
                        .map(|(_, r)| r)
                        .filter(RecordRef::in_segment),
                );
            }
            Ok(freed)
        })
    }

    // ---- properties

    fn check_prop_target(tx: &mut dyn Txn, ino: u64, name: &str) -> Result<()> {
        check_attr_name(name.as_bytes())?;
        if ino != POOL_INO {
            inode(tx, ino)?;
        }
        Ok(())
    }

    /// Sets a property on `ino` (0 = pool).
    pub fn set_prop(&self, ino: u64, name: &str, value: &str) -> Result<()> {
        self.write(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.set_prop(ino, name, value)
        })
    }

    /// The property set directly on `ino`, if any (no inheritance).
    pub fn get_prop(&self, ino: u64, name: &str) -> Result<Option<String>> {
        self.read(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.get_prop(ino, name)
        })
    }

    /// Removes the property set directly on `ino` (like `zfs inherit`); returns whether it was set.
    pub fn remove_prop(&self, ino: u64, name: &str) -> Result<bool> {
        self.write(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            tx.delete_prop(ino, name)
        })
    }

    /// Properties set directly on `ino`, in name order.
    pub fn list_props(&self, ino: u64) -> Result<Vec<(String, String)>> {
        self.read(|tx| {
            if ino != POOL_INO {
                inode(tx, ino)?;
            }
            tx.list_props(ino)
        })
    }

    /// The value that applies to `ino`: its own, else the nearest ancestor's, else the pool's.
    pub fn get_prop_effective(&self, ino: u64, name: &str) -> Result<Option<EffectiveProp>> {
        self.read(|tx| {
            Self::check_prop_target(tx, ino, name)?;
            let mut cur = ino;
            let mut steps = 0u32;
            while cur != POOL_INO {
                if let Some(value) = tx.get_prop(cur, name)? {
                    return Ok(Some(EffectiveProp { value, source: cur }));
                }
                if cur == ROOT_INO {
                    break;
                }
                steps += 1;
                if steps > 1_000_000 {
                    return Err(MetaError::Engine("parent pointer cycle".into()));
                }
                cur = match tx.get_inode(cur)? {
                    Some(row) if row.parent != 0 => row.parent,
                    // Stale or missing parent (e.g. a hard link outlived its directory).
                    _ => ROOT_INO,
                };
            }
            Ok(tx.get_prop(POOL_INO, name)?.map(|value| EffectiveProp {
                value,
                source: POOL_INO,
            }))
        })
    }
}
