//! Timestamps set by a caller are the ones that stay: an explicit mtime (utimensat, `touch -d`,
//! `tar x`, `cp -p`, `rsync -t`) must not be overwritten by a size op the file layer queued
//! earlier and commits later.

mod sim;

use std::sync::Arc;
use std::time::Duration;

use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::Vfs;
use presso_meta::memory::MemoryEngine;
use presso_meta::{FileKind, MetaStore, NewNode, SetAttr, Timespec, ROOT_INO};
use presso_store::SimDir;

/// A pool whose transaction groups commit only when asked (a sync), so that an op queued by the
/// file layer is still pending when the test sets the time.
fn mounted(dir: &SimDir, meta: &MemoryEngine) -> Arc<Vfs> {
    let (pool, _) = Pool::open_with(
        Arc::new(dir.clone()),
        MetaStore::new(Box::new(meta.handle())),
        PoolOptions {
            txg_interval: Duration::from_secs(3600),
            ..sim::pool_options()
        },
    )
    .expect("open");
    Vfs::new(pool, sim::vfs_config())
}

fn new_file(vfs: &Vfs) -> u64 {
    let node = NewNode {
        kind: FileKind::File,
        mode: 0o644,
        uid: 0,
        gid: 0,
        rdev: 0,
        target: None,
    };
    vfs.make_node(ROOT_INO, b"f", &node).expect("create").ino
}

const ARCHIVED: Timespec = Timespec {
    secs: 1_000_000_000,
    nsec: 5,
};

fn set_mtime(vfs: &Vfs, ino: u64) {
    let set = SetAttr {
        mtime: Some(ARCHIVED),
        ..SetAttr::default()
    };
    vfs.setattr(ino, set).expect("set the mtime");
}

/// Commits everything, then checks the file keeps the time set and `size`, before and after a
/// remount.
fn assert_time_kept(vfs: Arc<Vfs>, dir: &SimDir, meta: &MemoryEngine, ino: u64, size: u64) {
    vfs.sync_all().unwrap();
    assert_eq!(
        vfs.getattr(ino).unwrap().mtime,
        ARCHIVED,
        "after the commit"
    );
    vfs.shutdown().unwrap();
    let vfs = mounted(dir, meta);
    let attr = vfs.getattr(ino).unwrap();
    assert_eq!((attr.size, attr.mtime), (size, ARCHIVED), "after a remount");
    vfs.shutdown().unwrap();
}

/// A truncate queues the file's size with the time of the truncate; a later utimensat commits at
/// once, the size op after it. The time set must win, before and after a remount.
#[test]
fn a_time_set_after_a_truncate_survives_the_truncates_commit() {
    let (dir, meta) = sim::new_pool();
    let vfs = mounted(&dir, &meta);
    let ino = new_file(&vfs);
    let fh = vfs.open(ino).unwrap();
    vfs.write(ino, 0, b"some bytes a truncate cuts").unwrap();
    vfs.setattr(
        ino,
        SetAttr {
            size: Some(4),
            ..SetAttr::default()
        },
    )
    .unwrap();
    set_mtime(&vfs, ino);
    vfs.release(ino, fh).unwrap();
    assert_time_kept(vfs, &dir, &meta, ino, 4);
}

/// The same after a preallocating writer extends the file (fallocate queues the new size at
/// once): `rsync --preallocate -t`, download tools that reserve the length first.
#[test]
fn a_time_set_after_a_fallocate_survives_its_commit() {
    let (dir, meta) = sim::new_pool();
    let vfs = mounted(&dir, &meta);
    let ino = new_file(&vfs);
    let fh = vfs.open(ino).unwrap();
    vfs.fallocate(ino, 0, 1 << 20, 0).unwrap();
    vfs.release(ino, fh).unwrap();
    set_mtime(&vfs, ino);
    assert_time_kept(vfs, &dir, &meta, ino, 1 << 20);
}
