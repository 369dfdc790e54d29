//! Damage to a pool on disk never costs more than the damaged records: a flipped byte in any
//! field of an entry envelope, in a segment header or in the lock file, in a sealed segment or
//! in the last one, leaves the pool mountable; every other file reads back byte for byte; exactly
//! the damaged record reads as an I/O error and scrub names it (file and offset); nothing is
//! cut. Damage the pool cannot work around (the pool header, the metadata's header) is refused
//! with a message that says what to do, and the refused open changes no byte of the pool.

use std::collections::BTreeMap;
use std::path::Path;

mod common;

use common::{noise, TempDir};
use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{NewNode, RecordRef, ROOT_INO};
use presso_store::segment::segment_file_name;

const RECORD: usize = 16 << 10;
const FILES: u64 = 10;
const RECORDS_PER_FILE: usize = 3;

fn options() -> PoolOptions {
    PoolOptions {
        // Small segments: the files spread over several, sealed and last.
        segment_size: 128 << 10,
        workers: 2,
        ..PoolOptions::default()
    }
}

fn vfs_config() -> VfsConfig {
    VfsConfig {
        reclaim: None,
        ..VfsConfig::default()
    }
}

/// The pool every case starts from: `FILES` files of `RECORDS_PER_FILE` records, committed and
/// cleanly closed. Returns each file's inode and contents.
fn build(dir: &Path) -> Vec<(u64, Vec<u8>)> {
    let props = [
        ("compression".to_string(), "lz4".to_string()),
        ("recordsize".to_string(), "16K".to_string()),
    ];
    Pool::create(dir, &props).expect("create");
    let (pool, _) = Pool::open(dir, options()).expect("open");
    let vfs = Vfs::new(pool, vfs_config());
    let files = (0..FILES)
        .map(|i| {
            let node = NewNode::file(0o644, 0, 0);
            let ino = vfs
                .make_node(ROOT_INO, format!("f{i}").as_bytes(), &node)
                .unwrap()
                .ino;
            let data = noise(i + 1, RECORD * RECORDS_PER_FILE);
            let fh = vfs.open(ino).unwrap();
            vfs.write(ino, 0, &data).unwrap();
            vfs.release(ino, fh).unwrap();
            (ino, data)
        })
        .collect();
    vfs.shutdown().expect("close");
    files
}

/// Every record of every file, from the metadata of a pool at rest.
fn records(dir: &Path, files: &[(u64, Vec<u8>)]) -> Vec<(u64, u64, RecordRef)> {
    let (pool, _) = Pool::open(dir, options()).expect("open");
    let mut out = Vec::new();
    for (ino, _) in files {
        for (index, rec) in pool.records(*ino, 0..).unwrap() {
            assert!(rec.in_segment(), "record {index} of {ino} is inline");
            out.push((*ino, index, rec));
        }
    }
    Vfs::new(pool, vfs_config()).shutdown().unwrap();
    out
}

/// Every file of the pool, as bytes per file and record (an error for a record that fails).
fn read_all(vfs: &Vfs, files: &[(u64, Vec<u8>)]) -> BTreeMap<(u64, u64), Result<Vec<u8>, i32>> {
    let mut out = BTreeMap::new();
    for (ino, _) in files {
        for index in 0..RECORDS_PER_FILE as u64 {
            let got = vfs
                .read(*ino, index * RECORD as u64, RECORD as u32)
                .map(|b| b.to_vec())
                .map_err(|e| e.errno());
            out.insert((*ino, index), got);
        }
    }
    out
}

/// Snapshot of every file of the pool directory.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| {
            let e = e.unwrap();
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}

fn copy_pool(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for (name, bytes) in snapshot(from) {
        std::fs::write(to.join(name), bytes).unwrap();
    }
}

fn flip(path: &Path, at: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[at as usize] ^= 0x5a;
    std::fs::write(path, bytes).unwrap();
}

/// Opens the damaged pool, reads everything, scrubs; checks that exactly `victim` (if any) is
/// damaged and everything else reads back.
fn check_mounts(
    case: &str,
    dir: &Path,
    files: &[(u64, Vec<u8>)],
    victim: Option<(u64, u64)>,
) -> presso_fs::pool::OpenReport {
    let (pool, report) =
        Pool::open(dir, options()).unwrap_or_else(|e| panic!("{case}: open refused: {e}"));
    let vfs = Vfs::new(pool.clone(), vfs_config());
    for ((ino, index), got) in read_all(&vfs, files) {
        let data = &files.iter().find(|(i, _)| *i == ino).unwrap().1;
        let want = &data[index as usize * RECORD..(index as usize + 1) * RECORD];
        match got {
            Err(errno) if Some((ino, index)) == victim => {
                assert_eq!(errno, libc::EIO, "{case}: the damaged record's error")
            }
            Ok(bytes) if Some((ino, index)) != victim => assert!(
                bytes == want,
                "{case}: inode {ino} record {index} reads other bytes"
            ),
            other => panic!(
                "{case}: inode {ino} record {index}: {:?}",
                other.map(|b| b.len())
            ),
        }
    }
    let scrub = maintenance::scrub(&pool, &mut |_| {}).expect("scrub");
    let named: Vec<_> = scrub.damaged.iter().map(|d| (d.ino, d.index)).collect();
    assert_eq!(
        named,
        victim.into_iter().collect::<Vec<_>>(),
        "{case}: scrub"
    );
    if let Some((ino, index)) = victim {
        let d = &scrub.damaged[0];
        let name = files.iter().position(|(i, _)| *i == ino).unwrap();
        assert_eq!(
            d.path.as_deref(),
            Some(format!("/f{name}").as_str()),
            "{case}"
        );
        assert_eq!(d.file_offset, Some(index * RECORD as u64), "{case}");
    }
    vfs.shutdown().unwrap();
    report
}

