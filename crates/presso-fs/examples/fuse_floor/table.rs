//! The floor's in-memory table of names and attributes, and its namespace operations; each
//! regular file's bytes are in a file of its own in the data directory.

use std::collections::{BTreeMap, HashMap};
use std::ffi::OsStr;
use std::fs::{File, OpenOptions};
use std::os::unix::ffi::OsStrExt;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::SystemTime;

use fuser::{Errno, FileAttr, FileType, INodeNo, Request};
use parking_lot::Mutex;

pub(crate) const ROOT: u64 = 1;

pub(crate) struct Node {
    pub(crate) attr: FileAttr,
    /// A directory's names.
    pub(crate) children: BTreeMap<Vec<u8>, u64>,
    /// A symbolic link's target.
    pub(crate) target: Vec<u8>,
    /// The bytes of a regular file while it is open.
    pub(crate) file: Option<Arc<File>>,
    pub(crate) opens: u32,
}

pub(crate) struct Table {
    pub(crate) nodes: HashMap<u64, Node>,
    pub(crate) next_ino: u64,
}

/// A listed entry: its inode, the cookie after it, its name and attributes.
pub(crate) type Listed = (u64, u64, Vec<u8>, FileAttr);

pub(crate) struct Floor {
    pub(crate) table: Mutex<Table>,
    pub(crate) data: PathBuf,
}

pub(crate) fn now() -> SystemTime {
    SystemTime::now()
}

pub(crate) fn new_attr(ino: u64, kind: FileType, perm: u16, req: &Request) -> FileAttr {
    let t = now();
    FileAttr {
        ino: INodeNo(ino),
        size: 0,
        blocks: 0,
        atime: t,
        mtime: t,
        ctime: t,
        crtime: t,
        kind,
        perm,
        nlink: if kind == FileType::Directory { 2 } else { 1 },
        uid: req.uid(),
        gid: req.gid(),
        rdev: 0,
        blksize: 128 << 10,
        flags: 0,
    }
}

pub(crate) fn io_errno(e: &std::io::Error) -> Errno {
    Errno::from_i32(e.raw_os_error().unwrap_or(libc::EIO))
}

impl Floor {
    pub(crate) fn path(&self, ino: u64) -> PathBuf {
        self.data.join(ino.to_string())
    }

    /// Makes a node named `name` in `parent`; regular files get their (empty) data file.
    pub(crate) fn make(
        &self,
        req: &Request,
        parent: u64,
        name: &OsStr,
        kind: FileType,
        perm: u16,
        target: &[u8],
    ) -> Result<FileAttr, Errno> {
        let mut t = self.table.lock();
        let ino = t.next_ino;
        let dir = t.nodes.get(&parent).ok_or(Errno::ENOENT)?;
        if dir.attr.kind != FileType::Directory {
            return Err(Errno::ENOTDIR);
        }
        if dir.children.contains_key(name.as_bytes()) {
            return Err(Errno::EEXIST);
        }
        if kind == FileType::RegularFile {
            File::create(self.path(ino)).map_err(|e| io_errno(&e))?;
        }
        t.next_ino += 1;
        let mut attr = new_attr(ino, kind, perm, req);
        attr.size = target.len() as u64;
        t.nodes.insert(
            ino,
            Node {
                attr,
                children: BTreeMap::new(),
                target: target.to_vec(),
                file: None,
                opens: 0,
            },
        );
        let dir = t.nodes.get_mut(&parent).expect("looked up above");
        dir.children.insert(name.as_bytes().to_vec(), ino);
        dir.attr.mtime = now();
        dir.attr.ctime = dir.attr.mtime;
        if kind == FileType::Directory {
            dir.attr.nlink += 1;
        }
        Ok(attr)
    }

    /// Drops one link of `ino`; a node with no link and no open handle is forgotten.
    pub(crate) fn unlinked(&self, t: &mut Table, ino: u64) {
        let Some(node) = t.nodes.get_mut(&ino) else {
            return;
        };
        node.attr.nlink = node.attr.nlink.saturating_sub(1);
        node.attr.ctime = now();
        if node.attr.kind == FileType::Directory {
            node.attr.nlink = 0;
        }
        if node.attr.nlink == 0 && node.opens == 0 {
            if node.attr.kind == FileType::RegularFile {
                let _ = std::fs::remove_file(self.path(ino));
            }
            t.nodes.remove(&ino);
        }
    }

    pub(crate) fn remove(&self, parent: u64, name: &OsStr, dir: bool) -> Result<(), Errno> {
        let mut t = self.table.lock();
        let p = t.nodes.get(&parent).ok_or(Errno::ENOENT)?;
        let ino = *p.children.get(name.as_bytes()).ok_or(Errno::ENOENT)?;
        let node = t.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        match (dir, node.attr.kind == FileType::Directory) {
            (true, false) => return Err(Errno::ENOTDIR),
            (false, true) => return Err(Errno::EISDIR),
            (true, true) if !node.children.is_empty() => return Err(Errno::ENOTEMPTY),
            _ => {}
        }
        let p = t.nodes.get_mut(&parent).expect("looked up above");
        p.children.remove(name.as_bytes());
        p.attr.mtime = now();
        p.attr.ctime = p.attr.mtime;
        if dir {
            p.attr.nlink -= 1;
        }
        self.unlinked(&mut t, ino);
        Ok(())
    }

    pub(crate) fn attr_of(&self, ino: u64) -> Result<FileAttr, Errno> {
        let t = self.table.lock();
        t.nodes.get(&ino).map(|n| n.attr).ok_or(Errno::ENOENT)
    }

    pub(crate) fn open_file(&self, ino: u64) -> Result<u64, Errno> {
        let mut t = self.table.lock();
        let node = t.nodes.get_mut(&ino).ok_or(Errno::ENOENT)?;
        if node.file.is_none() {
            let f = OpenOptions::new()
                .read(true)
                .write(true)
                .open(self.path(ino))
                .map_err(|e| io_errno(&e))?;
            node.file = Some(Arc::new(f));
        }
        node.opens += 1;
        Ok(ino)
    }

    pub(crate) fn file(&self, ino: u64) -> Result<Arc<File>, Errno> {
        let t = self.table.lock();
        let node = t.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        node.file.clone().ok_or(Errno::EBADF)
    }

    /// The entries of directory `ino` from position `offset`: `.`, `..`, then its names.
    pub(crate) fn listing(&self, ino: u64, offset: u64) -> Result<Vec<Listed>, Errno> {
        let t = self.table.lock();
        let dir = t.nodes.get(&ino).ok_or(Errno::ENOENT)?;
        let dots = [(ino, b".".to_vec()), (ino, b"..".to_vec())];
        let names = dir.children.iter().map(|(n, i)| (*i, n.clone()));
        Ok(dots
            .into_iter()
            .chain(names)
            .enumerate()
            .skip(offset as usize)
            .filter_map(|(i, (child, name))| {
                let attr = t.nodes.get(&child)?.attr;
                Some((child, i as u64 + 1, name, attr))
            })
            .collect())
    }
}
