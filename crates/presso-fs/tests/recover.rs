//! `presso recover`: rebuilding a pool whose `meta.db` is deleted, emptied or corrupted, from
//! its metadata copy (older than the newest data) and the tagged entries of its segments.

mod common;

use common::TempDir;
use std::collections::BTreeMap;
use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions, COPY_FILE};
use presso_fs::recover::{recover, RecoverOptions, RecoverReport};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_fs::FsError;
use presso_meta::{FileKind, NewNode, ROOT_INO};

fn temp_pool(tag: &str) -> TempDir {
    let dir = TempDir::new("recover", tag);
    Pool::create(&dir.0, &[("compression".into(), "lz4".into())]).expect("create");
    dir
}

fn options() -> PoolOptions {
    PoolOptions {
        // Only the clean close writes the copy: it stays older than what follows.
        metadata_copy_every: Duration::from_secs(3600),
        segment_size: 1 << 20,
        ..PoolOptions::default()
    }
}

fn open(dir: &Path) -> Arc<Vfs> {
    let (pool, _) = Pool::open(dir, options()).expect("open");
    Vfs::new(pool, VfsConfig::default())
}

/// Text-like bytes that compress, but never to a frame small enough to be kept inline.
fn data(seed: u64, len: usize) -> Vec<u8> {
    let words: [&[u8]; 8] = [
        b"segment ",
        b"record ",
        b"GATTACA ",
        b"txg ",
        b"inode ",
        b"42 ",
        b"\n",
        b"recover ",
    ];
    let mut s = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        s ^= s << 13;
        s ^= s >> 7;
        s ^= s << 17;
        out.extend_from_slice(words[(s % 8) as usize]);
        out.push(b'a' + (s >> 40) as u8 % 26);
    }
    out.truncate(len);
    out
}

fn write_at(vfs: &Vfs, ino: u64, offset: u64, bytes: &[u8]) {
    let fh = vfs.open(ino).unwrap();
    vfs.write(ino, offset, bytes).unwrap();
    vfs.fsync(ino).unwrap();
    vfs.release(ino, fh).unwrap();
}

fn create(vfs: &Vfs, parent: u64, name: &str, bytes: &[u8]) -> u64 {
    let ino = vfs
        .make_node(parent, name.as_bytes(), &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    write_at(vfs, ino, 0, bytes);
    ino
}

fn mkdir(vfs: &Vfs, parent: u64, name: &str) -> u64 {
    vfs.make_node(parent, name.as_bytes(), &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino
}

fn read_all(vfs: &Vfs, ino: u64) -> Vec<u8> {
    let size = vfs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let chunk = vfs.read(ino, out.len() as u64, 1 << 20).unwrap();
        assert!(!chunk.as_ref().is_empty(), "short read at {}", out.len());
        out.extend_from_slice(chunk.as_ref());
    }
    out
}

/// What a daemon killed after its fsyncs leaves: everything committed, no copy refreshed.
fn kill(vfs: Arc<Vfs>) {
    let pool = vfs.pool().clone();
    vfs.halt();
    drop(vfs);
    while Arc::strong_count(&pool) > 1 {
        std::thread::yield_now();
    }
    drop(pool);
}

/// Every file of the pool by path, with its bytes.
fn tree(vfs: &Vfs) -> BTreeMap<String, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut dirs = vec![(ROOT_INO, String::new())];
    while let Some((dir, path)) = dirs.pop() {
        for e in vfs.readdir(dir, None, 1 << 20).unwrap() {
            let name = String::from_utf8(e.name.clone()).unwrap();
            let p = format!("{path}/{name}");
            match e.kind {
                FileKind::Dir => dirs.push((e.ino, p)),
                FileKind::File => {
                    out.insert(p, read_all(vfs, e.ino));
                }
                _ => {}
            }
        }
    }
    out
}

