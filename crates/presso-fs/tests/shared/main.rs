//! A pool shared by several clients, in one process: metadata on a real PostgreSQL server,
//! segments on a real S3 server (SeaweedFS), each client its own pool, file layer and local
//! directory, as separate mounts on separate machines would be.

use std::path::PathBuf;
use std::sync::Arc;

use presso_fs::pool::{ClientPlace, Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_fs::FsError;
use presso_meta::postgres::test_server::TestServer as Postgres;
use presso_meta::postgres::{PostgresOptions, PostgresTarget};
use presso_meta::{MetaStore, NewNode, ROOT_INO};
use presso_objects::test_server::TestServer as S3;
use presso_store::SegmentRange;

mod gone;
mod model;

/// A new shared pool: its metadata URL and where its clients keep their local files.
fn new_pool(tag: &str, properties: &[(&str, &str)]) -> (String, ClientPlace) {
    new_pool_on(Postgres::shared(), S3::shared(), tag, properties)
}

/// [`new_pool`] on given servers.
fn new_pool_on(
    postgres: &Postgres,
    s3: &S3,
    tag: &str,
    properties: &[(&str, &str)],
) -> (String, ClientPlace) {
    let meta_url = postgres.url(&Postgres::fresh_schema(tag));
    let data = format!("{}?endpoint={}", S3::fresh_url(tag), s3.endpoint());
    let cache = std::env::temp_dir().join(format!(
        "presso-shared-{tag}-{}-{}",
        std::process::id(),
        meta_url.rsplit('=').next().unwrap_or("")
    ));
    let _ = std::fs::remove_dir_all(&cache);
    let place = ClientPlace {
        cache,
        credentials: s3.options().credentials,
        server_timeout: presso_fs::pool::DEFAULT_SERVER_TIMEOUT,
    };
    let properties: Vec<(String, String)> = properties
        .iter()
        .map(|(n, v)| (n.to_string(), v.to_string()))
        .collect();
    Pool::create_shared(&meta_url, &data, &place, &properties).expect("create the shared pool");
    (meta_url, place)
}

fn options() -> PoolOptions {
    PoolOptions {
        workers: 1,
        segment_size: 1 << 20,
        ..PoolOptions::default()
    }
}

fn client(meta_url: &str, place: &ClientPlace) -> Arc<Vfs> {
    client_with(meta_url, place, options())
}

fn client_with(meta_url: &str, place: &ClientPlace, options: PoolOptions) -> Arc<Vfs> {
    let (pool, _) = Pool::open_shared(meta_url, place, options).expect("mount a client");
    Vfs::new(pool, VfsConfig::default())
}

/// Writes `data` to a new file `name` under `dir` and closes it, as `cp` would.
fn write_file(vfs: &Vfs, dir: u64, name: &str, data: &[u8]) -> u64 {
    let attr = vfs
        .make_node(dir, name.as_bytes(), &NewNode::file(0o644, 0, 0))
        .expect("create");
    let fh = vfs.open_created(dir, &attr).expect("open");
    vfs.write(attr.ino, 0, data).expect("write");
    vfs.flush(attr.ino).expect("flush");
    vfs.release(attr.ino, fh).expect("close");
    attr.ino
}

/// Opens the existing file `name` under `dir`, writes `data` over its start and closes it.
fn overwrite_file(vfs: &Vfs, dir: u64, name: &str, data: &[u8]) {
    let ino = vfs.lookup(dir, name.as_bytes()).expect("lookup").ino;
    let fh = vfs.open(ino).expect("open");
    vfs.write(ino, 0, data).expect("write");
    vfs.flush(ino).expect("flush");
    vfs.release(ino, fh).expect("close");
}

fn read_file(vfs: &Vfs, dir: u64, name: &str) -> Vec<u8> {
    let attr = vfs.lookup(dir, name.as_bytes()).expect("lookup");
    let fh = vfs.open(attr.ino).expect("open");
    let mut out = Vec::new();
    while (out.len() as u64) < attr.size {
        let got = vfs.read(attr.ino, out.len() as u64, 1 << 20).expect("read");
        assert!(!got.is_empty(), "short read at {}", out.len());
        out.extend_from_slice(&got);
    }
    vfs.release(attr.ino, fh).expect("close");
    out
}

/// Asserts two byte strings are equal without printing megabytes when they are not.
#[track_caller]
fn same(got: &[u8], want: &[u8]) {
    let first = got.iter().zip(want).position(|(a, b)| a != b);
    assert!(
        got.len() == want.len() && first.is_none(),
        "{} bytes read, {} written, first difference at {first:?}",
        got.len(),
        want.len()
    );
}

fn text(n: usize, seed: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(n);
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    while out.len() < n {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        out.extend_from_slice(format!("line {} value {}\n", out.len(), x % 1000).as_bytes());
    }
    out.truncate(n);
    out
}

/// The pool's metadata, opened as a tool would (acting for no client).
fn metadata(meta_url: &str) -> MetaStore {
    let target = PostgresTarget::from_url(meta_url).unwrap();
    MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap()
}

fn sessions(meta_url: &str) -> Vec<u64> {
    metadata(meta_url)
        .clients()
        .unwrap()
        .iter()
        .map(|c| c.id)
        .collect()
}

/// Numbers of the segments that have objects in the pool's object store.
fn segment_objects(meta_url: &str, place: &ClientPlace) -> std::collections::BTreeSet<u64> {
    let data = metadata(meta_url).data_location().unwrap().unwrap();
    let (data_url, mut opts) = presso_objects::locate(&data).unwrap();
    opts.credentials = place.credentials.clone();
    let objects = presso_objects::Objects::connect(&data_url, &opts).unwrap();
    objects
        .list()
        .unwrap()
        .iter()
        .filter_map(|(name, _)| name.strip_prefix("seg-")?.split_once('/')?.0.parse().ok())
        .collect()
}

#[test]
fn two_clients_read_what_the_other_wrote_and_closed() {
    let (url, place) = new_pool("twoclients", &[("compression", "off")]);
    let a = client(&url, &place);
    let b = client(&url, &place);
    let (ida, idb) = (
        a.pool().client().unwrap().id(),
        b.pool().client().unwrap().id(),
    );
    assert!(ida != idb && ida > 1 && idb > 1, "the creator was client 1");
    assert_eq!(sessions(&url), [ida.min(idb), ida.max(idb)]);

    // Close-to-open both ways, with files larger than a segment so both roll segments.
    let from_a = text(3 << 20, 1);
    let from_b = text(1 << 20, 2);
    write_file(&a, ROOT_INO, "from-a", &from_a);
    write_file(&b, ROOT_INO, "from-b", &from_b);
    same(&read_file(&b, ROOT_INO, "from-a"), &from_a);
    same(&read_file(&a, ROOT_INO, "from-b"), &from_b);

    // Each client appended only to its own segments.
    for vfs in [&a, &b] {
        let c = vfs.pool().client().unwrap();
        let own = c.segments();
        assert_eq!(own, SegmentRange::of_client(c.id()).unwrap());
        let segments = vfs.pool().store().segments();
        assert!(segments.len() > 1, "{segments:?}");
        assert!(segments.iter().all(|&s| own.contains(s)), "{segments:?}");
    }

    // b holds a file open while a rewrites it longer: b's next open reads all of it.
    let held = b.lookup(ROOT_INO, b"from-a").unwrap().ino;
    let held_fh = b.open(held).unwrap();
    let longer = text(4 << 20, 3);
    let fh = a.open(held).unwrap();
    a.write(held, 0, &longer).unwrap();
    a.flush(held).unwrap();
    a.release(held, fh).unwrap();
    same(&read_file(&b, ROOT_INO, "from-a"), &longer);
    b.release(held, held_fh).unwrap();

    // A rename on one client is whole on the other at once: no name is missing or doubled.
    a.rename(ROOT_INO, b"from-b", ROOT_INO, b"renamed").unwrap();
    assert!(matches!(
        b.lookup(ROOT_INO, b"from-b"),
        Err(FsError::Meta(_))
    ));
    same(&read_file(&b, ROOT_INO, "renamed"), &from_b);
    b.unlink(ROOT_INO, b"renamed").unwrap();
    assert!(a.lookup(ROOT_INO, b"renamed").is_err());

    a.shutdown().unwrap();
    assert_eq!(sessions(&url), [idb], "unmount ends a client's session");
    // A third client, mounted after the first left, reads everything committed.
    let c = client(&url, &place);
    same(&read_file(&c, ROOT_INO, "from-a"), &longer);
    b.shutdown().unwrap();
    c.shutdown().unwrap();
    assert!(sessions(&url).is_empty());
}

#[test]
fn a_new_pool_is_refused_over_one_and_wrong_places_say_so() {
    let (url, place) = new_pool("refusals", &[]);
    let s3 = S3::shared();
    // The same prefix again: refused before any metadata is made.
    let target = PostgresTarget::from_url(&url).unwrap();
    let other = Postgres::shared().url(&Postgres::fresh_schema("refusals"));
    let data = {
        let meta = MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap();
        meta.data_location().unwrap().unwrap()
    };
    let err = Pool::create_shared(&other, &data, &place, &[]).unwrap_err();
    assert!(err.to_string().contains("already holds objects"), "{err}");
    // The same schema again, with a fresh prefix: the schema exists.
    let fresh = format!("{}?endpoint={}", S3::fresh_url("refusals"), s3.endpoint());
    let err = Pool::create_shared(&url, &fresh, &place, &[]).unwrap_err();
    assert!(err.to_string().contains("exists"), "{err}");
    // A schema with no pool.
    let err = Pool::open_shared(&other, &place, options()).unwrap_err();
    assert!(!err.to_string().is_empty());
    // Wrong credentials: a clear refusal, and no session left behind.
    let wrong = ClientPlace {
        credentials: Some(("presso".into(), "wrong-secret".into())),
        ..place.clone()
    };
    let err = Pool::open_shared(&url, &wrong, options()).unwrap_err();
    assert!(err.to_string().contains("refused access"), "{err}");
    assert!(sessions(&url).is_empty());
    let _ = std::fs::remove_dir_all(PathBuf::from(&place.cache));
}

/// The S3 server restarts, then PostgreSQL, while a client writes and fsyncs file after file:
/// every operation waits for them and succeeds, and everything fsync'd reads back whole on
/// another client.
#[test]
fn writes_wait_through_restarts_of_both_servers() {
    let postgres = Postgres::start().expect("a PostgreSQL server of this test's own");
    let s3 = S3::start().expect("an S3 server of this test's own");
    let (url, place) = new_pool_on(&postgres, &s3, "restarts", &[("compression", "lz4")]);
    let a = client(&url, &place);
    let files: Vec<Vec<u8>> = (0..24)
        .map(|i| text(300_000 + i * 1000, i as u64))
        .collect();
    let (started, writing) = std::sync::mpsc::channel();
    let longest = std::thread::scope(|scope| {
        let writer = scope.spawn(|| {
            let mut longest = std::time::Duration::ZERO;
            for (i, data) in files.iter().enumerate() {
                if i == 2 {
                    started.send(()).unwrap();
                }
                let t = std::time::Instant::now();
                let ino = write_file(&a, ROOT_INO, &format!("f{i}"), data);
                a.fsync(ino)
                    .unwrap_or_else(|e| panic!("fsync of f{i} during the restarts: {e}"));
                longest = longest.max(t.elapsed());
            }
            longest
        });
        writing.recv().unwrap();
        s3.restart().expect("S3 server restarts");
        postgres.halt().expect("PostgreSQL stops");
        postgres.resume().expect("PostgreSQL starts again");
        writer.join().expect("every write and fsync succeeded")
    });
    // The writes met the outage: one of them waited for the S3 server to come back.
    assert!(longest > std::time::Duration::from_secs(2), "{longest:?}");
    let b = client(&url, &place);
    for (i, data) in files.iter().enumerate() {
        same(&read_file(&b, ROOT_INO, &format!("f{i}")), data);
    }
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// PostgreSQL ends the connection of a transaction group's commit in the middle of it (what a
/// restart does to a commit in flight): the group is tried again and the fsync waiting for it
/// succeeds. The commit is held on a lock of the counters table (where it reads the last
/// group's number), so the cut lands inside it.
#[test]
fn an_fsync_waits_through_a_commit_the_server_cut_off() {
    let postgres = Postgres::shared();
    let s3 = S3::shared();
    let (url, place) = new_pool_on(postgres, s3, "cutoff", &[("compression", "lz4")]);
    let schema = url.rsplit('=').next().unwrap().to_string();
    // Groups close only when asked, so the fsync's group is the one that is cut off.
    let a = client_with(
        &url,
        &place,
        PoolOptions {
            txg_interval: std::time::Duration::from_secs(3600),
            ..options()
        },
    );
    let data = text(200_000, 7);
    let ino = write_file(&a, ROOT_INO, "f", &data);
    let mut admin = postgres::Client::connect(&postgres.conninfo(), postgres::NoTls).unwrap();
    let mut lock = admin.transaction().unwrap();
    lock.batch_execute(&format!(
        "LOCK TABLE \"{schema}\".counters IN ACCESS EXCLUSIVE MODE"
    ))
    .unwrap();
    let mut watcher = postgres::Client::connect(&postgres.conninfo(), postgres::NoTls).unwrap();
    std::thread::scope(|scope| {
        let fsync = scope.spawn(|| a.fsync(ino));
        // The commit's backend, waiting for the lock inside its transaction.
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(60);
        loop {
            let waiting = watcher
                .query(
                    &format!(
                        "SELECT pg_terminate_backend(pid) FROM pg_locks
                         WHERE NOT granted AND relation = '\"{schema}\".counters'::regclass"
                    ),
                    &[],
                )
                .unwrap();
            if !waiting.is_empty() {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "the commit never waited for the lock"
            );
            std::thread::yield_now();
        }
        lock.rollback().unwrap();
        fsync
            .join()
            .unwrap()
            .expect("the fsync waits for the group to be tried again");
    });
    let b = client(&url, &place);
    same(&read_file(&b, ROOT_INO, "f"), &data);
    a.shutdown().unwrap();
    b.shutdown().unwrap();
}

/// An object store that stays down: an fsync fails with EIO once the client's server timeout
/// has passed, saying what is unavailable, instead of hanging; once the store is back, what
/// was fsync'd before reads whole on a new client.
#[test]
fn a_store_that_stays_down_fails_fsync_after_the_timeout() {
    use presso_objects::fault_proxy::{Fault, FaultProxy};
    let s3 = S3::shared();
    let proxy = FaultProxy::start(&s3.address()).unwrap();
    let meta_url = Postgres::shared().url(&Postgres::fresh_schema("down"));
    let data = format!("{}?endpoint={}", S3::fresh_url("down"), proxy.endpoint());
    let place = ClientPlace {
        cache: std::env::temp_dir().join(format!("presso-shared-down-{}", std::process::id())),
        credentials: s3.options().credentials,
        server_timeout: std::time::Duration::from_secs(3),
    };
    Pool::create_shared(&meta_url, &data, &place, &[]).unwrap();
    let a = client(&meta_url, &place);
    let ino = write_file(&a, ROOT_INO, "kept", b"written while the store was up");
    a.fsync(ino).unwrap();

    proxy.always(Some(Fault::Status(503)));
    let started = std::time::Instant::now();
    let attr = a
        .make_node(ROOT_INO, b"lost", &NewNode::file(0o644, 0, 0))
        .unwrap();
    a.write(attr.ino, 0, &text(200_000, 9)).unwrap();
    let err = a.fsync(attr.ino).unwrap_err();
    let waited = started.elapsed();
    assert_eq!(err.errno(), libc::EIO, "{err}");
    assert!(err.to_string().contains("unavailable"), "{err}");
    assert!(
        waited >= std::time::Duration::from_secs(2) && waited < std::time::Duration::from_secs(60),
        "{waited:?}"
    );
    proxy.always(None);
    // The store refuses writes after a failed sync until the client mounts again, as after a
    // failed fsync on a disk; what was fsync'd before is intact for a new client.
    let b = client(&meta_url, &place);
    same(
        &read_file(&b, ROOT_INO, "kept"),
        b"written while the store was up",
    );
    b.shutdown().unwrap();
    let _ = a.shutdown();
    let _ = std::fs::remove_dir_all(&place.cache);
}

/// A client collects its own segments while another reads the files in them: records moved to
/// new segments and records overwritten by the other client are read right by both, the
/// removed segments' objects are gone, and a new client reads everything.
#[test]
fn a_client_collects_its_own_segments_while_another_reads_them() {
    let (url, place) = new_pool("gc", &[("compression", "off")]);
    let a = client(&url, &place);
    let b = client(&url, &place);
    let mut files: Vec<Vec<u8>> = (0..4).map(|i| text(1_500_000, 10 + i)).collect();
    for (i, data) in files.iter().enumerate() {
        write_file(&a, ROOT_INO, &format!("f{i}"), data);
    }
    // b reads them all, so it has a's segments open and some of their blocks cached.
    for (i, data) in files.iter().enumerate() {
        same(&read_file(&b, ROOT_INO, &format!("f{i}")), data);
    }
    // Garbage in a's segments: a removes one file, b overwrites another.
    a.unlink(ROOT_INO, b"f0").unwrap();
    files[1] = text(1_500_000, 99);
    overwrite_file(&b, ROOT_INO, "f1", &files[1]);

    let before = a.pool().store().segments();
    let report = presso_fs::maintenance::gc(a.pool(), 0.99, &mut |_| {}).unwrap();
    assert!(report.segments_collected >= 2, "{report:?}");
    assert!(report.records_moved > 0, "{report:?}");
    let after = a.pool().store().segments();
    let own = a.pool().client().unwrap().segments();
    assert!(after.iter().all(|&s| own.contains(s)), "{after:?}");
    let removed: Vec<u64> = before
        .iter()
        .copied()
        .filter(|s| !after.contains(s))
        .collect();
    assert!(!removed.is_empty(), "{before:?} -> {after:?}");
    // Their objects are gone from the store.
    let objects = segment_objects(&url, &place);
    assert!(removed.iter().all(|n| !objects.contains(n)), "{objects:?}");

    // b reads through a's collection: moved records are looked up again.
    for (i, data) in files.iter().enumerate().skip(1) {
        same(&read_file(&b, ROOT_INO, &format!("f{i}")), data);
        same(&read_file(&a, ROOT_INO, &format!("f{i}")), data);
    }
    let c = client(&url, &place);
    for (i, data) in files.iter().enumerate().skip(1) {
        same(&read_file(&c, ROOT_INO, &format!("f{i}")), data);
    }
    assert!(c.lookup(ROOT_INO, b"f0").is_err());
    for vfs in [a, b, c] {
        vfs.shutdown().unwrap();
    }
}
