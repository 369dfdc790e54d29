//! The kernel's requests, one method each: call the [`Vfs`] and answer through the
//! [reply traits](super::reply), whichever transport carried the request. Which requests run
//! inline and which go to the worker pool is the [parent module](super)'s rule.

use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FopenFlags};
use presso_meta::{FileKind, NewNode, SetAttr, Timespec};

use super::convert::{
    attr, empty, entry, errno, looked_up, removed_file_attr, unknown_attr, xattr_bytes,
};
use super::reply::{
    AttrReply, CreateReply, DataReply, DirPlusReply, DirReply, EmptyReply, EntryReply, LockReply,
    LseekReply, OpenReply, Reply, StatfsReply, WriteReply, XattrReply,
};
use super::PressoFs;
use crate::error::FsError;
use crate::vfs::{Caller, Vfs};

impl PressoFs {
    /// Flushes everything at unmount.
    pub(super) fn destroy(&self) {
        if let Err(e) = self.vfs.sync_all() {
            crate::log!("presso: flushing at unmount failed: {e}");
        }
    }

    pub(super) fn lookup(&self, parent: u64, name: &[u8], reply: impl EntryReply) {
        looked_up(reply, self.ttl, self.vfs.lookup(parent, name))
    }

    pub(super) fn getattr(&self, ino: u64, reply: impl AttrReply) {
        attr(reply, self.ttl, self.vfs.getattr(ino))
    }

    pub(super) fn setattr(&self, caller: Caller, ino: u64, set: SetAttr, reply: impl AttrReply) {
        let times_only =
            set.mode.is_none() && set.uid.is_none() && set.gid.is_none() && set.size.is_none();
        let (atime, mtime) = (set.atime, set.mtime);
        match self.vfs.setattr_by(ino, set, caller) {
            // With the writeback cache the kernel keeps a written file's times and sends them
            // when it writes the inode back (at sync), also for a file removed since, which no
            // name or open file reaches any more (an open one is kept until its release). There
            // is nothing left to update; failing would fail the caller's syncfs.
            Err(e) if times_only && e.errno() == libc::ENOENT => {
                let now = Timespec::now();
                let gone = removed_file_attr(ino, atime.unwrap_or(now), mtime.unwrap_or(now));
                reply.attr(self.ttl, &gone);
            }
            result => attr(reply, self.ttl, result),
        }
    }

