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

/// A new shared pool: its metadata URL and where its clients keep their local files.
fn new_pool(tag: &str, properties: &[(&str, &str)]) -> (String, ClientPlace) {
    let meta_url = Postgres::shared().url(&Postgres::fresh_schema(tag));
    let s3 = S3::shared();
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
    let (pool, _) = Pool::open_shared(meta_url, place, options()).expect("mount a client");
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

fn sessions(meta_url: &str) -> Vec<u64> {
    let target = PostgresTarget::from_url(meta_url).unwrap();
    let meta = MetaStore::open_postgres(&target, &PostgresOptions::default()).unwrap();
    meta.clients().unwrap().iter().map(|c| c.id).collect()
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

    // A rename on one client is whole on the other at once: no name is missing or doubled.
    a.rename(ROOT_INO, b"from-b", ROOT_INO, b"renamed").unwrap();
    assert!(matches!(
        b.lookup(ROOT_INO, b"from-b"),
        Err(FsError::Meta(_))
    ));
    same(&read_file(&b, ROOT_INO, "renamed"), &from_b);
    b.unlink(ROOT_INO, b"renamed").unwrap();
    assert!(a.lookup(ROOT_INO, b"renamed").is_err());

    // Collection is refused, not half done: it needs the pool-wide lease.
    let refused = presso_fs::maintenance::gc(a.pool(), 0.9, &mut |_| {}).unwrap_err();
    assert!(refused.to_string().contains("lease"), "{refused}");

    a.shutdown().unwrap();
    assert_eq!(sessions(&url), [idb], "unmount ends a client's session");
    // A third client, mounted after the first left, reads everything committed.
    let c = client(&url, &place);
    same(&read_file(&c, ROOT_INO, "from-a"), &from_a);
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
