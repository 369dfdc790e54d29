//! The pool's own copy of its metadata (`meta.db.copy`): refreshed while the pool changes and at
//! every clean close, always whole, and enough to get every file back when `meta.db` is lost.

mod common;

use common::TempDir;
use std::path::Path;
use std::time::{Duration, Instant};

use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions, COPY_FILE};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{MetaStore, NewNode, ROOT_INO};

fn temp_pool(tag: &str) -> TempDir {
    let dir = TempDir::new("metacopy", tag);
    Pool::create(&dir.0, &[]).expect("create");
    dir
}

fn create_file(vfs: &Vfs, name: &str, data: &[u8]) -> u64 {
    let ino = vfs
        .make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    let fh = vfs.open(ino).unwrap();
    vfs.write(ino, 0, data).unwrap();
    vfs.release(ino, fh).unwrap();
    ino
}

/// The pool in `dir`, opened with `options`, under a file layer.
fn mount(dir: &Path, options: PoolOptions) -> std::sync::Arc<Vfs> {
    let (pool, _) = Pool::open(dir, options).unwrap();
    Vfs::new(pool, VfsConfig::default())
}

/// `len` bytes of a pattern that compresses.
fn patterned(len: u32) -> Vec<u8> {
    (0..len).map(|i| (i % 251) as u8).collect()
}

