//! The open segment's blocks reserved ahead of its appends, on real files: what is appended
//! reads back, the length is what was appended, and the reserved rest is given back when the
//! segment is sealed and when the store closes.

mod common;

use std::fs::File;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use common::{config, payload, TempDir};
use presso_store::segment::{segment_file_name, SEGMENT_HEADER_LEN};
use presso_store::{Committed, FsStorage, Storage, Store};

/// How far ahead the store reserves (its `RESERVE_STEP`).
const STEP: u64 = 8 << 20;

/// Bytes the file system allocated to `path`.
fn allocated(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().blocks() * 512
}

fn length(path: &Path) -> u64 {
    std::fs::metadata(path).unwrap().len()
}

/// Whether the file system under `dir` reserves blocks past a file's end (tmpfs, ext4 and XFS
/// do); where it cannot, the store appends as before and there is nothing here to check.
fn reserves(dir: &Path) -> bool {
    let path = dir.join("probe");
    let file = File::options()
        .read(true)
        .write(true)
        .create_new(true)
        .open(&path)
        .unwrap();
    let reserved = FsStorage::new(file).reserve(0, 1 << 20).is_ok();
    std::fs::remove_file(&path).unwrap();
    if !reserved {
        eprintln!("the file system under {dir:?} cannot reserve blocks; nothing to check");
    }
    reserved
}

/// A new store with segments of `segment_size` on real files, if the file system under them
/// reserves blocks.
fn reserving_store(tag: &str, segment_size: u64) -> Option<(TempDir, Store)> {
    let tmp = TempDir::new(tag);
    if !reserves(tmp.path()) {
        return None;
    }
    let store = Store::create(tmp.dir(), Default::default(), config(segment_size)).unwrap();
    Some((tmp, store))
}

#[test]
fn appends_write_into_reserved_blocks_given_back_when_sealed_and_closed() {
    let Some((tmp, store)) = reserving_store("reserve", 64 << 20) else {
        return;
    };
    let first = store.append(&payload(0, 1000)).unwrap();
    let seg1 = tmp.path().join(segment_file_name(first.segment));
    assert_eq!(length(&seg1), SEGMENT_HEADER_LEN + first.entry_len());
    assert!(
        allocated(&seg1) >= STEP,
        "one append reserved {} bytes, not a step ahead",
        allocated(&seg1)
    );

    store.roll().unwrap();
    assert_eq!(length(&seg1), SEGMENT_HEADER_LEN + first.entry_len());
    assert!(
        allocated(&seg1) < 1 << 20,
        "the sealed segment keeps {} bytes allocated for {} bytes",
        allocated(&seg1),
        length(&seg1)
    );

    // Past a step: the reservation moves ahead of the appends.
    let locs: Vec<_> = (1..100)
        .map(|i| store.append(&payload(i, 128 << 10)).unwrap())
        .collect();
    let seg2 = tmp.path().join(segment_file_name(locs[0].segment));
    let end = locs.last().unwrap().offset + locs.last().unwrap().entry_len();
    assert_eq!(length(&seg2), end);
    assert!(allocated(&seg2) >= end);
    store.sync().unwrap();
    for (i, loc) in (1..).zip(&locs) {
        assert_eq!(store.read(*loc).unwrap(), payload(i, 128 << 10));
    }

    store.close().unwrap();
    assert_eq!(length(&seg2), end);
    assert!(
        allocated(&seg2) < end + (1 << 20),
        "the closed store left {} bytes allocated for {end} bytes",
        allocated(&seg2)
    );
    drop(store);

    // Nothing past the end to cut or to read: the reopened store finds what was appended.
    let store = Store::open(tmp.dir(), config(64 << 20), &Committed::default()).unwrap();
    assert_eq!(store.read(first).unwrap(), payload(0, 1000));
    for (i, loc) in (1..).zip(&locs) {
        assert_eq!(store.read(*loc).unwrap(), payload(i, 128 << 10));
    }
    let next = store.append(&payload(100, 1000)).unwrap();
    assert_eq!((next.segment, next.offset), (locs[0].segment, end));
}

#[test]
fn a_reservation_stops_at_the_segment_size() {
    let Some((tmp, store)) = reserving_store("reserve-small", 1 << 20) else {
        return;
    };
    let loc = store.append(&payload(0, 1000)).unwrap();
    let seg = tmp.path().join(segment_file_name(loc.segment));
    assert!(
        allocated(&seg) <= (1 << 20) + 4096,
        "{} bytes reserved for a segment of 1 MiB",
        allocated(&seg)
    );
}
