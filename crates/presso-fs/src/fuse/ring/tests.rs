//! Ring entries served in-process: a request written into a slot as the kernel lays it out,
//! dispatched to the handlers over a file layer on a simulated disk, and the reply read back
//! from the slot handed home, byte by byte.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::{unbounded, Receiver};
use presso_meta::memory::MemoryEngine;
use presso_meta::ROOT_INO;
use presso_store::SimDir;

use super::decode::dispatch;
use super::{parse_cpu_list_end, ring_depth, Home, Slot, ENT_IN_OUT_AT, MAX_PAYLOAD, OP_IN_AT};
use crate::fuse::PressoFs;
use crate::vfs::orphan_tests::{open_pool, uncompressed_pool};
use crate::vfs::{Vfs, VfsConfig};

const LOOKUP: u32 = 1;
const MKDIR: u32 = 9;
const READ: u32 = 15;
const WRITE: u32 = 16;
const OPENDIR: u32 = 27;
const CREATE: u32 = 35;
const READDIRPLUS: u32 = 44;
const TTL: Duration = Duration::from_secs(7);

/// A mounted-like adapter over a new uncompressed pool, and where its replies come home.
struct Rig {
    fs: PressoFs,
    home: Arc<Home>,
    back: Receiver<Slot>,
    _parts: (SimDir, MemoryEngine),
}

impl Rig {
    fn new() -> Rig {
        let (dir, meta) = uncompressed_pool();
        let (pool, _) = open_pool(&dir, &meta);
        let config = VfsConfig {
            reclaim: None,
            ..VfsConfig::default()
        };
        let fs = PressoFs::new(Vfs::new(pool, config), 2, TTL, true);
        let (returned, back) = unbounded();
        // SAFETY: plain eventfd creation; the descriptor is owned from here on.
        let wake = unsafe { libc::eventfd(0, libc::EFD_CLOEXEC) };
        assert!(wake >= 0);
        // SAFETY: `wake` is a new descriptor nothing else owns.
        let wake = unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(wake) };
        let home = Arc::new(Home {
            returned,
            wake,
            owner: std::thread::current().id(),
        });
        Rig {
            fs,
            home,
            back,
            _parts: (dir, meta),
        }
    }

    /// Sends request `opcode` on `node` with `op_in` and `payload` as the kernel writes them;
    /// returns the reply's error and payload.
    fn call(&self, opcode: u32, node: u64, op_in: &[u8], payload: &[u8]) -> (i32, Vec<u8>) {
        self.call_claiming(opcode, node, op_in, payload, payload.len() as u32)
    }

    /// [`Rig::call`] with `payload_sz` set to `claimed` whatever the payload holds.
    fn call_claiming(
        &self,
        opcode: u32,
        node: u64,
        op_in: &[u8],
        payload: &[u8],
        claimed: u32,
    ) -> (i32, Vec<u8>) {
        const UNIQUE: u64 = 0x5eed_0001;
        let mut slot = Slot::new(3);
        // SAFETY: the slot is the test's own; nothing else holds its buffers.
        unsafe {
            let h = slot.header_mut();
            h.fill(0xAA);
            h[0..4].copy_from_slice(&(40 + op_in.len() as u32).to_ne_bytes());
            h[4..8].copy_from_slice(&opcode.to_ne_bytes());
            h[8..16].copy_from_slice(&UNIQUE.to_ne_bytes());
            h[16..24].copy_from_slice(&node.to_ne_bytes());
            h[24..36].fill(0);
            h[OP_IN_AT..OP_IN_AT + 128].fill(0);
            h[OP_IN_AT..OP_IN_AT + op_in.len()].copy_from_slice(op_in);
            let ent = &mut h[ENT_IN_OUT_AT..ENT_IN_OUT_AT + 32];
            ent.fill(0);
            ent[8..16].copy_from_slice(&UNIQUE.to_ne_bytes());
            ent[16..20].copy_from_slice(&claimed.to_ne_bytes());
            slot.payload_mut()[..payload.len()].copy_from_slice(payload);
        }
        dispatch(&self.fs, slot, &self.home);
        let slot = self
            .back
            .recv_timeout(Duration::from_secs(30))
            .expect("the slot comes home with its reply");
        assert_eq!(slot.index, 3, "the slot keeps its place in the queue");
        // SAFETY: the slot came home; the reply is written.
        let h = unsafe { slot.header() };
        let error = le32(h, 4) as i32;
        let payload_len = le32(h, ENT_IN_OUT_AT + 16) as usize;
        assert_eq!(le64(h, 8), UNIQUE, "the out header names the request");
        assert_eq!(
            le64(h, ENT_IN_OUT_AT + 8),
            UNIQUE,
            "the commit id is the request's"
        );
        assert_eq!(
            le32(h, 0) as usize,
            16 + payload_len,
            "the out header's length"
        );
        if error != 0 {
            assert_eq!(payload_len, 0, "an error carries no arguments");
        }
        // SAFETY: as above; the reply's bytes are in the payload.
        let reply = unsafe { slot.request_payload(payload_len) }.to_vec();
        (error, reply)
    }
}