/// Waits until the copy in `dir` names `name`, which the background refresh writes a moment
/// after the change; fails after 30 s.
fn wait_for_copy_of(dir: &Path, name: &str) {
    let started = Instant::now();
    while !copy_has(dir, name) {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no copy naming {name} 30 s after the change"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
}

/// A new pool holding one file, `name` with `data`, closed (which writes its copy).
fn pool_holding(tag: &str, name: &str, data: &[u8]) -> TempDir {
    let dir = temp_pool(tag);
    let vfs = mount(&dir.0, PoolOptions::default());
    create_file(&vfs, name, data);
    vfs.shutdown().unwrap();
    dir
}

/// Whether the copy in `dir` opens on its own and names `name`.
fn copy_has(dir: &Path, name: &str) -> bool {
    MetaStore::open_sqlite(dir.join(COPY_FILE))
        .and_then(|m| m.lookup(ROOT_INO, name.as_bytes()))
        .is_ok()
}

#[test]
fn the_copy_follows_the_pool_while_it_changes_and_at_close() {
    let dir = temp_pool("follows");
    let options = PoolOptions {
        metadata_copy_every: Duration::ZERO,
        ..PoolOptions::default()
    };
    let vfs = mount(&dir.0, options);
    create_file(&vfs, "early", b"written while mounted");
    vfs.sync_all().unwrap();
    // The refresh runs in the background after a commit that changed something.
    wait_for_copy_of(&dir.0, "early");
    create_file(&vfs, "late", b"written just before the close");
    vfs.shutdown().unwrap();
    assert!(
        copy_has(&dir.0, "late"),
        "the close did not refresh the copy"
    );
    assert!(!dir.0.join(format!("{COPY_FILE}.tmp")).exists());
}

#[test]
fn the_copy_gives_back_every_file_when_the_metadata_is_lost() {
    let data = patterned(300_000);
    let dir = pool_holding("restore", "precious", &data);

    let meta = dir.0.join("meta.db");
    std::fs::write(&meta, b"").unwrap();
    let refused = Pool::open(&dir.0, PoolOptions::default())
        .map(|_| ())
        .expect_err("empty metadata opened")
        .to_string();
    assert!(refused.contains(COPY_FILE), "{refused}");

    std::fs::copy(dir.0.join(COPY_FILE), &meta).unwrap();
    let vfs = mount(&dir.0, PoolOptions::default());
    let ino = vfs.lookup(ROOT_INO, b"precious").unwrap().ino;
    assert_eq!(&vfs.read(ino, 0, data.len() as u32).unwrap()[..], &data[..]);
    vfs.shutdown().unwrap();
}

/// The copy file's identity: each refresh renames a new file over it.
fn copy_identity(dir: &Path) -> (u64, std::time::SystemTime) {
    use std::os::unix::fs::MetadataExt;
    let meta = std::fs::metadata(dir.join(COPY_FILE)).unwrap();
    (meta.ino(), meta.modified().unwrap())
}

#[test]
fn a_mount_that_only_reads_leaves_the_copy_as_it_is() {
    let data = patterned(300_000);
    let dir = pool_holding("reads-only", "kept", &data);
    let before = copy_identity(&dir.0);

    for _ in 0..2 {
        let vfs = mount(&dir.0, PoolOptions::default());
        let ino = vfs.lookup(ROOT_INO, b"kept").unwrap().ino;
        let fh = vfs.open(ino).unwrap();
        assert_eq!(&vfs.read(ino, 0, data.len() as u32).unwrap()[..], &data[..]);
        vfs.release(ino, fh).unwrap();
        // The sweep saves the mount's statistics (bytes read): a write that is no change.
        vfs.sync_all().unwrap();
        vfs.shutdown().unwrap();
        assert_eq!(copy_identity(&dir.0), before, "the copy was rewritten");
    }
    let read = MetaStore::open_sqlite(dir.0.join("meta.db"))
        .unwrap()
        .statistics(&["stat.read_bytes"])
        .unwrap();
    assert!(read[0] >= 2 * data.len() as u64, "{read:?}");
}

/// A change of names alone (no record, so no transaction group with ops) is a change: the copy
/// follows it while mounted and at close.
#[test]
fn a_rename_alone_is_copied_while_mounted_and_at_close() {
    let dir = pool_holding("rename", "first", b"named three times");
    assert!(copy_has(&dir.0, "first"));

    let options = PoolOptions {
        metadata_copy_every: Duration::ZERO,
        ..PoolOptions::default()
    };
    let vfs = mount(&dir.0, options);
    vfs.rename(ROOT_INO, b"first", ROOT_INO, b"second").unwrap();
    wait_for_copy_of(&dir.0, "second");
    vfs.rename(ROOT_INO, b"second", ROOT_INO, b"third").unwrap();
    vfs.shutdown().unwrap();
    assert!(
        copy_has(&dir.0, "third"),
        "the close did not copy the rename"
    );
}

/// Scrub checks the copy: a sound one is left as it is, a damaged or missing one is written
/// afresh, and the report says which.
#[test]
fn scrub_writes_a_fresh_copy_in_place_of_a_damaged_or_missing_one() {
    let dir = temp_pool("scrub");
    let vfs = mount(&dir.0, PoolOptions::default());
    for i in 0..200 {
        create_file(&vfs, &format!("file-{i}"), b"a name to keep");
    }
    vfs.shutdown().unwrap();
    let copy = dir.0.join(COPY_FILE);
    let sound = copy_identity(&dir.0);

    let (pool, _) = Pool::open(&dir.0, PoolOptions::default()).unwrap();
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert_eq!(report.metadata_copy_problem, None);
    assert!(report.clean());
    assert_eq!(copy_identity(&dir.0), sound, "a sound copy was rewritten");

    // Every page after the header's overwritten: the file still opens, its B-trees do not.
    let mut bytes = std::fs::read(&copy).unwrap();
    assert!(bytes.len() > 8192, "a copy of {} bytes", bytes.len());
    for (i, b) in bytes[4096..].iter_mut().enumerate() {
        *b = (i * 7 % 251) as u8;
    }
    std::fs::write(&copy, &bytes).unwrap();
    assert!(!copy_has(&dir.0, "file-199"));
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert!(report.metadata_copy_problem.is_some(), "{report:?}");
    assert_eq!(report.metadata_copy_not_rewritten, None);
    assert!(report.clean());
    assert!(copy_has(&dir.0, "file-199"), "the fresh copy");

    std::fs::remove_file(&copy).unwrap();
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert_eq!(
        report.metadata_copy_problem.as_deref(),
        Some("there is none")
    );
    assert!(copy_has(&dir.0, "file-199"), "the fresh copy");
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert_eq!(report.metadata_copy_problem, None);
    pool.close().unwrap();
}
