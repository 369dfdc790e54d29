//! Renames: POSIX replacement rules, loop detection, `RENAME_NOREPLACE` and `RENAME_EXCHANGE`.

use std::collections::HashSet;

use crate::engine::Txn;
use crate::engine::{FileKind, Timespec};
use crate::error::{MetaError, Result};
use crate::namespace::{adjust_dir, check_name, dir, drop_link, inode, purge_records};
use crate::{LinkFate, MetaStore, Unlinked, ROOT_INO};

impl MetaStore {
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

    /// Swaps `a_parent/a_name` and `b_parent/b_name` atomically (`renameat2(RENAME_EXCHANGE)`):
    /// both must exist; either may be a directory, as long as neither moves below itself. Both
    /// inodes' ctime and both parents' mtime and ctime change, and directory link counts follow
    /// directories that change parent.
    pub fn rename_exchange(
        &self,
        a_parent: u64,
        a_name: &[u8],
        b_parent: u64,
        b_name: &[u8],
    ) -> Result<()> {
        check_name(a_name)?;
        check_name(b_name)?;
        self.write(|tx| {
            dir(tx, a_parent)?;
            dir(tx, b_parent)?;
            let a = tx
                .get_dentry(a_parent, a_name)?
                .ok_or(MetaError::NotFound)?;
            let b = tx
                .get_dentry(b_parent, b_name)?
                .ok_or(MetaError::NotFound)?;
            if (a_parent == b_parent && a_name == b_name) || a.ino == b.ino {
                return Ok(());
            }
            if a.kind == FileKind::Dir {
                refuse_loop(tx, a.ino, b_parent)?;
            }
            if b.kind == FileKind::Dir {
                refuse_loop(tx, b.ino, a_parent)?;
            }
            let now = Timespec::now();
            tx.put_dentry(a_parent, a_name, b)?;
            tx.put_dentry(b_parent, b_name, a)?;
            for (ino, parent) in [(a.ino, b_parent), (b.ino, a_parent)] {
                let mut row = inode(tx, ino)?;
                row.parent = parent;
                row.attr.ctime = now;
                tx.put_inode(&row)?;
            }
            // A directory that changes parent moves one link from its old parent to its new one.
            let dirs = |kind: FileKind| i64::from(kind == FileKind::Dir && a_parent != b_parent);
            let delta = dirs(b.kind) - dirs(a.kind);
            adjust_dir(tx, a_parent, delta, now)?;
            if b_parent != a_parent {
                adjust_dir(tx, b_parent, -delta, now)?;
            }
            Ok(())
        })
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
                refuse_loop(tx, src.ino, new_parent)?;
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
                        Some(Unlinked {
                            ino: dst.ino,
                            kind: dst.kind,
                            fate: LinkFate::Removed,
                            freed: purge_records(tx, dst.ino)?,
                        })
                    } else {
                        let row = inode(tx, dst.ino)?;
                        Some(drop_link(tx, row, is_open, self.client(), now)?)
                    }
                }
            };
            tx.put_dentry(new_parent, new_name, src)?;
            let mut moved = inode(tx, src.ino)?;
            moved.parent = new_parent;
            moved.attr.ctime = now;
            tx.put_inode(&moved)?;
            let delta = i64::from(src_is_dir && old_parent != new_parent);
            adjust_dir(tx, old_parent, -delta, now)?;
            adjust_dir(tx, new_parent, delta, now)?;
            Ok(replaced)
        })
    }
}

/// Refuses to move directory `moved` into `new_parent` if that is `moved` or below it: walks up
/// from the destination. Parent pointers that never reach the root (damaged metadata) are
/// [`MetaError::Corrupt`].
fn refuse_loop(tx: &mut dyn Txn, moved: u64, new_parent: u64) -> Result<()> {
    let mut cur = new_parent;
    let mut seen = HashSet::new();
    loop {
        if cur == moved {
            return Err(MetaError::CrossDirectoryLoop);
        }
        if cur == ROOT_INO || cur == 0 {
            return Ok(());
        }
        if !seen.insert(cur) {
            return Err(MetaError::Corrupt(format!(
                "the parent pointers above directory {new_parent} loop at {cur}"
            )));
        }
        cur = dir(tx, cur)?.parent;
    }
}
