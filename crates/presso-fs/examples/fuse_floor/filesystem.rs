//! The floor's answers to the kernel: each request done on the table and replied to.

use std::ffi::OsStr;
use std::fs::OpenOptions;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::FileExt;
use std::path::Path;
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileAttr, FileHandle, FileType, Filesystem, FopenFlags, Generation,
    INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyOpen, ReplyStatfs, ReplyWrite,
    ReplyXattr, Request, TimeOrNow,
};
use presso_fs::fuse::{configure_kernel, DEFAULT_CACHE_TIMEOUT};

use crate::table::{io_errno, new_attr, now, Floor};

const TTL: Duration = DEFAULT_CACHE_TIMEOUT;

fn reply_entry(reply: ReplyEntry, made: Result<FileAttr, Errno>) {
    match made {
        Ok(a) => reply.entry(&TTL, &a, Generation(0)),
        Err(e) => reply.error(e),
    }
}

fn reply_empty(reply: ReplyEmpty, done: Result<(), Errno>) {
    match done {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(e),
    }
}

fn at(t: TimeOrNow) -> SystemTime {
    match t {
        TimeOrNow::SpecificTime(t) => t,
        TimeOrNow::Now => now(),
    }
}

impl Filesystem for Floor {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        configure_kernel(config, false, false);
        Ok(())
    }

    fn lookup(&self, req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        let t = self.table.lock();
        let found = t
            .nodes
            .get(&parent.0)
            .and_then(|p| p.children.get(name.as_bytes()))
            .and_then(|i| t.nodes.get(i));
        match found {
            Some(n) => reply.entry(&TTL, &n.attr, Generation(0)),
            // Inode 0: a negative entry the kernel keeps, as Presso answers.
            None => {
                let mut none = new_attr(0, FileType::RegularFile, 0, req);
                none.nlink = 0;
                reply.entry(&TTL, &none, Generation(0))
            }
        }
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        match self.attr_of(ino.0) {
            Ok(a) => reply.attr(&TTL, &a),
            Err(e) => reply.error(e),
        }
    }

    fn setattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let mut t = self.table.lock();
        let Some(node) = t.nodes.get_mut(&ino.0) else {
            // The kernel writes a removed file's times back when it drops the inode.
            let mut gone = new_attr(ino.0, FileType::RegularFile, 0, _req);
            gone.nlink = 0;
            return reply.attr(&TTL, &gone);
        };
        if let Some(size) = size {
            let resized = match &node.file {
                Some(f) => f.set_len(size),
                None => OpenOptions::new()
                    .write(true)
                    .open(self.path(ino.0))
                    .and_then(|f| f.set_len(size)),
            };
            if let Err(e) = resized {
                return reply.error(io_errno(&e));
            }
            node.attr.size = size;
            node.attr.blocks = size.div_ceil(512);
            node.attr.mtime = now();
        }
        if let Some(mode) = mode {
            node.attr.perm = (mode & 0o7777) as u16;
        }
        if let Some(uid) = uid {
            node.attr.uid = uid;
        }
        if let Some(gid) = gid {
            node.attr.gid = gid;
        }
        if let Some(a) = atime {
            node.attr.atime = at(a);
        }
        if let Some(m) = mtime {
            node.attr.mtime = at(m);
        }
        node.attr.ctime = now();
        reply.attr(&TTL, &node.attr)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        let t = self.table.lock();
        match t.nodes.get(&ino.0) {
            Some(n) if n.attr.kind == FileType::Symlink => reply.data(&n.target),
            Some(_) => reply.error(Errno::EINVAL),
            None => reply.error(Errno::ENOENT),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _rdev: u32,
        reply: ReplyEntry,
    ) {
        let kind = match mode & libc::S_IFMT {
            libc::S_IFREG => FileType::RegularFile,
            libc::S_IFIFO => FileType::NamedPipe,
            _ => return reply.error(Errno::EPERM),
        };
        let perm = (mode & 0o7777 & !umask) as u16;
        reply_entry(reply, self.make(req, parent.0, name, kind, perm, b""));
    }

    fn mkdir(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let perm = (mode & 0o7777 & !umask) as u16;
        let made = self.make(req, parent.0, name, FileType::Directory, perm, b"");
        reply_entry(reply, made);
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.remove(parent.0, name, false));
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        reply_empty(reply, self.remove(parent.0, name, true));
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let target = target.as_os_str().as_bytes();
        let made = self.make(req, parent.0, link_name, FileType::Symlink, 0o777, target);
        reply_entry(reply, made);
    }

    fn rename(
        &self,
        _req: &Request,
        parent: INodeNo,
        name: &OsStr,
        newparent: INodeNo,
        newname: &OsStr,
        flags: RenameFlags,
        reply: ReplyEmpty,
    ) {
        if !(flags.is_empty() || flags == RenameFlags::RENAME_NOREPLACE) {
            return reply.error(Errno::EINVAL);
        }
        let mut t = self.table.lock();
        let moved = (|| {
            let ino = *t
                .nodes
                .get(&parent.0)
                .and_then(|p| p.children.get(name.as_bytes()))
                .ok_or(Errno::ENOENT)?;
            let is_dir = t.nodes[&ino].attr.kind == FileType::Directory;
            let np = t.nodes.get(&newparent.0).ok_or(Errno::ENOENT)?;
            let old = np.children.get(newname.as_bytes()).copied();
            if let Some(old) = old {
                if old == ino {
                    return Ok(());
                }
                if flags == RenameFlags::RENAME_NOREPLACE {
                    return Err(Errno::EEXIST);
                }
                let o = &t.nodes[&old];
                match (is_dir, o.attr.kind == FileType::Directory) {
                    (true, false) => return Err(Errno::ENOTDIR),
                    (false, true) => return Err(Errno::EISDIR),
                    (true, true) if !o.children.is_empty() => return Err(Errno::ENOTEMPTY),
                    _ => {}
                }
            }
            let stamp = now();
            let p = t.nodes.get_mut(&parent.0).expect("looked up above");
            p.children.remove(name.as_bytes());
            p.attr.mtime = stamp;
            p.attr.ctime = stamp;
            if is_dir {
                p.attr.nlink -= 1;
            }
            let np = t.nodes.get_mut(&newparent.0).expect("looked up above");
            np.children.insert(newname.as_bytes().to_vec(), ino);
            np.attr.mtime = stamp;
            np.attr.ctime = stamp;
            if is_dir {
                np.attr.nlink += 1;
            }
            if let Some(old) = old {
                if is_dir {
                    t.nodes.get_mut(&newparent.0).expect("above").attr.nlink -= 1;
                }
                self.unlinked(&mut t, old);
            }
            Ok(())
        })();
        reply_empty(reply, moved);
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        let mut t = self.table.lock();
        let linked = (|| {
            let np = t.nodes.get(&newparent.0).ok_or(Errno::ENOENT)?;
            if np.children.contains_key(newname.as_bytes()) {
                return Err(Errno::EEXIST);
            }
            let node = t.nodes.get_mut(&ino.0).ok_or(Errno::ENOENT)?;
            node.attr.nlink += 1;
            node.attr.ctime = now();
            let attr = node.attr;
            let np = t.nodes.get_mut(&newparent.0).expect("looked up above");
            np.children.insert(newname.as_bytes().to_vec(), ino.0);
            np.attr.mtime = now();
            Ok(attr)
        })();
        reply_entry(reply, linked);
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        match self.open_file(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), FopenFlags::empty()),
            Err(e) => reply.error(e),
        }
    }

    fn read(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        size: u32,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyData,
    ) {
        let read = self.file(ino.0).and_then(|f| {
            let mut buf = vec![0; size as usize];
            let mut n = 0;
            while n < buf.len() {
                match f.read_at(&mut buf[n..], offset + n as u64) {
                    Ok(0) => break,
                    Ok(k) => n += k,
                    Err(e) => return Err(io_errno(&e)),
                }
            }
            buf.truncate(n);
            Ok(buf)
        });
        match read {
            Ok(b) => reply.data(&b),
            Err(e) => reply.error(e),
        }
    }

    fn write(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        _write_flags: fuser::WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let written = self
            .file(ino.0)
            .and_then(|f| f.write_all_at(data, offset).map_err(|e| io_errno(&e)));
        if let Err(e) = written {
            return reply.error(e);
        }
        let mut t = self.table.lock();
        if let Some(node) = t.nodes.get_mut(&ino.0) {
            let end = offset + data.len() as u64;
            if end > node.attr.size {
                node.attr.size = end;
                node.attr.blocks = end.div_ceil(512);
            }
        }
        reply.written(data.len() as u32)
    }

    fn flush(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        reply.ok()
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        let mut t = self.table.lock();
        if let Some(node) = t.nodes.get_mut(&ino.0) {
            node.opens = node.opens.saturating_sub(1);
            if node.opens == 0 {
                node.file = None;
                if node.attr.nlink == 0 {
                    let _ = std::fs::remove_file(self.path(ino.0));
                    t.nodes.remove(&ino.0);
                }
            }
        }
        reply.ok()
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        let synced = self
            .file(ino.0)
            .and_then(|f| f.sync_data().map_err(|e| io_errno(&e)));
        reply_empty(reply, synced)
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(0), FopenFlags::empty());
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        match self.listing(ino.0, offset) {
            Ok(entries) => {
                for (child, cookie, name, attr) in entries {
                    if reply.add(INodeNo(child), cookie, attr.kind, OsStr::from_bytes(&name)) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        match self.listing(ino.0, offset) {
            Ok(entries) => {
                for (child, cookie, name, attr) in entries {
                    let name = OsStr::from_bytes(&name);
                    if reply.add(INodeNo(child), cookie, name, &TTL, &attr, Generation(0)) {
                        break;
                    }
                }
                reply.ok()
            }
            Err(e) => reply.error(e),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        reply.statfs(1 << 30, 1 << 29, 1 << 29, 1 << 20, 1 << 19, 4096, 255, 4096);
    }

    fn getxattr(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _name: &OsStr,
        _size: u32,
        reply: ReplyXattr,
    ) {
        reply.error(Errno::ENODATA)
    }

    fn listxattr(&self, _req: &Request, _ino: INodeNo, size: u32, reply: ReplyXattr) {
        if size == 0 {
            reply.size(0)
        } else {
            reply.data(&[])
        }
    }

    fn create(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let perm = (mode & 0o7777 & !umask) as u16;
        let made = self
            .make(req, parent.0, name, FileType::RegularFile, perm, b"")
            .and_then(|a| Ok((self.open_file(a.ino.0)?, a)));
        match made {
            Ok((fh, a)) => {
                reply.created(&TTL, &a, Generation(0), FileHandle(fh), FopenFlags::empty())
            }
            Err(e) => reply.error(e),
        }
    }
}
