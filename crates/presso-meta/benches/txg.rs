//! Metadata throughput with the SQLite engine on a database file: record-map updates through
//! transaction groups, record lookups, and per-segment usage over a million records.
//!
//! The databases go to `PRESSO_BENCH_DIR` (default: the system temporary directory), which should
//! be on the disk whose speed you want to know, and are removed afterwards.
//!
//! Run: `cargo bench -p presso-meta --bench txg -- --warm-up-time 1 --measurement-time 5`

use std::time::Instant;

mod common;

use common::TempDb;
use criterion::{criterion_group, criterion_main, BatchSize, Criterion, Throughput};
use presso_meta::{MetaStore, NewNode, RecordRef, TxgOp, ROOT_INO};

/// Record updates per transaction group, as the file-system layer batches them.
const BATCH: u64 = 1_000;
/// Files and records per file of the large database.
const FILES: u64 = 1_000;
const RECORDS_PER_FILE: u64 = 1_000;
/// Records per segment (256 MiB segments of 1 MiB frames).
const RECORDS_PER_SEGMENT: u64 = 256;

fn frame(serial: u64) -> RecordRef {
    RecordRef {
        segment: 1 + serial / RECORDS_PER_SEGMENT,
        offset: (serial % RECORDS_PER_SEGMENT) << 20,
        stored_len: 300_000 + (serial % 1000) as u32,
        logical_len: 1 << 20,
        codec: 3,
        checksum: serial.wrapping_mul(0x9e37_79b9_7f4a_7c15),
        inline: None,
    }
}

fn files(s: &MetaStore, n: u64) -> Vec<u64> {
    (0..n)
        .map(|i| {
            s.make_node(
                ROOT_INO,
                format!("f{i}").as_bytes(),
                &NewNode::file(0o644, 0, 0),
            )
            .expect("create")
            .ino
        })
        .collect()
}

/// A store whose `FILES` files hold `RECORDS_PER_FILE` records each, written in groups of
/// `batch` updates.
fn large(db: &TempDb, batch: u64) -> (MetaStore, Vec<u64>) {
    let s = MetaStore::create_sqlite(&db.0).expect("create");
    s.init().expect("init");
    let inos = files(&s, FILES);
    let total = FILES * RECORDS_PER_FILE;
    let start = Instant::now();
    let mut ops = Vec::with_capacity(batch as usize);
    for serial in 0..total {
        ops.push(TxgOp::SetRecord {
            ino: inos[(serial / RECORDS_PER_FILE) as usize],
            index: serial % RECORDS_PER_FILE,
            rec: frame(serial),
        });
        if ops.len() as u64 == batch || serial + 1 == total {
            s.apply_txg(&ops, false).expect("apply_txg");
            ops.clear();
        }
    }
    let secs = start.elapsed().as_secs_f64();
    eprintln!(
        "built {total} records in groups of {batch}: {secs:.1} s, {:.0} updates/s",
        total as f64 / secs
    );
    (s, inos)
}

fn apply_txg(c: &mut Criterion) {
    let db = TempDb::new("txg");
    let s = MetaStore::create_sqlite(&db.0).expect("create");
    s.init().expect("init");
    let inos = files(&s, 100);
    let mut group = c.benchmark_group("apply_txg");
    group.throughput(Throughput::Elements(BATCH));
    for durable in [false, true] {
        let name = if durable {
            "set_record_x1000_durable"
        } else {
            "set_record_x1000"
        };
        // Each group writes the next 1,000 records of one of 100 files, 10,000 records per
        // file: new records first, then replacements of older ones (which become garbage).
        let mut serial = 0u64;
        group.bench_function(name, |b| {
            b.iter_batched(
                || {
                    let ops: Vec<TxgOp> = (0..BATCH)
                        .map(|i| {
                            let n = serial + i;
                            TxgOp::SetRecord {
                                ino: inos[((n / 10_000) % 100) as usize],
                                index: n % 10_000,
                                rec: frame(n),
                            }
                        })
                        .collect();
                    serial += BATCH;
                    ops
                },
                |ops| s.apply_txg(&ops, durable).expect("apply_txg"),
                BatchSize::SmallInput,
            )
        });
    }
    group.finish();
    let space = s.space().expect("space");
    eprintln!(
        "apply_txg database: {} GB of frames live, {} GB garbage",
        space.stored / 1_000_000_000,
        space.garbage / 1_000_000_000
    );
}

fn large_database(c: &mut Criterion) {
    let db = TempDb::new("large");
    let (s, inos) = large(&db, 100_000);
    let usage = s.segment_usage().expect("segment_usage");
    assert_eq!(
        usage.values().map(|u| u.records).sum::<u64>(),
        FILES * RECORDS_PER_FILE
    );

    let mut group = c.benchmark_group("lookup");
    group.throughput(Throughput::Elements(BATCH));
    // xorshift: the same pseudo-random (file, index) sequence on every run
    let mut x = 0x2545_f491_4f6c_dd1du64;
    group.bench_function("get_record_x1000", |b| {
        b.iter(|| {
            for _ in 0..BATCH {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                let ino = inos[(x % FILES) as usize];
                let index = (x >> 32) % RECORDS_PER_FILE;
                s.get_record(ino, index)
                    .expect("get_record")
                    .expect("present");
            }
        })
    });
    group.finish();

    let mut group = c.benchmark_group("segment_usage");
    group.sample_size(10);
    group.throughput(Throughput::Elements(FILES * RECORDS_PER_FILE));
    group.bench_function("1M_records", |b| {
        b.iter(|| s.segment_usage().expect("segment_usage").len())
    });
    group.finish();

    let mut group = c.benchmark_group("records_in_segment");
    group.throughput(Throughput::Elements(RECORDS_PER_SEGMENT));
    group.bench_function("256_records", |b| {
        let mut seg = 0u64;
        b.iter(|| {
            seg = seg % (usage.len() as u64) + 1;
            s.records_in_segment(seg).expect("records_in_segment").len()
        })
    });
    group.finish();
}

criterion_group!(benches, apply_txg, large_database);
criterion_main!(benches);
