//! Requests taken from a ring entry: `fuse_in_header` at the start of the header buffer, the
//! opcode's own header (`fuse_*_in`) at `op_in`, and what follows it through `/dev/fuse`
//! (names, data) in the payload. Each is decoded and handed to its
//! [handler](crate::fuse::requests). A request whose bytes do not hold what its opcode needs is
//! answered EINVAL (EIO when the kernel's own lengths disagree); nothing here panics on what the
//! kernel wrote.

use std::sync::Arc;

use fuser::Errno;
use presso_meta::{SetAttr, Timespec};

use super::{Home, RingReply, Slot, ENT_IN_OUT_AT, MAX_PAYLOAD, OP_IN_AT};
use crate::fuse::reply::Reply;
use crate::fuse::requests::{unsupported, WriteKind};
use crate::fuse::PressoFs;
use crate::vfs::Caller;

// Opcodes (`enum fuse_opcode`).
const LOOKUP: u32 = 1;
const GETATTR: u32 = 3;
const SETATTR: u32 = 4;
const READLINK: u32 = 5;
const SYMLINK: u32 = 6;
const MKNOD: u32 = 8;
const MKDIR: u32 = 9;
const UNLINK: u32 = 10;
const RMDIR: u32 = 11;
const RENAME: u32 = 12;
const LINK: u32 = 13;
const OPEN: u32 = 14;
const READ: u32 = 15;
const WRITE: u32 = 16;
const STATFS: u32 = 17;
const RELEASE: u32 = 18;
const FSYNC: u32 = 20;
const SETXATTR: u32 = 21;
const GETXATTR: u32 = 22;
const LISTXATTR: u32 = 23;
const REMOVEXATTR: u32 = 24;
const FLUSH: u32 = 25;
const OPENDIR: u32 = 27;
const READDIR: u32 = 28;
const RELEASEDIR: u32 = 29;
const FSYNCDIR: u32 = 30;
const GETLK: u32 = 31;
const SETLK: u32 = 32;
const SETLKW: u32 = 33;
const CREATE: u32 = 35;
const DESTROY: u32 = 38;
const FALLOCATE: u32 = 43;
const READDIRPLUS: u32 = 44;
const RENAME2: u32 = 45;
const LSEEK: u32 = 46;

// `fuse_setattr_in.valid` bits.
const FATTR_MODE: u32 = 1 << 0;
const FATTR_UID: u32 = 1 << 1;
const FATTR_GID: u32 = 1 << 2;
const FATTR_SIZE: u32 = 1 << 3;
const FATTR_ATIME: u32 = 1 << 4;
const FATTR_MTIME: u32 = 1 << 5;
const FATTR_ATIME_NOW: u32 = 1 << 7;
const FATTR_MTIME_NOW: u32 = 1 << 8;
const FATTR_CTIME: u32 = 1 << 10;
/// `fuse_write_in.write_flags`: a write of pages from the kernel's cache (writeback).
const FUSE_WRITE_CACHE: u32 = 1;
/// `fuse_write_in.write_flags`: drop suid and sgid (the writer is not privileged).
const FUSE_WRITE_KILL_SUIDGID: u32 = 1 << 2;
/// `fuse_release_in.release_flags`: the release also ends the file's `flock`.
const FUSE_RELEASE_FLOCK_UNLOCK: u32 = 1 << 1;

/// The opcode's own header, read field by field at byte offsets.
struct OpIn<'a>(&'a [u8]);

impl OpIn<'_> {
    fn u32(&self, at: usize) -> u32 {
        u32::from_ne_bytes(self.0[at..at + 4].try_into().expect("4 bytes"))
    }
    fn u64(&self, at: usize) -> u64 {
        u64::from_ne_bytes(self.0[at..at + 8].try_into().expect("8 bytes"))
    }
    fn i32(&self, at: usize) -> i32 {
        self.u32(at) as i32
    }
}

/// The payload's NUL-terminated strings and the bytes after them.
struct Names<'a>(&'a [u8]);

