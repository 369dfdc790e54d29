//! Scrub and garbage collection at the same time on a mounted pool: the automatic collector may
//! run while `presso scrub` does. Scrub must neither fail nor report damage because collection
//! moved records and removed their old segments under it.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

mod common;

use common::{noise, TempDir};
use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{NewNode, ROOT_INO};

const RECORD: usize = 16 << 10;
const FILES: u64 = 8;
const RECORDS_PER_FILE: usize = 48;

#[test]
fn scrub_during_collection_finds_everything_intact() {
    let dir = TempDir::new("scrub-gc", "pool");
    let props = [
        ("compression".to_string(), "lz4".to_string()),
        ("recordsize".to_string(), "16K".to_string()),
    ];
    Pool::create(&dir.0, &props).expect("create");
    let options = PoolOptions {
        // Small segments: the files spread over many, and collection removes many.
        segment_size: 128 << 10,
        workers: 2,
        ..PoolOptions::default()
    };
    let (pool, _) = Pool::open(&dir.0, options).expect("open");
    let vfs = Vfs::new(
        pool.clone(),
        VfsConfig {
            reclaim: None,
            ..VfsConfig::default()
        },
    );
    let inos: Vec<u64> = (0..FILES)
        .map(|i| {
            let node = NewNode::file(0o644, 0, 0);
            let ino = vfs
                .make_node(ROOT_INO, format!("f{i}").as_bytes(), &node)
                .unwrap()
                .ino;
            vfs.open(ino).unwrap();
            ino
        })
        .collect();
    for (i, &ino) in inos.iter().enumerate() {
        vfs.write(ino, 0, &noise(i as u64 + 1, RECORD * RECORDS_PER_FILE))
            .unwrap();
    }
    for round in 1..=20u64 {
        // Every other record rewritten: every segment half garbage.
        for (i, &ino) in inos.iter().enumerate() {
            for r in (round as usize % 2..RECORDS_PER_FILE).step_by(2) {
                let data = noise(round * 1000 + i as u64 * 10 + r as u64, RECORD);
                vfs.write(ino, (r * RECORD) as u64, &data).unwrap();
            }
        }
        vfs.sync_all().unwrap();
        // One collection pass moves half of every segment and removes the old ones, while
        // scrubs run one after another until it is done.
        let done = Arc::new(AtomicBool::new(false));
        let collector = {
            let (pool, done) = (pool.clone(), done.clone());
            std::thread::spawn(move || {
                let report = maintenance::gc(&pool, 1.0, &mut |_| {});
                done.store(true, Ordering::SeqCst);
                report.expect("gc")
            })
        };
        let mut scrubs = 0;
        while !done.load(Ordering::SeqCst) || scrubs == 0 {
            let report = maintenance::scrub(&pool, &mut |_| {})
                .unwrap_or_else(|e| panic!("round {round}, scrub {scrubs}: scrub failed: {e}"));
            assert!(
                report.clean(),
                "round {round}: scrub reports damage while collection ran: {report:?}"
            );
            scrubs += 1;
        }
        let collected = collector.join().unwrap();
        assert!(collected.segments_collected > 0, "{collected:?}");
    }
    vfs.shutdown().unwrap();
}
