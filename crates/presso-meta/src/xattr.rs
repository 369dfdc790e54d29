//! Extended attributes.

use crate::engine::Timespec;
use crate::error::{MetaError, Result};
use crate::namespace::inode;
use crate::{MetaStore, XattrFlags, NAME_MAX, XATTR_VALUE_MAX};

/// Refuses extended attribute (and property) names that are empty, hold NUL or are too long.
pub(crate) fn check_attr_name(name: &[u8]) -> Result<()> {
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

/// The namespaces whose attributes Presso stores, as ext4 does. `system.` is not among them:
/// the kernel passes POSIX ACLs (`system.posix_acl_*`) to a FUSE file system as plain
/// attributes unless it negotiates ACL support, and storing them would show ACLs nothing
/// enforces.
const NAMESPACES: [&[u8]; 3] = [b"user.", b"trusted.", b"security."];

/// Refuses an extended attribute name outside [`NAMESPACES`] (`EOPNOTSUPP`) and a namespace
/// prefix without a name after it (`EINVAL`), after [`check_attr_name`].
fn check_xattr_name(name: &[u8]) -> Result<()> {
    check_attr_name(name)?;
    match NAMESPACES.iter().find(|ns| name.starts_with(ns)) {
        None => Err(MetaError::UnsupportedNamespace),
        Some(ns) if name.len() == ns.len() => {
            Err(MetaError::invalid("attribute namespace without a name"))
        }
        Some(_) => Ok(()),
    }
}

impl MetaStore {
    /// Reads an extended attribute.
    pub fn get_xattr(&self, ino: u64, name: &[u8]) -> Result<Vec<u8>> {
        check_xattr_name(name)?;
        self.read(|tx| {
            inode(tx, ino)?;
            tx.get_xattr(ino, name)?.ok_or(MetaError::NoAttribute)
        })
    }

    /// Sets an extended attribute, honouring `flags`.
    pub fn set_xattr(&self, ino: u64, name: &[u8], value: &[u8], flags: XattrFlags) -> Result<()> {
        check_xattr_name(name)?;
        if value.len() > XATTR_VALUE_MAX {
            return Err(MetaError::ValueTooLarge);
        }
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            let exists = tx.get_xattr(ino, name)?.is_some();
            match flags {
                XattrFlags::Create | XattrFlags::Both if exists => return Err(MetaError::Exists),
                XattrFlags::Replace | XattrFlags::Both if !exists => {
                    return Err(MetaError::NoAttribute)
                }
                _ => {}
            }
            tx.set_xattr(ino, name, value)?;
            row.attr.ctime = Timespec::now();
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

    /// Whether any inode has an extended attribute called `name` (the file layer asks once per
    /// mount for `security.capability`, which the kernel asks about before a file's first
    /// write).
    pub fn xattr_name_in_use(&self, name: &[u8]) -> Result<bool> {
        self.read(|tx| tx.xattr_name_in_use(name))
    }

    /// Removes an extended attribute.
    pub fn remove_xattr(&self, ino: u64, name: &[u8]) -> Result<()> {
        check_xattr_name(name)?;
        self.write(|tx| {
            let mut row = inode(tx, ino)?;
            if !tx.delete_xattr(ino, name)? {
                return Err(MetaError::NoAttribute);
            }
            row.attr.ctime = Timespec::now();
            tx.put_inode(&row)
        })
    }
}
