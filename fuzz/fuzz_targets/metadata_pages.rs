//! Damaged metadata pages: a real SQLite `meta.db` written by the presso-meta engine (a small
//! tree of directories, files with records, a symlink, a hard link, xattrs, properties, an
//! orphan), with bytes of its pages edited or overwritten from the fuzz input, then opened by the
//! engine and read from end to end (every name, attribute, link target, xattr, property and
//! record, the pool-wide views) and written to (the orphan purge of a pool open, a new directory
//! and a record in it, a rename, an unlink). Every call must return Ok or a `MetaError`: no
//! panic, abort or hang.
//!
//! The first input byte picks the damage: edits of bytes anywhere in the file (0), or input
//! bytes written over one page from an offset in it (1; the next byte picks the page, the two
//! after it the offset).
#![no_main]

#[path = "common/mod.rs"]
mod common;
#[path = "common/meta.rs"]
mod meta;

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use presso_meta::{MetaStore, NewNode, Timespec, TxgOp, XattrFlags, POOL_INO, ROOT_INO};

const PAGE: usize = 4096;

/// The bytes of a database holding a little of everything, written once per process.
fn seed_db() -> &'static [u8] {
    static SEED: OnceLock<Vec<u8>> = OnceLock::new();
    SEED.get_or_init(|| {
        let path = meta::work_dir("meta").join("seed.db");
        meta::remove_db(&path);
        let s = MetaStore::create_sqlite(&path).expect("create");
        s.init().expect("init");
        s.bind_pool("0123456789abcdef0123456789abcdef")
            .expect("bind");
        s.set_prop(POOL_INO, "compression", "zstd-3").expect("prop");
        let a = s
            .make_node(ROOT_INO, b"a", &NewNode::dir(0o755, 0, 0))
            .expect("a")
            .ino;
        let b = s
            .make_node(a, b"b", &NewNode::dir(0o2775, 1, 1))
            .expect("b")
            .ino;
        s.set_prop(a, "compression", "lz4").expect("prop");
        let f = s
            .make_node(b, b"f", &NewNode::file(0o644, 1, 1))
            .expect("f")
            .ino;
        s.set_xattr(f, b"user.note", b"a value", XattrFlags::Any)
            .expect("xattr");
        s.link(f, a, b"hard").expect("link");
        s.make_node(ROOT_INO, b"l", &NewNode::symlink(b"a/b/f", 0, 0))
            .expect("l");
        // Enough records and names to spread each table over a few pages, with few inodes to walk.
        let mut ops = Vec::new();
        for i in 0..48u64 {
            let inline = i % 4 == 3;
            let stored = if inline { 600 } else { 900 };
            ops.push(TxgOp::SetRecord {
                ino: f,
                index: i,
                rec: meta::record(1, 40 + i * 1000, stored, 4096, inline),
            });
        }
        ops.push(TxgOp::SetSize {
            ino: f,
            size: 48 * 4096,
            mtime: Timespec {
                secs: 1_700_000_000,
                nsec: 5,
            },
        });
        let many = s
            .make_node(ROOT_INO, b"many", &NewNode::dir(0o755, 0, 0))
            .expect("many")
            .ino;
        for i in 0..24u64 {
            let name = format!("file-{i:03}-{}", "x".repeat(100 + (i as usize * 7) % 120));
            let ino = s
                .make_node(many, name.as_bytes(), &NewNode::file(0o600, 2, 2))
                .expect("file")
                .ino;
            ops.push(TxgOp::SetRecord {
                ino,
                index: 0,
                rec: meta::record(2 + i % 3, 40 + i * 700, 600, 131072, false),
            });
            ops.push(TxgOp::SetSize {
                ino,
                size: 131072,
                mtime: Timespec {
                    secs: 1_700_000_000 + i as i64,
                    nsec: 0,
                },
            });
        }
        s.apply_txg(&ops, true).expect("txg");
        // An orphan: unlinked while open.
        let o = s
            .make_node(ROOT_INO, b"orphan", &NewNode::file(0o600, 0, 0))
            .expect("orphan")
            .ino;
        s.set_record(o, 0, &meta::record(4, 40, 100, 200, false))
            .expect("record");
        s.unlink(ROOT_INO, b"orphan", &|_| true).expect("unlink");
        s.close().expect("close");
        drop(s);
        let bytes = std::fs::read(&path).expect("read seed");
        meta::remove_db(&path);
        bytes
    })
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let mut bytes = seed_db().to_vec();
    if mode % 2 == 0 {
        common::mutate(&mut bytes, rest, 16);
    } else if rest.len() >= 3 {
        let pages = bytes.len().div_ceil(PAGE);
        let page = usize::from(rest[0]) % pages;
        let at = page * PAGE + usize::from(u16::from_le_bytes([rest[1], rest[2]])) % PAGE;
        let input = &rest[3..];
        let end = (at + input.len()).min(bytes.len()).min((page + 1) * PAGE);
        bytes[at..end].copy_from_slice(&input[..end - at]);
    }

    let path = meta::work_dir("meta").join("meta.db");
    meta::remove_db(&path);
    std::fs::write(&path, &bytes).expect("write the damaged database");
    if let Ok(store) = MetaStore::open_sqlite(&path) {
        if let Ok(dirs) = meta::read_all(&store) {
            let _ = meta::write_some(&store, &dirs);
        }
        let _ = store.close();
    }
});
