//! The plain data types of the semantic layer's API: attributes, directory entries, the outcome of
//! removing a name, attribute changes, xattr flags, properties, space totals and transaction-group
//! ops, plus the limits the layer enforces.

use crate::engine::{FileKind, InodeRow, RecordRef, Timespec};
use crate::error::{MetaError, Result};
#[cfg(doc)]
use crate::MetaStore;

/// Longest accepted file, xattr or property name, in bytes.
pub const NAME_MAX: usize = 255;
/// Most links a non-directory may have: ext4's limit, so a tree that fits on ext4 fits here
/// and one that does not fails the same way (`EMLINK`).
pub const LINK_MAX: u32 = 65_000;
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
        r.attr.clone()
    }
}

/// What [`MetaStore::make_node`] creates. The constructors cover every kind; the fields are public
/// so a caller may adjust one, and `make_node` refuses combinations that do not fit the kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewNode {
    /// Inode type.
    pub kind: FileKind,
    /// Permission bits (masked with `0o7777`; ignored for symlinks, which are always 0777).
    pub mode: u32,
    /// Owner.
    pub uid: u32,
    /// Group.
    pub gid: u32,
    /// Device number, kept for device nodes, fifos and sockets only.
    pub rdev: u64,
    /// Symlink target: required for symlinks (1 to [`SYMLINK_MAX`] bytes, no NUL), refused for
    /// every other kind.
    pub target: Option<Vec<u8>>,
}

impl NewNode {
    /// A regular file.
    pub fn file(mode: u32, uid: u32, gid: u32) -> Self {
        Self::plain(FileKind::File, mode, uid, gid)
    }

    /// A directory.
    pub fn dir(mode: u32, uid: u32, gid: u32) -> Self {
        Self::plain(FileKind::Dir, mode, uid, gid)
    }

    /// A symbolic link (mode 0777) pointing at `target`.
    pub fn symlink(target: &[u8], uid: u32, gid: u32) -> Self {
        NewNode {
            target: Some(target.to_vec()),
            ..Self::plain(FileKind::Symlink, 0o777, uid, gid)
        }
    }

    /// What `mknod(2)` creates: a fifo, socket or device node with device number `rdev`, or a
    /// regular file (whose `rdev` is dropped). Fails with [`MetaError::InvalidArgument`] for
    /// directories and symlinks, which have their own constructors.
    pub fn special(kind: FileKind, mode: u32, uid: u32, gid: u32, rdev: u64) -> Result<Self> {
        match kind {
            FileKind::Dir | FileKind::Symlink => Err(MetaError::invalid("mknod of dir/symlink")),
            FileKind::File => Ok(Self::file(mode, uid, gid)),
            _ => Ok(NewNode {
                rdev,
                ..Self::plain(kind, mode, uid, gid)
            }),
        }
    }

    fn plain(kind: FileKind, mode: u32, uid: u32, gid: u32) -> Self {
        NewNode {
            kind,
            mode,
            uid,
            gid,
            rdev: 0,
            target: None,
        }
    }
}

/// Where a directory listing resumes: strictly after the entry `(ino, name)` in listing order.
///
/// A directory lists its entries by the inode number each names, then by name. Inode numbers
/// are never reused and grow as nodes are made, so a directory lists in the order its entries
/// were made, and a listing resumes from an inode number alone, by any handle and at any time,
/// whatever changed meanwhile: an entry keeps its place until it is removed (a rename keeps
/// the inode, so its place too), and a removed one's number still says where to go on. Only
/// names of one inode in one directory (hard links side by side) share a number.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ListAfter<'a> {
    /// The inode the entry names.
    pub ino: u64,
    /// The entry's name; empty for [`ListAfter::ino`]: before every name of that inode.
    pub name: &'a [u8],
}

impl<'a> ListAfter<'a> {
    /// Resumes after the entry `name`, which names `ino`.
    pub fn entry(ino: u64, name: &'a [u8]) -> ListAfter<'a> {
        ListAfter { ino, name }
    }

    /// Resumes at the first entry naming inode `ino` or a later one: all that a position known
    /// only by its inode number can say (names are never empty).
    pub fn ino(ino: u64) -> ListAfter<'static> {
        ListAfter { ino, name: b"" }
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
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Unlinked {
    /// The inode that lost a name.
    pub ino: u64,
    /// Its type.
    pub kind: FileKind,
    /// What became of it.
    pub fate: LinkFate,
    /// When `fate` is [`LinkFate::Removed`]: every record (inline ones included) of the inode,
    /// removed in the same transaction, in index order; their bytes left the logical/stored
    /// totals and the non-inline ones are now garbage, so the caller marks their store entries
    /// dead. Empty for the other fates.
    pub freed: Vec<RecordRef>,
}

/// Changes for [`MetaStore::setattr`]; `None` fields are left alone. The change time becomes
/// now, or `ctime` when that is given.
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
    /// The change time as the caller's clock gave it: with the writeback cache the kernel keeps
    /// a written file's times and sends its own. The stored change time never goes back, so a
    /// request that would change nothing else writes nothing.
    pub ctime: Option<Timespec>,
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
    /// Both flags at once: fails either way, with [`MetaError::Exists`] if the attribute exists
    /// (the create check comes first) and [`MetaError::NoAttribute`] if not, as on ext4.
    Both,
}

impl XattrFlags {
    /// From the raw `setxattr(2)` flags.
    pub fn from_raw(flags: i32) -> Result<Self> {
        match flags {
            0 => Ok(XattrFlags::Any),
            libc::XATTR_CREATE => Ok(XattrFlags::Create),
            libc::XATTR_REPLACE => Ok(XattrFlags::Replace),
            f if f == libc::XATTR_CREATE | libc::XATTR_REPLACE => Ok(XattrFlags::Both),
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
    /// Sets property `name` on regular file `ino` itself (the file layer fixes a file's record
    /// size this way at its first write, so it commits with the file's first records instead
    /// of in a transaction of its own).
    SetProp {
        /// The file.
        ino: u64,
        /// The property's name (checked like an extended attribute's).
        name: String,
        /// Its value.
        value: String,
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