/// The pool of the tests: a copy taken at a clean close, then, after it, files overwritten in
/// part, appended to, created in a known directory and in a new one, all fsync'd, and the
/// daemon killed. Returns the expected tree after recovery (new files under
/// `/lost+found/<inode>`).
fn pool_newer_than_its_copy(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    let vfs = open(dir);
    let docs = mkdir(&vfs, ROOT_INO, "docs");
    let a = create(&vfs, docs, "a.txt", &data(1, 600_000));
    let b = create(&vfs, docs, "b.txt", &data(2, 200_000));
    create(&vfs, ROOT_INO, "same.txt", &data(3, 150_000));
    vfs.shutdown().unwrap();
    drop(vfs);
    assert!(dir.join(COPY_FILE).is_file());

    let vfs = open(dir);
    let mut a_data = data(1, 600_000);
    let patch = data(11, 150_000);
    write_at(&vfs, a, 200_000, &patch);
    a_data[200_000..350_000].copy_from_slice(&patch);
    let mut b_data = data(2, 200_000);
    let tail = data(12, 333_333);
    write_at(&vfs, b, 200_000, &tail);
    b_data.extend_from_slice(&tail);
    // The first inode number after the copy's is a file's: lost+found must not take it.
    let d_data = data(14, 77_777);
    let d = create(&vfs, docs, "d.txt", &d_data);
    let new_dir = mkdir(&vfs, ROOT_INO, "new");
    let c_data = data(13, 400_000);
    let c = create(&vfs, new_dir, "c.txt", &c_data);
    kill(vfs);

    BTreeMap::from([
        ("/docs/a.txt".to_string(), a_data),
        ("/docs/b.txt".to_string(), b_data),
        ("/same.txt".to_string(), data(3, 150_000)),
        (format!("/lost+found/{c}"), c_data),
        (format!("/lost+found/{d}"), d_data),
    ])
}

fn recover_ok(dir: &Path) -> RecoverReport {
    let mut calls = 0;
    let report = recover(dir, RecoverOptions::default(), &mut |_| calls += 1)
        .unwrap_or_else(|e| panic!("recover failed: {e}"));
    assert!(calls >= 2, "no progress reported");
    report
}

fn check_recovered(dir: &Path, expected: &BTreeMap<String, Vec<u8>>, report: &RecoverReport) {
    assert_eq!(report.started_from, COPY_FILE, "{report:?}");
    assert_eq!(report.files_restored, 2, "{report:?}");
    assert_eq!(report.lost_found.len(), 2, "{report:?}");
    assert!(report.records_applied >= 7, "{report:?}");
    assert_eq!(report.records_missing, 0, "{report:?}");
    assert!(
        report
            .moved_aside
            .iter()
            .any(|n| n.starts_with("meta.db.damaged-")),
        "{report:?}"
    );
    for name in &report.moved_aside {
        assert!(dir.join(name).exists(), "{name} is gone");
    }
    let vfs = open(dir);
    let got = tree(&vfs);
    assert_eq!(
        got.keys().collect::<Vec<_>>(),
        expected.keys().collect::<Vec<_>>()
    );
    for (path, bytes) in expected {
        assert!(got[path] == *bytes, "{path} differs after recovery");
    }
    let scrub = maintenance::scrub(vfs.pool(), &mut |_| {}).unwrap();
    assert!(scrub.clean(), "{scrub:?}");
    vfs.shutdown().unwrap();
}

#[test]
fn deleted_metadata_is_rebuilt_from_the_copy_and_the_segments() {
    let dir = temp_pool("deleted");
    let expected = pool_newer_than_its_copy(&dir.0);
    for suffix in ["", "-wal", "-shm"] {
        let _ = std::fs::remove_file(dir.0.join(format!("meta.db{suffix}")));
    }
    let refused = Pool::open(&dir.0, options()).map(|_| ()).unwrap_err();
    assert!(
        refused.to_string().contains("presso recover"),
        "the refusal does not name recover: {refused}"
    );
    let report = recover_ok(&dir.0);
    // Nothing to move aside but nothing lost either.
    let vfs = open(&dir.0);
    assert_tree(&tree(&vfs), &expected);
    vfs.shutdown().unwrap();
    assert_eq!(report.lost_found.len(), 2, "{report:?}");
}

#[test]
fn emptied_metadata_is_rebuilt_from_the_copy_and_the_segments() {
    let dir = temp_pool("emptied");
    let expected = pool_newer_than_its_copy(&dir.0);
    std::fs::write(dir.0.join("meta.db"), b"").unwrap();
    let report = recover_ok(&dir.0);
    check_recovered(&dir.0, &expected, &report);
}

#[test]
fn corrupted_metadata_is_rebuilt_from_the_copy_and_the_segments() {
    let dir = temp_pool("corrupted");
    let expected = pool_newer_than_its_copy(&dir.0);
    let meta = dir.0.join("meta.db");
    let mut bytes = std::fs::read(&meta).unwrap();
    for (i, b) in bytes.iter_mut().take(8192).enumerate() {
        *b ^= 0x5A ^ (i as u8);
    }
    std::fs::write(&meta, &bytes).unwrap();
    let refused = Pool::open(&dir.0, options()).map(|_| ()).unwrap_err();
    assert!(refused.to_string().contains("presso recover"), "{refused}");
    let report = recover_ok(&dir.0);
    check_recovered(&dir.0, &expected, &report);
    let damaged = report
        .moved_aside
        .iter()
        .find(|n| !n.ends_with("-wal") && !n.ends_with("-shm") && !n.ends_with("-intent"))
        .unwrap();
    assert_eq!(
        std::fs::read(dir.0.join(damaged)).unwrap(),
        bytes,
        "the damaged metadata was not kept as it was"
    );
}