/// A byte of every field of an entry envelope, and of its payload, of a record in a sealed
/// segment (the first and a middle one) and of the very last record of the last segment.
#[test]
fn a_flipped_byte_in_an_entry_costs_exactly_that_record() {
    let base = TempDir::new("damage", "entry");
    let files = build(&base.0);
    let recs = records(&base.0, &files);
    let last_segment = recs.iter().map(|(_, _, r)| r.segment).max().unwrap();
    assert!(
        last_segment >= 3,
        "the files fill only {last_segment} segments"
    );
    let first = recs
        .iter()
        .min_by_key(|(_, _, r)| (r.segment, r.offset))
        .unwrap();
    let middle = recs.iter().find(|(_, _, r)| r.segment == 2).unwrap();
    let last = recs
        .iter()
        .max_by_key(|(_, _, r)| (r.segment, r.offset))
        .unwrap();
    for (field, at) in [
        ("envelope magic", 0u64),
        ("payload length", 5),
        ("payload CRC-32", 9),
        ("header CRC-32", 14),
        ("frame header", 16),
        ("payload", 16 + 2000),
    ] {
        for (place, (ino, index, rec)) in [("first", first), ("middle", middle), ("last", last)] {
            let case = format!("{field} of the {place} record");
            let dir = TempDir::new("damage", "case");
            copy_pool(&base.0, &dir.0);
            let segment = dir.0.join(segment_file_name(rec.segment));
            flip(&segment, rec.offset + at);
            let damaged_len = std::fs::metadata(&segment).unwrap().len();
            check_mounts(&case, &dir.0, &files, Some((*ino, *index)));
            assert_eq!(
                std::fs::metadata(&segment).unwrap().len(),
                damaged_len,
                "{case}: the damaged segment was cut"
            );
        }
    }
}

/// A flipped byte in a segment header (sealed or last) or in the lock file: the pool mounts and
/// every record reads back.
#[test]
fn a_flipped_byte_in_a_segment_header_or_the_lock_file_costs_nothing() {
    let base = TempDir::new("damage", "header");
    let files = build(&base.0);
    let recs = records(&base.0, &files);
    let last_segment = recs.iter().map(|(_, _, r)| r.segment).max().unwrap();
    for (place, segment) in [("sealed", 1), ("last", last_segment)] {
        for (field, at) in [
            ("magic", 1u64),
            ("number", 8),
            ("pool id", 20),
            ("CRC-32", 33),
        ] {
            let case = format!("{field} of the {place} segment's header");
            let dir = TempDir::new("damage", "case");
            copy_pool(&base.0, &dir.0);
            flip(&dir.0.join(segment_file_name(segment)), at);
            let report = check_mounts(&case, &dir.0, &files, None);
            let named: Vec<u64> = report.damaged_segment_headers.iter().map(|d| d.0).collect();
            assert_eq!(named, vec![segment], "{case}");
        }
    }
    let dir = TempDir::new("damage", "lock");
    copy_pool(&base.0, &dir.0);
    let lock = dir.0.join(presso_store::LOCK_FILE);
    std::fs::write(&lock, b"\xff\x00garbage").unwrap();
    let report = check_mounts("garbage in the lock file", &dir.0, &files, None);
    assert!(!report.found_damage(), "{report:?}");
}

/// Damage the pool cannot work around is refused with a message naming the file and what to
/// do; the refused open changes no byte of the pool.
#[test]
fn a_refused_open_changes_nothing() {
    let base = TempDir::new("damage", "refused");
    let files = build(&base.0);
    drop(files);
    for (what, file, at) in [
        ("pool header magic", presso_store::header::POOL_FILE, 0u64),
        ("pool header uuid", presso_store::header::POOL_FILE, 20),
        ("metadata header", "meta.db", 3),
    ] {
        let dir = TempDir::new("damage", "case");
        copy_pool(&base.0, &dir.0);
        flip(&dir.0.join(file), at);
        let before = snapshot(&dir.0);
        let err = match Pool::open(&dir.0, options()) {
            Ok(_) => panic!("{what}: the damaged pool opened"),
            Err(e) => e.to_string(),
        };
        assert!(
            err.contains(file),
            "{what}: the message names no file: {err}"
        );
        assert!(
            err.contains("backup") || err.contains("recover"),
            "{what}: the message says nothing about what to do: {err}"
        );
        assert!(
            snapshot(&dir.0) == before,
            "{what}: the refused open changed the pool"
        );
    }
}
