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

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use presso_meta::{
    FileKind, MetaError, MetaStore, NewNode, RecordRef, Timespec, TxgOp, XattrFlags, POOL_INO,
    ROOT_INO,
};

const PAGE: usize = 4096;

/// A directory of this process for the database files. Those of processes that are gone (a
/// fuzzing run ends by exiting, with no clean-up) are removed first.
fn work_dir() -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix("presso-fuzz-meta-"));
            if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = tmp.join(format!("presso-fuzz-meta-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("work directory");
        dir
    })
}

fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

fn record(segment: u64, offset: u64, stored: u32, logical: u32, inline: bool) -> RecordRef {
    RecordRef {
        segment,
        offset,
        stored_len: stored,
        logical_len: logical,
        codec: (offset % 5) as u8,
        checksum: offset.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        inline: inline.then(|| common::pattern(offset, stored as usize)),
    }
}

/// The bytes of a database holding a little of everything, written once per process.
fn seed_db() -> &'static [u8] {
    static SEED: OnceLock<Vec<u8>> = OnceLock::new();
    SEED.get_or_init(|| {
        let path = work_dir().join("seed.db");
        remove_db(&path);
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
                rec: record(1, 40 + i * 1000, stored, 4096, inline),
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
                rec: record(2 + i % 3, 40 + i * 700, 600, 131072, false),
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
        s.set_record(o, 0, &record(4, 40, 100, 200, false))
            .expect("record");
        s.unlink(ROOT_INO, b"orphan", &|_| true).expect("unlink");
        s.close().expect("close");
        drop(s);
        let bytes = std::fs::read(&path).expect("read seed");
        remove_db(&path);
        bytes
    })
}

/// Everything a mount and a scrub read, on every inode reachable from the root (bounded, so a
/// cycle in damaged directory entries ends the walk rather than the harness). A failing call on
/// one inode does not stop the walk.
fn read_all(s: &MetaStore) -> Result<Vec<u64>, MetaError> {
    let mut dirs = Vec::new();
    s.is_initialized()?;
    let _ = s.pool_id()?;
    let _ = s.space()?;
    let usage = s.segment_usage()?;
    let _ = s.codec_usage()?;
    for &segment in usage.keys().take(8) {
        let _ = s.records_in_segment(segment)?;
    }
    let mut after = None;
    for _ in 0..64 {
        let batch = s.scan_records(after, 64)?;
        let Some(last) = batch.last() else { break };
        after = Some((last.ino, last.index));
    }

    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(ino) = queue.pop_front() {
        if !seen.insert(ino) || seen.len() > 100 {
            continue;
        }
        let Ok(attr) = s.getattr(ino) else { continue };
        let _ = s.path_of(ino);
        let _ = s.list_props(ino);
        let _ = s.get_prop_effective(ino, "compression");
        if let Ok(names) = s.list_xattrs(ino) {
            for name in names.iter().take(8) {
                let _ = s.get_xattr(ino, name);
            }
        }
        match attr.kind {
            FileKind::Dir => {
                dirs.push(ino);
                let _ = s.dir_parent(ino);
                let mut after: Option<Vec<u8>> = None;
                for _ in 0..16 {
                    let Ok(entries) = s.readdir(ino, after.as_deref(), 64) else {
                        break;
                    };
                    let Some(last) = entries.last() else { break };
                    after = Some(last.name.clone());
                    for e in &entries {
                        let _ = s.lookup(ino, &e.name);
                        queue.push_back(e.ino);
                    }
                }
            }
            FileKind::Symlink => {
                let _ = s.readlink(ino);
            }
            FileKind::File => {
                let _ = s.records(ino, ..);
            }
            _ => {}
        }
    }
    Ok(dirs)
}

/// What a mount writes: the orphan purge at open, then a new directory with a file and a
/// record, moved into a directory found in the walk, and removed again.
fn write_some(s: &MetaStore, dirs: &[u64]) -> Result<(), MetaError> {
    s.purge_orphans()?;
    let d = s
        .make_node(ROOT_INO, b"fuzz-dir", &NewNode::dir(0o755, 0, 0))?
        .ino;
    let f = s
        .make_node(d, b"fuzz-file", &NewNode::file(0o644, 0, 0))?
        .ino;
    s.apply_txg(
        &[
            TxgOp::SetRecord {
                ino: f,
                index: 0,
                rec: record(9, 40, 10, 20, false),
            },
            TxgOp::SetSize {
                ino: f,
                size: 20,
                mtime: Timespec::default(),
            },
        ],
        false,
    )?;
    for &target in dirs.iter().rev().take(2) {
        if s.rename(ROOT_INO, b"fuzz-dir", target, b"fuzz-moved", &|_| false)
            .is_ok()
        {
            let _ = s.rename(target, b"fuzz-moved", ROOT_INO, b"fuzz-dir", &|_| false);
        }
    }
    s.unlink(d, b"fuzz-file", &|_| false)?;
    s.rmdir(ROOT_INO, b"fuzz-dir")?;
    s.checkpoint()
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

    let path = work_dir().join("meta.db");
    remove_db(&path);
    std::fs::write(&path, &bytes).expect("write the damaged database");
    if let Ok(store) = MetaStore::open_sqlite(&path) {
        if let Ok(dirs) = read_all(&store) {
            let _ = write_some(&store, &dirs);
        }
        let _ = store.close();
    }
});
