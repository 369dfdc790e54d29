//! The FUSE adapter: each method converts arguments, calls the [`Vfs`], and replies. Errors are
//! mapped to errno here and nowhere else ([`FsError::errno`]).
//!
//! The session thread runs namespace operations, writes, flushes and releases inline (they only
//! touch metadata, copy into record buffers or hand records to the engine); reads, fsync and
//! fallocate, which may wait for decodes or commits, go to a small thread pool with their reply,
//! so one slow decode never stalls the mount. A hand-off costs a thread wake-up, which on a
//! virtual machine can cost more than the request itself: serving a close (FLUSH, then RELEASE)
//! inline made creating small files 19% faster there (docs/benchmarks.md).

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;
use std::sync::Arc;
use std::time::{Duration, SystemTime};

use crossbeam_channel::{unbounded, Sender};
use fuser::{
    Filesystem, KernelConfig, MountOption, ReplyAttr, ReplyCreate, ReplyData, ReplyDirectory,
    ReplyEmpty, ReplyEntry, ReplyLseek, ReplyOpen, ReplyStatfs, ReplyWrite, ReplyXattr, Request,
    TimeOrNow,
};
use presso_meta::{FileKind, NewNode, SetAttr, Timespec};

mod convert;

use crate::error::FsError;
use crate::vfs::Vfs;
use convert::{
    attr, caller, empty, entry, errno, file_attr, kind, looked_up, removed_file_attr, time,
    time_or_now, xattr_bytes,
};

/// How long the kernel may keep names and attributes without asking again, by default. One
/// daemon owns a pool and every change to it passes through the kernel, which updates or drops
/// what it cached as it forwards the change, so nothing it keeps goes stale while mounted: the
/// timeout only bounds how long memory of a name is kept, like a local file system's caches.
pub const DEFAULT_CACHE_TIMEOUT: Duration = Duration::from_secs(3600);
/// INIT flag of protocol 7.33 (the FUSE library here speaks 7.31, whose flag word already has
/// room for it): the file system, not the kernel, drops privileges on write, truncate and chown.
const FUSE_HANDLE_KILLPRIV_V2: u32 = 1 << 28;
/// WRITE flag under [`FUSE_HANDLE_KILLPRIV_V2`]: the writer lacks CAP_FSETID, so the write must
/// drop the file's privileges.
const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;

type Task = Box<dyn FnOnce() + Send>;

/// The `fuser` file system of a mounted pool.
pub struct PressoFs {
    vfs: Arc<Vfs>,
    tasks: Sender<Task>,
    /// How long the kernel may cache names and attributes.
    ttl: Duration,
}

impl PressoFs {
    /// Wraps `vfs`, with `threads` workers for blocking requests; the kernel may cache names
    /// and attributes for `ttl`.
    pub fn new(vfs: Arc<Vfs>, threads: usize, ttl: Duration) -> PressoFs {
        let (tx, rx) = unbounded::<Task>();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("presso-fuse{i}"))
                .spawn(move || {
                    for task in rx {
                        // A panicking request must not take the worker with it: the request
                        // gets EIO (its reply is dropped) and the next one is served.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                    }
                });
        }
        PressoFs {
            vfs,
            tasks: tx,
            ttl,
        }
    }

    fn spawn(&self, task: impl FnOnce(Arc<Vfs>) + Send + 'static) {
        let vfs = self.vfs.clone();
        let _ = self.tasks.send(Box::new(move || task(vfs)));
    }
}