/// Without a copy, every file with records goes to /lost+found by inode number.
#[test]
fn without_a_copy_every_file_goes_to_lost_found() {
    let dir = temp_pool("nocopy");
    let vfs = open(&dir.0);
    let docs = mkdir(&vfs, ROOT_INO, "docs");
    let a = create(&vfs, docs, "a.txt", &data(21, 300_000));
    let b = create(&vfs, ROOT_INO, "b.txt", &data(22, 1_000_001));
    kill(vfs);
    std::fs::remove_file(dir.0.join("meta.db")).unwrap();
    assert!(!dir.0.join(COPY_FILE).exists());
    let report = recover_ok(&dir.0);
    assert_eq!(report.started_from, "empty metadata");
    assert!(report.copy_unusable.is_some());
    let vfs = open(&dir.0);
    let expected = BTreeMap::from([
        (format!("/lost+found/{a}"), data(21, 300_000)),
        (format!("/lost+found/{b}"), data(22, 1_000_001)),
    ]);
    assert_tree(&tree(&vfs), &expected);
    // The pool's creation properties are back.
    assert_eq!(vfs.get_prop(ROOT_INO, "compression").unwrap().0, "lz4");
    vfs.shutdown().unwrap();
}

/// A mounted (open) pool is refused, and nothing changes.
#[test]
fn recover_refuses_a_pool_in_use_and_changes_nothing() {
    let dir = temp_pool("inuse");
    let vfs = open(&dir.0);
    create(&vfs, ROOT_INO, "x", &data(31, 100_000));
    vfs.sync_all().unwrap();
    let before = snapshot(&dir.0);
    let err = recover(&dir.0, RecoverOptions { force: true }, &mut |_| {}).unwrap_err();
    assert!(matches!(err, FsError::Refused(_)), "{err}");
    assert!(err.to_string().contains("in use"), "{err}");
    assert_eq!(
        snapshot(&dir.0),
        before,
        "a refused recovery changed the pool"
    );
    vfs.shutdown().unwrap();
}

/// A second recovery finds intact metadata and changes nothing; forced, it rebuilds the same
/// pool again.
#[test]
fn recovering_twice_is_harmless() {
    let dir = temp_pool("twice");
    let expected = pool_newer_than_its_copy(&dir.0);
    std::fs::write(dir.0.join("meta.db"), b"").unwrap();
    recover_ok(&dir.0);
    let before = snapshot(&dir.0);
    let err = recover(&dir.0, RecoverOptions::default(), &mut |_| {}).unwrap_err();
    assert!(err.to_string().contains("intact"), "{err}");
    assert_eq!(snapshot(&dir.0), before);
    let again = recover(&dir.0, RecoverOptions { force: true }, &mut |_| {}).unwrap();
    assert_eq!(again.lost_found.len(), 2, "{again:?}");
    let vfs = open(&dir.0);
    assert_tree(&tree(&vfs), &expected);
    vfs.shutdown().unwrap();
}

/// Garbage collection after the copy moved records the copy names and removed their segment:
/// recovery finds them where GC put them (same tag, same checksum).
#[test]
fn records_moved_by_gc_after_the_copy_are_found_again() {
    let dir = temp_pool("gc");
    let vfs = open(&dir.0);
    let mut files = BTreeMap::new();
    for i in 0..6u64 {
        let bytes = data(40 + i, 250_000);
        create(&vfs, ROOT_INO, &format!("f{i}"), &bytes);
        files.insert(format!("/f{i}"), bytes);
    }
    vfs.shutdown().unwrap();
    drop(vfs);
    let vfs = open(&dir.0);
    // Garbage in the first segments: f0 rewritten whole.
    let f0 = vfs.lookup(ROOT_INO, b"f0").unwrap().ino;
    let fresh = data(99, 250_000);
    write_at(&vfs, f0, 0, &fresh);
    files.insert("/f0".to_string(), fresh);
    let gc = maintenance::gc(vfs.pool(), 1.0, &mut |_| {}).unwrap();
    assert!(
        gc.segments_collected >= 1 && gc.records_moved >= 1,
        "{gc:?}"
    );
    kill(vfs);
    std::fs::write(dir.0.join("meta.db"), b"garbage, not a database").unwrap();
    let report = recover_ok(&dir.0);
    assert!(report.records_relocated >= 1, "{report:?}");
    assert_eq!(report.records_missing, 0, "{report:?}");
    assert!(report.lost_found.is_empty(), "{report:?}");
    let vfs = open(&dir.0);
    assert_tree(&tree(&vfs), &files);
    vfs.shutdown().unwrap();
}

