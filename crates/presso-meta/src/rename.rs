//! Renames: POSIX replacement rules, loop detection and `RENAME_NOREPLACE`.

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
                        Some(Unlinked {
                            ino: dst.ino,
                            kind: dst.kind,
                            fate: LinkFate::Removed,
                            freed: purge_records(tx, dst.ino)?,
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
            moved.attr.ctime = now;
            tx.put_inode(&moved)?;
            let delta = i64::from(src_is_dir && old_parent != new_parent);
            adjust_dir(tx, old_parent, -delta, now)?;
            adjust_dir(tx, new_parent, delta, now)?;
            Ok(replaced)
        })
    }
}