impl<'a> Names<'a> {
    /// The next NUL-terminated name, or None when there is no NUL.
    fn next(&mut self) -> Option<&'a [u8]> {
        let end = self.0.iter().position(|&b| b == 0)?;
        let (name, rest) = self.0.split_at(end);
        self.0 = &rest[1..];
        Some(name)
    }
}

/// Serves the request in `slot`, which the kernel has just completed.
pub(super) fn dispatch(fs: &PressoFs, mut slot: Slot, home: &Arc<Home>) {
    // SAFETY: the kernel completed the entry's command, so the slot is ours; the header
    // slices are copied out before the reply (which owns the slot) is made.
    let header = unsafe { slot.header() };
    let in_header = OpIn(&header[..40]);
    let opcode = in_header.u32(4);
    let unique = in_header.u64(8);
    let node = in_header.u64(16);
    let caller = Caller {
        uid: in_header.u32(24),
        gid: in_header.u32(28),
        pid: in_header.u32(32),
    };
    let mut op = [0u8; 128];
    op.copy_from_slice(&header[OP_IN_AT..OP_IN_AT + 128]);
    let payload_len = OpIn(&header[ENT_IN_OUT_AT..]).u32(16) as usize;
    slot.unique = unique;
    let op = OpIn(&op);
    // A listing's reply may hold as many bytes as the request's `size` (`fuse_read_in`).
    let list_max = match opcode {
        READDIR | READDIRPLUS => op.u32(16) as usize,
        _ => 0,
    };
    let payload_ok = payload_len <= MAX_PAYLOAD;
    // SAFETY: the length is checked against the buffer; the slice is only read by the handler
    // before it replies (see `Slot::request_payload`).
    let payload = unsafe { slot.request_payload(if payload_ok { payload_len } else { 0 }) };
    let reply = RingReply::new(slot, home.clone(), list_max);
    if !payload_ok {
        return reply.error(Errno::EIO);
    }
    serve(fs, opcode, node, caller, &op, payload, reply)
}