/// Mount options for a pool: the file-system name is the pool path, permissions are checked by
/// the kernel, and the mount is private to its owner unless `allow_other` is given.
pub fn mount_options(
    pool: &Path,
    allow_other: bool,
    read_only: bool,
    no_exec: bool,
) -> Vec<MountOption> {
    let mut options = vec![
        MountOption::FSName(pool.display().to_string()),
        MountOption::Subtype("presso".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if allow_other {
        options.push(MountOption::AllowOther);
    }
    if no_exec {
        options.push(MountOption::NoExec);
    }
    options.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    options
}

impl Filesystem for PressoFs {
    fn init(&mut self, _req: &Request<'_>, config: &mut KernelConfig) -> Result<(), libc::c_int> {
        let _ = config.set_max_write(1 << 20);
        let _ = config.set_max_readahead(1 << 20);
        // The kernel caches writes and sends them in large batches; reads of cached pages never
        // reach the daemon.
        let _ = config.add_capabilities(fuser::consts::FUSE_WRITEBACK_CACHE);
        let _ = config.add_capabilities(fuser::consts::FUSE_PARALLEL_DIROPS);
        // Suid, sgid and file capabilities are dropped here rather than by the kernel, which
        // would otherwise ask for `security.capability` before every write(2): a round trip
        // that queues behind the writeback the daemon is busy with.
        let _ = config.add_capabilities(FUSE_HANDLE_KILLPRIV_V2);
        let _ = config.set_max_background(64);
        let _ = config.set_congestion_threshold(48);
        Ok(())
    }

    fn destroy(&mut self) {
        if let Err(e) = self.vfs.sync_all() {
            crate::log!("presso: flushing at unmount failed: {e}");
        }
    }

    fn lookup(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEntry) {
        looked_up(reply, self.ttl, self.vfs.lookup(parent, name.as_bytes()))
    }

    fn getattr(&mut self, _req: &Request<'_>, ino: u64, _fh: Option<u64>, reply: ReplyAttr) {
        attr(reply, self.ttl, self.vfs.getattr(ino))
    }

    fn setattr(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        mode: Option<u32>,
        uid: Option<u32>,
        gid: Option<u32>,
        size: Option<u64>,
        atime: Option<TimeOrNow>,
        mtime: Option<TimeOrNow>,
        _ctime: Option<SystemTime>,
        _fh: Option<u64>,
        _crtime: Option<SystemTime>,
        _chgtime: Option<SystemTime>,
        _bkuptime: Option<SystemTime>,
        _flags: Option<u32>,
        reply: ReplyAttr,
    ) {
        let set = SetAttr {
            mode,
            uid,
            gid,
            size,
            atime: atime.map(time_or_now),
            mtime: mtime.map(time_or_now),
        };
        let times_only = mode.is_none() && uid.is_none() && gid.is_none() && size.is_none();
        match self.vfs.setattr_by(ino, set, caller(req)) {
            // With the writeback cache the kernel keeps a written file's times and sends them
            // when it writes the inode back (at sync), also for a file removed since, which no
            // name or open file reaches any more (an open one is kept until its release). There
            // is nothing left to update; failing would fail the caller's syncfs.
            Err(e) if times_only && e.errno() == libc::ENOENT => {
                let now = time(Timespec::now());
                let at = |t: Option<TimeOrNow>| t.map_or(now, |t| time(time_or_now(t)));
                reply.attr(&self.ttl, &removed_file_attr(ino, at(atime), at(mtime)));
            }
            result => attr(reply, self.ttl, result),
        }
    }

    fn readlink(&mut self, _req: &Request<'_>, ino: u64, reply: ReplyData) {
        match self.vfs.readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn mknod(
        &mut self,
        req: &Request<'_>,
        parent: u64,
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
            _ => return reply.error(libc::EINVAL),
        };
        let perm = mode & 0o7777 & !umask;
        let node = NewNode::special(k, perm, req.uid(), req.gid(), rdev.into());
        let made = node
            .map_err(FsError::from)
            .and_then(|node| self.vfs.make_node(parent, name.as_bytes(), &node));
        entry(reply, self.ttl, made)
    }

    fn mkdir(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        reply: ReplyEntry,
    ) {
        let node = NewNode::dir(mode & 0o7777 & !umask, req.uid(), req.gid());
        entry(
            reply,
            self.ttl,
            self.vfs.make_node(parent, name.as_bytes(), &node),
        )
    }

    fn unlink(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.unlink(parent, name.as_bytes()))
    }

    fn rmdir(&mut self, _req: &Request<'_>, parent: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.rmdir(parent, name.as_bytes()))
    }

    fn symlink(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        link_name: &OsStr,
        target: &Path,
        reply: ReplyEntry,
    ) {
        let node = NewNode::symlink(target.as_os_str().as_bytes(), req.uid(), req.gid());
        let made = self.vfs.make_node(parent, link_name.as_bytes(), &node);
        entry(reply, self.ttl, made)
    }

    fn rename(
        &mut self,
        _req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        newparent: u64,
        newname: &OsStr,
        flags: u32,
        reply: ReplyEmpty,
    ) {
        let (name, newname) = (name.as_bytes(), newname.as_bytes());
        match flags {
            0 => empty(reply, self.vfs.rename(parent, name, newparent, newname)),
            libc::RENAME_NOREPLACE => empty(
                reply,
                self.vfs.rename_noreplace(parent, name, newparent, newname),
            ),
            libc::RENAME_EXCHANGE => empty(
                reply,
                self.vfs.rename_exchange(parent, name, newparent, newname),
            ),
            // Any other flag (RENAME_WHITEOUT): callers fall back on EINVAL.
            _ => reply.error(libc::EINVAL),
        }
    }

    fn link(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        newparent: u64,
        newname: &OsStr,
        reply: ReplyEntry,
    ) {
        entry(
            reply,
            self.ttl,
            self.vfs.link(ino, newparent, newname.as_bytes()),
        )
    }

    fn open(&mut self, _req: &Request<'_>, ino: u64, _flags: i32, reply: ReplyOpen) {
        match self.vfs.open(ino) {
            Ok(fh) => reply.opened(fh, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn read(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        size: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyData,
    ) {
        if offset < 0 {
            return reply.error(libc::EINVAL);
        }
        self.spawn(move |vfs| match vfs.read(ino, offset as u64, size) {
            Ok(data) => reply.data(data.as_ref()),
            Err(e) => reply.error(errno(&e)),
        });
    }

    fn write(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        data: &[u8],
        write_flags: u32,
        _flags: i32,
        _lock_owner: Option<u64>,
        reply: ReplyWrite,
    ) {
        if offset < 0 {
            return reply.error(libc::EINVAL);
        }
        let unprivileged = write_flags & FUSE_WRITE_KILL_SUIDGID != 0;
        match self
            .vfs
            .write_by(ino, offset as u64, data, unprivileged, caller(_req))
        {
            Ok(n) => reply.written(n as u32),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn flush(&mut self, _req: &Request<'_>, ino: u64, _fh: u64, _owner: u64, reply: ReplyEmpty) {
        empty(reply, self.vfs.flush(ino));
    }

    fn release(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        _flags: i32,
        _lock_owner: Option<u64>,
        _flush: bool,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.vfs.release(ino, fh));
    }

    fn fsync(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |vfs| empty(reply, vfs.fsync(ino)));
    }

    // Without this the library answers ENOSYS, and the kernel then stops sending FSYNCDIR and
    // reports success for every directory fsync without anything being made durable.
    fn fsyncdir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        _fh: u64,
        _datasync: bool,
        reply: ReplyEmpty,
    ) {
        self.spawn(move |vfs| empty(reply, vfs.fsync_dir()));
    }

    fn opendir(&mut self, _req: &Request<'_>, _ino: u64, _flags: i32, reply: ReplyOpen) {
        reply.opened(self.vfs.opendir(), 0);
    }

    fn releasedir(
        &mut self,
        _req: &Request<'_>,
        _ino: u64,
        fh: u64,
        _flags: i32,
        reply: ReplyEmpty,
    ) {
        self.vfs.releasedir(fh);
        reply.ok();
    }

    fn readdir(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        fh: u64,
        offset: i64,
        mut reply: ReplyDirectory,
    ) {
        let listed = self
            .vfs
            .readdir_from(ino, fh, offset, |ino, cookie, k, name| {
                reply.add(ino, cookie, kind(k), OsStr::from_bytes(name))
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn statfs(&mut self, _req: &Request<'_>, _ino: u64, reply: ReplyStatfs) {
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
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        value: &[u8],
        flags: i32,
        _position: u32,
        reply: ReplyEmpty,
    ) {
        empty(reply, self.vfs.setxattr(ino, name.as_bytes(), value, flags))
    }

    fn getxattr(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        name: &OsStr,
        size: u32,
        reply: ReplyXattr,
    ) {
        xattr_bytes(reply, size, self.vfs.getxattr(ino, name.as_bytes()))
    }

    fn listxattr(&mut self, req: &Request<'_>, ino: u64, size: u32, reply: ReplyXattr) {
        // The names, each followed by a NUL, as listxattr(2) returns them.
        let listed = self.vfs.listxattr(ino, caller(req)).map(|names| {
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

    fn removexattr(&mut self, _req: &Request<'_>, ino: u64, name: &OsStr, reply: ReplyEmpty) {
        empty(reply, self.vfs.removexattr(ino, name.as_bytes()))
    }

    fn create(
        &mut self,
        req: &Request<'_>,
        parent: u64,
        name: &OsStr,
        mode: u32,
        umask: u32,
        _flags: i32,
        reply: ReplyCreate,
    ) {
        let node = NewNode::file(mode & 0o7777 & !umask, req.uid(), req.gid());
        let result = self
            .vfs
            .make_node(parent, name.as_bytes(), &node)
            .and_then(|a| Ok((self.vfs.open_created(parent, &a)?, a)));
        match result {
            Ok((fh, a)) => reply.created(&self.ttl, &file_attr(&a), 0, fh, 0),
            Err(e) => reply.error(errno(&e)),
        }
    }

    fn fallocate(
        &mut self,
        req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        length: i64,
        mode: i32,
        reply: ReplyEmpty,
    ) {
        if offset < 0 || length <= 0 {
            return reply.error(libc::EINVAL);
        }
        let caller = caller(req);
        self.spawn(move |vfs| {
            empty(
                reply,
                vfs.fallocate_by(ino, offset as u64, length as u64, mode, caller),
            )
        });
    }

    fn lseek(
        &mut self,
        _req: &Request<'_>,
        ino: u64,
        _fh: u64,
        offset: i64,
        whence: i32,
        reply: ReplyLseek,
    ) {
        if offset < 0 {
            return reply.error(libc::ENXIO);
        }
        match self.vfs.seek(ino, offset as u64, whence) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}
