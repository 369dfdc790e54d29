//! The pool's door to the metadata for the file layer: names, attributes, extended attributes
//! and the record map. Operations that remove a file count its frames dead in the same call, with
//! the records the metadata freed in the same transaction (no second lookup, no race window).

use std::ops::RangeBounds;

use presso_meta::{
    Attr, DirEntry, LinkFate, ListAfter, MetaError, NewNode, RecordRef, SetAttr, Unlinked,
    XattrFlags,
};

use super::Pool;
use crate::error::Result;

impl Pool {
    /// The result of a metadata change; a change that happened is noted for the durability
    /// sweep (a failed one changed nothing).
    fn noted<T>(&self, result: std::result::Result<T, MetaError>) -> Result<T> {
        if result.is_ok() {
            self.unsynced.note();
        }
        Ok(result?)
    }

    /// Looks a name up.
    pub fn lookup(&self, parent: u64, name: &[u8]) -> Result<Attr> {
        Ok(self.meta.lookup(parent, name)?)
    }

    /// An inode's attributes as committed.
    pub fn getattr(&self, ino: u64) -> Result<Attr> {
        Ok(self.meta.getattr(ino)?)
    }

    /// Changes attributes (the size of a regular file goes through the file layer, which queues
    /// it in a transaction group).
    pub fn setattr(&self, ino: u64, set: &SetAttr) -> Result<Attr> {
        self.noted(self.meta.setattr(ino, set))
    }

    /// Creates a file, directory, symbolic link, device node, FIFO or socket.
    pub fn make_node(&self, parent: u64, name: &[u8], node: &NewNode) -> Result<Attr> {
        self.noted(self.meta.make_node(parent, name, node))
    }

    /// A path of `ino` from the pool's root, for messages; `None` when it has no name left (or
    /// the metadata cannot say).
    pub fn path_of(&self, ino: u64) -> Option<String> {
        let path = self.meta.path_of(ino).ok()??;
        Some(String::from_utf8_lossy(&path).into_owned())
    }

    /// Reads a symbolic link.
    pub fn readlink(&self, ino: u64) -> Result<Vec<u8>> {
        Ok(self.meta.readlink(ino)?)
    }

    /// Adds a hard link.
    pub fn link(&self, ino: u64, parent: u64, name: &[u8]) -> Result<Attr> {
        self.noted(self.meta.link(ino, parent, name))
    }

    /// Removes a name. A file that loses its last name and is not open (`is_open`) is removed
    /// with its records, whose frames are counted dead here.
    pub fn unlink(
        &self,
        parent: u64,
        name: &[u8],
        is_open: &dyn Fn(u64) -> bool,
    ) -> Result<Unlinked> {
        let gone = self.noted(self.meta.unlink(parent, name, is_open))?;
        self.discard_freed(&gone);
        Ok(gone)
    }

    /// Removes an empty directory.
    pub fn rmdir(&self, parent: u64, name: &[u8]) -> Result<()> {
        self.noted(self.meta.rmdir(parent, name))
    }

    /// Renames, replacing an existing target where POSIX allows; what happened to a replaced
    /// target is returned, and its frames are counted dead if it was removed.
    pub fn rename(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
        is_open: &dyn Fn(u64) -> bool,
    ) -> Result<Option<Unlinked>> {
        let replaced = self.noted(
            self.meta
                .rename(parent, name, new_parent, new_name, is_open),
        )?;
        if let Some(gone) = &replaced {
            self.discard_freed(gone);
        }
        Ok(replaced)
    }

    /// Renames only if the target does not exist (`RENAME_NOREPLACE`).
    pub fn rename_noreplace(
        &self,
        parent: u64,
        name: &[u8],
        new_parent: u64,
        new_name: &[u8],
    ) -> Result<()> {
        self.noted(
            self.meta
                .rename_noreplace(parent, name, new_parent, new_name),
        )
    }

    /// Swaps two existing names atomically (`RENAME_EXCHANGE`); nothing is freed.
    pub fn rename_exchange(
        &self,
        parent: u64,
        name: &[u8],
        other_parent: u64,
        other_name: &[u8],
    ) -> Result<()> {
        self.noted(
            self.meta
                .rename_exchange(parent, name, other_parent, other_name),
        )
    }

    /// Removes an orphan (no names left) once its last handle is closed, counting its frames
    /// dead; `false` if it was not an orphan.
    pub fn forget(&self, ino: u64) -> Result<bool> {
        match self.noted(self.meta.forget(ino))? {
            Some(records) => {
                for rec in &records {
                    self.discard(rec);
                }
                Ok(true)
            }
            None => Ok(false),
        }
    }

    /// Lists a directory after `after`, in listing order ([`ListAfter`]).
    pub fn readdir(
        &self,
        ino: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<DirEntry>> {
        Ok(self.meta.readdir(ino, after, limit)?)
    }

    /// [`Pool::readdir`] with each entry's committed attributes (`None` where the metadata
    /// lacks them).
    pub fn readdir_plus(
        &self,
        ino: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<(DirEntry, Option<Attr>)>> {
        Ok(self.meta.readdir_plus(ino, after, limit)?)
    }

    /// Parent of a directory.
    pub fn dir_parent(&self, ino: u64) -> Result<u64> {
        Ok(self.meta.dir_parent(ino)?)
    }

    /// Reads an extended attribute.
    pub fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        Ok(self.meta.get_xattr(ino, name)?)
    }

    /// Sets an extended attribute.
    pub fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        self.noted(self.meta.set_xattr(ino, name, value, flags))
    }

    /// Whether any inode has an extended attribute called `name`.
    pub fn xattr_name_in_use(&self, name: &[u8]) -> Result<bool> {
        Ok(self.meta.xattr_name_in_use(name)?)
    }

    /// Extended attribute names.
    pub fn list_xattrs(&self, ino: u64) -> Result<Vec<Vec<u8>>> {
        Ok(self.meta.list_xattrs(ino)?)
    }

    /// Removes an extended attribute.
    pub fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        self.noted(self.meta.remove_xattr(ino, name))
    }

    /// Committed records of `ino` with index in `range`, in index order.
    pub fn records(&self, ino: u64, range: impl RangeBounds<u64>) -> Result<Vec<(u64, RecordRef)>> {
        Ok(self.meta.records(ino, range)?)
    }

    /// Committed record `index` of `ino`.
    pub fn record(&self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        Ok(self.meta.get_record(ino, index)?)
    }

    /// The property `name` set on `ino` itself (not inherited).
    pub fn own_prop(&self, ino: u64, name: &str) -> Result<Option<String>> {
        Ok(self.meta.get_prop(ino, name)?)
    }

    fn discard_freed(&self, gone: &Unlinked) {
        if gone.fate == LinkFate::Removed {
            for rec in &gone.freed {
                self.discard(rec);
            }
        }
    }
}
