//! Intent log replay: a real SQLite `meta.db` written by the presso-meta engine beside a
//! `meta.db-intent` log whose records continue its last committed group, as a killed daemon
//! leaves it. The records' bodies (row changes: inodes, directory entries, xattrs, records,
//! properties, counters) are encoded here from docs/design.md's table, edited by the fuzz input,
//! and framed with valid headers (or, in the second mode, the whole log is edited, headers
//! included). The engine opens the pair, which replays the log, then everything is read and
//! written as in `metadata_pages`. Every call must return Ok or a `MetaError`: no panic, abort
//! or hang.
//!
//! The first input byte picks the mode: edit the bodies and frame them anew (even), or edit the
//! framed log (odd).
#![no_main]

#[path = "common/mod.rs"]
mod common;
#[path = "common/meta.rs"]
mod meta;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use presso_meta::{MetaStore, NewNode, ROOT_INO};

const COUNTER: &str = "sqlite_intent_group";

/// The bytes of a small database and the last group it committed, made once per process.
fn seed() -> &'static (Vec<u8>, u64) {
    static SEED: OnceLock<(Vec<u8>, u64)> = OnceLock::new();
    SEED.get_or_init(|| {
        let path = meta::work_dir("intent").join("seed.db");
        meta::remove_db(&path);
        let s = MetaStore::create_sqlite(&path).expect("create");
        s.init().expect("init");
        let d = s
            .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 0, 0))
            .expect("d")
            .ino;
        s.make_node(d, b"f", &NewNode::file(0o644, 1, 1))
            .expect("f");
        s.close().expect("close");
        drop(s);
        let s = MetaStore::open_sqlite(&path).expect("reopen");
        let committed = s.statistics(&[COUNTER]).expect("counter")[0];
        s.close().expect("close");
        drop(s);
        let bytes = std::fs::read(&path).expect("read seed");
        meta::remove_db(&path);
        (bytes, committed)
    })
}

/// Writes one row change at a time, in the log's body encoding.
#[derive(Default)]
struct Body(Vec<u8>);

impl Body {
    fn n(&mut self, v: u64) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn w(&mut self, v: u32) -> &mut Self {
        self.0.extend_from_slice(&v.to_le_bytes());
        self
    }
    fn b(&mut self, v: u8) -> &mut Self {
        self.0.push(v);
        self
    }
    fn bytes(&mut self, v: &[u8]) -> &mut Self {
        self.w(v.len() as u32);
        self.0.extend_from_slice(v);
        self
    }
    fn time(&mut self, secs: i64) -> &mut Self {
        self.n(secs as u64).w(7)
    }
    /// A put of inode `ino` of kind `kind` (1 file, 2 directory, 3 symlink) under `parent`.
    fn inode(&mut self, ino: u64, kind: u8, parent: u64, target: Option<&[u8]>) -> &mut Self {
        self.b(1).n(ino).b(kind).w(0o644).w(1).w(1).n(10).w(1);
        self.time(1_700_000_000)
            .time(1_700_000_001)
            .time(1_700_000_002);
        self.n(0).n(parent);
        match target {
            Some(t) => self.b(1).bytes(t),
            None => self.b(0),
        }
    }
    fn dentry(&mut self, parent: u64, name: &[u8], ino: u64, kind: u8) -> &mut Self {
        self.b(3).n(parent).bytes(name).n(ino).b(kind)
    }
}

/// Bodies of a few transactions: new nodes, an xattr, records, a property, counters, and
/// removals.
fn bodies() -> Vec<Vec<u8>> {
    let mut out = Vec::new();
    let mut b = Body::default();
    b.inode(1000, 1, ROOT_INO, None)
        .dentry(ROOT_INO, b"new", 1000, 1);
    b.b(12).bytes(b"next_inode").n(1002);
    out.push(b.0);
    let mut b = Body::default();
    b.b(5).n(1000).bytes(b"user.k").bytes(b"value");
    b.b(7)
        .n(1000)
        .n(0)
        .n(3)
        .n(40)
        .w(100)
        .w(4096)
        .b(1)
        .n(99)
        .b(0);
    b.b(7)
        .n(1000)
        .n(1)
        .n(0)
        .n(0)
        .w(4)
        .w(4)
        .b(0)
        .n(5)
        .b(1)
        .bytes(b"abcd");
    b.b(12).bytes(b"logical_bytes").n(4100);
    out.push(b.0);
    let mut b = Body::default();
    b.inode(1001, 3, ROOT_INO, Some(b"new"))
        .dentry(ROOT_INO, b"link", 1001, 3);
    b.b(10).n(1000).bytes(b"compression").bytes(b"lz4");
    out.push(b.0);
    let mut b = Body::default();
    b.b(8)
        .n(1000)
        .n(1)
        .b(9)
        .n(1000)
        .n(0)
        .b(6)
        .n(1000)
        .bytes(b"user.k");
    b.b(11)
        .n(1000)
        .bytes(b"compression")
        .b(4)
        .n(ROOT_INO)
        .bytes(b"new")
        .b(2)
        .n(1000);
    out.push(b.0);
    out
}

/// Frames `bodies` as the records of group `group`, ops 0, 1, …
fn frame(group: u64, bodies: &[Vec<u8>]) -> Vec<u8> {
    let mut log = Vec::new();
    for (op, body) in bodies.iter().enumerate() {
        let start = log.len();
        log.extend_from_slice(b"PIL1");
        log.extend_from_slice(&(body.len() as u32).to_le_bytes());
        log.extend_from_slice(&group.to_le_bytes());
        log.extend_from_slice(&(op as u32).to_le_bytes());
        log.extend_from_slice(&[0; 4]);
        log.extend_from_slice(body);
        let crc = crc32fast::hash(&log[start..]);
        log[start + 20..start + 24].copy_from_slice(&crc.to_le_bytes());
    }
    log
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let (db, committed) = seed();
    let mut bodies = bodies();
    let log = if mode % 2 == 0 {
        for (body, edits) in bodies.iter_mut().zip(rest.chunks(40)) {
            common::mutate(body, edits, 8);
        }
        frame(committed + 1, &bodies)
    } else {
        let mut log = frame(committed + 1, &bodies);
        common::mutate(&mut log, rest, 16);
        log
    };

    let path = meta::work_dir("intent").join("meta.db");
    meta::remove_db(&path);
    std::fs::write(&path, db).expect("write the database");
    let mut log_path = path.as_os_str().to_owned();
    log_path.push("-intent");
    std::fs::write(&log_path, &log).expect("write the log");
    if let Ok(store) = MetaStore::open_sqlite(&path) {
        if let Ok(dirs) = meta::read_all(&store) {
            let _ = meta::write_some(&store, &dirs);
        }
        let _ = store.close();
    }
});
