//! Latency of single metadata operations on each durable engine, side by side: SQLite on a file
//! (the embedded default) and PostgreSQL on a throwaway local server reached through a unix
//! socket (the scale-out engine; a server across a network adds its round-trip time to every
//! statement), alone and acting for a client of a shared pool (whose writes check its session).
//! Each operation is one transaction, as the file-system layer runs it.
//!
//! Run: `cargo bench -p presso-meta --bench engines -- --warm-up-time 1 --measurement-time 5`
//! (`PRESSO_BENCH_DIR` picks the SQLite file's directory, default the temporary directory).

mod common;

use common::TempDb;
use criterion::{criterion_group, criterion_main, Criterion};
use presso_meta::postgres::test_server::TestServer;
use presso_meta::postgres::PostgresOptions;
use presso_meta::{MetaStore, NewNode, RecordRef, SetAttr, TxgOp, ROOT_INO};

fn sqlite() -> (MetaStore, TempDb) {
    let db = TempDb::new("engines");
    let store = MetaStore::create_sqlite(&db.0).expect("create sqlite");
    (store, db)
}

fn postgres() -> MetaStore {
    let target = TestServer::shared().target(&TestServer::fresh_schema("bench"));
    MetaStore::create_postgres(&target, &PostgresOptions::default()).expect("create postgres")
}

/// [`postgres`] acting for a registered client of a shared pool, as a mount does: every write
/// transaction also checks that the client's session exists (the fence).
fn postgres_as_client() -> MetaStore {
    let s = postgres();
    let id = s.register_client("bench", std::process::id(), 0).unwrap();
    s.act_as_client(id);
    s
}

/// Creates the directory the operations run in, with 1,000 files in it, and returns it and one
/// of the files.
fn populate(s: &MetaStore) -> (u64, u64) {
    s.init().unwrap();
    let dir = s
        .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino;
    let mut file = 0;
    for i in 0..1000 {
        let name = format!("f{i}");
        file = s
            .make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0))
            .unwrap()
            .ino;
    }
    (dir, file)
}

fn frame(serial: u64) -> RecordRef {
    RecordRef {
        segment: 1,
        offset: serial << 17,
        stored_len: 40_000,
        logical_len: 1 << 17,
        codec: 3,
        checksum: serial,
        inline: None,
    }
}

/// A mode change that changes something: 0600 and 0644 in turn.
fn other_mode(n: u64) -> SetAttr {
    SetAttr {
        mode: Some(if n.is_multiple_of(2) { 0o600 } else { 0o644 }),
        ..SetAttr::default()
    }
}

fn operations(c: &mut Criterion, engine: &str, s: &MetaStore) {
    let (dir, file) = populate(s);
    let mut g = c.benchmark_group(format!("meta-op/{engine}"));
    g.bench_function("lookup", |b| b.iter(|| s.lookup(dir, b"f500").unwrap()));
    g.bench_function("getattr", |b| b.iter(|| s.getattr(file).unwrap()));
    g.bench_function("readdir 100", |b| {
        b.iter(|| s.readdir(dir, None, 100).unwrap())
    });
    let mut n = 0u64;
    g.bench_function("create + unlink", |b| {
        b.iter(|| {
            n += 1;
            let name = format!("new{n}");
            s.make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0))
                .unwrap();
            s.unlink(dir, name.as_bytes(), &|_| false).unwrap();
        })
    });
    g.bench_function("setattr mode", |b| {
        b.iter(|| {
            let set = other_mode(n);
            n += 1;
            s.setattr(file, &set).unwrap()
        })
    });
    // The pattern of a file system's requests: each read follows a commit, so a read
    // connection's page cache is stale every time.
    g.bench_function("setattr then lookup", |b| {
        b.iter(|| {
            let set = other_mode(n);
            n += 1;
            s.setattr(file, &set).unwrap();
            s.lookup(dir, b"f500").unwrap()
        })
    });
    let mut serial = 0u64;
    g.bench_function("txg of 16 records", |b| {
        b.iter(|| {
            let ops: Vec<TxgOp> = (0..16)
                .map(|i| {
                    serial += 1;
                    TxgOp::SetRecord {
                        ino: file,
                        index: i,
                        rec: frame(serial),
                    }
                })
                .collect();
            s.apply_txg(&ops, false).unwrap()
        })
    });
    g.finish();
}

/// GETATTR of many files in turn, as a `stat` of every file of a large directory asks: more
/// inodes than the SQLite write connection's row cache holds, so each is read from SQLite.
fn getattr_many(c: &mut Criterion, s: &MetaStore) {
    const FILES: u64 = 10_000;
    let dir = s
        .make_node(ROOT_INO, b"many", &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino;
    let inos: Vec<u64> = (0..FILES)
        .map(|i| {
            let name = format!("f{i}");
            s.make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0))
                .unwrap()
                .ino
        })
        .collect();
    let mut g = c.benchmark_group("meta-op/sqlite");
    let mut next = 0;
    g.bench_function("getattr, 10,000 files in turn", |b| {
        b.iter(|| {
            next = (next + 1) % inos.len();
            s.getattr(inos[next]).unwrap()
        })
    });
    g.finish();
}

fn engines(c: &mut Criterion) {
    let (store, _db) = sqlite();
    operations(c, "sqlite", &store);
    getattr_many(c, &store);
    drop(store);
    operations(c, "postgres", &postgres());
    operations(c, "postgres-client", &postgres_as_client());
}

criterion_group!(benches, engines);
criterion_main!(benches);