fn le32(b: &[u8], at: usize) -> u32 {
    u32::from_ne_bytes(b[at..at + 4].try_into().unwrap())
}

fn le64(b: &[u8], at: usize) -> u64 {
    u64::from_ne_bytes(b[at..at + 8].try_into().unwrap())
}

fn name(n: &str) -> Vec<u8> {
    let mut v = n.as_bytes().to_vec();
    v.push(0);
    v
}

/// `fuse_mkdir_in` / the first words of `fuse_create_in`.
fn words(ws: &[u32]) -> Vec<u8> {
    ws.iter().flat_map(|w| w.to_ne_bytes()).collect()
}

/// Checks a `fuse_entry_out` for a node of `mode` (type and permission bits), valid for TTL.
fn assert_entry(e: &[u8], mode: u32) -> u64 {
    assert!(e.len() >= 128, "an entry is 128 bytes: {}", e.len());
    let ino = le64(e, 0);
    assert!(ino > ROOT_INO, "a new node: {ino}");
    assert_eq!(le64(e, 16), TTL.as_secs(), "entry validity");
    assert_eq!(le64(e, 24), TTL.as_secs(), "attribute validity");
    assert_eq!(le64(e, 40), ino, "fuse_attr.ino");
    assert_eq!(le32(e, 40 + 60), mode, "fuse_attr.mode");
    ino
}

#[test]
fn a_missing_name_is_a_negative_entry_and_a_made_one_is_found() {
    let rig = Rig::new();
    let (error, e) = rig.call(LOOKUP, ROOT_INO, &[], &name("d"));
    assert_eq!(error, 0);
    assert_eq!(e.len(), 128);
    assert_eq!(
        le64(&e, 0),
        0,
        "node 0: a name the kernel may remember as missing"
    );

    let (error, made) = rig.call(MKDIR, ROOT_INO, &words(&[0o755, 0o022]), &name("d"));
    assert_eq!(error, 0);
    let ino = assert_entry(&made, libc::S_IFDIR | 0o755);
    let (error, found) = rig.call(LOOKUP, ROOT_INO, &[], &name("d"));
    assert_eq!((error, le64(&found, 0)), (0, ino));

    let (error, _) = rig.call(MKDIR, ROOT_INO, &words(&[0o755, 0o022]), &name("d"));
    assert_eq!(error, -libc::EEXIST);
}

#[test]
fn bytes_written_through_the_ring_read_back_from_a_worker() {
    let rig = Rig::new();
    // `fuse_create_in`: flags, mode, umask, open_flags; the reply is an entry and an open.
    let create = words(&[libc::O_RDWR as u32, libc::S_IFREG | 0o640, 0o022, 0]);
    let (error, created) = rig.call(CREATE, ROOT_INO, &create, &name("f"));
    assert_eq!(error, 0);
    assert_eq!(created.len(), 128 + 16, "fuse_entry_out then fuse_open_out");
    let ino = assert_entry(&created, libc::S_IFREG | 0o640);
    let fh = le64(&created, 128);

    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    // `fuse_write_in`: fh, offset, size, write_flags, lock_owner, flags, padding.
    let mut write = Vec::new();
    write.extend(fh.to_ne_bytes());
    write.extend(1000u64.to_ne_bytes());
    write.extend(words(&[data.len() as u32, 0]));
    write.extend([0u8; 16]);
    let (error, written) = rig.call(WRITE, ino, &write, &data);
    assert_eq!((error, le32(&written, 0)), (0, data.len() as u32));

    // `fuse_read_in`: fh, offset, size, ... A READ is served by a worker thread, whose reply
    // wakes the queue.
    let mut read = Vec::new();
    read.extend(fh.to_ne_bytes());
    read.extend(0u64.to_ne_bytes());
    read.extend(words(&[400_000, 0]));
    read.extend([0u8; 16]);
    let (error, got) = rig.call(READ, ino, &read, &[]);
    assert_eq!(error, 0);
    assert_eq!(
        got.len(),
        1000 + data.len(),
        "zeros before the write, then its bytes"
    );
    assert!(got[..1000].iter().all(|&b| b == 0));
    assert_eq!(&got[1000..], &data[..]);
}

