//! What is left of clients that are gone: a client that unmounted, one that was killed after
//! uploading bytes it never committed, and one taken for stopped while it still runs.

use std::time::{Duration, Instant};

use super::*;

/// Clients of this test take each other for stopped after this much silence.
const TIMEOUT: Duration = Duration::from_secs(3);

fn short_timeout() -> PoolOptions {
    PoolOptions {
        client_timeout: TIMEOUT,
        ..options()
    }
}

/// Waits until client `id`'s session is gone, for up to a minute.
fn until_ended(url: &str, id: u64) {
    let deadline = Instant::now() + Duration::from_secs(60);
    while sessions(url).contains(&id) {
        assert!(Instant::now() < deadline, "client {id} was never ended");
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// The segments of clients that are gone are collected by one that holds the maintenance lease:
/// those without a live record go (a killed client's uncommitted upload among them, on the
/// lease holder's own once it ended the client), those with garbage are copied into the
/// collector's own by `gc`, and every file reads whole on every client afterwards. A client
/// whose session was ended while it ran commits nothing more.
#[test]
fn segments_of_gone_clients_are_collected_and_an_ended_client_commits_nothing() {
    let (url, place) = new_pool("gone", &[("compression", "off")]);
    // a writes four files over several segments and unmounts.
    let a = client_with(&url, &place, short_timeout());
    let a_id = a.pool().client().unwrap().id();
    let mut files: Vec<Vec<u8>> = (0..4).map(|i| text(1_500_000, 40 + i)).collect();
    for (i, data) in files.iter().enumerate() {
        write_file(&a, ROOT_INO, &format!("f{i}"), data);
    }
    a.shutdown().unwrap();

    // k commits a file, then uploads bytes into a segment of their own it never commits, and
    // is killed.
    let k = client_with(&url, &place, short_timeout());
    let k_id = k.pool().client().unwrap().id();
    let kept = text(300_000, 50);
    write_file(&k, ROOT_INO, "k", &kept);
    let store = k.pool().store();
    store.roll().unwrap();
    store.append(&text(500_000, 51)).unwrap();
    store.sync().unwrap();
    let uncommitted = store.current_segment();
    assert!(segment_objects(&url, &place).contains(&uncommitted));
    k.pool().halt();

    // z is taken for stopped while it still runs: after that nothing of it commits.
    let z = client_with(&url, &place, short_timeout());
    let z_id = z.pool().client().unwrap().id();
    assert!(metadata(&url).end_client(z_id).unwrap());
    let err = z
        .make_node(ROOT_INO, b"z", &NewNode::file(0o644, 0, 0))
        .expect_err("a create of an ended client");
    assert_eq!(err.errno(), libc::EIO, "{err}");

    // b ends k once it has been silent for the timeout, and makes garbage in a's segments.
    let b = client_with(&url, &place, short_timeout());
    until_ended(&url, k_id);
    // The client that ended k removes the segment k never committed to on its own.
    let deadline = Instant::now() + Duration::from_secs(60);
    while segment_objects(&url, &place).contains(&uncommitted) {
        assert!(Instant::now() < deadline, "segment {uncommitted} stayed");
        std::thread::sleep(Duration::from_millis(100));
    }
    b.unlink(ROOT_INO, b"f0").unwrap();
    files[1] = text(1_500_000, 52);
    overwrite_file(&b, ROOT_INO, "f1", &files[1]);

    // b collects: the gone clients' segments with garbage go, their live records with them.
    let gone = |n: &u64| [a_id, k_id, z_id].contains(&SegmentRange::client_of(*n));
    let before: Vec<u64> = segment_objects(&url, &place)
        .into_iter()
        .filter(gone)
        .collect();
    let report = presso_fs::maintenance::gc(b.pool(), 0.99, &mut |_| {}).unwrap();
    assert!(report.records_moved > 0, "{report:?}");
    let after: Vec<u64> = segment_objects(&url, &place)
        .into_iter()
        .filter(gone)
        .collect();
    assert!(after.len() < before.len(), "{before:?} -> {after:?}");
    let meta = metadata(&url);
    for n in &after {
        let records = meta.records_in_segment(*n).unwrap();
        assert!(
            !records.is_empty(),
            "segment {n} stayed without live records"
        );
    }

    // Everything reads whole on b and on a client mounted afterwards; z never committed "z".
    let c = client_with(&url, &place, short_timeout());
    for vfs in [&b, &c] {
        for (i, data) in files.iter().enumerate().skip(1) {
            same(&read_file(vfs, ROOT_INO, &format!("f{i}")), data);
        }
        same(&read_file(vfs, ROOT_INO, "k"), &kept);
        assert!(vfs.lookup(ROOT_INO, b"f0").is_err());
        assert!(vfs.lookup(ROOT_INO, b"z").is_err());
    }
    z.pool().halt();
    for vfs in [b, c] {
        vfs.shutdown().unwrap();
    }
}

/// Garbage another client makes in a client's segments (it overwrites every file the first one
/// wrote) is counted by the first client's next look at its segments, and its automatic reclaim
/// then removes the segments that hold nothing live any more, while both stay mounted.
#[test]
fn a_client_reclaims_the_garbage_another_made_in_its_segments() {
    let (url, place) = new_pool("othersgarbage", &[("compression", "off")]);
    let (pool, _) = Pool::open_shared(&url, &place, short_timeout()).expect("mount a");
    let reclaim = presso_fs::reclaim::ReclaimPolicy {
        min_garbage: 1 << 20,
        interval: Duration::from_millis(100),
        ..Default::default()
    };
    let a = Vfs::new(
        pool,
        VfsConfig {
            reclaim: Some(reclaim),
            ..VfsConfig::default()
        },
    );
    let b = client_with(&url, &place, short_timeout());
    let mut files: Vec<Vec<u8>> = (0..4).map(|i| text(1_500_000, 60 + i)).collect();
    for (i, data) in files.iter().enumerate() {
        write_file(&a, ROOT_INO, &format!("f{i}"), data);
    }
    let written: Vec<u64> = a.pool().store().segments();
    for (i, data) in files.iter_mut().enumerate() {
        *data = text(1_500_000, 70 + i as u64);
        overwrite_file(&b, ROOT_INO, &format!("f{i}"), data);
    }
    // a's sealed segments held only the old bytes: its reclaim removes them once it has
    // counted the garbage (within five client timeouts, then its reclaim interval).
    let sealed: Vec<u64> = written[..written.len() - 1].to_vec();
    assert!(!sealed.is_empty(), "{written:?}");
    let deadline = Instant::now() + Duration::from_secs(90);
    loop {
        let objects = segment_objects(&url, &place);
        if sealed.iter().all(|n| !objects.contains(n)) {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "a's segments {sealed:?} stayed: {objects:?}"
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    for vfs in [&a, &b] {
        for (i, data) in files.iter().enumerate() {
            same(&read_file(vfs, ROOT_INO, &format!("f{i}")), data);
        }
    }
    for vfs in [a, b] {
        vfs.shutdown().unwrap();
    }
}
