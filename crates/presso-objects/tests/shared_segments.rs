//! Two writers of one pool on a real S3 server, each with its own local directory and its own
//! segment numbers: each reads what the other synced, including what the other appended after
//! the reader first opened that segment, and neither can write, cut or create the other's
//! segments.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use presso_objects::segments::ObjectDir;
use presso_objects::test_server::TestServer;
use presso_objects::Objects;
use presso_store::{Committed, FsDir, SegmentRange, Store, StoreConfig, StoreError, CLIENT_SHIFT};

fn local_dir(tag: &str) -> FsDir {
    static N: AtomicU64 = AtomicU64::new(0);
    let path = std::env::temp_dir().join(format!(
        "presso-shared-seg-{tag}-{}-{}",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ));
    let _ = std::fs::remove_dir_all(&path);
    FsDir::create_all(&path).unwrap()
}

fn config(client: u64) -> StoreConfig {
    StoreConfig {
        segment_size: 64 << 10,
        own_segments: SegmentRange::of_client(client).unwrap(),
    }
}

fn payload(seed: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| ((seed * 131 + i * 7) % 251) as u8).collect()
}

#[test]
fn writers_read_each_others_segments_and_write_only_their_own() {
    let server = TestServer::shared();
    let objects = Arc::new(
        Objects::connect(&TestServer::fresh_url("shared-seg"), &server.options()).unwrap(),
    );
    let dir = |client| {
        Arc::new(
            ObjectDir::new(local_dir("c"), objects.clone(), 1 << 20)
                .owning(SegmentRange::of_client(client).unwrap()),
        )
    };
    let a = Store::create(dir(1), BTreeMap::new(), config(1)).unwrap();
    let b = Store::open(dir(2), config(2), &Committed::default()).unwrap();
    assert_eq!(a.current_segment(), (1 << CLIENT_SHIFT) + 1);
    assert_eq!(b.current_segment(), (2 << CLIENT_SHIFT) + 1);

    let mut written = Vec::new();
    for i in 0..12 {
        let (store, other) = if i % 2 == 0 { (&a, &b) } else { (&b, &a) };
        let data = payload(i, 9_000 + i * 301);
        let loc = store.append(&data).unwrap();
        store.sync().unwrap();
        // Read at once by the other writer: the first read of a segment opens it, later ones
        // find what was appended since.
        assert_eq!(other.read(loc).unwrap(), data, "entry {i} at {loc:?}");
        written.push((loc, data));
    }
    for (loc, data) in &written {
        assert_eq!(&a.read(*loc).unwrap(), data);
        assert_eq!(&b.read(*loc).unwrap(), data);
    }
    // Each writer lists, accounts and collects only its own segments.
    assert!(a.segments().iter().all(|&s| s >> CLIENT_SHIFT == 1));
    assert!(b.segments().iter().all(|&s| s >> CLIENT_SHIFT == 2));
    assert!(matches!(
        b.remove_segment(written[0].0.segment),
        Err(StoreError::NoSuchSegment { .. })
    ));
    // A location past what the other writer uploaded is no entry, not a hang or stale bytes.
    let (loc, _) = written[0];
    let beyond = presso_store::Location {
        offset: loc.offset + (1 << 30),
        ..loc
    };
    assert!(matches!(
        b.read(beyond),
        Err(StoreError::BadLocation { .. })
    ));
    // A segment nobody made.
    let nowhere = presso_store::Location {
        segment: (3 << CLIENT_SHIFT) + 1,
        ..loc
    };
    assert!(matches!(
        b.read(nowhere),
        Err(StoreError::NoSuchSegment { .. })
    ));
    // The object-store directory refuses writes to another client's segment outright.
    let foreign = dir(2);
    let seg =
        presso_store::StorageDir::open_segment(foreign.as_ref(), a.current_segment()).unwrap();
    let refused = seg.write_at(b"x", 1 << 20).unwrap_err();
    assert_eq!(refused.kind(), std::io::ErrorKind::PermissionDenied);
    assert_eq!(
        seg.set_len(0).unwrap_err().kind(),
        std::io::ErrorKind::PermissionDenied
    );
}

#[test]
fn a_writer_out_of_segment_numbers_says_so() {
    let server = TestServer::shared();
    let objects = Arc::new(
        Objects::connect(&TestServer::fresh_url("shared-seg"), &server.options()).unwrap(),
    );
    let own = SegmentRange { start: 7, end: 9 };
    let dir = Arc::new(ObjectDir::new(local_dir("n"), objects, 0).owning(own));
    let config = StoreConfig {
        segment_size: 4096,
        own_segments: own,
    };
    let store = Store::create(dir, BTreeMap::new(), config).unwrap();
    assert_eq!(store.current_segment(), 7);
    store.append(&payload(1, 3000)).unwrap();
    store.append(&payload(2, 3000)).unwrap();
    let err = store.append(&payload(3, 3000)).unwrap_err();
    assert!(
        matches!(err, StoreError::SegmentNumbersUsedUp { start: 7, end: 9 }),
        "{err}"
    );
    assert!(err.to_string().contains("remount"), "{err}");
}

#[test]
fn client_ranges_do_not_overlap_and_leave_the_single_writer_alone() {
    assert_eq!(SegmentRange::of_client(0), None);
    assert_eq!(SegmentRange::of_client(1 << 23), None);
    let one = SegmentRange::of_client(1).unwrap();
    let two = SegmentRange::of_client(2).unwrap();
    let last = SegmentRange::of_client((1 << 23) - 1).unwrap();
    assert!(one.end <= two.start);
    assert!(!one.contains(two.start) && !two.contains(one.end - 1));
    assert!(one.contains(one.start) && one.contains(one.end - 1));
    assert!(
        i64::try_from(last.end - 1).is_ok(),
        "numbers fit a signed 64-bit column"
    );
    // A pool with one writer numbers from 1: client 1's range starts far above.
    assert!(one.start > 1 << 39);
}
