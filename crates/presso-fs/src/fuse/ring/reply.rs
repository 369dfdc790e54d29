//! Replies written into a ring entry: the out header (`fuse_out_header`) into the header buffer,
//! the reply's arguments into the payload, byte by byte as the kernel's `fuse.h` lays them out
//! (the same bytes a reply written to `/dev/fuse` carries after its header).

use std::sync::Arc;
use std::time::Duration;

use fuser::{Errno, FopenFlags};
use presso_meta::{Attr, FileKind};

use super::{Home, Slot, ENT_IN_OUT_AT, MAX_PAYLOAD};
use crate::fuse::convert::{blocks, BLOCK_SIZE};
use crate::fuse::reply::{
    AttrReply, CreateReply, DataReply, DirPlusReply, DirReply, EmptyReply, EntryReply, LockReply,
    LseekReply, OpenReply, Reply, StatfsReply, WriteReply, XattrReply,
};
use crate::vfs::StatFs;

/// `fuse_attr`.
const ATTR_LEN: usize = 88;
/// `fuse_entry_out`: node, generation, two validities, then `fuse_attr`.
const ENTRY_LEN: usize = 40 + ATTR_LEN;
/// `fuse_dirent` without its name.
const DIRENT_LEN: usize = 24;

/// The reply to one request taken from a ring entry. It owns the entry until it is sent, and
/// sends EIO if dropped unsent (a handler that panicked), so that the entry always goes back.
pub(crate) struct RingReply {
    slot: Option<Slot>,
    home: Arc<Home>,
    /// For listings: bytes of entries added so far, and the most the kernel asked for.
    listed: usize,
    list_max: usize,
}

impl RingReply {
    pub(super) fn new(slot: Slot, home: Arc<Home>, list_max: usize) -> RingReply {
        RingReply {
            slot: Some(slot),
            home,
            listed: 0,
            list_max: list_max.min(MAX_PAYLOAD),
        }
    }

    /// Writes the out header and gives the entry back, `payload_len` bytes of arguments
    /// already in the payload.
    fn finish(&mut self, error: i32, payload_len: usize) {
        let Some(mut slot) = self.slot.take() else {
            return;
        };
        let unique = slot.unique;
        // SAFETY: the reply owns the slot, and the handler is done with the request's bytes.
        let header = unsafe { slot.header_mut() };
        let len = (16 + payload_len) as u32;
        header[0..4].copy_from_slice(&len.to_ne_bytes());
        header[4..8].copy_from_slice(&error.to_ne_bytes());
        header[8..16].copy_from_slice(&unique.to_ne_bytes());
        // `fuse_uring_ent_in_out`: flags, commit_id, payload_sz, padding, reserved.
        let ent = &mut header[ENT_IN_OUT_AT..ENT_IN_OUT_AT + 32];
        ent.fill(0);
        ent[8..16].copy_from_slice(&unique.to_ne_bytes());
        ent[16..20].copy_from_slice(&(payload_len as u32).to_ne_bytes());
        self.home.give_back(slot);
    }

    /// Sends `parts` one after the other as the reply's arguments.
    fn send(mut self, parts: &[&[u8]]) {
        let total: usize = parts.iter().map(|p| p.len()).sum();
        if total > MAX_PAYLOAD {
            return self.finish(-libc::EIO, 0);
        }
        if let Some(slot) = self.slot.as_mut() {
            // SAFETY: as in `finish`.
            let payload = unsafe { slot.payload_mut() };
            let mut at = 0;
            for part in parts {
                payload[at..at + part.len()].copy_from_slice(part);
                at += part.len();
            }
        }
        self.finish(0, total)
    }

    /// Appends one listing entry of `len` bytes (padded to 8), written by `write`; false when
    /// it does not fit in what the kernel asked for.
    fn append(&mut self, len: usize, write: impl FnOnce(&mut [u8])) -> bool {
        let padded = len.next_multiple_of(8);
        if self.listed + padded > self.list_max {
            return false;
        }
        let Some(slot) = self.slot.as_mut() else {
            return false;
        };
        // SAFETY: as in `finish`; a listing request's arguments are plain numbers, read
        // before the first entry is added.
        let payload = unsafe { slot.payload_mut() };
        let entry = &mut payload[self.listed..self.listed + padded];
        entry.fill(0);
        write(&mut entry[..len]);
        self.listed += padded;
        true
    }
}

impl Drop for RingReply {
    fn drop(&mut self) {
        self.finish(-libc::EIO, 0);
    }
}

/// Little-endian (native) fields written one after the other.
struct Put<'a> {
    buf: &'a mut [u8],
    at: usize,
}

impl<'a> Put<'a> {
    fn new(buf: &'a mut [u8]) -> Put<'a> {
        Put { buf, at: 0 }
    }
    fn u64(&mut self, v: u64) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }
    fn u32(&mut self, v: u32) -> &mut Self {
        self.bytes(&v.to_ne_bytes())
    }
    fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.buf[self.at..self.at + b.len()].copy_from_slice(b);
        self.at += b.len();
        self
    }
}

/// `fuse_attr`.
fn put_attr(put: &mut Put<'_>, a: &Attr) {
    put.u64(a.ino)
        .u64(a.size)
        .u64(blocks(a.size))
        .u64(a.atime.secs as u64)
        .u64(a.mtime.secs as u64)
        .u64(a.ctime.secs as u64)
        .u32(a.atime.nsec)
        .u32(a.mtime.nsec)
        .u32(a.ctime.nsec)
        .u32(a.kind.type_bits() | (a.mode & 0o7777))
        .u32(a.nlink)
        .u32(a.uid)
        .u32(a.gid)
        .u32(a.rdev as u32)
        .u32(BLOCK_SIZE)
        .u32(0);
}

