//! The pool's own copy of its metadata (`meta.db.copy`): refreshed while the pool changes and at
//! every clean close, always whole, and enough to get every file back when `meta.db` is lost.

mod common;

use common::TempDir;
use std::path::Path;
use std::time::{Duration, Instant};

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
    let (pool, _) = Pool::open(&dir.0, options).unwrap();
    let vfs = Vfs::new(pool, VfsConfig::default());
    create_file(&vfs, "early", b"written while mounted");
    vfs.sync_all().unwrap();
    // The refresh runs in the background after a commit that changed something.
    let started = Instant::now();
    while !copy_has(&dir.0, "early") {
        assert!(
            started.elapsed() < Duration::from_secs(30),
            "no copy holding the file 30 s after its commit"
        );
        std::thread::sleep(Duration::from_millis(20));
    }
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
    let dir = temp_pool("restore");
    let (pool, _) = Pool::open(&dir.0, PoolOptions::default()).unwrap();
    let vfs = Vfs::new(pool, VfsConfig::default());
    let data: Vec<u8> = (0..300_000u32).map(|i| (i % 251) as u8).collect();
    create_file(&vfs, "precious", &data);
    vfs.shutdown().unwrap();

    let meta = dir.0.join("meta.db");
    std::fs::write(&meta, b"").unwrap();
    let refused = Pool::open(&dir.0, PoolOptions::default())
        .map(|_| ())
        .expect_err("empty metadata opened")
        .to_string();
    assert!(refused.contains(COPY_FILE), "{refused}");

    std::fs::copy(dir.0.join(COPY_FILE), &meta).unwrap();
    let (pool, _) = Pool::open(&dir.0, PoolOptions::default()).unwrap();
    let vfs = Vfs::new(pool, VfsConfig::default());
    let ino = vfs.lookup(ROOT_INO, b"precious").unwrap().ino;
    assert_eq!(&vfs.read(ino, 0, data.len() as u32).unwrap()[..], &data[..]);
    vfs.shutdown().unwrap();
}
