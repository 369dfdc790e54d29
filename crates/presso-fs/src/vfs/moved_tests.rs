//! A read at the place garbage collection has moved a record's frame from (readahead reads at
//! places it looked up earlier): the record is looked up again and read at its new place, and
//! the failed read is not counted as damage in the pool. A read that fails where the frame did
//! not move still is.

use std::sync::atomic::Ordering;

use presso_meta::{NewNode, RecordRef, ROOT_INO};

use super::orphan_tests::{open_pool, uncompressed_pool};
use super::{Vfs, VfsConfig};
use crate::maintenance;

/// The default record size.
const RS: usize = 128 << 10;
const RECORDS: u64 = 8;

#[test]
fn a_read_where_a_frame_was_before_it_moved_is_not_damage() {
    let (dir, meta) = uncompressed_pool();
    let (pool, _) = open_pool(&dir, &meta);
    // No record fits the cache, so every load reads the store.
    let config = VfsConfig {
        reclaim: None,
        cache_bytes: 1,
        ..VfsConfig::default()
    };
    let vfs = Vfs::new(pool.clone(), config);
    let file = |name: &[u8]| {
        vfs.make_node(ROOT_INO, name, &NewNode::file(0o644, 0, 0))
            .expect("create")
            .ino
    };
    let (kept, doomed) = (file(b"kept"), file(b"doomed"));
    // Written in turn and committed together, so that the kept file's segments hold garbage
    // once the other file is gone.
    for index in 0..RECORDS {
        let at = index * RS as u64;
        vfs.write(kept, at, &[index as u8 + 1; RS]).expect("write");
        vfs.write(doomed, at, &[0xee; RS]).expect("write");
    }
    vfs.sync_all().expect("sync");
    let before = pool.records(kept, 0..RECORDS).expect("records");
    vfs.unlink(ROOT_INO, b"doomed").expect("unlink");
    vfs.sync_all().expect("sync");
    maintenance::gc(&pool, 1.0, &mut |_| {}).expect("gc");
    let after = pool.records(kept, 0..RECORDS).expect("records");
    let (index, left) = before
        .iter()
        .zip(&after)
        .find(|(was, now)| was.1.segment != now.1.segment)
        .map(|(was, _)| was.clone())
        .expect("no record of the kept file moved");

    let damage = || pool.counters().corruptions.load(Ordering::Relaxed);
    let counted = damage();
    let data = vfs.load(kept, index, &left).expect("the moved record");
    assert!(data.iter().all(|&b| b == index as u8 + 1));
    assert_eq!(
        damage(),
        counted,
        "a read where the frame was before it moved was counted as damage"
    );

    // The same place named for another frame than the record's: not a move, so damage.
    let other = RecordRef {
        checksum: left.checksum ^ 1,
        ..left.clone()
    };
    assert!(vfs.load(kept, index, &other).is_err());
    assert_eq!(damage(), counted + 1);
    vfs.shutdown().expect("shut down");
}