#[test]
fn a_listing_holds_what_fits_in_the_size_asked() {
    let rig = Rig::new();
    for i in 0..20 {
        let (error, _) = rig.call(
            MKDIR,
            ROOT_INO,
            &words(&[0o700, 0]),
            &name(&format!("n{i:02}")),
        );
        assert_eq!(error, 0);
    }
    // A pool of its own lets the kernel open directories itself, and lists through handle 0.
    let (error, opened) = rig.call(OPENDIR, ROOT_INO, &[0u8; 8], &[]);
    assert_eq!((error, opened.len()), (-libc::ENOSYS, 0), "OPENDIR");
    let fh = 0u64;
    // `fuse_read_in` for READDIRPLUS: fh, offset 0 (a new pass), size. Each entry is a
    // `fuse_direntplus` of 152 bytes and its name, padded to 160 for the names here.
    let listing = |size: u32| {
        let mut op = Vec::new();
        op.extend(fh.to_ne_bytes());
        op.extend(0u64.to_ne_bytes());
        op.extend(words(&[size, 0]));
        rig.call(READDIRPLUS, ROOT_INO, &op, &[])
    };
    let names: Vec<String> = [".".to_string(), "..".to_string()]
        .into_iter()
        .chain((0..20).map(|i| format!("n{i:02}")))
        .collect();
    let (error, three) = listing(3 * 160 + 159);
    assert_eq!(
        (error, three.len()),
        (0, 3 * 160),
        "three entries fit, a fourth does not"
    );
    let (error, all) = listing(1 << 16);
    assert_eq!((error, all.len()), (0, names.len() * 160));
    for (entry, name) in all.chunks(160).zip(&names) {
        let namelen = le32(entry, 128 + 16) as usize;
        assert_eq!(&entry[152..152 + namelen], name.as_bytes());
        assert_eq!(
            le32(entry, 128 + 20),
            u32::from(libc::DT_DIR),
            "type of {name}"
        );
        assert_eq!(
            le64(entry, 0),
            le64(entry, 128),
            "the entry's node is the dirent's"
        );
        assert!(
            entry[152 + namelen..].iter().all(|&b| b == 0),
            "padding of {name}"
        );
    }
    assert_eq!(
        &three[..],
        &all[..3 * 160],
        "the short reply is the start of the long one"
    );
}

#[test]
fn requests_whose_bytes_do_not_hold_their_arguments_are_refused() {
    let rig = Rig::new();
    // A name without its NUL.
    let (error, _) = rig.call(LOOKUP, ROOT_INO, &[], b"no-terminator");
    assert_eq!(error, -libc::EINVAL);
    // A payload longer than any entry holds.
    let (error, _) = rig.call_claiming(LOOKUP, ROOT_INO, &[], &name("x"), MAX_PAYLOAD as u32 + 1);
    assert_eq!(error, -libc::EIO);
    // A WRITE claiming more bytes than came.
    let mut write = Vec::new();
    write.extend(0u64.to_ne_bytes());
    write.extend(0u64.to_ne_bytes());
    write.extend(words(&[10, 0]));
    let (error, _) = rig.call(WRITE, ROOT_INO, &write, b"abc");
    assert_eq!(error, -libc::EIO);
    // An opcode no handler serves.
    let (error, _) = rig.call(4096, ROOT_INO, &[], &[]);
    assert_eq!(error, -libc::ENOSYS);
}

#[test]
fn the_possible_cpu_list_gives_one_past_its_highest_cpu() {
    assert_eq!(parse_cpu_list_end("0"), Some(1));
    assert_eq!(parse_cpu_list_end("0-1"), Some(2));
    assert_eq!(parse_cpu_list_end("0-3,5"), Some(6));
    assert_eq!(parse_cpu_list_end("0,2-7"), Some(8));
    assert_eq!(parse_cpu_list_end(""), None);
    assert_eq!(parse_cpu_list_end("x"), None);
}

#[test]
fn queues_of_many_cpus_register_fewer_entries() {
    assert_eq!(ring_depth(1), 8);
    assert_eq!(ring_depth(2), 8);
    assert_eq!(ring_depth(8), 8);
    assert_eq!(ring_depth(16), 4);
    assert_eq!(ring_depth(64), 2);
    assert_eq!(ring_depth(512), 2);
}
