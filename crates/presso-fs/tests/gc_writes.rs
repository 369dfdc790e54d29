//! Garbage collection while records are being stored: a pass must free the segments it
//! collects even when records stored into them as it starts commit during it (the write path
//! waits for such a pass before it answers ENOSPC, and the writes in flight go on).

mod common;

use common::{noise, TempDir};
use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{NewNode, TxgOp, ROOT_INO};

const RECORD: usize = 16 << 10;
const RECORDS: usize = 8;

#[test]
fn a_record_stored_as_a_pass_starts_does_not_keep_the_segment() {
    let dir = TempDir::new("gc-writes", "pool");
    let props = [
        ("compression".to_string(), "off".to_string()),
        ("recordsize".to_string(), "16K".to_string()),
    ];
    Pool::create(&dir.0, &props).expect("create");
    let (pool, _) = Pool::open(&dir.0, PoolOptions::default()).expect("open");
    let vfs = Vfs::new(
        pool.clone(),
        VfsConfig {
            reclaim: None,
            ..VfsConfig::default()
        },
    );
    let file = |name: &str| {
        let ino = vfs
            .make_node(ROOT_INO, name.as_bytes(), &NewNode::file(0o644, 0, 0))
            .unwrap()
            .ino;
        vfs.open(ino).unwrap();
        ino
    };
    // A file written twice: its first version is garbage in the open segment.
    let table = file("table");
    vfs.write(table, 0, &noise(1, RECORD * RECORDS)).unwrap();
    vfs.sync_all().unwrap();
    let current = noise(2, RECORD * RECORDS);
    vfs.write(table, 0, &current).unwrap();
    vfs.sync_all().unwrap();
    let first_segment = pool.store().current_segment();
    assert!(pool.store().dead_bytes() > 0);

    // A record stored into that segment once the pass has looked at the segments, and
    // named by an op queued then: a write in flight as the pass starts.
    let log = file("log");
    let appended = noise(3, RECORD);
    let mut stored_during_pass = false;
    let mut store_once = |_| {
        if std::mem::replace(&mut stored_during_pass, true) {
            return;
        }
        let (stored, pending) = pool.store_raw(&appended, log, 0, RECORD as u32);
        let rec = stored.expect("store").expect("a frame, not a hole");
        assert_eq!(rec.segment, first_segment);
        pool.txgs().queue(
            TxgOp::SetRecord {
                ino: log,
                index: 0,
                rec,
            },
            None,
        );
        drop(pending);
    };
    let report = maintenance::gc(&pool, 1.0, &mut store_once).expect("gc");
    assert!(stored_during_pass);
    assert_eq!(report.segments_collected, 1, "{report:?}");
    assert!(
        !pool
            .store()
            .all_segment_stats()
            .iter()
            .any(|s| s.segment == first_segment),
        "the collected segment is still there: {report:?}"
    );
    assert_eq!(pool.store().dead_bytes(), 0, "{report:?}");
    assert_eq!(vfs.read(table, 0, current.len() as u32).unwrap(), current);
    let moved = pool.record(log, 0).unwrap().expect("the stored record");
    assert_ne!(moved.segment, first_segment);
    assert_eq!(pool.read_record(log, 0, &moved).unwrap(), appended);
    let scrub = maintenance::scrub(&pool, &mut |_| {}).expect("scrub");
    assert!(scrub.clean(), "{scrub:?}");
    vfs.shutdown().unwrap();
}