/// `fuse_entry_out`: the name and the attributes are valid for `ttl`.
fn put_entry(put: &mut Put<'_>, ttl: Duration, a: &Attr) {
    put.u64(a.ino)
        .u64(0)
        .u64(ttl.as_secs())
        .u64(ttl.as_secs())
        .u32(ttl.subsec_nanos())
        .u32(ttl.subsec_nanos());
    put_attr(put, a);
}

fn entry_bytes(ttl: Duration, a: &Attr) -> [u8; ENTRY_LEN] {
    let mut b = [0u8; ENTRY_LEN];
    put_entry(&mut Put::new(&mut b), ttl, a);
    b
}

/// `fuse_open_out`.
fn open_bytes(fh: u64, flags: FopenFlags) -> [u8; 16] {
    let mut b = [0u8; 16];
    Put::new(&mut b).u64(fh).u32(flags.bits()).u32(0);
    b
}

/// The type in a `fuse_dirent`: the file type bits shifted down, as `d_type` has them.
fn dirent_type(kind: FileKind) -> u32 {
    kind.type_bits() >> 12
}

impl Reply for RingReply {
    fn error(mut self, errno: Errno) {
        self.finish(-errno.code(), 0)
    }
}

impl EmptyReply for RingReply {
    fn ok(self) {
        self.send(&[])
    }
}

impl EntryReply for RingReply {
    fn entry(self, ttl: Duration, attr: &Attr) {
        self.send(&[&entry_bytes(ttl, attr)])
    }
}

impl AttrReply for RingReply {
    fn attr(self, ttl: Duration, attr: &Attr) {
        // `fuse_attr_out`: validity, its nanoseconds, a dummy, then `fuse_attr`.
        let mut b = [0u8; 16 + ATTR_LEN];
        let mut put = Put::new(&mut b);
        put.u64(ttl.as_secs()).u32(ttl.subsec_nanos()).u32(0);
        put_attr(&mut put, attr);
        self.send(&[&b])
    }
}

impl DataReply for RingReply {
    fn data(self, bytes: &[u8]) {
        self.send(&[bytes])
    }
}

impl OpenReply for RingReply {
    fn opened(self, fh: u64, flags: FopenFlags) {
        self.send(&[&open_bytes(fh, flags)])
    }
}

impl CreateReply for RingReply {
    fn created(self, ttl: Duration, attr: &Attr, fh: u64, flags: FopenFlags) {
        self.send(&[&entry_bytes(ttl, attr), &open_bytes(fh, flags)])
    }
}

impl WriteReply for RingReply {
    fn written(self, size: u32) {
        // `fuse_write_out`: size, padding.
        let mut b = [0u8; 8];
        Put::new(&mut b).u32(size);
        self.send(&[&b])
    }
}

impl LockReply for RingReply {
    fn locked(self, start: u64, end: u64, typ: i32, pid: u32) {
        // `fuse_lk_out`: a `fuse_file_lock`.
        let mut b = [0u8; 24];
        Put::new(&mut b)
            .u64(start)
            .u64(end)
            .u32(typ as u32)
            .u32(pid);
        self.send(&[&b])
    }
}

impl StatfsReply for RingReply {
    fn statfs(self, s: &StatFs) {
        // `fuse_kstatfs`: five counts, block size, name length, fragment size, padding, spare.
        let mut b = [0u8; 80];
        Put::new(&mut b)
            .u64(s.blocks)
            .u64(s.blocks_free)
            .u64(s.blocks_avail)
            .u64(s.files)
            .u64(s.files_free)
            .u32(s.block_size)
            .u32(s.name_max)
            .u32(s.block_size);
        self.send(&[&b])
    }
}

impl XattrReply for RingReply {
    fn size(self, size: u32) {
        // `fuse_getxattr_out`: size, padding.
        let mut b = [0u8; 8];
        Put::new(&mut b).u32(size);
        self.send(&[&b])
    }
    fn data(self, bytes: &[u8]) {
        self.send(&[bytes])
    }
}

impl LseekReply for RingReply {
    fn offset(self, offset: i64) {
        self.send(&[&offset.to_ne_bytes()])
    }
}

impl DirReply for RingReply {
    fn add(&mut self, ino: u64, cookie: u64, kind: FileKind, name: &[u8]) -> bool {
        let fitted = self.append(DIRENT_LEN + name.len(), |e| {
            Put::new(e)
                .u64(ino)
                .u64(cookie)
                .u32(name.len() as u32)
                .u32(dirent_type(kind))
                .bytes(name);
        });
        !fitted
    }
    fn ok(mut self) {
        let listed = self.listed;
        self.finish(0, listed)
    }
}

impl DirPlusReply for RingReply {
    fn add(&mut self, cookie: u64, name: &[u8], ttl: Duration, attr: &Attr) -> bool {
        // `fuse_direntplus`: a `fuse_entry_out`, then a `fuse_dirent` with the name.
        let fitted = self.append(ENTRY_LEN + DIRENT_LEN + name.len(), |e| {
            let mut put = Put::new(e);
            put_entry(&mut put, ttl, attr);
            put.u64(attr.ino)
                .u64(cookie)
                .u32(name.len() as u32)
                .u32(dirent_type(attr.kind))
                .bytes(name);
        });
        !fitted
    }
    fn ok(mut self) {
        let listed = self.listed;
        self.finish(0, listed)
    }
}
