//! The kernel's requests, one method each: convert the arguments, call the [`Vfs`], reply.
//! Which requests run inline and which go to the worker pool is the [parent module](super)'s
//! rule.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use fuser::{
    BsdFileFlags, Errno, FileHandle, Filesystem, Generation, INodeNo, KernelConfig, LockOwner,
    OpenFlags, RenameFlags, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus,
    ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr,
    Request, TimeOrNow, WriteFlags,
};
use presso_meta::{FileKind, NewNode, SetAttr, Timespec};

use super::convert::{
    attr, caller, empty, entry, errno, file_attr, kind, looked_up, removed_file_attr, time,
    time_or_now, timespec, unknown_attr, xattr_bytes,
};
use super::{configure_kernel, PressoFs};
use crate::error::FsError;
use crate::vfs::Vfs;

impl Filesystem for PressoFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        configure_kernel(config, self.shared());
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.vfs.sync_all() {
            crate::log!("presso: flushing at unmount failed: {e}");
        }
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        looked_up(reply, self.ttl, self.vfs.lookup(parent.0, name.as_bytes()))
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        attr(reply, self.ttl, self.vfs.getattr(ino.0))
    }

    fn setattr(
        &self,
        req: &Request,
        ino: INodeNo,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        ctime: Option<SystemTime>,
        _fh: Option<FileHandle>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<BsdFileFlags>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
            // Sent with the writeback cache, whose kernel keeps a written file's times and
            // sends its own change time with every SETATTR; taking it lets a request that
            // changes nothing else (tar's chown to the owner a file has) write nothing.
            ctime: ctime.map(timespec),
        };
        let times_only = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none();
        match self.vfs.setattr_by(ino.0, set, caller(req)) {
            // With the writeback cache the kernel keeps a written file's times and sends them
            // when it writes the inode back (at sync), also for a file removed since, which no
            // name or open file reaches any more (an open one is kept until its release). There
            // is nothing left to update; failing would fail the caller's syncfs.
            Err(e) if times_only && e.errno() == libc::ENOENT => {
                let now = time(Timespec::now());
                let at = |t: Option<TimeOrNow>| t.map_or(now, |t| time(time_or_now(t)));
                reply.attr(&self.ttl, &removed_file_attr(ino.0, at(atime), at(mtime)));
            }
            result => attr(reply, self.ttl, result),
        }
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        match self.vfs.readlink(ino.0) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &self,
        req: &Request,
        parent: INodeNo,
        name: &OsStr,
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: ReplyEntry,
    ) {
        let k = match mode & libc::S_IFMT {
            libc::S_IFREG => FileKind::File,
            libc::S_IFIFO => FileKind::Fifo,
            libc::S_IFSOCK => FileKind::Socket,
            libc::S_IFCHR => FileKind::CharDevice,
            libc::S_IFBLK => FileKind::BlockDevice,
            _ => return reply.error(Errno::EINVAL),
        };
        let perm = mode & 0o7777 & !umask;
        let node = NewNode::special(k, perm, req.uid(), req.gid(), rdev.into());
        let made = node
            .map_err(FsError::from)
            .and_then(|node| self.vfs.make_node(parent.0, name.as_bytes(), &node));
        entry(reply, self.ttl, made)
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
        let node = NewNode::dir(mode & 0o7777 & !umask, req.uid(), req.gid());
        entry(
            reply,
            self.ttl,
            self.vfs.make_node(parent.0, name.as_bytes(), &node),
        )
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.unlink(parent.0, name.as_bytes()))
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.rmdir(parent.0, name.as_bytes()))
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let node = NewNode::symlink(target.as_os_str().as_bytes(), req.uid(), req.gid());
        let made = self.vfs.make_node(parent.0, link_name.as_bytes(), &node);
        entry(reply, self.ttl, made)
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
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        match flags {
            f if f.is_empty() => {
                empty(reply, self.vfs.rename(parent.0, name, newparent.0, newname))
            }
            RenameFlags::RENAME_NOREPLACE => empty(
                reply,
                self.vfs
                    .rename_noreplace(parent.0, name, newparent.0, newname),
            ),
            RenameFlags::RENAME_EXCHANGE => empty(
                reply,
                self.vfs
                    .rename_exchange(parent.0, name, newparent.0, newname),
            ),
            // Any other flag (RENAME_WHITEOUT): callers fall back on EINVAL.
            _ => reply.error(Errno::EINVAL),
        }
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(
            reply,
            self.ttl,
            self.vfs.link(ino.0, newparent.0, newname.as_bytes()),
        )
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        self.forget_cached_attributes(ino);
        match self.vfs.open(ino.0) {
            Ok(fh) => reply.opened(FileHandle(fh), self.file_cache()),
            Err(e) => reply.error(errno(&e)),
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
        self.spawn(move |vfs| match vfs.read(ino.0, offset, size) {
            Ok(data) => reply.data(data.as_ref()),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn write(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        data: &[u8],
        write_flags: WriteFlags,
        _flags: OpenFlags,
        _lock_owner: Option<LockOwner>,
        reply: ReplyWrite,
    ) {
        let unprivileged = write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID);
        match self
            .vfs
            .write_by(ino.0, offset, data, unprivileged, caller(req))
        {
            Ok((n, submission)) => {
                reply.written(n as u32);
                submission.submit();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        if !self.shared() {
            // `close()` waits for this reply; the file's last records are routed (and a short
            // one compressed) after it.
            return match self.vfs.flush_deferred(ino.0) {
                Ok(submission) => {
                    reply.ok();
                    submission.submit();
                }
                Err(e) => reply.error(errno(&e)),
            };
        }
        // A shared pool's close commits the file and drops the closing process's locks: work
        // for a worker, not for a session thread.
        self.spawn(move |vfs| {
            let unlocked = vfs.unlock_owner(ino.0, owner.0);
            empty(reply, vfs.flush(ino.0).and(unlocked));
        });
    }

    fn release(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        lock_owner: Option<LockOwner>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        // The last close of an open file ends its `flock`.
        let unlocked = lock_owner.map_or(Ok(()), |o| self.vfs.unlock_owner(ino.0, o.0));
        match self.vfs.release_deferred(ino.0, fh.0) {
            Ok(submission) => {
                empty(reply, unlocked);
                submission.submit();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn getlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: ReplyLock,
    ) {
        self.spawn(
            move |vfs| match vfs.getlk(ino.0, lock_owner.0, (start, end), typ, pid) {
                Ok((start, end, typ, pid)) => reply.locked(start, end, typ, pid),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    fn setlk(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        lock_owner: LockOwner,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: ReplyEmpty,
    ) {
        let task = move |vfs: Arc<Vfs>| {
            empty(
                reply,
                vfs.setlk(ino.0, lock_owner.0, (start, end), typ, pid, sleep),
            )
        };
        if !sleep {
            return self.spawn(task);
        }
        // A wait for a lock may last: it gets a thread of its own, so that waiters never hold
        // up the workers the lock's holder needs to get on and let go of it.
        let vfs = self.vfs.clone();
        let _ = std::thread::Builder::new()
            .name("presso-lockwait".into())
            .spawn(move || task(vfs));
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |vfs| empty(reply, vfs.fsync(ino.0)));
    }

    // Without this the library answers ENOSYS, and the kernel then stops sending FSYNCDIR and
    // reports success for every directory fsync without anything being made durable.
    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |vfs| empty(reply, vfs.fsync_dir()));
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        reply.opened(FileHandle(self.vfs.opendir()), self.listing_cache());
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        self.vfs.releasedir(fh.0);
        reply.ok();
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self
            .vfs
            .readdir_from(ino.0, fh.0, offset, |ino, cookie, k, name| {
                reply.add(INodeNo(ino), cookie, kind(k), OsStr::from_bytes(name))
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        mut reply: ReplyDirectoryPlus,
    ) {
        let ttl = self.ttl;
        let listed = self
            .vfs
            .readdir_plus_from(ino.0, fh.0, offset, |ino, k, a, cookie, name| {
                let name = OsStr::from_bytes(name);
                let (attr, ttl) = match a {
                    Some(a) => (file_attr(a), ttl),
                    // Valid for no time: the name is listed, and any use of it asks the
                    // daemon again (and fails, as a lookup of a damaged name does). Node 0
                    // would hide the name: the library lists entries under their node.
                    None => (unknown_attr(ino, k), Duration::ZERO),
                };
                reply.add(INodeNo(ino), cookie, name, &ttl, &attr, Generation(0))
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        let s = self.vfs.statfs();
        reply.statfs(
            s.blocks,
            s.blocks_free,
            s.blocks_avail,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.block_size,
        );
    }

    fn setxattr(
        &self,
        _req: &Request,
        ino: INodeNo,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        empty(
            reply,
            self.vfs.setxattr(ino.0, name.as_bytes(), value, flags),
        )
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        xattr_bytes(reply, size, self.vfs.getxattr(ino.0, name.as_bytes()))
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        // The names, each followed by a NUL, as listxattr(2) returns them.
        let listed = self.vfs.listxattr(ino.0, caller(req)).map(|names| {
            names
                .into_iter()
                .flat_map(|mut n| {
                    n.push(0);
                    n
                })
                .collect()
        });
        xattr_bytes(reply, size, listed)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.removexattr(ino.0, name.as_bytes()))
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
        let node = NewNode::file(mode & 0o7777 & !umask, req.uid(), req.gid());
        let result = self
            .vfs
            .make_node(parent.0, name.as_bytes(), &node)
            .and_then(|a| Ok((self.vfs.open_created(parent.0, &a)?, a)));
        match result {
            Ok((fh, a)) => reply.created(
                &self.ttl,
                &file_attr(&a),
                Generation(0),
                FileHandle(fh),
                self.file_cache(),
            ),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &self,
        req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: u64,
        length: u64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if length == 0 {
            return reply.error(Errno::EINVAL);
        }
        let caller = caller(req);
        self.spawn(move |vfs| empty(reply, vfs.fallocate_by(ino.0, offset, length, mode, caller)));
    }

    fn lseek(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        match self.vfs.seek(ino.0, offset as u64, whence) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
