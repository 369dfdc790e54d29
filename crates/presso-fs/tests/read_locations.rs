//! The record locations a sequential reader keeps between its reads (so that the metadata is
//! asked once per readahead batch): a rewrite, a truncate or a punched hole that commits while
//! the file stays open is read back at once, never the locations kept from before.

mod sim;

use std::sync::Arc;

use presso_fs::maintenance;
use presso_fs::pool::Pool;
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{NewNode, SetAttr, ROOT_INO};
use std::sync::atomic::Ordering;

/// Record size of the default pool.
const RS: usize = 128 << 10;
/// Records of the file.
const RECORDS: usize = 40;

fn mounted() -> (Arc<Vfs>, Arc<Pool>) {
    // A decoded-record cache smaller than the file, so that reads go to the segments.
    let config = VfsConfig {
        cache_bytes: 1 << 20,
        ..sim::vfs_config()
    };
    let (vfs, pool, _) = sim::mounted_with(config);
    (vfs, pool)
}

/// A new empty file named `name`; returns its inode.
fn new_file(vfs: &Vfs, name: &str) -> u64 {
    vfs.make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino
}

/// A new file named `name` holding `data`, committed; returns its inode.
fn file_of(vfs: &Vfs, name: &str, data: &[Vec<u8>]) -> u64 {
    let ino = new_file(vfs, name);
    for (index, rec) in data.iter().enumerate() {
        vfs.write(ino, (index * RS) as u64, rec).unwrap();
    }
    vfs.sync_all().unwrap();
    ino
}

/// Record `index` of version `v`: bytes no other record or version has.
fn record(index: usize, v: u8) -> Vec<u8> {
    (0..RS)
        .map(|i| (i as u8).wrapping_mul(31) ^ (index as u8) ^ v.wrapping_mul(101))
        .collect()
}

/// Reads the whole file front to back, a record per request (as the kernel asks), and checks
/// every record against `want`.
fn read_through(vfs: &Vfs, ino: u64, want: &[Vec<u8>], what: &str) {
    for (index, expected) in want.iter().enumerate() {
        let got = vfs.read(ino, (index * RS) as u64, RS as u32).unwrap();
        assert!(
            got[..] == expected[..],
            "{what}: record {index} reads other bytes ({} bytes)",
            got.len()
        );
    }
}

#[test]
fn changes_committed_while_a_reader_keeps_locations_are_read_back() {
    let (vfs, _) = mounted();
    let mut want: Vec<Vec<u8>> = (0..RECORDS).map(|i| record(i, 0)).collect();
    let ino = file_of(&vfs, "f", &want);
    let fh = vfs.open(ino).unwrap();
    read_through(&vfs, ino, &want, "written");
    read_through(&vfs, ino, &want, "read again");

    // Rewrites, each committed before the next read.
    for (round, index) in [3usize, 4, 20, 39].into_iter().enumerate() {
        want[index] = record(index, round as u8 + 1);
        vfs.write(ino, (index * RS) as u64, &want[index]).unwrap();
        vfs.sync_all().unwrap();
        read_through(&vfs, ino, &want, &format!("record {index} rewritten"));
    }

    // A truncate into the middle, then the file grown back: the cut records read as zeros.
    let size = |s: usize| SetAttr {
        size: Some(s as u64),
        ..SetAttr::default()
    };
    vfs.setattr(ino, size(10 * RS)).unwrap();
    vfs.sync_all().unwrap();
    vfs.setattr(ino, size(RECORDS * RS)).unwrap();
    vfs.sync_all().unwrap();
    for rec in &mut want[10..] {
        *rec = vec![0; RS];
    }
    read_through(&vfs, ino, &want, "truncated and grown");

    // Records written again past the cut, and a hole punched into the kept part.
    for (index, rec) in want.iter_mut().enumerate().skip(10) {
        *rec = record(index, 9);
        vfs.write(ino, (index * RS) as u64, rec).unwrap();
    }
    vfs.sync_all().unwrap();
    read_through(&vfs, ino, &want, "written again");
    let punch = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
    vfs.fallocate(ino, (5 * RS) as u64, (3 * RS) as u64, punch)
        .unwrap();
    vfs.sync_all().unwrap();
    for rec in &mut want[5..8] {
        *rec = vec![0; RS];
    }
    read_through(&vfs, ino, &want, "hole punched");

    vfs.release(ino, fh).unwrap();
    vfs.shutdown().unwrap();
}

/// Garbage collection moves the records a reader keeps locations of, and removes the segment
/// they left: the reader asks for the new places at once, and no read fails on the way (a read
/// at a place a frame has left is counted as damage, and would be reported so).
#[test]
fn frames_moved_by_garbage_collection_are_looked_up_again_before_their_places_go() {
    let (vfs, pool) = mounted();
    // The two files' records written in turn and committed together, so that the segments
    // holding the kept file's records also hold garbage once the other file is gone (files
    // committed one after the other may fill segments of their own, which GC leaves alone).
    let (doomed, ino) = (new_file(&vfs, "doomed"), new_file(&vfs, "kept"));
    let want: Vec<Vec<u8>> = (0..RECORDS).map(|i| record(i, 0)).collect();
    for (index, rec) in want.iter().enumerate() {
        let at = (index * RS) as u64;
        vfs.write(ino, at, rec).unwrap();
        vfs.write(doomed, at, &record(index, 7)).unwrap();
    }
    vfs.sync_all().unwrap();
    let fh = vfs.open(ino).unwrap();
    read_through(&vfs, ino, &want, "before the collection");
    let segments = || -> Vec<u64> {
        let records = pool.records(ino, 0..RECORDS as u64).unwrap();
        records.iter().map(|(_, r)| r.segment).collect()
    };
    let before = segments();

    vfs.unlink(ROOT_INO, b"doomed").unwrap();
    vfs.sync_all().unwrap();
    assert!(vfs.getattr(doomed).is_err());
    let report = maintenance::gc(&pool, 1.0, &mut |_| {}).unwrap();
    assert!(report.records_moved > 0, "nothing moved: {report:?}");
    let after = segments();
    assert!(
        before.iter().zip(&after).any(|(b, a)| b != a),
        "no record of the kept file moved: {before:?}"
    );

    let damage = pool.counters().corruptions.load(Ordering::Relaxed);
    read_through(&vfs, ino, &want, "after the collection");
    assert_eq!(
        pool.counters().corruptions.load(Ordering::Relaxed),
        damage,
        "reads went to places frames had left"
    );
    vfs.release(ino, fh).unwrap();
    vfs.shutdown().unwrap();
}