    pub(super) fn readlink(&self, ino: u64, reply: impl DataReply) {
        match self.vfs.readlink(ino) {
            Ok(t) => reply.data(&t),
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn mknod(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        rdev: u32,
        reply: impl EntryReply,
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
        let node = NewNode::special(k, perm, caller.uid, caller.gid, rdev.into());
        let made = node
            .map_err(FsError::from)
            .and_then(|node| self.vfs.make_node(parent, name, &node));
        entry(reply, self.ttl, made)
    }

    pub(super) fn mkdir(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        reply: impl EntryReply,
    ) {
        let node = NewNode::dir(mode & 0o7777 & !umask, caller.uid, caller.gid);
        entry(reply, self.ttl, self.vfs.make_node(parent, name, &node))
    }

    pub(super) fn unlink(&self, parent: u64, name: &[u8], reply: impl EmptyReply) {
        empty(reply, self.vfs.unlink(parent, name))
    }

    pub(super) fn rmdir(&self, parent: u64, name: &[u8], reply: impl EmptyReply) {
        empty(reply, self.vfs.rmdir(parent, name))
    }

    pub(super) fn symlink(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        target: &[u8],
        reply: impl EntryReply,
    ) {
        let node = NewNode::symlink(target, caller.uid, caller.gid);
        entry(reply, self.ttl, self.vfs.make_node(parent, name, &node))
    }

    /// RENAME and RENAME2; `flags` as renameat2(2) takes them.
    pub(super) fn rename(
        &self,
        parent: u64,
        name: &[u8],
        newparent: u64,
        newname: &[u8],
        flags: u32,
        reply: impl EmptyReply,
    ) {
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
            _ => reply.error(Errno::EINVAL),
        }
    }

    pub(super) fn link(&self, ino: u64, newparent: u64, newname: &[u8], reply: impl EntryReply) {
        entry(reply, self.ttl, self.vfs.link(ino, newparent, newname))
    }

    pub(super) fn open(&self, ino: u64, reply: impl OpenReply) {
        self.forget_cached_attributes(ino);
        match self.vfs.open(ino) {
            Ok(fh) => reply.opened(fh, self.file_cache()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn read(&self, ino: u64, offset: u64, size: u32, reply: impl DataReply) {
        self.spawn(move |vfs| match vfs.read(ino, offset, size) {
            Ok(data) => reply.data(data.as_ref()),
            Err(e) => reply.error(errno(&e)),
        });
    }

    /// WRITE.
    pub(super) fn write(
        &self,
        caller: Caller,
        ino: u64,
        offset: u64,
        data: &[u8],
        how: WriteKind,
        reply: impl WriteReply,
    ) {
        match self
            .vfs
            .write_by(ino, offset, data, how.unprivileged, caller)
        {
            Ok((n, submission)) => {
                reply.written(n as u32);
                submission.submit();
            }
            Err(e) if how.from_cache => {
                let end = offset.saturating_add(data.len() as u64);
                if let Err(grow) = self.vfs.grow_for_refused_write(ino, end) {
                    crate::log!(
                        "presso: inode {ino}: cannot grow to a refused write's end: {grow}"
                    );
                }
                reply.error(errno(&e));
                self.drop_refused_pages(ino, offset, data.len());
            }
            Err(e) => {
                reply.error(errno(&e));
                self.vfs.note_refused_write(data.len() as u64);
            }
        }
    }

    pub(super) fn flush(&self, ino: u64, owner: u64, reply: impl EmptyReply) {
        if !self.shared() {
            // Reports a failed earlier write; stores nothing (see `Vfs::flush`).
            return empty(reply, self.vfs.flush(ino));
        }
        // A shared pool's close commits the file and drops the closing process's locks: work
        // for a worker, not for a session thread.
        self.spawn(move |vfs| {
            let unlocked = vfs.unlock_owner(ino, owner);
            empty(reply, vfs.flush(ino).and(unlocked));
        });
    }

    /// RELEASE; `lock_owner` when the last close of the file also ends a `flock`.
    pub(super) fn release(
        &self,
        ino: u64,
        fh: u64,
        lock_owner: Option<u64>,
        reply: impl EmptyReply,
    ) {
        let unlocked = lock_owner.map_or(Ok(()), |o| self.vfs.unlock_owner(ino, o));
        match self.vfs.release_deferred(ino, fh) {
            Ok(submission) => {
                empty(reply, unlocked);
                submission.submit();
            }
            Err(e) => reply.error(errno(&e)),
        }
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn getlk(
        &self,
        ino: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        reply: impl LockReply,
    ) {
        self.spawn(
            move |vfs| match vfs.getlk(ino, lock_owner, (start, end), typ, pid) {
                Ok((start, end, typ, pid)) => reply.locked(start, end, typ, pid),
                Err(e) => reply.error(errno(&e)),
            },
        );
    }

    #[allow(clippy::too_many_arguments)]
    pub(super) fn setlk(
        &self,
        ino: u64,
        lock_owner: u64,
        start: u64,
        end: u64,
        typ: i32,
        pid: u32,
        sleep: bool,
        reply: impl EmptyReply,
    ) {
        let task = move |vfs: Arc<Vfs>| {
            empty(
                reply,
                vfs.setlk(ino, lock_owner, (start, end), typ, pid, sleep),
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

    pub(super) fn fsync(&self, ino: u64, reply: impl EmptyReply) {
        self.spawn(move |vfs| empty(reply, vfs.fsync(ino)));
    }

    // Without this the kernel, answered ENOSYS, stops sending FSYNCDIR and reports success for
    // every directory fsync without anything being made durable.
    pub(super) fn fsyncdir(&self, reply: impl EmptyReply) {
        self.spawn(move |vfs| empty(reply, vfs.fsync_dir()));
    }

    /// A shared pool's directories get handles and listings the kernel does not keep (other
    /// clients change them unseen). A pool of its own answers ENOSYS: the kernel then opens
    /// directories itself, sends no OPENDIR or RELEASEDIR again (two round trips fewer per
    /// directory read), lists through no handle ([`Vfs::readdir_from`] goes on from the cookie
    /// alone), and keeps listings, dropping one when it changes the directory.
    pub(super) fn opendir(&self, reply: impl OpenReply) {
        if self.shared() {
            reply.opened(self.vfs.opendir(), FopenFlags::empty());
        } else {
            reply.error(Errno::ENOSYS);
        }
    }

    pub(super) fn releasedir(&self, fh: u64, reply: impl EmptyReply) {
        self.vfs.releasedir(fh);
        reply.ok();
    }

    pub(super) fn readdir(&self, ino: u64, fh: u64, offset: u64, mut reply: impl DirReply) {
        let listed = self
            .vfs
            .readdir_from(ino, fh, offset, |ino, cookie, k, name| {
                reply.add(ino, cookie, k, name)
            });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn readdirplus(&self, ino: u64, fh: u64, offset: u64, mut reply: impl DirPlusReply) {
        let ttl = self.ttl;
        let listed =
            self.vfs
                .readdir_plus_from(ino, fh, offset, |ino, k, a, cookie, name| match a {
                    Some(a) => reply.add(cookie, name, ttl, a),
                    // `.` and `..` (the kernel ignores their attributes), or a damaged name.
                    // Valid for no time: the name is listed, and any use of it asks the daemon
                    // again (and fails, as a lookup of a damaged name does). Node 0 would hide the
                    // name: the kernel lists entries under their node.
                    None => reply.add(cookie, name, Duration::ZERO, &unknown_attr(ino, k)),
                });
        match listed {
            Ok(()) => reply.ok(),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn statfs(&self, reply: impl StatfsReply) {
        reply.statfs(&self.vfs.statfs());
    }

    pub(super) fn setxattr(
        &self,
        ino: u64,
        name: &[u8],
        value: &[u8],
        flags: i32,
        reply: impl EmptyReply,
    ) {
        empty(reply, self.vfs.setxattr(ino, name, value, flags))
    }

    pub(super) fn getxattr(&self, ino: u64, name: &[u8], size: u32, reply: impl XattrReply) {
        xattr_bytes(reply, size, self.vfs.getxattr(ino, name))
    }

    pub(super) fn listxattr(&self, caller: Caller, ino: u64, size: u32, reply: impl XattrReply) {
        // The names, each followed by a NUL, as listxattr(2) returns them.
        let listed = self.vfs.listxattr(ino, caller).map(|names| {
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

    pub(super) fn removexattr(&self, ino: u64, name: &[u8], reply: impl EmptyReply) {
        empty(reply, self.vfs.removexattr(ino, name))
    }

    pub(super) fn create(
        &self,
        caller: Caller,
        parent: u64,
        name: &[u8],
        mode: u32,
        umask: u32,
        reply: impl CreateReply,
    ) {
        let node = NewNode::file(mode & 0o7777 & !umask, caller.uid, caller.gid);
        let result = self
            .vfs
            .make_node(parent, name, &node)
            .and_then(|a| Ok((self.vfs.open_created(parent, &a)?, a)));
        match result {
            Ok((fh, a)) => reply.created(self.ttl, &a, fh, self.file_cache()),
            Err(e) => reply.error(errno(&e)),
        }
    }

    pub(super) fn fallocate(
        &self,
        caller: Caller,
        ino: u64,
        offset: u64,
        length: u64,
        mode: i32,
        reply: impl EmptyReply,
    ) {
        if length == 0 {
            return reply.error(Errno::EINVAL);
        }
        self.spawn(move |vfs| empty(reply, vfs.fallocate_by(ino, offset, length, mode, caller)));
    }

    pub(super) fn lseek(&self, ino: u64, offset: i64, whence: i32, reply: impl LseekReply) {
        if offset < 0 {
            return reply.error(Errno::ENXIO);
        }
        match self.vfs.seek(ino, offset as u64, whence) {
            Ok(o) => reply.offset(o as i64),
            Err(e) => reply.error(errno(&e)),
        }
    }
}

/// What the kernel says of a WRITE besides its bytes.
#[derive(Debug, Clone, Copy)]
pub(super) struct WriteKind {
    /// The writer lacks CAP_FSETID: the file's suid and sgid go first.
    pub unprivileged: bool,
    /// Pages from the kernel's cache (writeback), not a `write(2)` passed through.
    pub from_cache: bool,
}

/// Answers a request no handler serves: the kernel then stops sending it where it can.
pub(super) fn unsupported(reply: impl Reply) {
    reply.error(Errno::ENOSYS)
}
