//! How a request is answered, whatever carries the answer to the kernel: one trait per kind of
//! answer, implemented by the FUSE library's reply types (requests read from `/dev/fuse`) and by
//! [`RingReply`](super::ring::RingReply) (requests taken from an io_uring queue). The request
//! handlers are written once, against these traits.

use std::ffi::OsStr;
use std::os::unix::ffi::OsStrExt;
use std::time::Duration;

use fuser::{
    Errno, FileHandle, FopenFlags, Generation, INodeNo, ReplyAttr, ReplyCreate, ReplyData,
    ReplyDirectory, ReplyDirectoryPlus, ReplyEmpty, ReplyEntry, ReplyLock, ReplyLseek, ReplyOpen,
    ReplyStatfs, ReplyWrite, ReplyXattr,
};
use presso_meta::{Attr, FileKind};

use super::convert::{file_attr, kind};
use crate::vfs::StatFs;

/// Any answer: every request may fail.
pub(crate) trait Reply: Send + 'static {
    /// Answers with `errno`.
    fn error(self, errno: Errno);
}

/// The answer to a request that returns nothing.
pub(crate) trait EmptyReply: Reply {
    /// Success.
    fn ok(self);
}

/// The answer to a request that names a node (LOOKUP, MKNOD, MKDIR, SYMLINK, LINK).
pub(crate) trait EntryReply: Reply {
    /// The node's attributes; the kernel may keep the name and the attributes for `ttl`.
    fn entry(self, ttl: Duration, attr: &Attr);
}

/// The answer to GETATTR and SETATTR.
pub(crate) trait AttrReply: Reply {
    /// The attributes, which the kernel may keep for `ttl`.
    fn attr(self, ttl: Duration, attr: &Attr);
}

/// The answer to READ and READLINK.
pub(crate) trait DataReply: Reply {
    /// The bytes.
    fn data(self, bytes: &[u8]);
}

/// The answer to OPEN and OPENDIR.
pub(crate) trait OpenReply: Reply {
    /// The handle, and what the kernel may keep of the file.
    fn opened(self, fh: u64, flags: FopenFlags);
}

/// The answer to CREATE.
pub(crate) trait CreateReply: Reply {
    /// The new file's attributes and its open handle.
    fn created(self, ttl: Duration, attr: &Attr, fh: u64, flags: FopenFlags);
}

/// The answer to WRITE.
pub(crate) trait WriteReply: Reply {
    /// How many bytes were taken.
    fn written(self, size: u32);
}

/// The answer to GETLK.
pub(crate) trait LockReply: Reply {
    /// The lock that conflicts (or the request's own range with `F_UNLCK`).
    fn locked(self, start: u64, end: u64, typ: i32, pid: u32);
}

/// The answer to STATFS.
pub(crate) trait StatfsReply: Reply {
    /// The pool's figures.
    fn statfs(self, s: &StatFs);
}

/// The answer to GETXATTR and LISTXATTR.
pub(crate) trait XattrReply: Reply {
    /// The size the caller needs (asked with size 0).
    fn size(self, size: u32);
    /// The bytes.
    fn data(self, bytes: &[u8]);
}

/// The answer to LSEEK.
pub(crate) trait LseekReply: Reply {
    /// The offset found.
    fn offset(self, offset: i64);
}

/// The answer to READDIR: entries added until the reply is full, then sent.
pub(crate) trait DirReply: Reply {
    /// Adds a name; true when it did not fit (and was not added).
    fn add(&mut self, ino: u64, cookie: u64, kind: FileKind, name: &[u8]) -> bool;
    /// Sends the entries added.
    fn ok(self);
}

/// The answer to READDIRPLUS: [`DirReply`] with each entry's attributes.
pub(crate) trait DirPlusReply: Reply {
    /// Adds a name with its attributes, valid for `ttl`; true when it did not fit.
    fn add(&mut self, cookie: u64, name: &[u8], ttl: Duration, attr: &Attr) -> bool;
    /// Sends the entries added.
    fn ok(self);
}

macro_rules! fails_with_errno {
    ($($t:ty),*) => {$(
        impl Reply for $t {
            fn error(self, errno: Errno) {
                <$t>::error(self, errno)
            }
        }
    )*};
}

fails_with_errno!(
    ReplyEmpty,
    ReplyEntry,
    ReplyAttr,
    ReplyData,
    ReplyOpen,
    ReplyCreate,
    ReplyWrite,
    ReplyLock,
    ReplyStatfs,
    ReplyXattr,
    ReplyLseek,
    ReplyDirectory,
    ReplyDirectoryPlus
);

impl EmptyReply for ReplyEmpty {
    fn ok(self) {
        ReplyEmpty::ok(self)
    }
}

impl EntryReply for ReplyEntry {
    fn entry(self, ttl: Duration, attr: &Attr) {
        ReplyEntry::entry(self, &ttl, &file_attr(attr), Generation(0))
    }
}

impl AttrReply for ReplyAttr {
    fn attr(self, ttl: Duration, attr: &Attr) {
        ReplyAttr::attr(self, &ttl, &file_attr(attr))
    }
}

impl DataReply for ReplyData {
    fn data(self, bytes: &[u8]) {
        ReplyData::data(self, bytes)
    }
}

impl OpenReply for ReplyOpen {
    fn opened(self, fh: u64, flags: FopenFlags) {
        ReplyOpen::opened(self, FileHandle(fh), flags)
    }
}

impl CreateReply for ReplyCreate {
    fn created(self, ttl: Duration, attr: &Attr, fh: u64, flags: FopenFlags) {
        ReplyCreate::created(
            self,
            &ttl,
            &file_attr(attr),
            Generation(0),
            FileHandle(fh),
            flags,
        )
    }
}

impl WriteReply for ReplyWrite {
    fn written(self, size: u32) {
        ReplyWrite::written(self, size)
    }
}

impl LockReply for ReplyLock {
    fn locked(self, start: u64, end: u64, typ: i32, pid: u32) {
        ReplyLock::locked(self, start, end, typ, pid)
    }
}

impl StatfsReply for ReplyStatfs {
    fn statfs(self, s: &StatFs) {
        ReplyStatfs::statfs(
            self,
            s.blocks,
            s.blocks_free,
            s.blocks_avail,
            s.files,
            s.files_free,
            s.block_size,
            s.name_max,
            s.block_size,
        )
    }
}

impl XattrReply for ReplyXattr {
    fn size(self, size: u32) {
        ReplyXattr::size(self, size)
    }
    fn data(self, bytes: &[u8]) {
        ReplyXattr::data(self, bytes)
    }
}

impl LseekReply for ReplyLseek {
    fn offset(self, offset: i64) {
        ReplyLseek::offset(self, offset)
    }
}

impl DirReply for ReplyDirectory {
    fn add(&mut self, ino: u64, cookie: u64, k: FileKind, name: &[u8]) -> bool {
        ReplyDirectory::add(self, INodeNo(ino), cookie, kind(k), OsStr::from_bytes(name))
    }
    fn ok(self) {
        ReplyDirectory::ok(self)
    }
}

impl DirPlusReply for ReplyDirectoryPlus {
    fn add(&mut self, cookie: u64, name: &[u8], ttl: Duration, attr: &Attr) -> bool {
        ReplyDirectoryPlus::add(
            self,
            INodeNo(attr.ino),
            cookie,
            OsStr::from_bytes(name),
            &ttl,
            &file_attr(attr),
            Generation(0),
        )
    }
    fn ok(self) {
        ReplyDirectoryPlus::ok(self)
    }
}
