//! Requests read from `/dev/fuse` by the FUSE library: each method hands its decoded arguments
//! to the [handler](super::requests) of the request, with the library's reply.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::time::SystemTime;

use fuser::{
    BsdFileFlags, FileHandle, Filesystem, INodeNo, KernelConfig, LockOwner, OpenFlags, RenameFlags,
    ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry,
    ReplyLock, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request, TimeOrNow,
    WriteFlags,
};
use presso_meta::SetAttr;

use super::convert::{caller, time_or_now, timespec};
use super::{configure_kernel, requests, PressoFs};

impl Filesystem for PressoFs {
    fn init(&mut self, _req: &Request, config: &mut KernelConfig) -> std::io::Result<()> {
        // FUSE over io_uring is offered when the kernel lists it; its rings are made before
        // the daemon asks for it (see `PressoFs::prepare_ring`).
        let offered = config
            .capabilities()
            .contains(fuser::InitFlags::FUSE_OVER_IO_URING);
        let ring = self.prepare_ring(offered);
        configure_kernel(config, self.shared(), ring);
        Ok(())
    }

    fn destroy(&mut self) {
        PressoFs::destroy(self)
    }

    fn lookup(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEntry) {
        PressoFs::lookup(self, parent.0, name.as_bytes(), reply)
    }

    fn getattr(&self, _req: &Request, ino: INodeNo, _fh: Option<FileHandle>, reply: ReplyAttr) {
        PressoFs::getattr(self, ino.0, reply)
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
        PressoFs::setattr(self, caller(req), ino.0, set, reply)
    }

    fn readlink(&self, _req: &Request, ino: INodeNo, reply: ReplyData) {
        PressoFs::readlink(self, ino.0, reply)
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
        let name = name.as_bytes();
        PressoFs::mknod(self, caller(req), parent.0, name, mode, umask, rdev, reply)
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
        let name = name.as_bytes();
        PressoFs::mkdir(self, caller(req), parent.0, name, mode, umask, reply)
    }

    fn unlink(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        PressoFs::unlink(self, parent.0, name.as_bytes(), reply)
    }

    fn rmdir(&self, _req: &Request, parent: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        PressoFs::rmdir(self, parent.0, name.as_bytes(), reply)
    }

    fn symlink(
        &self,
        req: &Request,
        parent: INodeNo,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let (name, target) = (link_name.as_bytes(), target.as_os_str().as_bytes());
        PressoFs::symlink(self, caller(req), parent.0, name, target, reply)
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
        PressoFs::rename(
            self,
            parent.0,
            name,
            newparent.0,
            newname,
            flags.bits(),
            reply,
        )
    }

    fn link(
        &self,
        _req: &Request,
        ino: INodeNo,
        newparent: INodeNo,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        PressoFs::link(self, ino.0, newparent.0, newname.as_bytes(), reply)
    }

    fn open(&self, _req: &Request, ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        PressoFs::open(self, ino.0, reply)
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
        PressoFs::read(self, ino.0, offset, size, reply)
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
        let how = requests::WriteKind {
            unprivileged: write_flags.contains(WriteFlags::FUSE_WRITE_KILL_SUIDGID),
            from_cache: write_flags.contains(WriteFlags::FUSE_WRITE_CACHE),
        };
        PressoFs::write(self, caller(req), ino.0, offset, data, how, reply)
    }

    fn flush(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        owner: LockOwner,
        reply: ReplyEmpty,
    ) {
        PressoFs::flush(self, ino.0, owner.0, reply)
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
        PressoFs::release(self, ino.0, fh.0, lock_owner.map(|o| o.0), reply)
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
        PressoFs::getlk(self, ino.0, lock_owner.0, start, end, typ, pid, reply)
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
        let owner = lock_owner.0;
        PressoFs::setlk(self, ino.0, owner, start, end, typ, pid, sleep, reply)
    }

    fn fsync(
        &self,
        _req: &Request,
        ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        PressoFs::fsync(self, ino.0, reply)
    }

    fn fsyncdir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        _fh: FileHandle,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        PressoFs::fsyncdir(self, reply)
    }

    fn opendir(&self, _req: &Request, _ino: INodeNo, _flags: OpenFlags, reply: ReplyOpen) {
        PressoFs::opendir(self, reply)
    }

    fn releasedir(
        &self,
        _req: &Request,
        _ino: INodeNo,
        fh: FileHandle,
        _flags: OpenFlags,
        reply: ReplyEmpty,
    ) {
        PressoFs::releasedir(self, fh.0, reply)
    }

    fn readdir(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectory,
    ) {
        PressoFs::readdir(self, ino.0, fh.0, offset, reply)
    }

    fn readdirplus(
        &self,
        _req: &Request,
        ino: INodeNo,
        fh: FileHandle,
        offset: u64,
        reply: ReplyDirectoryPlus,
    ) {
        PressoFs::readdirplus(self, ino.0, fh.0, offset, reply)
    }

    fn statfs(&self, _req: &Request, _ino: INodeNo, reply: ReplyStatfs) {
        PressoFs::statfs(self, reply)
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
        PressoFs::setxattr(self, ino.0, name.as_bytes(), value, flags, reply)
    }

    fn getxattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, size: u32, reply: ReplyXattr) {
        PressoFs::getxattr(self, ino.0, name.as_bytes(), size, reply)
    }

    fn listxattr(&self, req: &Request, ino: INodeNo, size: u32, reply: ReplyXattr) {
        PressoFs::listxattr(self, caller(req), ino.0, size, reply)
    }

    fn removexattr(&self, _req: &Request, ino: INodeNo, name: &OsStr, reply: ReplyEmpty) {
        PressoFs::removexattr(self, ino.0, name.as_bytes(), reply)
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
        let name = name.as_bytes();
        PressoFs::create(self, caller(req), parent.0, name, mode, umask, reply)
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
        PressoFs::fallocate(self, caller(req), ino.0, offset, length, mode, reply)
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
        PressoFs::lseek(self, ino.0, offset, whence, reply)
    }
}