/// Decodes the arguments of `opcode` and calls its handler.
fn serve(
    fs: &PressoFs,
    opcode: u32,
    node: u64,
    caller: Caller,
    op: &OpIn<'_>,
    payload: &[u8],
    reply: RingReply,
) {
    let mut names = Names(payload);
    // The name a request carries first, or EINVAL.
    macro_rules! name {
        () => {
            match names.next() {
                Some(name) => name,
                None => return reply.error(Errno::EINVAL),
            }
        };
    }
    match opcode {
        LOOKUP => fs.lookup(node, name!(), reply),
        GETATTR => fs.getattr(node, reply),
        SETATTR => fs.setattr(caller, node, set_attr(op), reply),
        READLINK => fs.readlink(node, reply),
        SYMLINK => {
            let (name, target) = (name!(), name!());
            fs.symlink(caller, node, name, target, reply)
        }
        MKNOD => fs.mknod(
            caller,
            node,
            name!(),
            op.u32(0),
            op.u32(8),
            op.u32(4),
            reply,
        ),
        MKDIR => fs.mkdir(caller, node, name!(), op.u32(0), op.u32(4), reply),
        UNLINK => fs.unlink(node, name!(), reply),
        RMDIR => fs.rmdir(node, name!(), reply),
        RENAME | RENAME2 => {
            let flags = if opcode == RENAME2 { op.u32(8) } else { 0 };
            let (name, newname) = (name!(), name!());
            fs.rename(node, name, op.u64(0), newname, flags, reply)
        }
        LINK => fs.link(op.u64(0), node, name!(), reply),
        OPEN => fs.open(node, reply),
        READ => fs.read(node, op.u64(8), op.u32(16), reply),
        WRITE => {
            let size = op.u32(16) as usize;
            let Some(data) = payload.get(..size) else {
                return reply.error(Errno::EIO);
            };
            let flags = op.u32(20);
            let how = WriteKind {
                unprivileged: flags & FUSE_WRITE_KILL_SUIDGID != 0,
                from_cache: flags & FUSE_WRITE_CACHE != 0,
            };
            fs.write(caller, node, op.u64(8), data, how, reply)
        }
        STATFS => fs.statfs(reply),
        RELEASE => {
            let unlock = op.u32(12) & FUSE_RELEASE_FLOCK_UNLOCK != 0;
            let owner = unlock.then(|| op.u64(16));
            fs.release(node, op.u64(0), owner, reply)
        }
        FSYNC => fs.fsync(node, reply),
        SETXATTR => {
            let name = name!();
            let Some(value) = names.0.get(..op.u32(0) as usize) else {
                return reply.error(Errno::EINVAL);
            };
            fs.setxattr(node, name, value, op.i32(4), reply)
        }
        GETXATTR => fs.getxattr(node, name!(), op.u32(0), reply),
        LISTXATTR => fs.listxattr(caller, node, op.u32(0), reply),
        REMOVEXATTR => fs.removexattr(node, name!(), reply),
        FLUSH => fs.flush(node, op.u64(16), reply),
        OPENDIR => fs.opendir(reply),
        READDIR => fs.readdir(node, op.u64(0), op.u64(8), reply),
        READDIRPLUS => fs.readdirplus(node, op.u64(0), op.u64(8), reply),
        RELEASEDIR => fs.releasedir(op.u64(0), reply),
        FSYNCDIR => fs.fsyncdir(reply),
        GETLK => {
            let (owner, start, end, typ, pid) = lock_request(op);
            fs.getlk(node, owner, start, end, typ, pid, reply)
        }
        SETLK | SETLKW => {
            let (owner, start, end, typ, pid) = lock_request(op);
            let sleep = opcode == SETLKW;
            fs.setlk(node, owner, start, end, typ, pid, sleep, reply)
        }
        CREATE => fs.create(caller, node, name!(), op.u32(4), op.u32(8), reply),
        DESTROY => {
            fs.destroy();
            crate::fuse::reply::EmptyReply::ok(reply)
        }
        // `fuse_fallocate_in`: fh, offset, length, mode.
        FALLOCATE => fs.fallocate(caller, node, op.u64(8), op.u64(16), op.i32(24), reply),
        // `fuse_lseek_in`: fh, offset, whence.
        LSEEK => fs.lseek(node, op.u64(8) as i64, op.i32(16), reply),
        _ => unsupported(reply),
    }
}

/// `fuse_lk_in`: fh, owner, then `fuse_file_lock` (start, end, type, pid); returns the owner
/// and the lock.
fn lock_request(op: &OpIn<'_>) -> (u64, u64, u64, i32, u32) {
    (op.u64(8), op.u64(16), op.u64(24), op.i32(32), op.u32(36))
}

/// `fuse_setattr_in`: what to change, by its `valid` bits.
fn set_attr(op: &OpIn<'_>) -> SetAttr {
    let valid = op.u32(0);
    let has = |bit: u32| valid & bit != 0;
    let time = |secs_at: usize, nsec_at: usize, now_bit: u32| {
        if has(now_bit) {
            Timespec::now()
        } else {
            Timespec {
                secs: op.u64(secs_at) as i64,
                nsec: op.u32(nsec_at),
            }
        }
    };
    SetAttr {
        mode: has(FATTR_MODE).then(|| op.u32(68)),
        uid: has(FATTR_UID).then(|| op.u32(76)),
        gid: has(FATTR_GID).then(|| op.u32(80)),
        size: has(FATTR_SIZE).then(|| op.u64(16)),
        atime: has(FATTR_ATIME).then(|| time(32, 56, FATTR_ATIME_NOW)),
        mtime: has(FATTR_MTIME).then(|| time(40, 60, FATTR_MTIME_NOW)),
        ctime: has(FATTR_CTIME).then(|| Timespec {
            secs: op.u64(48) as i64,
            nsec: op.u32(64),
        }),
    }
}
