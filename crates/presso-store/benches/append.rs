//! Append throughput to real files: 128 KiB payloads (the size of a full record frame) with a
//! sync every 8 or 64 MiB, as transaction groups would, in stored MB/s (payload bytes per second,
//! envelopes not counted). Every iteration appends one group and syncs it; sealed segments are
//! removed between iterations, untimed, to bound the disk space used.
//!
//! For comparison, `no_sync/64` appends 64 MiB to a fresh pool without syncing: the store's own
//! cost (envelope, CRC-32, the copy into the page cache) without the disk. Its pool is deleted
//! before the data is written back, untimed.
//!
//! The pool lives on disk under `target/tmp` (`PRESSO_BENCH_DIR` puts it elsewhere), never in
//! memory, so the fsyncs are real.
//!
//! Run: `cargo bench -p presso-store --bench append -- --measurement-time 5 --warm-up-time 1`

use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use presso_store::{FsDir, Store, StoreConfig};

const PAYLOAD: usize = 128 << 10;

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
}

impl Drop for BenchDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

fn payload(len: usize) -> Vec<u8> {
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn append(c: &mut Criterion) {
    let data = payload(PAYLOAD);
    let mut group = c.benchmark_group("append_128KiB");
    group.sample_size(10);
    for group_mib in [8usize, 64] {
        let per_sync = (group_mib << 20) / PAYLOAD;
        let dir = BenchDir::new("append");
        let store = Store::create(
            Arc::new(FsDir::open(&dir.0).expect("open the bench directory")),
            Default::default(),
            StoreConfig::default(),
        )
        .expect("create the pool");
        group.throughput(Throughput::Bytes((per_sync * PAYLOAD) as u64));
        group.bench_function(BenchmarkId::new("sync_every_MiB", group_mib), |b| {
            b.iter_custom(|iters| {
                let mut timed = Duration::ZERO;
                for _ in 0..iters {
                    let start = Instant::now();
                    for _ in 0..per_sync {
                        store.append(&data).expect("append");
                    }
                    store.sync().expect("sync");
                    timed += start.elapsed();
                    let current = store.current_segment();
                    for n in store.segments() {
                        if n != current {
                            store.remove_segment(n).expect("remove a sealed segment");
                        }
                    }
                }
                timed
            })
        });
    }

    let dir = BenchDir::new("append-nosync");
    let per_group = (64 << 20) / PAYLOAD;
    group.throughput(Throughput::Bytes((per_group * PAYLOAD) as u64));
    group.bench_function(BenchmarkId::new("no_sync", 64), |b| {
        b.iter_custom(|iters| {
            let mut timed = Duration::ZERO;
            for i in 0..iters {
                let pool = dir.0.join(i.to_string());
                std::fs::create_dir(&pool).expect("create a pool directory");
                let store = Store::create(
                    Arc::new(FsDir::open(&pool).expect("open the pool directory")),
                    Default::default(),
                    StoreConfig::default(),
                )
                .expect("create the pool");
                let start = Instant::now();
                for _ in 0..per_group {
                    store.append(&data).expect("append");
                }
                timed += start.elapsed();
                drop(store);
                std::fs::remove_dir_all(&pool).expect("remove the pool");
            }
            timed
        })
    });
    group.finish();
}

criterion_group!(benches, append);
criterion_main!(benches);
