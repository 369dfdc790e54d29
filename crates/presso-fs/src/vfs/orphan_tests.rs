//! An UNLINK racing the last close of the file it unlinks. The UNLINK reads which files are
//! open, then removes the name; a close that finishes between the two finds the file not yet
//! an orphan, and the UNLINK then makes it one with no handle left to close. The tests run the
//! two in that order by hand.

use std::sync::Arc;
use std::time::Duration;

use presso_meta::memory::MemoryEngine;
use presso_meta::{Attr, MetaStore, NewNode, ROOT_INO};
use presso_store::SimDir;

use super::{Vfs, VfsConfig};
use crate::pool::{Pool, PoolOptions};

/// The test file's length: several records.
const LEN: usize = 300_000;

fn options() -> PoolOptions {
    PoolOptions {
        txg_interval: Duration::from_millis(50),
        workers: 1,
        ..PoolOptions::default()
    }
}

/// Opens the pool on `dir` and `meta`; returns it and how many orphan records the open purged.
pub(crate) fn open_pool(dir: &SimDir, meta: &MemoryEngine) -> (Arc<Pool>, usize) {
    let (pool, report) = Pool::open_with(
        Arc::new(dir.clone()),
        MetaStore::new(Box::new(meta.handle())),
        options(),
    )
    .expect("open the pool");
    (pool, report.orphan_records_purged)
}

/// A new uncompressed pool on simulated parts: its records are stored in segments, not inline
/// in the metadata (so a mount that finds an orphan counts them, and GC moves them).
pub(crate) fn uncompressed_pool() -> (SimDir, MemoryEngine) {
    let (dir, meta) = (SimDir::new(), MemoryEngine::new());
    Pool::create_with(
        Arc::new(dir.clone()),
        &MetaStore::new(Box::new(meta.handle())),
        &[("compression".to_string(), "off".to_string())],
    )
    .expect("create the pool");
    (dir, meta)
}

/// A pool with an empty file `f`, not open yet.
fn pool_with_file() -> (SimDir, MemoryEngine, Arc<Vfs>, Attr) {
    let (dir, meta) = uncompressed_pool();
    let (pool, _) = open_pool(&dir, &meta);
    let config = VfsConfig {
        reclaim: None,
        ..VfsConfig::default()
    };
    let vfs = Vfs::new(pool, config);
    let attr = vfs
        .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0))
        .expect("create f");
    (dir, meta, vfs, attr)
}

/// A pool with file `f` holding committed records, open through the returned handle.
fn pool_with_open_file() -> (SimDir, MemoryEngine, Arc<Vfs>, u64, u64) {
    let (dir, meta, vfs, attr) = pool_with_file();
    let fh = vfs.open_created(ROOT_INO, &attr).expect("open f");
    vfs.write(attr.ino, 0, &[7; LEN]).expect("write f");
    vfs.fsync(attr.ino).expect("fsync f");
    (dir, meta, vfs, attr.ino, fh)
}

/// Unmounts and mounts again: how many records of orphans the mount had to remove.
fn orphan_records_at_next_mount(dir: &SimDir, meta: &MemoryEngine, vfs: Arc<Vfs>) -> usize {
    vfs.shutdown().expect("clean unmount");
    drop(vfs);
    open_pool(dir, meta).1
}

/// An UNLINK whose look at the open files comes before the file's last close, and whose name
/// change comes after it (and after a group commit forgot the closed file's node, if
/// `node_forgotten`): the file must be gone at once, its records with it.
fn unlink_around_the_last_close(node_forgotten: bool) {
    let (dir, meta, vfs, ino, fh) = pool_with_open_file();
    let open = vfs.open_set();
    vfs.release(ino, fh).expect("release");
    if node_forgotten {
        vfs.drop_node(ino);
    }
    let gone = vfs
        .pool
        .unlink(ROOT_INO, b"f", &|i| open.contains(&i))
        .expect("unlink");
    vfs.name_dropped(&gone);
    assert!(
        vfs.getattr(ino).is_err(),
        "the unlinked, closed file is still there"
    );
    assert!(!vfs.files.lock().contains_key(&ino));
    assert_eq!(orphan_records_at_next_mount(&dir, &meta, vfs), 0);
}

#[test]
fn a_close_between_an_unlinks_look_and_its_removal_still_frees_the_file() {
    unlink_around_the_last_close(false);
}

/// A group commit forgets the node of a closed file whose changes are all committed: the name
/// change then finds no node, and must still remove the orphan.
#[test]
fn a_close_and_a_forgotten_node_between_an_unlinks_look_and_its_removal_still_free_the_file() {
    unlink_around_the_last_close(true);
}

#[test]
fn a_close_between_a_renames_look_and_its_replacing_still_frees_the_file() {
    let (dir, meta, vfs, ino, fh) = pool_with_open_file();
    vfs.make_node(ROOT_INO, b"g", &NewNode::file(0o644, 0, 0))
        .expect("create g");
    let open = vfs.open_set();
    vfs.release(ino, fh).expect("release");
    let replaced = vfs
        .pool
        .rename(ROOT_INO, b"g", ROOT_INO, b"f", &|i| open.contains(&i))
        .expect("rename")
        .expect("f was replaced");
    vfs.name_dropped(&replaced);
    assert!(
        vfs.getattr(ino).is_err(),
        "the replaced, closed file is still there"
    );
    assert_eq!(orphan_records_at_next_mount(&dir, &meta, vfs), 0);
}

#[test]
fn a_file_unlinked_while_open_lives_until_its_last_close() {
    let (dir, meta, vfs, ino, fh) = pool_with_open_file();
    vfs.unlink(ROOT_INO, b"f").expect("unlink");
    assert_eq!(vfs.read(ino, 0, 2 * LEN as u32).expect("read").len(), LEN);
    vfs.release(ino, fh).expect("release");
    assert!(
        vfs.getattr(ino).is_err(),
        "the closed orphan is still there"
    );
    assert_eq!(orphan_records_at_next_mount(&dir, &meta, vfs), 0);
}

/// A group commit between a new file's node and its open count (CREATE makes the node, then
/// counts the open) forgot the node as a closed file. An UNLINK then took the open file for
/// closed and removed its inode, and the file's later writes and fsync failed with ENOENT.
#[test]
fn a_group_commit_between_a_files_node_and_its_open_keeps_the_file_open() {
    let (dir, meta, vfs, attr) = pool_with_file();
    let node = vfs.node_with(attr.clone(), None).expect("its node");
    vfs.committed(&[], u64::MAX);
    let fh = vfs.opened(&node);
    vfs.unlink(ROOT_INO, b"f").expect("unlink");
    vfs.write(attr.ino, 0, &[7; LEN])
        .expect("write the open orphan");
    vfs.fsync(attr.ino).expect("fsync the open orphan");
    assert_eq!(
        vfs.read(attr.ino, 0, 2 * LEN as u32).expect("read").len(),
        LEN
    );
    vfs.release(attr.ino, fh).expect("release");
    assert!(
        vfs.getattr(attr.ino).is_err(),
        "the closed orphan is still there"
    );
    assert_eq!(orphan_records_at_next_mount(&dir, &meta, vfs), 0);
}