/// Records kept inline in the metadata (frames of at most 112 bytes: a tiny file, the short
/// tail of a longer one) come back too: their frames are also written to the segments.
#[test]
fn inline_records_written_after_the_copy_come_back() {
    let dir = temp_pool("inline");
    let vfs = open(&dir.0);
    let old = create(&vfs, ROOT_INO, "old", &data(50, 300_000));
    vfs.shutdown().unwrap();
    drop(vfs);
    let vfs = open(&dir.0);
    let tiny = b"a tiny file, kept inline in the metadata\n".to_vec();
    let t = create(&vfs, ROOT_INO, "tiny", &tiny);
    let tail = data(51, 2 * 131_072 + 60);
    let l = create(&vfs, ROOT_INO, "tail", &tail);
    assert!(
        vfs.pool().record(l, 2).unwrap().unwrap().inline.is_some(),
        "the tail record is not inline; the test needs one"
    );
    // An existing file gets a short tail, also inline.
    let mut old_data = data(50, 300_000);
    let more = b"and twelve more".to_vec();
    write_at(&vfs, old, 300_000, &more);
    old_data.extend_from_slice(&more);
    kill(vfs);
    std::fs::write(dir.0.join("meta.db"), b"").unwrap();
    recover_ok(&dir.0);
    let vfs = open(&dir.0);
    let expected = BTreeMap::from([
        ("/old".to_string(), old_data),
        (format!("/lost+found/{t}"), tiny),
        (format!("/lost+found/{l}"), tail),
    ]);
    assert_tree(&tree(&vfs), &expected);
    vfs.shutdown().unwrap();
}

/// Records that became holes after the copy (zeros written over data, a file ending in zeros)
/// come back as zeros, at the right size.
#[test]
fn holes_written_after_the_copy_come_back_as_zeros() {
    let dir = temp_pool("holes");
    let vfs = open(&dir.0);
    let old = create(&vfs, ROOT_INO, "old", &data(60, 500_000));
    vfs.shutdown().unwrap();
    drop(vfs);
    let vfs = open(&dir.0);
    let mut old_data = data(60, 500_000);
    // Record 1 (128 KiB to 256 KiB) zeroed whole: a hole replaces the copy's record.
    let zeros = vec![0u8; 131_072];
    write_at(&vfs, old, 131_072, &zeros);
    old_data[131_072..262_144].fill(0);
    let mut sparse = data(61, 100_000);
    sparse.resize(100_000 + 400_000, 0);
    let s = create(&vfs, ROOT_INO, "sparse", &sparse);
    kill(vfs);
    std::fs::write(dir.0.join("meta.db"), b"").unwrap();
    recover_ok(&dir.0);
    let vfs = open(&dir.0);
    let expected = BTreeMap::from([
        ("/old".to_string(), old_data),
        (format!("/lost+found/{s}"), sparse),
    ]);
    assert_tree(&tree(&vfs), &expected);
    vfs.shutdown().unwrap();
}

/// The trees are equal; a difference is shown by names and sizes, not bytes.
fn assert_tree(got: &BTreeMap<String, Vec<u8>>, expected: &BTreeMap<String, Vec<u8>>) {
    let sizes = |t: &BTreeMap<String, Vec<u8>>| -> Vec<(String, usize)> {
        t.iter().map(|(k, v)| (k.clone(), v.len())).collect()
    };
    assert_eq!(sizes(got), sizes(expected));
    for (path, bytes) in expected {
        assert!(got[path] == *bytes, "{path} differs");
    }
}

/// Every file of `dir` with its bytes.
fn snapshot(dir: &Path) -> BTreeMap<String, Vec<u8>> {
    std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap())
        .filter(|e| e.file_type().unwrap().is_file())
        .map(|e| {
            (
                e.file_name().to_string_lossy().into_owned(),
                std::fs::read(e.path()).unwrap(),
            )
        })
        .collect()
}
