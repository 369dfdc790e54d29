//! Opening a pool of 1,000,000 entries of 64-byte payloads whose last segment ends in a torn
//! entry: recovery checks every sealed segment's header, scans the last segment from its start,
//! cuts the torn tail and syncs. With the default 256 MiB segments all 80 MB of entries are in
//! the last segment, which is the worst case; with 8 MiB segments the last one holds a tenth.
//! Also the scrub scan (`Store::entries`) of the 256 MiB pool's one segment.
//!
//! Each pool is built once; before every timed open the torn entry is written again (untimed).
//! The files are in the page cache, as after an unmount and remount. The pools live on disk under
//! `target/tmp` (`PRESSO_BENCH_DIR` puts them elsewhere).
//!
//! Run: `cargo bench -p presso-store --bench recovery -- --measurement-time 5 --warm-up-time 1`

use std::fs::OpenOptions;
use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;

use criterion::{criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, Throughput};
use presso_store::segment::{encode_entry, segment_file_name};
use presso_store::{Committed, FsDir, StorageDir, Store, StoreConfig};

const ENTRIES: u64 = 1_000_000;
const PAYLOAD: usize = 64;
/// Bytes of the torn entry left at the end: its envelope header and part of its payload.
const TORN: usize = 40;

/// A fresh pool directory on disk, removed on drop.
struct BenchDir(PathBuf);

impl BenchDir {
    fn new(tag: &str) -> Self {
        let base = std::env::var_os("PRESSO_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from(env!("CARGO_TARGET_TMPDIR")));
        let path = base.join(format!("presso-store-bench-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).expect("create the bench directory");
        Self(path)
    }

    fn dir(&self) -> Arc<dyn StorageDir> {
        Arc::new(FsDir::open(&self.0).expect("open the bench directory"))
    }
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Builds a pool of `ENTRIES` entries; returns its directory and the last segment's path.
fn build(config: StoreConfig, tag: &str) -> (BenchDir, PathBuf) {
    let dir = BenchDir::new(tag);
    let store = Store::create(dir.dir(), Default::default(), config).expect("create the pool");
    let mut data = [0u8; PAYLOAD];
    for i in 0..ENTRIES {
        data[..8].copy_from_slice(&i.to_le_bytes());
        store.append(&data).expect("append");
    }
    store.sync().expect("sync");
    let last = dir.0.join(segment_file_name(store.current_segment()));
    (dir, last)
}

fn tear(last: &PathBuf) {
    let entry = encode_entry(&[0xEE; PAYLOAD]);
    let mut f = OpenOptions::new()
        .append(true)
        .open(last)
        .expect("open the last segment");
    f.write_all(&entry[..TORN]).expect("write the torn entry");
}

fn recovery(c: &mut Criterion) {
    let mut pools = Vec::new();
    let mut group = c.benchmark_group("open_1M_entries_torn_tail");
    group.sample_size(10);
    for segment_mib in [256u64, 8] {
        let config = StoreConfig {
            segment_size: segment_mib << 20,
            ..StoreConfig::default()
        };
        let (dir, last) = build(config, &format!("recovery-{segment_mib}"));
        group.bench_function(BenchmarkId::new("segment_MiB", segment_mib), |b| {
            b.iter_batched(
                || tear(&last),
                |()| {
                    let store =
                        Store::open(dir.dir(), config, &Committed::default()).expect("open");
                    assert_eq!(store.recovery().discarded_bytes, TORN as u64);
                    store
                },
                BatchSize::PerIteration,
            )
        });
        pools.push((dir, config));
    }
    group.finish();

    let (dir, config) = &pools[0];
    let store = Store::open(dir.dir(), *config, &Committed::default()).expect("open");
    let segment = store.current_segment();
    let mut group = c.benchmark_group("scrub_scan_1M_entries");
    group.sample_size(10);
    group.throughput(Throughput::Bytes(
        store.segment_stats(segment).expect("stats").total_bytes,
    ));
    group.bench_function("one_256MiB_segment", |b| {
        b.iter(|| {
            let e = store.entries(segment).expect("entries");
            assert_eq!(e.entries.len() as u64, ENTRIES);
            e
        })
    });
    group.finish();
}

criterion_group!(benches, recovery);
criterion_main!(benches);
