//! Converting between the FUSE library's types and the file layer's: times, kinds, attributes,
//! the caller of a request, and replies from results (errno via [`FsError::errno`] only).

use std::time::{Duration, SystemTime, UNIX_EPOCH};

use fuser::{Errno, FileAttr, FileType, INodeNo, Request, TimeOrNow};
use presso_meta::{Attr, FileKind, Timespec};

use super::reply::{AttrReply, EmptyReply, EntryReply, XattrReply};
use crate::error::FsError;
use crate::vfs::Caller;

pub(super) fn time(t: Timespec) -> SystemTime {
    if t.secs >= 0 {
        UNIX_EPOCH + Duration::new(t.secs as u64, t.nsec)
    } else {
        UNIX_EPOCH - Duration::from_secs(t.secs.unsigned_abs())
            + Duration::from_nanos(t.nsec.into())
    }
}

/// The kernel's time in a SETATTR, as the FUSE library hands it over. The kernel sends seconds
/// and nanoseconds added to them; for a time before 1970 the library turns (-S, N) into the
/// epoch minus S seconds and N nanoseconds, where the time is the epoch minus S plus N. So the
/// distance before the epoch is read back as the kernel's two numbers, which keeps the time
/// exact (the times conformance test compares times before 1970 with ext4's).
pub(super) fn timespec(t: SystemTime) -> Timespec {
    match t.duration_since(UNIX_EPOCH) {
        Ok(d) => Timespec {
            secs: d.as_secs() as i64,
            nsec: d.subsec_nanos(),
        },
        Err(e) => Timespec {
            secs: -(e.duration().as_secs() as i64),
            nsec: e.duration().subsec_nanos(),
        },
    }
}

pub(super) fn time_or_now(t: TimeOrNow) -> Timespec {
    match t {
        TimeOrNow::Now => Timespec::now(),
        TimeOrNow::SpecificTime(t) => timespec(t),
    }
}

pub(super) fn kind(k: FileKind) -> FileType {
    match k {
        FileKind::File => FileType::RegularFile,
        FileKind::Dir => FileType::Directory,
        FileKind::Symlink => FileType::Symlink,
        FileKind::Fifo => FileType::NamedPipe,
        FileKind::Socket => FileType::Socket,
        FileKind::CharDevice => FileType::CharDevice,
        FileKind::BlockDevice => FileType::BlockDevice,
    }
}

/// The block size the kernel is told (`st_blksize`): the record size, so that programs write
/// whole records.
pub(super) const BLOCK_SIZE: u32 = 128 << 10;

/// `st_blocks`: 512-byte units of the logical size.
pub(super) fn blocks(size: u64) -> u64 {
    size.div_ceil(512)
}

pub(super) fn file_attr(a: &Attr) -> FileAttr {
    FileAttr {
        ino: INodeNo(a.ino),
        size: a.size,
        blocks: blocks(a.size),
        atime: time(a.atime),
        mtime: time(a.mtime),
        ctime: time(a.ctime),
        crtime: time(a.ctime),
        kind: kind(a.kind),
        perm: (a.mode & 0o7777) as u16,
        nlink: a.nlink,
        uid: a.uid,
        gid: a.gid,
        rdev: a.rdev as u32,
        blksize: BLOCK_SIZE,
        flags: 0,
    }
}

/// The attributes of a regular file that no longer exists: no links, no bytes, no permissions.
pub(super) fn removed_file_attr(ino: u64, atime: Timespec, mtime: Timespec) -> Attr {
    Attr {
        ino,
        kind: FileKind::File,
        mode: 0,
        uid: 0,
        gid: 0,
        size: 0,
        nlink: 0,
        atime,
        mtime,
        ctime: mtime,
        rdev: 0,
    }
}

/// Attributes of a listed name of kind `k` whose inode `ino` the metadata cannot give: no
/// permissions, no bytes, no links (sent valid for no time, so nothing relies on them).
pub(super) fn unknown_attr(ino: u64, k: FileKind) -> Attr {
    Attr {
        kind: k,
        ..removed_file_attr(ino, EPOCH, EPOCH)
    }
}

const EPOCH: Timespec = Timespec { secs: 0, nsec: 0 };

pub(super) fn caller(req: &Request) -> Caller {
    Caller {
        uid: req.uid(),
        gid: req.gid(),
        pid: req.pid(),
    }
}

pub(super) fn errno(e: &FsError) -> Errno {
    Errno::from_i32(e.errno())
}

pub(super) fn empty(reply: impl EmptyReply, result: Result<(), FsError>) {
    match result {
        Ok(()) => reply.ok(),
        Err(e) => reply.error(errno(&e)),
    }
}

pub(super) fn entry(reply: impl EntryReply, ttl: Duration, result: Result<Attr, FsError>) {
    match result {
        Ok(a) => reply.entry(ttl, &a),
        Err(e) => reply.error(errno(&e)),
    }
}

/// The reply to a LOOKUP: a name that does not exist is answered with inode 0, which the kernel
/// keeps as a negative entry for `ttl` (a plain ENOENT is not cached, so every later stat or open
/// of the missing name would ask again).
pub(super) fn looked_up(reply: impl EntryReply, ttl: Duration, result: Result<Attr, FsError>) {
    match result {
        Err(e) if e.errno() == libc::ENOENT => {
            reply.entry(ttl, &removed_file_attr(0, EPOCH, EPOCH))
        }
        result => entry(reply, ttl, result),
    }
}

pub(super) fn attr(reply: impl AttrReply, ttl: Duration, result: Result<Attr, FsError>) {
    match result {
        Ok(a) => reply.attr(ttl, &a),
        Err(e) => reply.error(errno(&e)),
    }
}

/// The reply to GETXATTR or LISTXATTR: with `size` 0 the length the caller needs, the bytes if
/// they fit in `size`, else ERANGE.
pub(super) fn xattr_bytes(reply: impl XattrReply, size: u32, result: Result<Vec<u8>, FsError>) {
    match result {
        Ok(bytes) if size == 0 => reply.size(bytes.len() as u32),
        Ok(bytes) if bytes.len() <= size as usize => reply.data(&bytes),
        Ok(_) => reply.error(Errno::ERANGE),
        Err(e) => reply.error(errno(&e)),
    }
}
