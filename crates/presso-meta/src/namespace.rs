//! The name space: lookups, node creation, links, removal, renames (see [`crate::rename`]),
//! directory listing, attributes and orphans. Every rule about names and link counts lives here.

use crate::accounting::account_dropped;
use crate::engine::{Dentry, FileKind, InodeRow, RecordRef, Timespec, Txn, COUNTER_NEXT_INODE};
use crate::error::{MetaError, Result};
use crate::{
    Attr, DirEntry, LinkFate, ListAfter, MetaStore, NewNode, SetAttr, Unlinked, LINK_MAX, NAME_MAX,
    ROOT_INO, SYMLINK_MAX,
};

/// Refuses names POSIX does not allow in a directory.
pub(crate) fn check_name(name: &[u8]) -> Result<()> {
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

/// The inode row of `ino`, or [`MetaError::NotFound`].
pub(crate) fn inode(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
    tx.get_inode(ino)?.ok_or(MetaError::NotFound)
}

/// The inode row of directory `ino`, or [`MetaError::NotFound`] / [`MetaError::NotDir`].
pub(crate) fn dir(tx: &mut dyn Txn, ino: u64) -> Result<InodeRow> {
    let row = inode(tx, ino)?;
    if row.attr.kind != FileKind::Dir {
        return Err(MetaError::NotDir);
    }
    Ok(row)
}

/// Inode numbers the metadata hands out stay below this: 2^43, some nine trillion creates (ext4
/// has 2^32 inodes at most). So engines storing them as signed 64-bit integers keep their
/// order, and a directory listing's cookie carries one with 20 bits to tell names apart in the
/// 63 bits the kernel's offsets have.
pub const INO_LIMIT: u64 = 1 << 43;

/// The entry a listing gives for directory entry `d` called `name`.
fn listed(name: Vec<u8>, d: Dentry) -> DirEntry {
    DirEntry {
        name,
        ino: d.ino,
        kind: d.kind,
    }
}

/// Hands out the next inode number (never reused, always above the root). The counter is read
/// from the metadata: a value no correct build writes (at or past [`INO_LIMIT`], or the number of
/// an inode that exists) is damage, and creating a node over it would replace that inode.
fn alloc_ino(tx: &mut dyn Txn) -> Result<u64> {
    let next = tx.get_counter(COUNTER_NEXT_INODE)?.max(ROOT_INO + 1);
    if next >= INO_LIMIT {
        return Err(MetaError::Corrupt(format!(
            "the next inode number {next} is out of range"
        )));
    }
    if tx.get_inode(next)?.is_some() {
        return Err(MetaError::Corrupt(format!(
            "the next inode number {next} is already in use"
        )));
    }
    tx.set_counter(COUNTER_NEXT_INODE, next + 1)?;
    Ok(next)
}

/// Adds `delta` to a directory's link count and stamps its mtime/ctime.
pub(crate) fn adjust_dir(tx: &mut dyn Txn, ino: u64, delta: i64, now: Timespec) -> Result<()> {
    let mut row = dir(tx, ino)?;
    let n = i64::from(row.attr.nlink) + delta;
    row.attr.nlink = u32::try_from(n).map_err(|_| MetaError::TooManyLinks)?;
    row.attr.mtime = now;
    row.attr.ctime = now;
    tx.put_inode(&row)
}

/// Removes an inode with everything hanging off it (records, xattrs, properties), returning its
/// records.
pub(crate) fn purge(tx: &mut dyn Txn, ino: u64) -> Result<Vec<(u64, RecordRef)>> {
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

/// Checks that `node`'s fields agree with its kind; returns the symlink target, if any.
fn check_node(node: &NewNode) -> Result<Option<&[u8]>> {
    match (node.kind, node.target.as_deref()) {
        (FileKind::Symlink, Some(target)) => {
            if target.is_empty() || target.contains(&0) {
                return Err(MetaError::invalid("empty symlink target or NUL in target"));
            }
            if target.len() > SYMLINK_MAX {
                return Err(MetaError::NameTooLong);
            }
            Ok(Some(target))
        }
        (FileKind::Symlink, None) => Err(MetaError::invalid("symlink without a target")),
        (_, Some(_)) => Err(MetaError::invalid("target given for a non-symlink")),
        (_, None) => Ok(None),
    }
}

/// [`purge`], returning only the references of the removed records.
pub(crate) fn purge_records(tx: &mut dyn Txn, ino: u64) -> Result<Vec<RecordRef>> {
    Ok(purge(tx, ino)?.into_iter().map(|(_, r)| r).collect())
}

/// Drops one link of a non-directory whose name was already removed. An inode left an orphan
/// records `owner` (the client keeping it open in a shared pool; 0: none).
pub(crate) fn drop_link(
    tx: &mut dyn Txn,
    mut row: InodeRow,
    is_open: &dyn Fn(u64) -> bool,
    owner: u64,
    now: Timespec,
) -> Result<Unlinked> {
    row.attr.nlink = row.attr.nlink.saturating_sub(1);
    row.attr.ctime = now;
    let (fate, freed) = if row.attr.nlink > 0 {
        tx.put_inode(&row)?;
        (LinkFate::Linked, Vec::new())
    } else if is_open(row.attr.ino) {
        tx.put_inode(&row)?;
        if owner != 0 {
            tx.set_prop(row.attr.ino, crate::clients::ORPHAN_OF, &owner.to_string())?;
        }
        (LinkFate::Orphaned, Vec::new())
    } else {
        (LinkFate::Removed, purge_records(tx, row.attr.ino)?)
    };
    Ok(Unlinked {
        ino: row.attr.ino,
        kind: row.attr.kind,
        fate,
        freed,
    })
}

impl MetaStore {
    /// Looks a name up in a directory.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        check_name(name)?;
        self.read(|tx| {
            dir(tx, parent)?;
            let d = tx.get_dentry(parent, name)?.ok_or(MetaError::NotFound)?;
            Ok(inode(tx, d.ino)?.attr)
        })
    }

    /// Attributes of an inode.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        self.read(|tx| Ok(inode(tx, ino)?.attr))
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

    /// A path of `ino` from the root (`/`-separated, starting with `/`), for messages such as
    /// scrub's: through the directory its `parent` names, so one of its names if it has hard
    /// links. `None` for an orphan (no name left) or when a directory on the way does not hold
    /// it (metadata damaged: the caller falls back to the inode number).
    pub fn path_of(&self, ino: u64) -> Result<Option<Vec<u8>>> {
        self.read(|tx| {
            let mut names: Vec<Vec<u8>> = Vec::new();
            let mut at = ino;
            while at != ROOT_INO {
                let row = inode(tx, at)?;
                if row.attr.nlink == 0 || names.len() > 4096 {
                    return Ok(None);
                }
                let Some(name) = name_in(tx, row.parent, at)? else {
                    return Ok(None);
                };
                names.push(name);
                at = row.parent;
            }
            let mut path = Vec::new();
            for name in names.iter().rev() {
                path.push(b'/');
                path.extend_from_slice(name);
            }
            if path.is_empty() {
                path.push(b'/');
            }
            Ok(Some(path))
        })
    }

    /// Creates `parent/name` as described by `node`: a regular file, directory, symbolic link
    /// (mode always 0777), fifo, socket or device node. The device number is kept for device
    /// nodes, fifos and sockets only. In a set-group-ID directory the node gets the directory's
    /// group instead of `node.gid`, and a new directory the set-group-ID bit too.
    pub fn make_node(&self, parent: u64, name: &[u8], node: &NewNode) -> Result<Attr> {
        self.make_node_as(parent, name, node, None)
    }

    /// [`MetaStore::make_node`] with inode number `ino` instead of the next free one, for
    /// rebuilding lost metadata: the pool's segments name records by inode number. `ino` must be
    /// above the root and not in use ([`MetaError::Exists`]); later inodes are numbered above it.
    pub fn make_node_numbered(
        &self,
        parent: u64,
        name: &[u8],
        node: &NewNode,
        ino: u64,
    ) -> Result<Attr> {
        if ino <= ROOT_INO || ino == u64::MAX {
            return Err(MetaError::invalid("inode number out of range"));
        }
        self.make_node_as(parent, name, node, Some(ino))
    }

    fn make_node_as(
        &self,
        parent: u64,
        name: &[u8],
        node: &NewNode,
        wanted: Option<u64>,
    ) -> Result<Attr> {
        let target = check_node(node)?;
        check_name(name)?;
        self.write(|tx| {
            let parent_attr = dir(tx, parent)?.attr;
            if tx.get_dentry(parent, name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let now = Timespec::now();
            let ino = match wanted {
                None => alloc_ino(tx)?,
                Some(ino) => {
                    if tx.get_inode(ino)?.is_some() {
                        return Err(MetaError::Exists);
                    }
                    let next = tx.get_counter(COUNTER_NEXT_INODE)?;
                    tx.set_counter(COUNTER_NEXT_INODE, next.max(ino + 1))?;
                    ino
                }
            };
            let kind = node.kind;
            let is_dir = kind == FileKind::Dir;
            // A set-group-ID directory gives new nodes its group, and new directories the bit.
            let setgid_parent = parent_attr.mode & 0o2000 != 0;
            let gid = if setgid_parent {
                parent_attr.gid
            } else {
                node.gid
            };
            let inherited = if setgid_parent && is_dir { 0o2000 } else { 0 };
            let row = InodeRow {
                attr: Attr {
                    ino,
                    kind,
                    mode: if kind == FileKind::Symlink {
                        0o777
                    } else {
                        (node.mode & 0o7777) | inherited
                    },
                    uid: node.uid,
                    gid,
                    size: target.map_or(0, |t| t.len() as u64),
                    nlink: if is_dir { 2 } else { 1 },
                    atime: now,
                    mtime: now,
                    ctime: now,
                    rdev: match kind {
                        FileKind::File | FileKind::Dir | FileKind::Symlink => 0,
                        _ => node.rdev,
                    },
                },
                parent,
                target: target.map(<[u8]>::to_vec),
            };
            adjust_dir(tx, parent, i64::from(is_dir), now)?;
            tx.put_inode(&row)?;
            tx.put_dentry(parent, name, Dentry { ino, kind })?;
            Ok(row.attr)
        })
    }

    /// The target of a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        self.read(|tx| {
            let row = inode(tx, ino)?;
            match (row.attr.kind, row.target) {
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
            if row.attr.kind == FileKind::Dir {
                return Err(MetaError::NotPermitted);
            }
            if row.attr.nlink == 0 {
                return Err(MetaError::NotFound);
            }
            dir(tx, new_parent)?;
            if tx.get_dentry(new_parent, new_name)?.is_some() {
                return Err(MetaError::Exists);
            }
            let now = Timespec::now();
            if row.attr.nlink >= LINK_MAX {
                return Err(MetaError::TooManyLinks);
            }
            row.attr.nlink += 1;
            row.attr.ctime = now;
            tx.put_inode(&row)?;
            tx.put_dentry(
                new_parent,
                new_name,
                Dentry {
                    ino,
                    kind: row.attr.kind,
                },
            )?;
            adjust_dir(tx, new_parent, 0, now)?;
            Ok(row.attr)
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
            drop_link(tx, row, is_open, self.client(), now)
        })
    }

    /// Removes an orphan (an inode with no names left) with its records, xattrs and properties.
    /// Returns the removed records (inline ones included, in index order; accounted like those of
    /// [`Unlinked::freed`]), or `None` (having done nothing) if the inode does not exist, is a
    /// directory or still has names.
    pub fn forget(&self, ino: u64) -> Result<Option<Vec<RecordRef>>> {
        self.write(|tx| match tx.get_inode(ino)? {
            Some(row) if row.attr.nlink == 0 && row.attr.kind != FileKind::Dir => {
                Ok(Some(purge_records(tx, ino)?))
            }
            _ => Ok(None),
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

    /// Up to `limit` entries of directory `ino` after `after`, in listing order (see
    /// [`ListAfter`]). Fewer than `limit` only when no more follow; pass [`ListAfter::entry`]
    /// of the last returned entry to continue.
    pub fn readdir(
        &self,
        ino: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        self.read(|tx| {
            dir(tx, ino)?;
            Ok(tx
                .list_dentries(ino, after, limit)?
                .into_iter()
                .map(|(name, d)| listed(name, d))
                .collect())
        })
    }

    /// [`MetaStore::readdir`] with each entry's attributes, read in the same transaction;
    /// `None` for a name whose inode is missing (damaged metadata), so that one damaged name
    /// does not hide the others.
    pub fn readdir_plus(
        &self,
        ino: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<(DirEntry, Option<Attr>)>> {
        self.read(|tx| {
            dir(tx, ino)?;
            let entries = tx.list_dentries_with_inodes(ino, after, limit)?;
            Ok(entries
                .into_iter()
                .map(|(name, d, row)| (listed(name, d), row.map(|r| r.attr)))
                .collect())
        })
    }

    /// Changes attributes; `ctime` becomes now, or the given one if that is later (see
    /// [`SetAttr::ctime`]). A change that leaves the row as it was writes nothing.
    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr> {
        self.write(|tx| {
            let before = inode(tx, ino)?;
            let mut row = before.clone();
            let now = Timespec::now();
            if let Some(size) = set.size {
                match row.attr.kind {
                    FileKind::File => {}
                    FileKind::Dir => return Err(MetaError::IsDir),
                    _ => return Err(MetaError::invalid("size change on a non-regular file")),
                }
                row.attr.size = size;
                row.attr.mtime = now;
            }
            if let Some(mode) = set.mode {
                row.attr.mode = mode & 0o7777;
            }
            if let Some(uid) = set.uid {
                row.attr.uid = uid;
            }
            if let Some(gid) = set.gid {
                row.attr.gid = gid;
            }
            if let Some(t) = set.atime {
                row.attr.atime = t;
            }
            if let Some(t) = set.mtime {
                row.attr.mtime = t;
            }
            row.attr.ctime = match set.ctime {
                Some(t) => t.max(before.attr.ctime),
                None => now,
            };
            if row != before {
                tx.put_inode(&row)?;
            }
            Ok(row.attr)
        })
    }

    /// Removes every orphan — a non-directory inode with no names left (`nlink == 0`), such as a
    /// file unlinked while open whose [`MetaStore::forget`] a crash prevented — with its records,
    /// xattrs and properties, accounting exactly like `forget`. Returns the removed non-inline
    /// records, whose bytes are now garbage; the caller marks their store entries dead.
    ///
    /// Meant for pool open, before any file is open: it also removes orphans that are still open.
    /// Engines index inodes with `nlink == 0`, so this costs nothing when there are none.
    pub fn purge_orphans(&self) -> Result<Vec<RecordRef>> {
        // Most opens find none, and then write nothing (see `MetaStore::write`).
        if self.read(|tx| tx.list_orphans())?.is_empty() {
            return Ok(Vec::new());
        }
        self.write(|tx| {
            let mut freed = Vec::new();
            for ino in tx.list_orphans()? {
                let orphan = ino != ROOT_INO
                    && tx
                        .get_inode(ino)?
                        .is_some_and(|row| row.attr.nlink == 0 && row.attr.kind != FileKind::Dir);
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
}

/// The name under which directory `parent` holds `ino`, if it does (one index read: listing order
/// is by inode number).
fn name_in(tx: &mut dyn Txn, parent: u64, ino: u64) -> Result<Option<Vec<u8>>> {
    let batch = tx.list_dentries(parent, Some(ListAfter::ino(ino)), 1)?;
    Ok(batch
        .into_iter()
        .find(|(_, d)| d.ino == ino)
        .map(|(name, _)| name))
}
