//! One conformance suite, run against every engine. Each `fn` below takes a fresh, initialized
//! store; the `conformance!` macro instantiates every one of them once per engine.

// `libc::S_IF*` are `mode_t`, which is `u32` on Linux but narrower elsewhere: keep the casts.
#![allow(clippy::unnecessary_cast)]

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Barrier;

use presso_meta::memory::MemoryEngine;
use presso_meta::postgres::test_server::TestServer;
use presso_meta::postgres::{PostgresEngine, PostgresOptions};
use presso_meta::sqlite::SqliteEngine;
use presso_meta::{
    ClientSession, CodecSpace, EffectiveProp, FileKind, LinkFate, ListAfter, MetaEngine, MetaError,
    MetaStore, NewNode, RecordLocation, RecordRef, SegmentUsage, SetAttr, SpaceUsage,
    SqliteOptions, Synchronous, Timespec, TxgOp, TxgOutcome, XattrFlags, LINK_MAX, POOL_INO,
    ROOT_INO,
};

// ---------------------------------------------------------------------------------------------
// fixtures

pub fn temp_db_path(tag: &str) -> PathBuf {
    static N: AtomicU64 = AtomicU64::new(0);
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map(|d| d.subsec_nanos())
        .unwrap_or(0);
    std::env::temp_dir().join(format!(
        "presso-meta-{tag}-{}-{}-{nanos}.db",
        std::process::id(),
        N.fetch_add(1, Ordering::Relaxed)
    ))
}

pub fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

/// A store plus the database file to delete afterwards.
pub struct Fixture {
    pub store: MetaStore,
    path: Option<PathBuf>,
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if let Some(p) = &self.path {
            remove_db(p);
        }
    }
}

fn memory_engine() -> (Box<dyn MetaEngine>, Option<PathBuf>) {
    (Box::new(MemoryEngine::new()), None)
}

fn sqlite_engine() -> (Box<dyn MetaEngine>, Option<PathBuf>) {
    let path = temp_db_path("conf");
    let e = SqliteEngine::create(&path, SqliteOptions::default()).expect("create sqlite");
    (Box::new(e), Some(path))
}

/// A new pool in a schema of its own on the test process's PostgreSQL server.
fn postgres_engine() -> (Box<dyn MetaEngine>, Option<PathBuf>) {
    let target = TestServer::shared().target(&TestServer::fresh_schema("conf"));
    let e = PostgresEngine::create(&target, &PostgresOptions::default()).expect("create postgres");
    (Box::new(e), None)
}

fn fixture(make: fn() -> (Box<dyn MetaEngine>, Option<PathBuf>)) -> Fixture {
    let (engine, path) = make();
    let store = MetaStore::new(engine);
    store.init().expect("init");
    Fixture { store, path }
}

macro_rules! conformance {
    ($($name:ident),* $(,)?) => {
        mod memory_engine {
            $( #[test] fn $name() { let fx = super::fixture(super::memory_engine); super::$name(&fx.store); } )*
        }
        mod sqlite_engine {
            $( #[test] fn $name() { let fx = super::fixture(super::sqlite_engine); super::$name(&fx.store); } )*
        }
        mod postgres_engine {
            $( #[test] fn $name() { let fx = super::fixture(super::postgres_engine); super::$name(&fx.store); } )*
        }
    };
}

conformance!(
    init_root,
    create_lookup_getattr,
    name_validation,
    mkdir_nlink,
    setgid_directories_pass_on_their_group,
    symlink_readlink,
    mknod_kinds,
    hard_links,
    path_of_names_a_file_from_the_root,
    link_count_stops_at_ext4s_limit,
    unlink_errors,
    rmdir_rules,
    orphans,
    removal_returns_the_freed_records,
    rename_basic,
    rename_replace,
    rename_noreplace_refuses_an_existing_target,
    rename_exchange_swaps_two_names,
    rename_loop,
    readdir_pagination,
    readdir_plus_gives_what_lookup_gives,
    setattr_rules,
    xattrs,
    xattr_names_in_use_across_inodes,
    xattr_namespaces_and_both_flags,
    records_and_accounting,
    property_inheritance,
    properties_read_together,
    failed_ops_leave_no_trace,
    txg_applies_in_order_with_set_accounting,
    txg_skips_ops_on_gone_or_non_regular_inodes,
    txg_sets_a_files_own_property_with_its_records,
    txg_rejects_malformed_batches_whole,
    txg_move_record_compare_and_swap,
    segment_usage_and_records_in_segment,
    codec_usage_counts_every_live_record,
    codec_counters_follow_every_record_change,
    scan_records_paginates,
    purge_orphans_removes_every_orphan,
    readers_run_while_a_writer_commits,
    statistics_add_up_and_stay_apart_from_accounting,
    client_sessions_register_beat_and_end,
    orphans_of_a_stopped_client_go_with_it,
    a_client_whose_session_ended_commits_nothing,
    locks_conflict_split_and_go_with_their_owner,
    a_lease_has_one_holder_until_its_time_runs_out,
);

fn a_lease_has_one_holder_until_its_time_runs_out(s: &MetaStore) {
    assert!(s.take_lease("maintenance", 1, 100, 30).unwrap());
    assert!(
        !s.take_lease("maintenance", 2, 110, 30).unwrap(),
        "held by 1"
    );
    assert!(
        s.take_lease("other", 2, 110, 30).unwrap(),
        "leases are by name"
    );
    assert!(
        s.take_lease("maintenance", 1, 120, 30).unwrap(),
        "renewed by its holder"
    );
    assert!(
        !s.take_lease("maintenance", 2, 150, 30).unwrap(),
        "renewed until 150"
    );
    assert!(
        s.take_lease("maintenance", 2, 151, 30).unwrap(),
        "1's time ran out"
    );
    s.release_lease("maintenance", 1).unwrap();
    assert!(
        !s.take_lease("maintenance", 1, 160, 30).unwrap(),
        "only its holder gives it up"
    );
    s.release_lease("maintenance", 2).unwrap();
    assert!(s.take_lease("maintenance", 1, 160, 30).unwrap());
    assert!(s.clients().unwrap().is_empty(), "leases are no sessions");
}

fn locks_conflict_split_and_go_with_their_owner(s: &MetaStore) {
    use presso_meta::{LockKind::*, LockOwner};
    let f = file(s, ROOT_INO, "f");
    let a = LockOwner {
        client: 1,
        owner: 7,
    };
    let b = LockOwner {
        client: 2,
        owner: 7,
    };
    let a2 = LockOwner {
        client: 1,
        owner: 8,
    };
    assert_eq!(s.set_lock(f, a, Some(Write), (0, 100), 11).unwrap(), None);
    // Another owner, on this client or another, meets it.
    let held = s
        .set_lock(f, b, Some(Read), (50, 60), 22)
        .unwrap()
        .expect("conflict");
    assert_eq!(
        (held.owner, held.kind, held.start, held.end, held.pid),
        (a, Write, 0, 100, 11)
    );
    assert!(s
        .set_lock(f, a2, Some(Read), (99, 101), 33)
        .unwrap()
        .is_some());
    assert_eq!(
        s.test_lock(f, b, Write, 0, 10).unwrap().map(|l| l.owner),
        Some(a)
    );
    assert_eq!(
        s.test_lock(f, a, Write, 0, 10).unwrap(),
        None,
        "an owner never meets itself"
    );
    assert_eq!(
        s.set_lock(f, b, Some(Read), (100, u64::MAX), 22).unwrap(),
        None
    );
    // Read locks share; a write lock meets them.
    assert_eq!(s.set_lock(f, a2, Some(Read), (200, 300), 33).unwrap(), None);
    assert_eq!(
        s.test_lock(f, a, Write, 250, 251).unwrap().map(|l| l.kind),
        Some(Read)
    );
    // Unlocking the middle splits a's lock in two.
    assert_eq!(s.set_lock(f, a, None, (20, 30), 11).unwrap(), None);
    assert_eq!(s.set_lock(f, b, Some(Write), (20, 30), 22).unwrap(), None);
    assert!(s
        .set_lock(f, b, Some(Write), (19, 20), 22)
        .unwrap()
        .is_some());
    assert!(s
        .set_lock(f, b, Some(Write), (30, 31), 22)
        .unwrap()
        .is_some());
    // Closing the file as a removes all of a's locks, none of the others'.
    s.unlock_all(f, a).unwrap();
    assert_eq!(s.set_lock(f, b, Some(Write), (0, 20), 22).unwrap(), None);
    assert_eq!(
        s.test_lock(f, a, Write, 250, 251).unwrap().map(|l| l.owner),
        Some(a2)
    );
    // Client 2 stopped: its locks go, client 1's stay; sessions still list.
    s.release_client_locks(2).unwrap();
    assert_eq!(s.test_lock(f, a, Write, 0, 100).unwrap(), None);
    assert_eq!(
        s.test_lock(f, b, Write, 0, 1000).unwrap().map(|l| l.owner),
        Some(a2)
    );
    assert!(s.clients().unwrap().is_empty());
    assert_eq!(
        s.set_lock(f, a, Some(Read), (5, 5), 1).unwrap_err(),
        MetaError::InvalidArgument("a lock's range ends before it starts".into())
    );
    // Locks go with their file.
    s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert_eq!(s.test_lock(f, b, Write, 0, 1), Err(MetaError::NotFound));
    s.release_client_locks(1).unwrap();
}

fn orphans_of_a_stopped_client_go_with_it(s: &MetaStore) {
    let (c5, c6) = (
        s.register_client("a", 1, 0).unwrap(),
        s.register_client("b", 2, 0).unwrap(),
    );
    s.act_as_client(c5);
    let f = file(s, ROOT_INO, "f");
    s.set_record(f, 0, &rec(1, 100, 400)).unwrap();
    let g = file(s, ROOT_INO, "g");
    assert_eq!(
        s.unlink(ROOT_INO, b"f", &open).unwrap().fate,
        LinkFate::Orphaned
    );
    s.act_as_client(c6);
    let h = file(s, ROOT_INO, "h");
    file(s, ROOT_INO, "x");
    // A rename that replaces an open file orphans it too.
    let r = s.rename(ROOT_INO, b"x", ROOT_INO, b"h", &open).unwrap();
    assert_eq!(r.map(|u| (u.ino, u.fate)), Some((h, LinkFate::Orphaned)));
    // Client c5 stopped: its orphan goes, with its records; c6's and live files stay.
    assert_eq!(s.purge_orphans_of(c5).unwrap(), vec![rec(1, 100, 400)]);
    assert_eq!(s.getattr(f), Err(MetaError::NotFound));
    assert_eq!(s.getattr(h).unwrap().nlink, 0);
    assert_eq!(s.getattr(g).unwrap().nlink, 1);
    assert_eq!(s.space().unwrap(), space(0, 0, 100));
    assert_eq!(
        s.purge_orphans_of(c5).unwrap(),
        vec![],
        "nothing left of c5"
    );
    assert_eq!(s.purge_orphans_of(c6).unwrap(), vec![]);
    assert_eq!(s.getattr(h), Err(MetaError::NotFound));
}

fn a_client_whose_session_ended_commits_nothing(s: &MetaStore) {
    let a = s.register_client("a", 1, 0).unwrap();
    let b = s.register_client("b", 2, 0).unwrap();
    s.act_as_client(a);
    let f = file(s, ROOT_INO, "f");
    // Client b takes a for stopped.
    s.act_as_client(b);
    assert!(s.end_client(a).unwrap());
    s.act_as_client(a);
    let ended = |r: Result<(), MetaError>| assert_eq!(r, Err(MetaError::SessionEnded(a)));
    ended(
        s.make_node(ROOT_INO, b"g", &NewNode::file(0o644, 0, 0))
            .map(|_| ()),
    );
    ended(
        s.apply_txg(
            &[TxgOp::SetRecord {
                ino: f,
                index: 0,
                rec: rec(1 << 40, 100, 10),
            }],
            true,
        )
        .map(|_| ()),
    );
    ended(s.unlink(ROOT_INO, b"f", &closed).map(|_| ()));
    assert!(!s.heartbeat(a, 10).unwrap(), "its beat says it is gone");
    assert!(!s.end_client(a).unwrap());
    s.act_as_client(b);
    assert_eq!(names(s, ROOT_INO), ["f"]);
    assert!(s.records(f, ..).unwrap().is_empty());
}

fn client_sessions_register_beat_and_end(s: &MetaStore) {
    assert!(s.clients().unwrap().is_empty());
    let a = s.register_client("node-a", 100, 1_000).unwrap();
    let b = s.register_client("node b.example", 200, 1_005).unwrap();
    assert_eq!((a, b), (1, 2), "numbers count up from 1");
    assert!(s.heartbeat(a, 1_010).unwrap());
    assert!(
        s.heartbeat(b, 1_003).unwrap(),
        "a late beat keeps the later time"
    );
    let all = s.clients().unwrap();
    assert_eq!(
        all,
        [
            ClientSession {
                id: 1,
                started: 1_000,
                heartbeat: 1_010,
                pid: 100,
                host: "node-a".into()
            },
            ClientSession {
                id: 2,
                started: 1_005,
                heartbeat: 1_005,
                pid: 200,
                host: "node b.example".into()
            },
        ]
    );
    // Sessions live apart from the namespace: the root lists nothing of them.
    assert!(s.readdir(ROOT_INO, None, 100).unwrap().is_empty());
    assert!(s.end_client(a).unwrap());
    assert!(!s.end_client(a).unwrap());
    assert!(
        !s.heartbeat(a, 1_020).unwrap(),
        "an ended session stays ended"
    );
    assert_eq!(
        s.register_client("node-a", 100, 1_030).unwrap(),
        3,
        "numbers are never reused"
    );
    assert_eq!(
        s.clients()
            .unwrap()
            .iter()
            .map(|c| c.id)
            .collect::<Vec<_>>(),
        [2, 3]
    );
    let err = s.register_client("bad\nhost", 1, 0).unwrap_err();
    assert!(matches!(err, MetaError::InvalidArgument(_)), "{err}");
}

fn statistics_add_up_and_stay_apart_from_accounting(s: &MetaStore) {
    assert_eq!(s.statistics(&["stat.a", "stat.b"]).unwrap(), [0, 0]);
    s.add_statistics(&[("stat.a", 5), ("stat.b", 7)]).unwrap();
    s.add_statistics(&[("stat.a", 3), ("stat.b", 0)]).unwrap();
    assert_eq!(s.statistics(&["stat.a", "stat.b"]).unwrap(), [8, 7]);
    s.add_statistics(&[("stat.a", u64::MAX)]).unwrap();
    assert_eq!(
        s.statistics(&["stat.a"]).unwrap(),
        [u64::MAX],
        "sums saturate"
    );
    // A name outside the statistics would reach the space or inode counters: refused whole.
    let space = s.space().unwrap();
    let err = s
        .add_statistics(&[("stat.b", 1), ("logical_bytes", 100)])
        .unwrap_err();
    assert!(matches!(err, MetaError::InvalidArgument(_)), "{err}");
    assert_eq!(s.space().unwrap(), space);
    assert_eq!(s.statistics(&["stat.b"]).unwrap(), [7]);
}

fn closed(_: u64) -> bool {
    false
}

fn open(_: u64) -> bool {
    true
}

fn rec(segment: u64, stored: u32, logical: u32) -> RecordRef {
    RecordRef {
        segment,
        offset: segment * 1000,
        stored_len: stored,
        logical_len: logical,
        codec: 3,
        checksum: u64::MAX - segment,
        inline: None,
    }
}

fn rec_at(segment: u64, offset: u64, stored: u32, logical: u32) -> RecordRef {
    RecordRef {
        segment,
        offset,
        stored_len: stored,
        logical_len: logical,
        codec: 3,
        checksum: offset ^ segment,
        inline: None,
    }
}

fn inline_rec(data: &[u8], logical: u32) -> RecordRef {
    RecordRef {
        segment: 0,
        offset: 0,
        stored_len: data.len() as u32,
        logical_len: logical,
        codec: 0,
        checksum: 9,
        inline: Some(data.to_vec()),
    }
}

fn space(logical: u64, stored: u64, garbage: u64) -> SpaceUsage {
    SpaceUsage {
        logical,
        stored,
        garbage,
    }
}

fn usage(records: u64, stored_bytes: u64) -> SegmentUsage {
    SegmentUsage {
        records,
        stored_bytes,
    }
}

fn codec_space(records: u64, logical_bytes: u64, stored_bytes: u64) -> CodecSpace {
    CodecSpace {
        records,
        logical_bytes,
        stored_bytes,
    }
}

fn loc(ino: u64, index: u64, rec: RecordRef) -> RecordLocation {
    RecordLocation { ino, index, rec }
}

fn ts(secs: i64) -> Timespec {
    Timespec { secs, nsec: 5 }
}

fn file(s: &MetaStore, parent: u64, name: &str) -> u64 {
    s.make_node(parent, name.as_bytes(), &NewNode::file(0o644, 1000, 1000))
        .expect("create")
        .ino
}

fn mkdir(s: &MetaStore, parent: u64, name: &str) -> u64 {
    s.make_node(parent, name.as_bytes(), &NewNode::dir(0o755, 1000, 1000))
        .expect("mkdir")
        .ino
}

fn path_of_names_a_file_from_the_root(s: &MetaStore) {
    let path = |ino| {
        s.path_of(ino)
            .unwrap()
            .map(|p| String::from_utf8(p).unwrap())
    };
    assert_eq!(path(ROOT_INO).as_deref(), Some("/"));
    let a = mkdir(s, ROOT_INO, "a");
    let b = mkdir(s, a, "b");
    for i in 0..2500 {
        file(s, b, &format!("filler{i}"));
    }
    let f = file(s, b, "zz-last");
    assert_eq!(path(f).as_deref(), Some("/a/b/zz-last"));
    assert_eq!(path(b).as_deref(), Some("/a/b"));
    s.rename(b, b"zz-last", ROOT_INO, b"moved", &closed)
        .unwrap();
    assert_eq!(path(f).as_deref(), Some("/moved"));
    s.unlink(ROOT_INO, b"moved", &open).unwrap();
    assert_eq!(path(f), None, "an orphan has no path");
    assert_eq!(s.path_of(999_999), Err(MetaError::NotFound));
}

fn nlink(s: &MetaStore, ino: u64) -> u32 {
    s.getattr(ino).expect("getattr").nlink
}

/// The names `dir` lists, sorted.
fn names(s: &MetaStore, dir: u64) -> Vec<String> {
    let mut names: Vec<String> = listed(s, dir);
    names.sort();
    names
}

/// The names `dir` lists, in listing order.
fn listed(s: &MetaStore, dir: u64) -> Vec<String> {
    s.readdir(dir, None, usize::MAX)
        .expect("readdir")
        .into_iter()
        .map(|e| String::from_utf8(e.name).unwrap())
        .collect()
}

/// The names of `dir` in listing order: by the inode each names, then by name.
fn in_listing_order(s: &MetaStore, dir: u64, mut names: Vec<String>) -> Vec<String> {
    names.sort_by_key(|n| (s.lookup(dir, n.as_bytes()).unwrap().ino, n.clone()));
    names
}

// ---------------------------------------------------------------------------------------------
// the suite

fn init_root(s: &MetaStore) {
    let root = s.getattr(ROOT_INO).unwrap();
    assert_eq!(root.kind, FileKind::Dir);
    assert_eq!(root.mode, 0o755);
    assert_eq!(root.nlink, 2);
    assert_eq!(root.st_mode(), libc::S_IFDIR as u32 | 0o755);
    assert_eq!(s.dir_parent(ROOT_INO).unwrap(), ROOT_INO);
    s.init().unwrap(); // idempotent
    assert!(names(s, ROOT_INO).is_empty());
    assert_eq!(s.space().unwrap(), SpaceUsage::default());
}

fn create_lookup_getattr(s: &MetaStore) {
    let a = s
        .make_node(ROOT_INO, b"a", &NewNode::file(0o100644, 7, 8))
        .unwrap();
    assert_eq!(a.kind, FileKind::File);
    assert_eq!(a.mode, 0o644, "type bits are masked off");
    assert_eq!((a.uid, a.gid, a.nlink, a.size), (7, 8, 1, 0));
    assert!(a.ino > ROOT_INO);
    assert_eq!(a.st_mode(), libc::S_IFREG as u32 | 0o644);
    assert_eq!(s.lookup(ROOT_INO, b"a").unwrap(), a);
    assert_eq!(s.getattr(a.ino).unwrap(), a);

    let b = s
        .make_node(ROOT_INO, b"b", &NewNode::file(0o600, 0, 0))
        .unwrap();
    assert!(b.ino > a.ino, "inode numbers increase and are unique");

    assert_eq!(
        s.make_node(ROOT_INO, b"a", &NewNode::file(0o644, 0, 0)),
        Err(MetaError::Exists)
    );
    assert_eq!(
        s.make_node(ROOT_INO, b"a", &NewNode::dir(0o755, 0, 0)),
        Err(MetaError::Exists)
    );
    assert_eq!(s.lookup(ROOT_INO, b"nope"), Err(MetaError::NotFound));
    assert_eq!(s.lookup(a.ino, b"x"), Err(MetaError::NotDir));
    assert_eq!(
        s.make_node(a.ino, b"x", &NewNode::file(0o644, 0, 0)),
        Err(MetaError::NotDir)
    );
    assert_eq!(
        s.make_node(9999, b"x", &NewNode::file(0o644, 0, 0)),
        Err(MetaError::NotFound)
    );
    assert_eq!(s.getattr(9999), Err(MetaError::NotFound));
    assert_eq!(s.dir_parent(a.ino), Err(MetaError::NotDir));

    // creating in a directory stamps its mtime
    let root = s.getattr(ROOT_INO).unwrap();
    assert!(root.mtime >= a.ctime);
    // binary names are fine
    let bin = [0xffu8, 0xfe, b'x'];
    let c = s
        .make_node(ROOT_INO, &bin, &NewNode::file(0o644, 0, 0))
        .unwrap();
    assert_eq!(s.lookup(ROOT_INO, &bin).unwrap().ino, c.ino);
}

fn name_validation(s: &MetaStore) {
    let long = vec![b'x'; 256];
    let max = vec![b'y'; 255];
    for bad in [&b""[..], b".", b"..", b"a/b", b"a\0b"] {
        let e = s
            .make_node(ROOT_INO, bad, &NewNode::file(0o644, 0, 0))
            .unwrap_err();
        assert!(matches!(e, MetaError::InvalidArgument(_)), "{bad:?}: {e:?}");
        assert_eq!(e.errno(), libc::EINVAL);
        assert!(matches!(
            s.lookup(ROOT_INO, bad),
            Err(MetaError::InvalidArgument(_))
        ));
    }
    let e = s
        .make_node(ROOT_INO, &long, &NewNode::dir(0o755, 0, 0))
        .unwrap_err();
    assert_eq!(e, MetaError::NameTooLong);
    assert_eq!(e.errno(), libc::ENAMETOOLONG);
    let f = s
        .make_node(ROOT_INO, &max, &NewNode::file(0o644, 0, 0))
        .unwrap();
    assert_eq!(
        s.rename(ROOT_INO, &max, ROOT_INO, &long, &closed),
        Err(MetaError::NameTooLong)
    );
    assert!(matches!(
        s.link(f.ino, ROOT_INO, b"."),
        Err(MetaError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.make_node(ROOT_INO, b"a/b", &NewNode::symlink(b"t", 0, 0)),
        Err(MetaError::InvalidArgument(_))
    ));
    // errno table
    assert_eq!(MetaError::NotFound.errno(), libc::ENOENT);
    assert_eq!(MetaError::Exists.errno(), libc::EEXIST);
    assert_eq!(MetaError::NotDir.errno(), libc::ENOTDIR);
    assert_eq!(MetaError::IsDir.errno(), libc::EISDIR);
    assert_eq!(MetaError::NotEmpty.errno(), libc::ENOTEMPTY);
    assert_eq!(MetaError::NotPermitted.errno(), libc::EPERM);
    assert_eq!(MetaError::CrossDirectoryLoop.errno(), libc::EINVAL);
    assert_eq!(MetaError::NoAttribute.errno(), libc::ENODATA);
    assert_eq!(MetaError::ValueTooLarge.errno(), libc::E2BIG);
    assert_eq!(MetaError::EngineFailure("x".into()).errno(), libc::EIO);
    assert_eq!(MetaError::Corrupt("x".into()).errno(), libc::EIO);
    assert_eq!(MetaError::Io("x".into()).errno(), libc::EIO);
    assert_eq!(MetaError::Full.errno(), libc::ENOSPC);
}

fn mkdir_nlink(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    assert_eq!(nlink(s, ROOT_INO), 3);
    assert_eq!(nlink(s, a), 2);
    let b = mkdir(s, a, "b");
    mkdir(s, a, "c");
    file(s, a, "f");
    assert_eq!(nlink(s, a), 4, "2 + two subdirectories; files do not count");
    assert_eq!(nlink(s, ROOT_INO), 3);
    assert_eq!(s.dir_parent(b).unwrap(), a);
    assert_eq!(s.getattr(a).unwrap().kind, FileKind::Dir);
    assert_eq!(
        s.getattr(a).unwrap().st_mode(),
        libc::S_IFDIR as u32 | 0o755
    );
    s.rmdir(a, b"b").unwrap();
    assert_eq!(nlink(s, a), 3);
    assert_eq!(s.getattr(b), Err(MetaError::NotFound));
}

fn setgid_directories_pass_on_their_group(s: &MetaStore) {
    let g = s
        .make_node(ROOT_INO, b"g", &NewNode::dir(0o2775, 7, 42))
        .unwrap()
        .ino;
    let f = s
        .make_node(g, b"f", &NewNode::file(0o644, 1000, 1000))
        .unwrap();
    assert_eq!((f.gid, f.mode), (42, 0o644), "a file in a set-group-ID dir");
    let d = s
        .make_node(g, b"d", &NewNode::dir(0o755, 1000, 1000))
        .unwrap();
    assert_eq!((d.gid, d.mode), (42, 0o2755), "a dir in a set-group-ID dir");
    let l = s
        .make_node(g, b"l", &NewNode::symlink(b"f", 1000, 1000))
        .unwrap();
    assert_eq!(l.gid, 42, "a symlink in a set-group-ID dir");
    let inner = s
        .make_node(d.ino, b"x", &NewNode::file(0o600, 1000, 1000))
        .unwrap();
    assert_eq!(
        inner.gid, 42,
        "the bit passed on keeps passing the group on"
    );
    let plain = mkdir(s, ROOT_INO, "plain");
    let f = s
        .make_node(plain, b"f", &NewNode::dir(0o755, 1000, 1000))
        .unwrap();
    assert_eq!(
        (f.gid, f.mode),
        (1000, 0o755),
        "an ordinary dir passes nothing on"
    );
}

fn symlink_readlink(s: &MetaStore) {
    let l = s
        .make_node(ROOT_INO, b"l", &NewNode::symlink(b"../some/where", 5, 6))
        .unwrap();
    assert_eq!(l.kind, FileKind::Symlink);
    assert_eq!(l.size, 13);
    assert_eq!(l.mode, 0o777);
    assert_eq!(s.readlink(l.ino).unwrap(), b"../some/where");
    let f = file(s, ROOT_INO, "f");
    assert!(matches!(s.readlink(f), Err(MetaError::InvalidArgument(_))));
    assert!(matches!(
        s.readlink(ROOT_INO),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(s.readlink(9999), Err(MetaError::NotFound));
    assert!(matches!(
        s.make_node(ROOT_INO, b"e", &NewNode::symlink(b"", 0, 0)),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(
        s.make_node(ROOT_INO, b"big", &NewNode::symlink(&vec![b'x'; 4097], 0, 0)),
        Err(MetaError::NameTooLong)
    );
    assert_eq!(
        s.make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0)),
        Err(MetaError::Exists)
    );
    // symlinks can be hard-linked and unlinked like files
    s.link(l.ino, ROOT_INO, b"l2").unwrap();
    assert_eq!(
        s.unlink(ROOT_INO, b"l", &closed).unwrap().fate,
        LinkFate::Linked
    );
    assert_eq!(s.readlink(l.ino).unwrap(), b"../some/where");
}

fn mknod_kinds(s: &MetaStore) {
    let d = s
        .make_node(
            ROOT_INO,
            b"dev",
            &NewNode::special(FileKind::CharDevice, 0o600, 0, 0, 0x0103).unwrap(),
        )
        .unwrap();
    assert_eq!(d.kind, FileKind::CharDevice);
    assert_eq!(d.rdev, 0x0103);
    assert_eq!(d.st_mode(), libc::S_IFCHR as u32 | 0o600);
    let p = s
        .make_node(
            ROOT_INO,
            b"p",
            &NewNode::special(FileKind::Fifo, 0o644, 0, 0, 0).unwrap(),
        )
        .unwrap();
    assert_eq!(p.st_mode(), libc::S_IFIFO as u32 | 0o644);
    let k = s
        .make_node(
            ROOT_INO,
            b"k",
            &NewNode::special(FileKind::Socket, 0o644, 0, 0, 0).unwrap(),
        )
        .unwrap();
    assert_eq!(k.st_mode(), libc::S_IFSOCK as u32 | 0o644);
    let b = s
        .make_node(
            ROOT_INO,
            b"b",
            &NewNode::special(FileKind::BlockDevice, 0o644, 0, 0, 1).unwrap(),
        )
        .unwrap();
    assert_eq!(b.st_mode(), libc::S_IFBLK as u32 | 0o644);
    let l = s
        .make_node(ROOT_INO, b"l", &NewNode::symlink(b"x", 0, 0))
        .unwrap();
    assert_eq!(l.st_mode(), libc::S_IFLNK as u32 | 0o777);
    for kind in [FileKind::Dir, FileKind::Symlink] {
        assert!(matches!(
            NewNode::special(kind, 0o755, 0, 0, 0),
            Err(MetaError::InvalidArgument(_))
        ));
    }
    // a regular file through mknod keeps no device number
    let f = s
        .make_node(
            ROOT_INO,
            b"f",
            &NewNode::special(FileKind::File, 0o644, 0, 0, 9).unwrap(),
        )
        .unwrap();
    assert_eq!((f.kind, f.rdev), (FileKind::File, 0));
    assert_eq!(s.lookup(ROOT_INO, b"d"), Err(MetaError::NotFound));
    // a node's fields must agree with its kind
    let mut bad = NewNode::file(0o644, 0, 0);
    bad.target = Some(b"t".to_vec());
    assert!(matches!(
        s.make_node(ROOT_INO, b"x", &bad),
        Err(MetaError::InvalidArgument(_))
    ));
    let mut bad = NewNode::symlink(b"t", 0, 0);
    bad.target = None;
    assert!(matches!(
        s.make_node(ROOT_INO, b"x", &bad),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(nlink(s, ROOT_INO), 2);
}

fn hard_links(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    let f = file(s, ROOT_INO, "f");
    let a = s.link(f, d, b"g").unwrap();
    assert_eq!(a.nlink, 2);
    assert_eq!(s.lookup(d, b"g").unwrap().ino, f);
    assert_eq!(nlink(s, d), 2, "file links do not change directory nlink");
    assert_eq!(s.link(d, ROOT_INO, b"d2"), Err(MetaError::NotPermitted));
    assert_eq!(MetaError::NotPermitted.errno(), libc::EPERM);
    assert_eq!(s.link(f, ROOT_INO, b"f"), Err(MetaError::Exists));
    assert_eq!(s.link(f, f, b"x"), Err(MetaError::NotDir));
    assert_eq!(s.link(9999, ROOT_INO, b"x"), Err(MetaError::NotFound));
    s.link(f, ROOT_INO, b"h").unwrap();
    assert_eq!(nlink(s, f), 3);

    s.set_record(f, 0, &rec(4, 10, 20)).unwrap();
    let u = s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert_eq!((u.ino, u.fate), (f, LinkFate::Linked));
    assert_eq!(
        u.freed,
        vec![],
        "a name going away frees nothing while others remain"
    );
    assert_eq!(nlink(s, f), 2);
    assert_eq!(s.unlink(d, b"g", &closed).unwrap().fate, LinkFate::Linked);
    let u = s.unlink(ROOT_INO, b"h", &closed).unwrap();
    assert_eq!(u.fate, LinkFate::Removed);
    assert_eq!(u.kind, FileKind::File);
    assert_eq!(
        u.freed,
        vec![rec(4, 10, 20)],
        "the last name frees the records"
    );
    assert_eq!(s.getattr(f), Err(MetaError::NotFound));
}

fn link_count_stops_at_ext4s_limit(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    let d = mkdir(s, ROOT_INO, "links");
    for i in 1..LINK_MAX {
        s.link(f, d, format!("{i}").as_bytes())
            .expect("a link within the limit");
    }
    assert_eq!(nlink(s, f), LINK_MAX);
    assert_eq!(s.link(f, d, b"one-more"), Err(MetaError::TooManyLinks));
    assert_eq!(nlink(s, f), LINK_MAX);
    assert_eq!(s.lookup(d, b"one-more"), Err(MetaError::NotFound));
}

fn unlink_errors(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    let f = file(s, ROOT_INO, "f");
    assert_eq!(s.unlink(ROOT_INO, b"d", &closed), Err(MetaError::IsDir));
    assert_eq!(
        s.unlink(ROOT_INO, b"nope", &closed),
        Err(MetaError::NotFound)
    );
    assert_eq!(s.unlink(f, b"x", &closed), Err(MetaError::NotDir));
    assert_eq!(s.unlink(9999, b"x", &closed), Err(MetaError::NotFound));
    assert_eq!(nlink(s, d), 2);
    assert_eq!(nlink(s, f), 1);
}

fn rmdir_rules(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    let f = file(s, d, "f");
    assert_eq!(s.rmdir(ROOT_INO, b"d"), Err(MetaError::NotEmpty));
    assert_eq!(s.rmdir(d, b"f"), Err(MetaError::NotDir));
    assert_eq!(s.rmdir(ROOT_INO, b"nope"), Err(MetaError::NotFound));
    assert_eq!(s.rmdir(f, b"x"), Err(MetaError::NotDir));
    s.set_xattr(d, b"user.k", b"v", XattrFlags::Any).unwrap();
    s.set_prop(d, "compression", "zstd").unwrap();
    s.unlink(d, b"f", &closed).unwrap();
    s.rmdir(ROOT_INO, b"d").unwrap();
    assert_eq!(s.getattr(d), Err(MetaError::NotFound));
    assert_eq!(nlink(s, ROOT_INO), 2);
    assert_eq!(s.lookup(ROOT_INO, b"d"), Err(MetaError::NotFound));
    assert_eq!(s.list_props(d), Err(MetaError::NotFound));
}

fn orphans(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    s.set_record(f, 0, &rec(1, 100, 400)).unwrap();
    s.set_xattr(f, b"user.a", b"1", XattrFlags::Any).unwrap();
    let u = s.unlink(ROOT_INO, b"f", &open).unwrap();
    assert_eq!((u.ino, u.fate), (f, LinkFate::Orphaned));
    assert_eq!(u.freed, vec![], "an open file keeps its records");
    let a = s.getattr(f).unwrap();
    assert_eq!(a.nlink, 0);
    assert_eq!(s.lookup(ROOT_INO, b"f"), Err(MetaError::NotFound));
    // still readable while open
    assert_eq!(s.get_record(f, 0).unwrap(), Some(rec(1, 100, 400)));
    assert_eq!(s.get_xattr(f, b"user.a").unwrap(), b"1");
    // an orphan cannot get a name again
    assert_eq!(s.link(f, ROOT_INO, b"g"), Err(MetaError::NotFound));
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 400,
            stored: 100,
            garbage: 0
        }
    );
    assert_eq!(s.forget(f).unwrap(), Some(vec![rec(1, 100, 400)]));
    assert_eq!(s.getattr(f), Err(MetaError::NotFound));
    assert_eq!(s.forget(f).unwrap(), None, "second forget is a no-op");
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 0,
            stored: 0,
            garbage: 100
        }
    );

    // forget does not touch linked inodes or directories
    let g = file(s, ROOT_INO, "g");
    assert_eq!(s.forget(g).unwrap(), None);
    assert_eq!(s.forget(ROOT_INO).unwrap(), None);
    assert_eq!(nlink(s, g), 1);

    // rename over an open file orphans it too
    let h = file(s, ROOT_INO, "h");
    let r = s
        .rename(ROOT_INO, b"g", ROOT_INO, b"h", &open)
        .unwrap()
        .unwrap();
    assert_eq!((r.ino, r.fate), (h, LinkFate::Orphaned));
    assert_eq!(r.freed, vec![]);
    assert_eq!(nlink(s, h), 0);
    assert_eq!(s.lookup(ROOT_INO, b"h").unwrap().ino, g);
    assert_eq!(
        s.forget(h).unwrap(),
        Some(vec![]),
        "removed, with no records"
    );
}

fn removal_returns_the_freed_records(s: &MetaStore) {
    let three = [
        rec(1, 10, 40),
        inline_rec(b"tiny", 4),
        rec_at(2, 64, 20, 80),
    ];
    let fill = |name: &str| {
        let ino = file(s, ROOT_INO, name);
        for (i, r) in three.iter().enumerate() {
            s.set_record(ino, 2 * i as u64, r).unwrap();
        }
        ino
    };

    // unlink of a closed file: exactly its records, in index order, inline one included
    let f = fill("f");
    let u = s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert_eq!((u.ino, u.fate), (f, LinkFate::Removed));
    assert_eq!(u.freed, three.to_vec());
    assert_eq!(s.space().unwrap(), space(0, 0, 30));

    // unlink of an open file: nothing yet; its forget frees them
    let g = fill("g");
    let u = s.unlink(ROOT_INO, b"g", &open).unwrap();
    assert_eq!((u.ino, u.fate), (g, LinkFate::Orphaned));
    assert_eq!(u.freed, vec![]);
    assert_eq!(s.forget(g).unwrap(), Some(three.to_vec()));
    assert_eq!(s.forget(g).unwrap(), None);

    // rename over a file: the replaced file's records
    let h = fill("h");
    file(s, ROOT_INO, "src");
    let r = s
        .rename(ROOT_INO, b"src", ROOT_INO, b"h", &closed)
        .unwrap()
        .unwrap();
    assert_eq!((r.ino, r.fate), (h, LinkFate::Removed));
    assert_eq!(r.freed, three.to_vec());

    // rename over an empty directory: removed, nothing to free
    let e = mkdir(s, ROOT_INO, "e");
    mkdir(s, ROOT_INO, "d");
    let r = s
        .rename(ROOT_INO, b"d", ROOT_INO, b"e", &closed)
        .unwrap()
        .unwrap();
    assert_eq!((r.ino, r.fate, r.freed), (e, LinkFate::Removed, vec![]));
    assert_eq!(s.space().unwrap(), space(0, 0, 90));
}

fn rename_exchange_swaps_two_names(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let b = mkdir(s, ROOT_INO, "b");
    let f = file(s, a, "f");
    let d = mkdir(s, b, "d");
    let sub = mkdir(s, d, "sub");
    assert_eq!((nlink(s, a), nlink(s, b)), (2, 3));
    // A file and a directory across parents: names swap, the directory's parent and the
    // parents' link counts follow it.
    s.rename_exchange(a, b"f", b, b"d").unwrap();
    assert_eq!(s.lookup(a, b"f").unwrap().ino, d);
    assert_eq!(s.lookup(b, b"d").unwrap().ino, f);
    assert_eq!(s.dir_parent(d).unwrap(), a);
    assert_eq!((nlink(s, a), nlink(s, b)), (3, 2));
    // Within one directory.
    let g = file(s, a, "g");
    s.rename_exchange(a, b"f", a, b"g").unwrap();
    assert_eq!(
        (
            s.lookup(a, b"f").unwrap().ino,
            s.lookup(a, b"g").unwrap().ino
        ),
        (g, d)
    );
    assert_eq!(nlink(s, a), 3);
    // Both must exist; neither may move below itself; the same name is a no-op.
    assert_eq!(
        s.rename_exchange(a, b"zz", b, b"d"),
        Err(MetaError::NotFound)
    );
    assert_eq!(
        s.rename_exchange(a, b"g", b, b"zz"),
        Err(MetaError::NotFound)
    );
    assert_eq!(
        s.rename_exchange(a, b"g", sub, b"x"),
        Err(MetaError::NotFound),
        "missing target"
    );
    let x = file(s, sub, "x");
    assert_eq!(
        s.rename_exchange(a, b"g", sub, b"x"),
        Err(MetaError::CrossDirectoryLoop),
        "the directory would move below itself"
    );
    assert_eq!(
        s.lookup(sub, b"x").unwrap().ino,
        x,
        "a refused exchange changes nothing"
    );
    s.rename_exchange(a, b"g", a, b"g").unwrap();
    assert_eq!(s.lookup(a, b"g").unwrap().ino, d);
}

fn rename_noreplace_refuses_an_existing_target(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let f = file(s, a, "f");
    let g = file(s, a, "g");
    let d = mkdir(s, ROOT_INO, "d");
    assert_eq!(s.rename_noreplace(a, b"f", a, b"g"), Err(MetaError::Exists));
    assert_eq!(
        s.rename_noreplace(a, b"f", ROOT_INO, b"d"),
        Err(MetaError::Exists)
    );
    assert_eq!(s.rename_noreplace(a, b"f", a, b"f"), Err(MetaError::Exists));
    assert_eq!(
        (
            s.lookup(a, b"f").unwrap().ino,
            s.lookup(a, b"g").unwrap().ino
        ),
        (f, g),
        "a refused rename changes nothing"
    );
    assert_eq!(
        s.rename_noreplace(a, b"zz", a, b"y"),
        Err(MetaError::NotFound)
    );
    // a free target: an ordinary rename, across directories too
    s.rename_noreplace(a, b"f", d, b"f").unwrap();
    assert_eq!(names(s, a), ["g"]);
    assert_eq!(s.lookup(d, b"f").unwrap().ino, f);
    s.rename_noreplace(ROOT_INO, b"d", a, b"d").unwrap();
    assert_eq!(s.dir_parent(d).unwrap(), a);
    assert_eq!((nlink(s, ROOT_INO), nlink(s, a)), (3, 3));
}

fn rename_basic(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let b = mkdir(s, ROOT_INO, "b");
    let f = file(s, a, "f");
    // within a directory
    assert_eq!(s.rename(a, b"f", a, b"g", &closed).unwrap(), None);
    assert_eq!(names(s, a), ["g"]);
    assert_eq!(s.lookup(a, b"g").unwrap().ino, f);
    // across directories
    s.rename(a, b"g", b, b"f", &closed).unwrap();
    assert_eq!(names(s, a), Vec::<String>::new());
    assert_eq!(names(s, b), ["f"]);
    assert_eq!((nlink(s, a), nlink(s, b)), (2, 2));
    // a directory across directories moves nlink and the parent pointer
    let c = mkdir(s, a, "c");
    assert_eq!(nlink(s, a), 3);
    s.rename(a, b"c", b, b"c", &closed).unwrap();
    assert_eq!((nlink(s, a), nlink(s, b)), (2, 3));
    assert_eq!(s.dir_parent(c).unwrap(), b);
    assert_eq!(nlink(s, ROOT_INO), 4);
    // onto itself: no-op
    assert_eq!(s.rename(b, b"c", b, b"c", &closed).unwrap(), None);
    assert_eq!(names(s, b), ["c", "f"]);
    // errors
    assert_eq!(
        s.rename(a, b"zz", b, b"x", &closed),
        Err(MetaError::NotFound)
    );
    assert_eq!(
        s.rename(a, b"zz", 9999, b"x", &closed),
        Err(MetaError::NotFound)
    );
    assert_eq!(s.rename(b, b"f", f, b"x", &closed), Err(MetaError::NotDir));
    assert_eq!(s.rename(f, b"f", b, b"x", &closed), Err(MetaError::NotDir));
}

fn rename_replace(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    let e = mkdir(s, ROOT_INO, "e");
    let full = mkdir(s, ROOT_INO, "full");
    file(s, full, "x");
    let f = file(s, ROOT_INO, "f");
    let g = file(s, ROOT_INO, "g");
    assert_eq!(nlink(s, ROOT_INO), 5);

    // file over file
    s.set_record(g, 0, &rec(9, 10, 20)).unwrap();
    let r = s
        .rename(ROOT_INO, b"f", ROOT_INO, b"g", &closed)
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.ino, r.kind, r.fate),
        (g, FileKind::File, LinkFate::Removed)
    );
    assert_eq!(r.freed, vec![rec(9, 10, 20)], "the replaced file's records");
    assert_eq!(s.lookup(ROOT_INO, b"g").unwrap().ino, f);
    assert_eq!(s.lookup(ROOT_INO, b"f"), Err(MetaError::NotFound));
    assert_eq!(s.getattr(g), Err(MetaError::NotFound));
    assert_eq!(s.space().unwrap().garbage, 10);

    // file over a hard-linked file: the target keeps its other name
    let h = file(s, ROOT_INO, "h");
    s.link(h, d, b"h2").unwrap();
    let r = s
        .rename(ROOT_INO, b"g", ROOT_INO, b"h", &closed)
        .unwrap()
        .unwrap();
    assert_eq!((r.ino, r.fate), (h, LinkFate::Linked));
    assert_eq!(r.freed, vec![]);
    assert_eq!(nlink(s, h), 1);

    // two names of the same inode: no-op, both remain
    s.link(f, ROOT_INO, b"f2").unwrap();
    assert_eq!(
        s.rename(ROOT_INO, b"h", ROOT_INO, b"f2", &closed).unwrap(),
        None
    );
    assert_eq!(s.lookup(ROOT_INO, b"h").unwrap().ino, f);
    assert_eq!(s.lookup(ROOT_INO, b"f2").unwrap().ino, f);
    assert_eq!(nlink(s, f), 2);

    // dir over empty dir
    let sub = mkdir(s, d, "sub");
    assert_eq!(nlink(s, d), 3);
    let r = s
        .rename(ROOT_INO, b"d", ROOT_INO, b"e", &closed)
        .unwrap()
        .unwrap();
    assert_eq!(
        (r.ino, r.kind, r.fate),
        (e, FileKind::Dir, LinkFate::Removed)
    );
    assert_eq!(s.getattr(e), Err(MetaError::NotFound));
    assert_eq!(s.lookup(ROOT_INO, b"e").unwrap().ino, d);
    assert_eq!(nlink(s, ROOT_INO), 4, "root lost one subdirectory");
    assert_eq!(nlink(s, d), 3);
    assert_eq!(s.dir_parent(sub).unwrap(), d);

    // dir over empty dir in another directory
    let t = mkdir(s, full, "t");
    assert_eq!(nlink(s, full), 3);
    s.rename(d, b"sub", full, b"t", &closed).unwrap();
    assert_eq!(s.getattr(t), Err(MetaError::NotFound));
    assert_eq!((nlink(s, d), nlink(s, full)), (2, 3));
    assert_eq!(s.dir_parent(sub).unwrap(), full);

    // dir over non-empty dir, file over dir, dir over file
    let e2 = mkdir(s, ROOT_INO, "e2");
    assert_eq!(
        s.rename(ROOT_INO, b"e2", ROOT_INO, b"full", &closed),
        Err(MetaError::NotEmpty)
    );
    assert_eq!(
        s.rename(ROOT_INO, b"h", ROOT_INO, b"e2", &closed),
        Err(MetaError::IsDir)
    );
    assert_eq!(
        s.rename(ROOT_INO, b"e2", ROOT_INO, b"h", &closed),
        Err(MetaError::NotDir)
    );
    // nothing changed by the failures
    assert_eq!(s.lookup(ROOT_INO, b"e2").unwrap().ino, e2);
    assert_eq!(s.lookup(ROOT_INO, b"h").unwrap().ino, f);
    assert_eq!(nlink(s, ROOT_INO), 5);
}

fn rename_loop(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let b = mkdir(s, a, "b");
    let c = mkdir(s, b, "c");
    let e = s.rename(ROOT_INO, b"a", c, b"a", &closed).unwrap_err();
    assert_eq!(e, MetaError::CrossDirectoryLoop);
    assert_eq!(e.errno(), libc::EINVAL);
    assert_eq!(
        s.rename(ROOT_INO, b"a", a, b"x", &closed),
        Err(MetaError::CrossDirectoryLoop)
    );
    assert_eq!(
        s.rename(a, b"b", b, b"x", &closed),
        Err(MetaError::CrossDirectoryLoop)
    );
    // moving up is fine
    s.rename(b, b"c", ROOT_INO, b"c", &closed).unwrap();
    assert_eq!(s.dir_parent(c).unwrap(), ROOT_INO);
    // and then a sibling can go below it
    s.rename(ROOT_INO, b"a", c, b"a", &closed).unwrap();
    assert_eq!(s.dir_parent(a).unwrap(), c);
    assert_eq!(nlink(s, ROOT_INO), 3);
    assert_eq!(nlink(s, c), 3);
}

fn readdir_plus_gives_what_lookup_gives(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    mkdir(s, d, "sub");
    let f = file(s, d, "f");
    s.link(f, d, b"f2").unwrap();
    s.make_node(d, b"l", &NewNode::symlink(b"target", 0, 0))
        .unwrap();
    for i in 0..10 {
        file(s, d, &format!("n{i}"));
    }
    let mut got = Vec::new();
    let mut after: Option<(u64, Vec<u8>)> = None;
    loop {
        let from = after.as_ref().map(|(i, n)| ListAfter::entry(*i, n));
        let page = s.readdir_plus(d, from, 4).unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 4);
        // The same entries as a plain listing of the same page.
        let plain = s.readdir(d, from, 4).unwrap();
        let entries: Vec<_> = page.iter().map(|(e, _)| e.clone()).collect();
        assert_eq!(entries, plain);
        let last = &page.last().unwrap().0;
        after = Some((last.ino, last.name.clone()));
        for (e, attr) in page {
            assert_eq!(attr, Some(s.lookup(d, &e.name).unwrap()));
            got.push(String::from_utf8(e.name).unwrap());
        }
    }
    assert_eq!(got, listed(s, d));
    assert_eq!(got.len(), 14);
    // A hard link is listed beside the other names of its inode.
    let f2 = s
        .readdir_plus(d, Some(ListAfter::entry(f, b"f")), 1)
        .unwrap();
    assert_eq!(f2[0].0.name, b"f2");
    assert_eq!((f2[0].0.ino, f2[0].1.as_ref().unwrap().nlink), (f, 2));
    assert_eq!(s.readdir_plus(f, None, 10), Err(MetaError::NotDir));
    assert_eq!(s.readdir_plus(9999, None, 10), Err(MetaError::NotFound));
}

fn readdir_pagination(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    let mut expect: Vec<String> = (0..25).map(|i| format!("n{i:02}")).collect();
    for (i, n) in expect.iter().enumerate() {
        if i % 5 == 0 {
            mkdir(s, d, n);
        } else {
            file(s, d, n);
        }
    }
    file(s, d, "n00x");
    expect.push("n00x".into());
    let expect = in_listing_order(s, d, expect);
    let mut got = Vec::new();
    let mut after: Option<(u64, Vec<u8>)> = None;
    let mut pages = 0;
    loop {
        let page = s
            .readdir(d, after.as_ref().map(|(i, n)| ListAfter::entry(*i, n)), 7)
            .unwrap();
        if page.is_empty() {
            break;
        }
        assert!(page.len() <= 7);
        pages += 1;
        let last = page.last().unwrap();
        after = Some((last.ino, last.name.clone()));
        for e in page {
            let a = s.lookup(d, &e.name).unwrap();
            assert_eq!((a.ino, a.kind), (e.ino, e.kind));
            got.push(String::from_utf8(e.name).unwrap());
        }
    }
    assert_eq!(pages, 4);
    assert_eq!(got, expect);
    let past_every_inode = ListAfter::ino(i64::MAX as u64);
    assert_eq!(s.readdir(d, Some(past_every_inode), 10).unwrap(), vec![]);
    assert_eq!(s.readdir(d, None, 0).unwrap(), vec![]);
    for (i, name) in expect.iter().enumerate() {
        let rest: Vec<String> = expect[i + 1..].iter().take(3).cloned().collect();
        let ino = s.lookup(d, name.as_bytes()).unwrap().ino;
        let after_entry = s
            .readdir(d, Some(ListAfter::entry(ino, name.as_bytes())), 3)
            .unwrap();
        let after_entry: Vec<String> = after_entry
            .into_iter()
            .map(|e| String::from_utf8(e.name).unwrap())
            .collect();
        assert_eq!(after_entry, rest, "after {name}");
        // A position known only by its inode number resumes at the entry of that inode.
        let at_ino = s.readdir(d, Some(ListAfter::ino(ino)), 1).unwrap();
        assert_eq!(at_ino[0].name, name.as_bytes());
    }
    assert_eq!(names(s, ROOT_INO), ["d"]);
    let f = s.lookup(d, b"n01").unwrap().ino;
    assert_eq!(s.readdir(f, None, 10), Err(MetaError::NotDir));
    assert_eq!(s.readdir(9999, None, 10), Err(MetaError::NotFound));
}

fn setattr_rules(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    let before = s.getattr(f).unwrap();
    let t = Timespec {
        secs: 1_000_000,
        nsec: 42,
    };
    let a = s
        .setattr(
            f,
            &SetAttr {
                mode: Some(0o4751),
                uid: Some(11),
                gid: Some(12),
                size: Some(12345),
                atime: Some(t),
                mtime: Some(Timespec { secs: -5, nsec: 7 }),
                ctime: None,
            },
        )
        .unwrap();
    assert_eq!((a.mode, a.uid, a.gid, a.size), (0o4751, 11, 12, 12345));
    assert_eq!(a.atime, t);
    assert_eq!(a.mtime, Timespec { secs: -5, nsec: 7 });
    assert!(a.ctime >= before.ctime);
    assert_eq!(s.getattr(f).unwrap(), a);
    // size alone bumps mtime
    let b = s
        .setattr(
            f,
            &SetAttr {
                size: Some(1),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert!(b.mtime > a.mtime);
    assert_eq!((b.size, b.mode), (1, 0o4751));
    // type bits are masked
    let c = s
        .setattr(
            f,
            &SetAttr {
                mode: Some(0o100600),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!(c.mode, 0o600);
    let size = SetAttr {
        size: Some(1),
        ..SetAttr::default()
    };
    assert_eq!(s.setattr(ROOT_INO, &size), Err(MetaError::IsDir));
    let l = s
        .make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0))
        .unwrap()
        .ino;
    assert!(matches!(
        s.setattr(l, &size),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(s.setattr(9999, &size), Err(MetaError::NotFound));
    // mode on a directory is fine
    let d = s
        .setattr(
            ROOT_INO,
            &SetAttr {
                mode: Some(0o700),
                ..SetAttr::default()
            },
        )
        .unwrap();
    assert_eq!((d.mode, d.kind), (0o700, FileKind::Dir));
    // A change time the caller gives (the kernel's own, with the writeback cache) is taken when
    // it is later than the stored one...
    let later = Timespec {
        secs: d.ctime.secs + 100,
        nsec: 5,
    };
    let chmod = |ctime| SetAttr {
        mode: Some(0o711),
        ctime: Some(ctime),
        ..SetAttr::default()
    };
    let e = s.setattr(ROOT_INO, &chmod(later)).unwrap();
    assert_eq!((e.mode, e.ctime), (0o711, later));
    // ...and never sets it back, so repeating a change with an earlier one changes nothing.
    let earlier = Timespec {
        secs: later.secs - 50,
        nsec: 0,
    };
    assert_eq!(s.setattr(ROOT_INO, &chmod(earlier)).unwrap(), e);
    assert_eq!(s.getattr(ROOT_INO).unwrap(), e);
}

fn xattr_names_in_use_across_inodes(s: &MetaStore) {
    let cap = b"security.capability";
    let in_use = |name: &[u8]| s.xattr_name_in_use(name).unwrap();
    assert!(!in_use(cap));
    let (f, g) = (file(s, ROOT_INO, "f"), file(s, ROOT_INO, "g"));
    s.set_xattr(f, b"user.a", b"1", XattrFlags::Any).unwrap();
    assert!(in_use(b"user.a") && !in_use(cap) && !in_use(b"user"));
    s.set_xattr(f, cap, b"c", XattrFlags::Any).unwrap();
    s.set_xattr(g, cap, b"c", XattrFlags::Any).unwrap();
    assert!(in_use(cap));
    s.remove_xattr(f, cap).unwrap();
    assert!(in_use(cap), "g still has one");
    s.unlink(ROOT_INO, b"g", &closed).unwrap();
    assert!(!in_use(cap), "removed with g");
    assert!(in_use(b"user.a"));
}

fn xattrs(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    assert_eq!(s.list_xattrs(f).unwrap(), Vec::<Vec<u8>>::new());
    assert_eq!(s.get_xattr(f, b"user.a"), Err(MetaError::NoAttribute));
    s.set_xattr(f, b"user.b", b"2", XattrFlags::Any).unwrap();
    s.set_xattr(f, b"user.a", b"", XattrFlags::Create).unwrap();
    assert_eq!(s.get_xattr(f, b"user.a").unwrap(), b"");
    assert_eq!(
        s.set_xattr(f, b"user.a", b"x", XattrFlags::Create),
        Err(MetaError::Exists)
    );
    assert_eq!(
        s.set_xattr(f, b"user.c", b"x", XattrFlags::Replace),
        Err(MetaError::NoAttribute)
    );
    s.set_xattr(f, b"user.a", b"\x00\xff", XattrFlags::Replace)
        .unwrap();
    assert_eq!(s.get_xattr(f, b"user.a").unwrap(), b"\x00\xff");
    s.set_xattr(f, b"user.b", b"3", XattrFlags::Any).unwrap();
    assert_eq!(s.get_xattr(f, b"user.b").unwrap(), b"3");
    assert_eq!(
        s.list_xattrs(f).unwrap(),
        vec![b"user.a".to_vec(), b"user.b".to_vec()]
    );
    s.remove_xattr(f, b"user.a").unwrap();
    assert_eq!(s.remove_xattr(f, b"user.a"), Err(MetaError::NoAttribute));
    assert_eq!(s.list_xattrs(f).unwrap(), vec![b"user.b".to_vec()]);
    // limits and errors
    assert_eq!(
        s.set_xattr(f, b"user.big", &vec![0u8; 65537], XattrFlags::Any),
        Err(MetaError::ValueTooLarge)
    );
    s.set_xattr(f, b"user.max", &vec![1u8; 65536], XattrFlags::Any)
        .unwrap();
    assert_eq!(
        s.set_xattr(f, &[b'n'; 256], b"", XattrFlags::Any),
        Err(MetaError::NameTooLong)
    );
    assert!(matches!(
        s.set_xattr(f, b"", b"", XattrFlags::Any),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(
        s.set_xattr(9999, b"user.a", b"", XattrFlags::Any),
        Err(MetaError::NotFound)
    );
    assert_eq!(s.list_xattrs(9999), Err(MetaError::NotFound));
    // xattrs are per inode, and shared between hard links
    s.link(f, ROOT_INO, b"g").unwrap();
    assert_eq!(
        s.get_xattr(s.lookup(ROOT_INO, b"g").unwrap().ino, b"user.b")
            .unwrap(),
        b"3"
    );
    s.set_xattr(ROOT_INO, b"user.dir", b"d", XattrFlags::Any)
        .unwrap();
    assert_eq!(s.list_xattrs(ROOT_INO).unwrap(), vec![b"user.dir".to_vec()]);
    // flags from raw
    assert_eq!(XattrFlags::from_raw(0).unwrap(), XattrFlags::Any);
    assert_eq!(
        XattrFlags::from_raw(libc::XATTR_CREATE).unwrap(),
        XattrFlags::Create
    );
    assert_eq!(
        XattrFlags::from_raw(libc::XATTR_REPLACE).unwrap(),
        XattrFlags::Replace
    );
    assert_eq!(
        XattrFlags::from_raw(libc::XATTR_CREATE | libc::XATTR_REPLACE).unwrap(),
        XattrFlags::Both
    );
    assert!(XattrFlags::from_raw(4).is_err());
}

/// Names outside the user., trusted. and security. namespaces are not supported (EOPNOTSUPP,
/// as on ext4, system. included: no POSIX ACLs); a namespace without a name is invalid; both
/// flags at once fail either way, the create check first, as on ext4.
fn xattr_namespaces_and_both_flags(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    for name in [
        b"other.a".as_slice(),
        b"plain",
        b"user",
        b"userx.a",
        b"system.a",
        b"system.posix_acl_access",
        b"system.",
    ] {
        let shown = String::from_utf8_lossy(name);
        assert_eq!(
            s.set_xattr(f, name, b"x", XattrFlags::Any),
            Err(MetaError::UnsupportedNamespace),
            "set {shown}"
        );
        assert_eq!(
            s.get_xattr(f, name),
            Err(MetaError::UnsupportedNamespace),
            "get {shown}"
        );
        assert_eq!(
            s.remove_xattr(f, name),
            Err(MetaError::UnsupportedNamespace),
            "remove {shown}"
        );
    }
    for name in [b"user.".as_slice(), b"trusted.", b"security."] {
        let shown = String::from_utf8_lossy(name);
        let invalid = |r: Result<(), MetaError>| matches!(r, Err(MetaError::InvalidArgument(_)));
        assert!(
            invalid(s.set_xattr(f, name, b"x", XattrFlags::Any)),
            "set {shown}"
        );
        assert!(invalid(s.get_xattr(f, name).map(drop)), "get {shown}");
        assert!(invalid(s.remove_xattr(f, name)), "remove {shown}");
    }
    assert_eq!(s.list_xattrs(f).unwrap(), Vec::<Vec<u8>>::new());
    for name in [b"user.a".as_slice(), b"trusted.a", b"security.a"] {
        s.set_xattr(f, name, b"1", XattrFlags::Any).unwrap();
    }
    assert_eq!(
        s.set_xattr(f, b"user.a", b"2", XattrFlags::Both),
        Err(MetaError::Exists)
    );
    assert_eq!(
        s.set_xattr(f, b"user.b", b"2", XattrFlags::Both),
        Err(MetaError::NoAttribute)
    );
    assert_eq!(s.get_xattr(f, b"user.a").unwrap(), b"1");
    assert_eq!(s.list_xattrs(f).unwrap().len(), 3);
}

fn records_and_accounting(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    let g = file(s, ROOT_INO, "g");
    for i in 0..10 {
        assert_eq!(s.set_record(f, i, &rec(i + 1, 100, 1000)).unwrap(), None);
    }
    s.set_record(g, 0, &rec(50, 7, 70)).unwrap();
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 10_070,
            stored: 1_007,
            garbage: 0
        }
    );
    assert_eq!(s.get_record(f, 3).unwrap(), Some(rec(4, 100, 1000)));
    assert_eq!(s.get_record(f, 10).unwrap(), None);
    assert_eq!(s.get_record(f, u64::MAX).unwrap(), None);

    // replace returns the old ref and accounts it as garbage
    let old = s.set_record(f, 3, &rec(77, 60, 1000)).unwrap();
    assert_eq!(old, Some(rec(4, 100, 1000)));
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 10_070,
            stored: 967,
            garbage: 100
        }
    );
    // setting the identical ref again is not garbage
    assert_eq!(
        s.set_record(f, 3, &rec(77, 60, 1000)).unwrap(),
        Some(rec(77, 60, 1000))
    );
    assert_eq!(s.space().unwrap().garbage, 100);

    // inline records: stored in metadata, never garbage
    let inline = RecordRef {
        segment: 0,
        offset: 0,
        stored_len: 3,
        logical_len: 5,
        codec: 0,
        checksum: 1,
        inline: Some(vec![1, 2, 3]),
    };
    s.set_record(g, 1, &inline).unwrap();
    let old = s.set_record(g, 1, &rec(51, 2, 5)).unwrap();
    assert_eq!(old, Some(inline.clone()));
    assert_eq!(s.space().unwrap().garbage, 100);
    let bad_inline = RecordRef {
        stored_len: 4,
        ..inline
    };
    assert!(matches!(
        s.set_record(g, 2, &bad_inline),
        Err(MetaError::InvalidArgument(_))
    ));

    // ranges
    let r = s.records(f, 2..5).unwrap();
    assert_eq!(r.iter().map(|(i, _)| *i).collect::<Vec<_>>(), vec![2, 3, 4]);
    assert_eq!(r[1].1, rec(77, 60, 1000));
    assert_eq!(s.records(f, 8..).unwrap().len(), 2);
    assert_eq!(s.records(f, ..=1).unwrap().len(), 2);
    assert_eq!(s.records(f, ..).unwrap().len(), 10);
    assert_eq!(s.records(f, 5..5).unwrap(), vec![]);
    assert_eq!(s.records(g, ..).unwrap().len(), 2, "records are per inode");

    // truncate
    let removed = s.truncate_records(f, 7).unwrap();
    assert_eq!(
        removed.iter().map(|(i, _)| *i).collect::<Vec<_>>(),
        vec![7, 8, 9]
    );
    assert_eq!(removed[0].1, rec(8, 100, 1000));
    assert_eq!(s.records(f, ..).unwrap().len(), 7);
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 7_000 + 70 + 5,
            stored: 660 + 7 + 2,
            garbage: 400
        }
    );
    assert_eq!(s.truncate_records(f, 100).unwrap(), vec![]);

    // removing the file frees the rest
    s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 75,
            stored: 9,
            garbage: 1_060
        }
    );
    assert_eq!(s.get_record(f, 0), Err(MetaError::NotFound));
    s.release_garbage(1_000).unwrap();
    assert_eq!(s.space().unwrap().garbage, 60);
    s.release_garbage(1_000).unwrap();
    assert_eq!(s.space().unwrap().garbage, 0, "saturates");

    // errors
    let d = mkdir(s, ROOT_INO, "d");
    assert_eq!(s.set_record(d, 0, &rec(1, 1, 1)), Err(MetaError::IsDir));
    assert_eq!(s.records(d, ..), Err(MetaError::IsDir));
    let l = s
        .make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0))
        .unwrap()
        .ino;
    assert!(matches!(
        s.set_record(l, 0, &rec(1, 1, 1)),
        Err(MetaError::InvalidArgument(_))
    ));
    assert!(matches!(
        s.set_record(g, u64::MAX, &rec(1, 1, 1)),
        Err(MetaError::InvalidArgument(_))
    ));
    assert_eq!(
        s.set_record(9999, 0, &rec(1, 1, 1)),
        Err(MetaError::NotFound)
    );
    // large (but valid) indexes and full-width u64 fields round-trip
    let wide = RecordRef {
        segment: u64::MAX,
        offset: u64::MAX - 1,
        stored_len: u32::MAX,
        logical_len: u32::MAX,
        codec: u8::MAX,
        checksum: u64::MAX,
        inline: None,
    };
    let big = presso_meta::RECORD_INDEX_LIMIT - 1;
    s.set_record(g, big, &wide).unwrap();
    assert_eq!(s.get_record(g, big).unwrap(), Some(wide.clone()));
    assert_eq!(s.records(g, 2..).unwrap(), vec![(big, wide)]);
}

fn property_inheritance(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let b = mkdir(s, a, "b");
    let f = file(s, b, "c");
    let other = mkdir(s, ROOT_INO, "other");
    assert_eq!(s.get_prop_effective(f, "compression").unwrap(), None);

    s.set_prop(POOL_INO, "compression", "lz4").unwrap();
    let eff = |ino| s.get_prop_effective(ino, "compression").unwrap();
    let at = |v: &str, src| {
        Some(EffectiveProp {
            value: v.into(),
            source: src,
        })
    };
    assert_eq!(eff(f), at("lz4", POOL_INO));
    assert_eq!(eff(POOL_INO), at("lz4", POOL_INO));

    s.set_prop(a, "compression", "zstd-3").unwrap();
    assert_eq!(eff(f), at("zstd-3", a));
    assert_eq!(eff(b), at("zstd-3", a));
    assert_eq!(eff(a), at("zstd-3", a));
    assert_eq!(eff(other), at("lz4", POOL_INO));
    assert_eq!(eff(ROOT_INO), at("lz4", POOL_INO));

    // changing it at /a affects everything below immediately
    s.set_prop(a, "compression", "zstd-19").unwrap();
    assert_eq!(eff(f), at("zstd-19", a));
    // files created later inherit too
    let f2 = file(s, b, "d");
    assert_eq!(eff(f2), at("zstd-19", a));

    // closer settings win; the file's own wins over all
    s.set_prop(b, "compression", "none").unwrap();
    assert_eq!(eff(f), at("none", b));
    s.set_prop(f, "compression", "gzip").unwrap();
    assert_eq!(eff(f), at("gzip", f));
    assert_eq!(eff(f2), at("none", b));
    assert_eq!(s.get_prop(f, "compression").unwrap(), Some("gzip".into()));
    assert_eq!(s.get_prop(f2, "compression").unwrap(), None);

    // inherit again
    assert!(s.remove_prop(f, "compression").unwrap());
    assert!(!s.remove_prop(f, "compression").unwrap());
    assert!(s.remove_prop(b, "compression").unwrap());
    assert_eq!(eff(f), at("zstd-19", a));

    // rename moves inheritance with the name (directories and files)
    s.rename(a, b"b", other, b"b", &closed).unwrap();
    assert_eq!(eff(f), at("lz4", POOL_INO));
    s.rename(other, b"b", a, b"b", &closed).unwrap();
    s.rename(b, b"c", ROOT_INO, b"c", &closed).unwrap();
    assert_eq!(eff(f), at("lz4", POOL_INO));
    s.rename(ROOT_INO, b"c", a, b"c", &closed).unwrap();
    assert_eq!(eff(f), at("zstd-19", a));

    // listing, several names, pool properties
    s.set_prop(a, "checksum", "xxh3").unwrap();
    assert_eq!(
        s.list_props(a).unwrap(),
        vec![
            ("checksum".to_string(), "xxh3".to_string()),
            ("compression".to_string(), "zstd-19".to_string())
        ]
    );
    assert_eq!(
        s.list_props(POOL_INO).unwrap(),
        vec![("compression".to_string(), "lz4".to_string())]
    );
    assert_eq!(s.get_prop_effective(f, "recordsize").unwrap(), None);

    // a hard link whose original directory is gone falls back to the root then the pool
    let t = mkdir(s, ROOT_INO, "t");
    let h = file(s, t, "h");
    s.link(h, ROOT_INO, b"h").unwrap();
    s.set_prop(t, "compression", "brotli").unwrap();
    assert_eq!(eff(h), at("brotli", t));
    s.unlink(t, b"h", &closed).unwrap();
    s.rmdir(ROOT_INO, b"t").unwrap();
    assert_eq!(eff(h), at("lz4", POOL_INO));
    s.set_prop(ROOT_INO, "compression", "root").unwrap();
    assert_eq!(eff(h), at("root", ROOT_INO));

    // errors
    assert_eq!(s.set_prop(9999, "x", "y"), Err(MetaError::NotFound));
    assert_eq!(s.get_prop_effective(9999, "x"), Err(MetaError::NotFound));
    assert!(matches!(
        s.set_prop(a, "", "y"),
        Err(MetaError::InvalidArgument(_))
    ));
}

/// Several effective properties read at once give what one lookup per name gives: own values,
/// inherited ones with their source, unset ones, in the order asked; an unknown inode or a bad
/// name fails the whole call.
fn properties_read_together(s: &MetaStore) {
    let a = mkdir(s, ROOT_INO, "a");
    let f = file(s, a, "f");
    s.set_prop(POOL_INO, "compression", "lz4").unwrap();
    s.set_prop(a, "threshold", "20%").unwrap();
    s.set_prop(f, "recordsize", "16K").unwrap();
    let names = ["compression", "threshold", "recordsize", "offload"];
    for ino in [POOL_INO, ROOT_INO, a, f] {
        let one_by_one: Vec<_> = names
            .iter()
            .map(|n| s.get_prop_effective(ino, n).unwrap())
            .collect();
        assert_eq!(s.get_props_effective(ino, &names).unwrap(), one_by_one);
    }
    assert_eq!(
        s.get_props_effective(f, &names).unwrap(),
        vec![
            Some(EffectiveProp {
                value: "lz4".into(),
                source: POOL_INO
            }),
            Some(EffectiveProp {
                value: "20%".into(),
                source: a
            }),
            Some(EffectiveProp {
                value: "16K".into(),
                source: f
            }),
            None,
        ]
    );
    assert_eq!(s.get_props_effective(f, &[]).unwrap(), vec![]);
    assert_eq!(
        s.get_props_effective(9999, &names),
        Err(MetaError::NotFound)
    );
    assert!(matches!(
        s.get_props_effective(f, &["compression", ""]),
        Err(MetaError::InvalidArgument(_))
    ));
}

fn failed_ops_leave_no_trace(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    file(s, d, "x");
    let before = (
        s.getattr(ROOT_INO).unwrap(),
        s.getattr(d).unwrap(),
        names(s, ROOT_INO),
        s.space().unwrap(),
    );
    let next = s
        .make_node(ROOT_INO, b"probe", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    s.unlink(ROOT_INO, b"probe", &closed).unwrap();
    let before_root = s.getattr(ROOT_INO).unwrap();
    assert!(s.rmdir(ROOT_INO, b"d").is_err());
    assert!(s.rename(ROOT_INO, b"d", d, b"d", &closed).is_err());
    assert!(s
        .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 0, 0))
        .is_err());
    assert_eq!(s.getattr(ROOT_INO).unwrap(), before_root);
    assert_eq!(s.getattr(d).unwrap(), before.1);
    assert_eq!(names(s, ROOT_INO), before.2);
    assert_eq!(s.space().unwrap(), before.3);
    // failed creates do not consume inode numbers
    let again = s
        .make_node(ROOT_INO, b"probe2", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    assert_eq!(again, next + 1);
}

fn txg_applies_in_order_with_set_accounting(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    let g = file(s, ROOT_INO, "g");
    let out = s
        .apply_txg(
            &[
                TxgOp::SetRecord {
                    ino: f,
                    index: 0,
                    rec: rec_at(1, 0, 100, 1000),
                },
                TxgOp::SetRecord {
                    ino: f,
                    index: 1,
                    rec: rec_at(1, 100, 50, 1000),
                },
                TxgOp::SetRecord {
                    ino: g,
                    index: 0,
                    rec: inline_rec(b"abc", 10),
                },
                TxgOp::SetSize {
                    ino: f,
                    size: 2000,
                    mtime: ts(100),
                },
            ],
            false,
        )
        .unwrap();
    assert_eq!(out, TxgOutcome::default());
    assert_eq!(s.space().unwrap(), space(2010, 153, 0));
    let a = s.getattr(f).unwrap();
    assert_eq!((a.size, a.mtime), (2000, ts(100)));
    assert!(a.ctime > ts(100), "ctime never goes back");
    assert_eq!(
        s.getattr(g).unwrap().size,
        0,
        "SetSize only touches its inode"
    );

    // replace, set the identical ref again, clear, clear a hole, and an in-batch set+clear
    let out = s
        .apply_txg(
            &[
                TxgOp::SetRecord {
                    ino: f,
                    index: 0,
                    rec: rec_at(2, 0, 70, 1000),
                },
                TxgOp::SetRecord {
                    ino: f,
                    index: 1,
                    rec: rec_at(1, 100, 50, 1000),
                },
                TxgOp::ClearRecord { ino: f, index: 1 },
                TxgOp::ClearRecord { ino: f, index: 7 },
                TxgOp::SetRecord {
                    ino: g,
                    index: 1,
                    rec: rec_at(2, 70, 30, 300),
                },
                TxgOp::ClearRecord { ino: g, index: 1 },
                TxgOp::ClearRecord { ino: g, index: 0 },
            ],
            true,
        )
        .unwrap();
    assert_eq!(
        out.replaced,
        vec![
            rec_at(1, 0, 100, 1000),
            rec_at(1, 100, 50, 1000),
            rec_at(2, 70, 30, 300)
        ],
        "inline refs take no segment space and are not reported"
    );
    assert!(out.not_applied.is_empty());
    assert_eq!(s.records(f, ..).unwrap(), vec![(0, rec_at(2, 0, 70, 1000))]);
    assert_eq!(s.records(g, ..).unwrap(), vec![]);
    assert_eq!(s.space().unwrap(), space(1000, 70, 180));

    // a later SetSize wins, and sizes may shrink; ctime keeps the later value
    let before = s.getattr(f).unwrap().ctime;
    let late = Timespec {
        secs: before.secs + 1000,
        nsec: 0,
    };
    s.apply_txg(
        &[
            TxgOp::SetSize {
                ino: f,
                size: 5,
                mtime: ts(200),
            },
            TxgOp::SetSize {
                ino: f,
                size: 7,
                mtime: late,
            },
        ],
        false,
    )
    .unwrap();
    let a = s.getattr(f).unwrap();
    assert_eq!((a.size, a.mtime, a.ctime), (7, late, late));
    assert_eq!(s.records(f, ..).unwrap().len(), 1, "no record truncation");

    // an empty durable batch is fine (a durability barrier) and changes nothing
    assert_eq!(s.apply_txg(&[], true).unwrap(), TxgOutcome::default());
    assert_eq!(s.space().unwrap(), space(1000, 70, 180));
}

fn txg_skips_ops_on_gone_or_non_regular_inodes(s: &MetaStore) {
    let gone = file(s, ROOT_INO, "gone");
    s.set_record(gone, 0, &rec_at(1, 0, 10, 100)).unwrap();
    s.unlink(ROOT_INO, b"gone", &closed).unwrap();
    let orphan = file(s, ROOT_INO, "orphan");
    s.unlink(ROOT_INO, b"orphan", &open).unwrap();
    let d = mkdir(s, ROOT_INO, "d");
    let l = s
        .make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0))
        .unwrap()
        .ino;
    assert_eq!(s.space().unwrap(), space(0, 0, 10));

    let out = s
        .apply_txg(
            &[
                TxgOp::SetRecord {
                    ino: gone,
                    index: 0,
                    rec: rec_at(2, 0, 20, 100),
                },
                TxgOp::SetRecord {
                    ino: gone,
                    index: 1,
                    rec: inline_rec(b"xy", 2),
                },
                TxgOp::MoveRecord {
                    ino: gone,
                    index: 0,
                    from_segment: 1,
                    from_offset: 0,
                    rec: rec_at(2, 20, 10, 100),
                },
                TxgOp::ClearRecord {
                    ino: gone,
                    index: 0,
                },
                TxgOp::SetSize {
                    ino: gone,
                    size: 9,
                    mtime: ts(1),
                },
                TxgOp::SetRecord {
                    ino: d,
                    index: 0,
                    rec: rec_at(2, 30, 1, 1),
                },
                TxgOp::SetSize {
                    ino: d,
                    size: 9,
                    mtime: ts(1),
                },
                TxgOp::SetRecord {
                    ino: l,
                    index: 0,
                    rec: rec_at(2, 31, 2, 2),
                },
                TxgOp::SetSize {
                    ino: l,
                    size: 9,
                    mtime: ts(1),
                },
                TxgOp::SetProp {
                    ino: gone,
                    name: "recordsize".into(),
                    value: "16K".into(),
                },
                TxgOp::SetProp {
                    ino: d,
                    name: "recordsize".into(),
                    value: "16K".into(),
                },
                TxgOp::SetProp {
                    ino: l,
                    name: "recordsize".into(),
                    value: "16K".into(),
                },
                TxgOp::SetProp {
                    ino: 999_999,
                    name: "recordsize".into(),
                    value: "16K".into(),
                },
                TxgOp::SetRecord {
                    ino: 999_999,
                    index: 0,
                    rec: rec_at(2, 33, 4, 4),
                },
                // an open orphan still takes its data
                TxgOp::SetRecord {
                    ino: orphan,
                    index: 0,
                    rec: rec_at(3, 0, 40, 400),
                },
                TxgOp::SetSize {
                    ino: orphan,
                    size: 400,
                    mtime: ts(1),
                },
            ],
            false,
        )
        .unwrap();
    assert!(out.replaced.is_empty());
    assert_eq!(
        out.not_applied,
        vec![
            rec_at(2, 0, 20, 100),
            rec_at(2, 20, 10, 100),
            rec_at(2, 30, 1, 1),
            rec_at(2, 31, 2, 2),
            rec_at(2, 33, 4, 4),
        ]
    );
    // skipped frames are garbage already: 10 (old) + 20 + 10 + 1 + 2 + 4
    assert_eq!(s.space().unwrap(), space(400, 40, 47));
    assert_eq!(s.getattr(gone), Err(MetaError::NotFound));
    assert_eq!(s.getattr(d).unwrap().size, 0);
    assert_eq!(s.get_prop(d, "recordsize").unwrap(), None);
    assert_eq!(s.get_prop(l, "recordsize").unwrap(), None);
    assert_eq!(s.getattr(l).unwrap().size, 1);
    let o = s.getattr(orphan).unwrap();
    assert_eq!((o.size, o.mtime, o.nlink), (400, ts(1), 0));
    assert_eq!(
        s.get_record(orphan, 0).unwrap(),
        Some(rec_at(3, 0, 40, 400))
    );
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([(3, usage(1, 40))])
    );
    assert_eq!(s.forget(orphan).unwrap(), Some(vec![rec_at(3, 0, 40, 400)]));
    assert_eq!(s.space().unwrap(), space(0, 0, 87));
}

fn txg_sets_a_files_own_property_with_its_records(s: &MetaStore) {
    let d = mkdir(s, ROOT_INO, "d");
    s.set_prop(d, "recordsize", "64K").unwrap();
    let f = file(s, d, "f");
    s.apply_txg(
        &[
            TxgOp::SetProp {
                ino: f,
                name: "recordsize".into(),
                value: "16K".into(),
            },
            TxgOp::SetRecord {
                ino: f,
                index: 0,
                rec: rec(1, 10, 10),
            },
        ],
        false,
    )
    .unwrap();
    assert_eq!(s.get_prop(f, "recordsize").unwrap(), Some("16K".into()));
    assert_eq!(s.get_prop(d, "recordsize").unwrap(), Some("64K".into()));
    let own = s.get_prop_effective(f, "recordsize").unwrap().unwrap();
    assert_eq!((own.value.as_str(), own.source), ("16K", f));
    assert_eq!(s.get_record(f, 0).unwrap(), Some(rec(1, 10, 10)));
}

fn txg_rejects_malformed_batches_whole(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    let good = TxgOp::SetRecord {
        ino: f,
        index: 0,
        rec: rec(1, 10, 10),
    };
    let bad_ops = [
        TxgOp::SetRecord {
            ino: f,
            index: presso_meta::RECORD_INDEX_LIMIT,
            rec: rec(1, 10, 10),
        },
        TxgOp::SetRecord {
            ino: f,
            index: 1,
            rec: RecordRef {
                stored_len: 9,
                ..inline_rec(b"abc", 3)
            },
        },
        TxgOp::MoveRecord {
            ino: f,
            index: u64::MAX,
            from_segment: 1,
            from_offset: 1000,
            rec: rec(2, 10, 10),
        },
        TxgOp::ClearRecord {
            ino: f,
            index: u64::MAX,
        },
        // malformed even though the inode does not exist
        TxgOp::SetRecord {
            ino: 999_999,
            index: u64::MAX,
            rec: rec(1, 10, 10),
        },
        TxgOp::SetProp {
            ino: f,
            name: String::new(),
            value: "16K".into(),
        },
    ];
    for bad in bad_ops {
        let err = s.apply_txg(&[good.clone(), bad.clone()], true).unwrap_err();
        assert!(
            matches!(err, MetaError::InvalidArgument(_)),
            "{bad:?}: {err:?}"
        );
        assert_eq!(
            s.get_record(f, 0).unwrap(),
            None,
            "nothing of {bad:?} applied"
        );
        assert_eq!(s.space().unwrap(), SpaceUsage::default());
    }
}

fn txg_move_record_compare_and_swap(s: &MetaStore) {
    let f = file(s, ROOT_INO, "f");
    for i in 0..4 {
        s.set_record(f, i, &rec_at(1, i * 100, 100, 1000)).unwrap();
    }
    s.set_record(f, 4, &inline_rec(b"in", 4)).unwrap();
    assert_eq!(s.space().unwrap(), space(4004, 402, 0));

    // GC copies segment 1's live frames to segment 2 (one recompressed smaller); meanwhile a
    // write replaced record 1 and record 3 was cleared
    let live = s.records_in_segment(1).unwrap();
    assert_eq!(live.len(), 4);
    s.apply_txg(
        &[
            TxgOp::SetRecord {
                ino: f,
                index: 1,
                rec: rec_at(3, 0, 80, 1000),
            },
            TxgOp::ClearRecord { ino: f, index: 3 },
        ],
        false,
    )
    .unwrap();
    assert_eq!(s.space().unwrap(), space(3004, 282, 200));
    let moves: Vec<TxgOp> = live
        .iter()
        .map(|l| TxgOp::MoveRecord {
            ino: l.ino,
            index: l.index,
            from_segment: l.rec.segment,
            from_offset: l.rec.offset,
            rec: rec_at(2, l.index * 100, if l.index == 0 { 60 } else { 100 }, 1000),
        })
        .chain([
            // the inline record is never "in" a segment, even at a matching location
            TxgOp::MoveRecord {
                ino: f,
                index: 4,
                from_segment: 0,
                from_offset: 0,
                rec: rec_at(2, 900, 2, 4),
            },
            // moving a record onto itself is a no-op
            TxgOp::MoveRecord {
                ino: f,
                index: 1,
                from_segment: 3,
                from_offset: 0,
                rec: rec_at(3, 0, 80, 1000),
            },
        ])
        .collect();
    let out = s.apply_txg(&moves, false).unwrap();
    assert_eq!(
        out.replaced,
        vec![rec_at(1, 0, 100, 1000), rec_at(1, 200, 100, 1000)]
    );
    assert_eq!(
        out.not_applied,
        vec![
            rec_at(2, 100, 100, 1000),
            rec_at(2, 300, 100, 1000),
            rec_at(2, 900, 2, 4)
        ]
    );
    assert_eq!(
        s.records(f, ..).unwrap(),
        vec![
            (0, rec_at(2, 0, 60, 1000)),
            (1, rec_at(3, 0, 80, 1000)),
            (2, rec_at(2, 200, 100, 1000)),
            (4, inline_rec(b"in", 4)),
        ]
    );
    // logical unchanged; stored follows the new frames; garbage: 200 before, +200 moved away,
    // +202 of copies that lost the race
    assert_eq!(s.space().unwrap(), space(3004, 242, 602));
    assert_eq!(s.records_in_segment(1).unwrap(), vec![]);
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([(2, usage(2, 160)), (3, usage(1, 80))])
    );
    // segment 1 held 400 bytes, all garbage now, and GC gives them back
    s.release_garbage(400).unwrap();
    // live segment bytes + garbage == handed over (400 + 80 + 362 copies) - released
    let live_bytes: u64 = s
        .segment_usage()
        .unwrap()
        .values()
        .map(|u| u.stored_bytes)
        .sum();
    assert_eq!(
        live_bytes + s.space().unwrap().garbage,
        400 + 80 + 362 - 400
    );
}

fn codec_usage_counts_every_live_record(s: &MetaStore) {
    assert!(s.codec_usage().unwrap().is_empty());
    let f = file(s, ROOT_INO, "f");
    let g = file(s, ROOT_INO, "g");
    let with_codec = |codec: u8, rec: RecordRef| RecordRef { codec, ..rec };
    s.set_record(f, 0, &rec_at(7, 0, 30, 100)).unwrap();
    s.set_record(f, 1, &with_codec(4, rec_at(7, 30, 20, 100)))
        .unwrap();
    s.set_record(f, 2, &inline_rec(b"zz", 10)).unwrap();
    s.set_record(g, 0, &rec_at(8, 0, u32::MAX, u32::MAX))
        .unwrap();
    assert_eq!(
        s.codec_usage().unwrap(),
        BTreeMap::from([
            (0, codec_space(1, 10, 2)),
            (
                3,
                codec_space(2, 100 + u64::from(u32::MAX), 30 + u64::from(u32::MAX))
            ),
            (4, codec_space(1, 100, 20)),
        ])
    );
    // an overwrite changes the codec's figures; truncating and unlinking remove them
    s.set_record(f, 0, &with_codec(4, rec_at(8, 9, 10, 100)))
        .unwrap();
    s.truncate_records(f, 2).unwrap();
    assert_eq!(
        s.codec_usage().unwrap(),
        BTreeMap::from([
            (3, codec_space(1, u64::from(u32::MAX), u64::from(u32::MAX))),
            (4, codec_space(2, 200, 30)),
        ])
    );
    s.unlink(ROOT_INO, b"g", &closed).unwrap();
    s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert!(s.codec_usage().unwrap().is_empty());
}

/// Random record changes of every kind, several codecs: after each, the per-codec figures equal
/// a count of every record.
fn codec_counters_follow_every_record_change(s: &MetaStore) {
    let mut files: Vec<u64> = (0..4)
        .map(|i| file(s, ROOT_INO, &format!("c{i}")))
        .collect();
    let mut codecs_at_once = 0;
    // engines that keep no counters (PostgreSQL) count at every call
    let kept = s.codec_usage().unwrap().is_empty() && s.codec_counters().unwrap().is_some();
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut next = move |n: u64| {
        state = state
            .wrapping_mul(6_364_136_223_846_793_005)
            .wrapping_add(1_442_695_040_888_963_407);
        (state >> 33) % n
    };
    for step in 0..300 {
        let which = next(4) as usize;
        let ino = files[which];
        let index = next(6);
        let rec = match next(4) {
            0 => inline_rec(b"xy", 2 + next(50) as u32),
            _ => rec_at(
                1 + next(3),
                next(10_000),
                1 + next(500) as u32,
                1 + next(2_000) as u32,
            ),
        };
        let rec = RecordRef {
            codec: next(3) as u8 * 70,
            ..rec
        };
        match next(7) {
            0 => drop(s.set_record(ino, index, &rec).unwrap()),
            1 => drop(s.truncate_records(ino, index).unwrap()),
            2 => drop(
                s.apply_txg(
                    &[
                        TxgOp::SetRecord { ino, index, rec },
                        TxgOp::ClearRecord {
                            ino,
                            index: next(6),
                        },
                    ],
                    false,
                )
                .unwrap(),
            ),
            3 => {
                // a move of a record GC found, which may have changed since
                let Some((index, cur)) = s.records(ino, ..).unwrap().into_iter().next() else {
                    continue;
                };
                let moved = TxgOp::MoveRecord {
                    ino,
                    index,
                    from_segment: cur.segment,
                    from_offset: cur.offset + next(2),
                    rec: RecordRef { segment: 9, ..cur },
                };
                s.apply_txg(&[moved], false).unwrap();
            }
            4 => {
                // ops on a file that is gone are skipped
                let gone = TxgOp::SetRecord {
                    ino: 999_999,
                    index,
                    rec,
                };
                s.apply_txg(&[gone], true).unwrap();
            }
            5 => {
                s.unlink(ROOT_INO, format!("c{which}").as_bytes(), &closed)
                    .unwrap();
                files[which] = file(s, ROOT_INO, &format!("c{which}"));
            }
            _ => {
                let g = file(s, ROOT_INO, "g");
                s.set_record(g, 0, &rec).unwrap();
                s.rename(
                    ROOT_INO,
                    b"g",
                    ROOT_INO,
                    format!("c{which}").as_bytes(),
                    &closed,
                )
                .unwrap();
                files[which] = g;
            }
        }
        let usage = s.count_codec_usage().unwrap();
        if kept {
            // kept change by change (before `codec_usage`, which would count them again)
            assert_eq!(
                s.codec_counters().unwrap(),
                Some(usage.clone()),
                "step {step}"
            );
        }
        assert_eq!(s.codec_usage().unwrap(), usage, "step {step}");
        codecs_at_once = codecs_at_once.max(usage.len());
    }
    assert_eq!(codecs_at_once, 3);
}

fn segment_usage_and_records_in_segment(s: &MetaStore) {
    assert!(s.segment_usage().unwrap().is_empty());
    let f = file(s, ROOT_INO, "f");
    let g = file(s, ROOT_INO, "g");
    s.set_record(g, 5, &rec_at(7, 300, 30, 100)).unwrap();
    s.set_record(f, 0, &rec_at(7, 500, 50, 100)).unwrap();
    s.set_record(f, 1, &rec_at(7, 100, 10, 100)).unwrap();
    s.set_record(f, 2, &rec_at(8, 0, 80, 100)).unwrap();
    s.set_record(f, 3, &inline_rec(b"zz", 10)).unwrap();
    s.set_record(g, 0, &rec_at(u64::MAX, u64::MAX - 1, u32::MAX, 1))
        .unwrap();
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([
            (7, usage(3, 90)),
            (8, usage(1, 80)),
            (u64::MAX, usage(1, u64::from(u32::MAX)))
        ])
    );
    // offset order, inline records never listed
    assert_eq!(
        s.records_in_segment(7).unwrap(),
        vec![
            loc(f, 1, rec_at(7, 100, 10, 100)),
            loc(g, 5, rec_at(7, 300, 30, 100)),
            loc(f, 0, rec_at(7, 500, 50, 100)),
        ]
    );
    assert_eq!(s.records_in_segment(0).unwrap(), vec![]);
    assert_eq!(s.records_in_segment(9).unwrap(), vec![]);
    assert_eq!(
        s.records_in_segment(u64::MAX).unwrap(),
        vec![loc(g, 0, rec_at(u64::MAX, u64::MAX - 1, u32::MAX, 1))]
    );
    // replacing, truncating and unlinking move the numbers
    s.set_record(f, 0, &rec_at(8, 80, 5, 100)).unwrap();
    s.set_record(f, 2, &inline_rec(b"q", 100)).unwrap();
    s.truncate_records(g, 1).unwrap();
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([
            (7, usage(1, 10)),
            (8, usage(1, 5)),
            (u64::MAX, usage(1, u64::from(u32::MAX)))
        ])
    );
    assert_eq!(
        s.records_in_segment(8).unwrap(),
        vec![loc(f, 0, rec_at(8, 80, 5, 100))]
    );
    s.unlink(ROOT_INO, b"g", &closed).unwrap();
    s.unlink(ROOT_INO, b"f", &closed).unwrap();
    assert!(s.segment_usage().unwrap().is_empty());
    assert_eq!(s.records_in_segment(7).unwrap(), vec![]);
}

fn scan_records_paginates(s: &MetaStore) {
    assert_eq!(s.scan_records(None, 10).unwrap(), vec![]);
    let f = file(s, ROOT_INO, "f");
    let e = file(s, ROOT_INO, "empty");
    let g = file(s, ROOT_INO, "g");
    let mut all = Vec::new();
    for (ino, idx) in [(f, 0), (f, 1), (f, 9), (g, 2), (g, 3)] {
        let r = if idx == 1 {
            inline_rec(b"abc", 5)
        } else {
            rec_at(ino, idx * 10, 10, 10)
        };
        s.set_record(ino, idx, &r).unwrap();
        all.push(loc(ino, idx, r));
    }
    let big = presso_meta::RECORD_INDEX_LIMIT - 1;
    s.set_record(g, big, &rec(5, 1, 1)).unwrap();
    all.push(loc(g, big, rec(5, 1, 1)));
    assert_eq!(s.scan_records(None, usize::MAX).unwrap(), all);
    for limit in 1..=all.len() + 1 {
        let mut got = Vec::new();
        let mut after = None;
        loop {
            let page = s.scan_records(after, limit).unwrap();
            assert!(page.len() <= limit);
            match page.last() {
                None => break,
                Some(l) => after = Some((l.ino, l.index)),
            }
            got.extend(page);
        }
        assert_eq!(got, all, "limit {limit}");
    }
    assert_eq!(s.scan_records(None, 0).unwrap(), vec![]);
    assert_eq!(
        s.scan_records(Some((f, 1)), 1).unwrap(),
        vec![all[2].clone()]
    );
    assert_eq!(
        s.scan_records(Some((e, u64::MAX)), 1).unwrap(),
        vec![all[3].clone()]
    );
    assert_eq!(s.scan_records(Some((g, big)), 5).unwrap(), vec![]);
    assert_eq!(s.scan_records(Some((u64::MAX, 0)), 5).unwrap(), vec![]);
    assert_eq!(s.scan_records(Some((0, 0)), 2).unwrap(), all[..2].to_vec());
}

fn purge_orphans_removes_every_orphan(s: &MetaStore) {
    assert_eq!(s.purge_orphans().unwrap(), vec![]);
    let d = mkdir(s, ROOT_INO, "d");
    let f = file(s, d, "f");
    s.set_record(f, 0, &rec_at(1, 0, 100, 400)).unwrap();
    s.set_record(f, 1, &inline_rec(b"tail", 4)).unwrap();
    s.set_record(f, 2, &rec_at(1, 100, 50, 400)).unwrap();
    s.set_xattr(f, b"user.a", b"1", XattrFlags::Any).unwrap();
    s.set_prop(f, "compression", "lz4").unwrap();
    let l = s
        .make_node(d, b"l", &NewNode::symlink(b"target", 0, 0))
        .unwrap()
        .ino;
    let keep = file(s, d, "keep");
    s.set_record(keep, 0, &rec_at(2, 0, 10, 10)).unwrap();
    let linked = file(s, d, "linked");
    s.link(linked, ROOT_INO, b"other").unwrap();

    assert_eq!(s.unlink(d, b"f", &open).unwrap().fate, LinkFate::Orphaned);
    assert_eq!(s.unlink(d, b"l", &open).unwrap().fate, LinkFate::Orphaned);
    assert_eq!(
        s.unlink(d, b"linked", &open).unwrap().fate,
        LinkFate::Linked
    );
    assert_eq!(s.space().unwrap(), space(814, 164, 0));

    let freed = s.purge_orphans().unwrap();
    assert_eq!(freed, vec![rec_at(1, 0, 100, 400), rec_at(1, 100, 50, 400)]);
    assert_eq!(s.getattr(f), Err(MetaError::NotFound));
    assert_eq!(s.getattr(l), Err(MetaError::NotFound));
    assert_eq!(s.list_props(f), Err(MetaError::NotFound));
    assert_eq!(s.list_xattrs(f), Err(MetaError::NotFound));
    assert_eq!(s.space().unwrap(), space(10, 10, 150));
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([(2, usage(1, 10))])
    );
    assert_eq!(
        s.scan_records(None, 10).unwrap(),
        vec![loc(keep, 0, rec_at(2, 0, 10, 10))]
    );
    // everything with a name is untouched
    assert_eq!(nlink(s, linked), 1);
    assert_eq!(nlink(s, keep), 1);
    assert_eq!(nlink(s, d), 2);
    assert_eq!(nlink(s, ROOT_INO), 3);
    assert_eq!(s.purge_orphans().unwrap(), vec![]);
    assert_eq!(s.forget(f).unwrap(), None);
}

fn readers_run_while_a_writer_commits(s: &MetaStore) {
    const RECORDS: u64 = 16;
    const GENERATIONS: u64 = 60;
    let f = file(s, ROOT_INO, "f");
    // generation n: every record of f lives in segment n and the size is n
    let generation = |n: u64| -> Vec<TxgOp> {
        (0..RECORDS)
            .map(|i| TxgOp::SetRecord {
                ino: f,
                index: i,
                rec: rec_at(n, i * 10, 10, 100),
            })
            .chain([TxgOp::SetSize {
                ino: f,
                size: n,
                mtime: ts(n as i64),
            }])
            .collect()
    };
    s.apply_txg(&generation(1), false).unwrap();
    let done = AtomicBool::new(false);
    std::thread::scope(|scope| {
        let readers: Vec<_> = (0..3)
            .map(|_| {
                scope.spawn(|| {
                    let mut last = 0;
                    loop {
                        let finished = done.load(Ordering::Acquire);
                        let recs = s.records(f, ..).unwrap();
                        assert_eq!(recs.len() as u64, RECORDS);
                        let n = recs[0].1.segment;
                        assert!(
                            recs.iter().all(|(_, r)| r.segment == n),
                            "a read saw half a transaction group"
                        );
                        assert!(n >= last, "reads went back in time");
                        let u = s.segment_usage().unwrap();
                        assert_eq!(u.len(), 1, "{u:?}");
                        let (&seg, &su) = u.iter().next().unwrap();
                        assert!(seg >= n);
                        assert_eq!(su, usage(RECORDS, RECORDS * 10));
                        last = n;
                        if finished {
                            return last;
                        }
                    }
                })
            })
            .collect();
        for n in 2..=GENERATIONS {
            s.apply_txg(&generation(n), n % 20 == 0).unwrap();
        }
        done.store(true, Ordering::Release);
        for r in readers {
            assert_eq!(
                r.join().unwrap(),
                GENERATIONS,
                "the last read sees the last commit"
            );
        }
    });
    assert_eq!(s.getattr(f).unwrap().size, GENERATIONS);
    assert_eq!(
        s.space().unwrap(),
        space(
            RECORDS * 100,
            RECORDS * 10,
            (GENERATIONS - 1) * RECORDS * 10
        )
    );
}

// ---------------------------------------------------------------------------------------------
// engine-level: dropped write transactions leave no trace

fn engine_rollback(e: &dyn MetaEngine) {
    use presso_meta::{Attr, Dentry, InodeRow};
    let row = InodeRow {
        attr: Attr {
            ino: 42,
            kind: FileKind::File,
            mode: 0o644,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 1,
            atime: Timespec::default(),
            mtime: Timespec::default(),
            ctime: Timespec::default(),
            rdev: 0,
        },
        parent: 1,
        target: None,
    };
    {
        let mut tx = e.write().unwrap();
        tx.put_inode(&row).unwrap();
        tx.put_dentry(
            1,
            b"x",
            Dentry {
                ino: 42,
                kind: FileKind::File,
            },
        )
        .unwrap();
        tx.set_counter("c", 5).unwrap();
        tx.set_prop(0, "p", "v").unwrap();
        tx.set_xattr(42, b"a", b"b").unwrap();
        tx.put_record(42, 0, &rec(1, 1, 1)).unwrap();
        assert_eq!(tx.get_inode(42).unwrap(), Some(row.clone()));
        // dropped without commit
    }
    {
        let mut tx = e.read().unwrap();
        assert_eq!(tx.get_inode(42).unwrap(), None);
        assert_eq!(tx.get_dentry(1, b"x").unwrap(), None);
        assert_eq!(tx.get_counter("c").unwrap(), 0);
        assert_eq!(tx.get_prop(0, "p").unwrap(), None);
        assert_eq!(tx.list_xattrs(42).unwrap(), Vec::<Vec<u8>>::new());
        assert_eq!(tx.list_records(42, 0..10).unwrap(), vec![]);
        assert!(
            tx.put_inode(&row).is_err(),
            "read transactions refuse writes"
        );
    }
    // committed, then a later dropped txn that overwrites and deletes rolls back to it
    let mut tx = e.write().unwrap();
    tx.put_inode(&row).unwrap();
    tx.set_counter("c", 5).unwrap();
    tx.commit().unwrap();
    {
        let mut tx = e.write().unwrap();
        tx.delete_inode(42).unwrap();
        tx.set_counter("c", 6).unwrap();
        tx.set_counter("c", 7).unwrap();
    }
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_inode(42).unwrap(), Some(row));
    assert_eq!(tx.get_counter("c").unwrap(), 5);
}

/// `replace_record` gives back what it replaced and leaves the new record, on every engine.
fn engine_replace_record(e: &dyn MetaEngine) {
    let rec = |n: u64| RecordRef {
        segment: 3,
        offset: n << 17,
        stored_len: 1000 + n as u32,
        logical_len: 4096,
        codec: 2,
        checksum: n,
        inline: None,
    };
    let mut tx = e.write().unwrap();
    assert_eq!(tx.replace_record(9, 4, &rec(1)).unwrap(), None);
    assert_eq!(tx.replace_record(9, 4, &rec(2)).unwrap(), Some(rec(1)));
    assert_eq!(tx.replace_record(9, 4, &rec(2)).unwrap(), Some(rec(2)));
    tx.commit().unwrap();
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_record(9, 4).unwrap(), Some(rec(2)));
    assert_eq!(tx.list_records(9, 0..10).unwrap(), vec![(4, rec(2))]);
}

#[test]
fn replace_record_on_every_engine() {
    for make in [memory_engine as fn() -> _, sqlite_engine, postgres_engine] {
        let (e, path) = make();
        engine_replace_record(&*e);
        drop(e);
        if let Some(p) = path {
            remove_db(&p);
        }
    }
}

#[test]
fn memory_engine_rollback() {
    engine_rollback(&MemoryEngine::new());
}

#[test]
fn sqlite_engine_rollback() {
    let (e, path) = sqlite_engine();
    engine_rollback(&*e);
    drop(e);
    remove_db(&path.unwrap());
}

#[test]
fn postgres_engine_rollback() {
    let (e, _) = postgres_engine();
    engine_rollback(&*e);
}

#[test]
fn store_is_send_and_sync() {
    fn check<T: Send + Sync>() {}
    check::<MetaStore>();
}

// ---------------------------------------------------------------------------------------------
// SQLite only

#[test]
fn sqlite_survives_reopen() {
    let path = temp_db_path("reopen");
    let (f, d) = {
        let s = MetaStore::create_sqlite_with(
            &path,
            SqliteOptions {
                synchronous: Synchronous::Full,
            },
        )
        .unwrap();
        s.init().unwrap();
        let d = mkdir(&s, ROOT_INO, "dir");
        let f = file(&s, d, "file");
        s.set_record(f, 0, &rec(3, 30, 300)).unwrap();
        s.set_record(f, 0, &rec(4, 40, 400)).unwrap();
        s.set_xattr(f, b"user.k", b"v", XattrFlags::Any).unwrap();
        s.set_prop(d, "compression", "zstd").unwrap();
        s.make_node(d, b"l", &NewNode::symlink(b"file", 0, 0))
            .unwrap();
        (f, d)
    };
    let s = MetaStore::open_sqlite(&path).unwrap();
    s.init().unwrap();
    assert_eq!(s.lookup(ROOT_INO, b"dir").unwrap().ino, d);
    assert_eq!(s.lookup(d, b"file").unwrap().ino, f);
    assert_eq!(nlink(&s, ROOT_INO), 3);
    assert_eq!(s.get_record(f, 0).unwrap(), Some(rec(4, 40, 400)));
    assert_eq!(s.get_xattr(f, b"user.k").unwrap(), b"v");
    assert_eq!(
        s.get_prop_effective(f, "compression")
            .unwrap()
            .unwrap()
            .value,
        "zstd"
    );
    let l = s.lookup(d, b"l").unwrap().ino;
    assert_eq!(s.readlink(l).unwrap(), b"file");
    assert_eq!(
        s.space().unwrap(),
        SpaceUsage {
            logical: 400,
            stored: 40,
            garbage: 30
        }
    );
    // the inode counter persisted too
    let g = file(&s, d, "g");
    assert!(g > l);
    drop(s);
    remove_db(&path);
}

#[test]
fn sqlite_purges_orphans_left_by_a_crash() {
    let path = temp_db_path("crash");
    let (f, keep) = {
        let s = MetaStore::create_sqlite(&path).unwrap();
        s.init().unwrap();
        let f = file(&s, ROOT_INO, "f");
        let keep = file(&s, ROOT_INO, "keep");
        s.apply_txg(
            &[
                TxgOp::SetRecord {
                    ino: f,
                    index: 0,
                    rec: rec_at(1, 0, 100, 400),
                },
                TxgOp::SetRecord {
                    ino: f,
                    index: 1,
                    rec: inline_rec(b"x", 1),
                },
                TxgOp::SetRecord {
                    ino: keep,
                    index: 0,
                    rec: rec_at(2, 0, 20, 80),
                },
            ],
            true,
        )
        .unwrap();
        s.set_xattr(f, b"user.k", b"v", XattrFlags::Any).unwrap();
        assert_eq!(
            s.unlink(ROOT_INO, b"f", &open).unwrap().fate,
            LinkFate::Orphaned
        );
        s.make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0))
            .unwrap();
        s.unlink(ROOT_INO, b"l", &open).unwrap();
        // the process dies here: no forget
        (f, keep)
    };
    let s = MetaStore::open_sqlite(&path).unwrap();
    s.init().unwrap();
    assert_eq!(
        s.getattr(f).unwrap().nlink,
        0,
        "the orphan survived the crash"
    );
    assert_eq!(s.space().unwrap(), space(481, 121, 0));
    assert_eq!(s.purge_orphans().unwrap(), vec![rec_at(1, 0, 100, 400)]);
    assert_eq!(s.getattr(f), Err(MetaError::NotFound));
    assert_eq!(s.space().unwrap(), space(80, 20, 100));
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([(2, usage(1, 20))])
    );
    assert_eq!(
        s.scan_records(None, 10).unwrap(),
        vec![loc(keep, 0, rec_at(2, 0, 20, 80))]
    );
    assert_eq!(s.purge_orphans().unwrap(), vec![]);
    drop(s);
    // and the purge itself was committed
    let s = MetaStore::open_sqlite(&path).unwrap();
    assert_eq!(s.purge_orphans().unwrap(), vec![]);
    assert_eq!(s.space().unwrap(), space(80, 20, 100));
    drop(s);
    remove_db(&path);
}

#[test]
fn sqlite_readers_keep_their_snapshot_while_a_writer_commits() {
    let (e, path) = sqlite_engine();
    let mut w = e.write().unwrap();
    w.set_counter("c", 1).unwrap();
    w.commit().unwrap();

    // Long reads: a short one (`read`) may run on the idle write connection, and a write
    // waits for it to end.
    let mut early = e.read_scan().unwrap();
    assert_eq!(early.get_counter("c").unwrap(), 1);
    let mut other = e.read_scan().unwrap();
    assert_eq!(other.get_counter("c").unwrap(), 1);
    // with one shared connection this write would wait for the open readers forever
    let mut w = e.write().unwrap();
    w.set_counter("c", 2).unwrap();
    w.put_record(7, 0, &rec(1, 1, 1)).unwrap();
    assert_eq!(
        early.get_counter("c").unwrap(),
        1,
        "uncommitted writes are invisible"
    );
    w.commit().unwrap();
    assert_eq!(
        early.get_counter("c").unwrap(),
        1,
        "a snapshot does not move"
    );
    assert_eq!(early.list_records(7, 0..1).unwrap(), vec![]);
    assert_eq!(other.scan_records(None, 10).unwrap(), vec![]);
    let mut late = e.read().unwrap();
    assert_eq!(late.get_counter("c").unwrap(), 2);
    assert_eq!(late.list_records(7, 0..1).unwrap().len(), 1);
    early.commit().unwrap();
    drop(other);
    drop(late);
    let mut again = e.read().unwrap();
    assert_eq!(again.get_counter("c").unwrap(), 2);
    drop(again);
    drop(e);
    remove_db(&path.unwrap());
}

/// A short read runs on the write connection while that is idle (whose page cache no commit
/// made stale); a read begun while that one is open, or while a durable write is, takes a
/// connection of its own; each sees every commit made before it began.
#[test]
fn sqlite_short_reads_share_the_idle_write_connection() {
    let (e, path) = sqlite_engine();
    let mut w = e.write_durable().unwrap();
    w.set_counter("c", 1).unwrap();
    w.commit().unwrap();
    let mut first = e.read().unwrap();
    assert_eq!(first.get_counter("c").unwrap(), 1);
    // The write connection is taken: this one must not wait for it.
    let mut second = e.read().unwrap();
    assert_eq!(second.get_counter("c").unwrap(), 1);
    assert!(
        second.set_counter("c", 5).is_err(),
        "a read transaction wrote"
    );
    assert!(
        first.set_counter("c", 5).is_err(),
        "a read transaction wrote"
    );
    drop(second);
    first.commit().unwrap();
    // A writer on another thread and reads here, alternating: each read sees the last commit.
    let engine = &*e;
    for n in 2..20u64 {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut w = engine.write_durable().unwrap();
                w.set_counter("c", n).unwrap();
                w.commit().unwrap();
            });
        });
        let mut r = engine.read().unwrap();
        assert_eq!(r.get_counter("c").unwrap(), n);
        drop(r);
        // a durable write open on another thread leaves reads a connection of their own
        let (begun, hold) = (Barrier::new(2), Barrier::new(2));
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut w = engine.write_durable().unwrap();
                w.set_counter("c", 100).unwrap();
                begun.wait();
                hold.wait();
                drop(w); // rolled back
            });
            begun.wait();
            let mut r = engine.read().unwrap();
            assert_eq!(r.get_counter("c").unwrap(), n, "saw an uncommitted write");
            drop(r);
            hold.wait();
        });
    }
    drop(e);
    remove_db(&path.unwrap());
}

/// Ordinary writes are grouped: each is committed to the intent log, and SQLite commits the
/// group later. Every read sees them at once, on whichever thread: a short read waits for the
/// write connection while a group is open, and a scan commits the group first. A write that
/// fails or is dropped leaves the rest of its group as it was.
#[test]
fn sqlite_grouped_writes_are_seen_by_every_read() {
    let (e, path) = sqlite_engine();
    let engine = &*e;
    for n in 1..30u64 {
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut w = engine.write().unwrap();
                w.set_counter("c", n).unwrap();
                w.put_record(n, 0, &rec(n, 40, 40)).unwrap();
                w.commit().unwrap();
                let mut dropped = engine.write().unwrap();
                dropped.set_counter("c", 1000).unwrap();
                dropped.delete_records_from(n, 0).unwrap();
                drop(dropped);
            });
        });
        let mut r = engine.read().unwrap();
        assert_eq!(r.get_counter("c").unwrap(), n);
        assert_eq!(r.list_records(n, 0..1).unwrap().len(), 1);
        drop(r);
        std::thread::scope(|scope| {
            scope.spawn(|| {
                let mut scan = engine.read_scan().unwrap();
                assert_eq!(scan.get_counter("c").unwrap(), n);
                assert_eq!(scan.scan_records(None, 100).unwrap().len(), n as usize);
            });
        });
    }
    drop(e);
    remove_db(&path.unwrap());
}

#[test]
fn sqlite_adds_missing_indexes_to_existing_databases() {
    let path = temp_db_path("indexes");
    let s = MetaStore::create_sqlite(&path).unwrap();
    s.init().unwrap();
    let f = file(&s, ROOT_INO, "f");
    s.set_record(f, 0, &rec(4, 40, 40)).unwrap();
    s.unlink(ROOT_INO, b"f", &open).unwrap();
    drop(s);
    let indexes = |c: &rusqlite::Connection| -> Vec<String> {
        let mut st = c
            .prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL ORDER BY name")
            .unwrap();
        let rows = st.query_map([], |r| r.get(0)).unwrap();
        rows.map(|r| r.unwrap()).collect()
    };
    {
        // a version-1 database from before the indexes existed
        let c = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(indexes(&c), ALL_INDEXES);
        c.execute_batch(
            "DROP INDEX inodes_orphans; DROP INDEX records_by_segment; DROP INDEX dentries_by_ino;",
        )
        .unwrap();
        assert!(indexes(&c).is_empty());
    }
    let s = MetaStore::open_sqlite(&path).unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(indexes(&c), ALL_INDEXES);
        let v: i64 = c
            .query_row("SELECT version FROM meta_version", [], |r| r.get(0))
            .unwrap();
        assert_eq!(v, i64::from(presso_meta::SCHEMA_VERSION));
    }
    assert_eq!(
        s.segment_usage().unwrap(),
        BTreeMap::from([(4, usage(1, 40))])
    );
    assert_eq!(s.purge_orphans().unwrap(), vec![rec(4, 40, 40)]);
    // Listings, which the new index serves, in the order the names were made.
    let made: Vec<String> = (0..50).map(|i| format!("m{}", 50 - i)).collect();
    for n in &made {
        file(&s, ROOT_INO, n);
    }
    assert_eq!(listed(&s, ROOT_INO), made);
    drop(s);
    remove_db(&path);
}

#[test]
fn sqlite_counts_codecs_once_for_a_pool_without_codec_counters() {
    let path = temp_db_path("codec-counters");
    let s = MetaStore::create_sqlite(&path).unwrap();
    s.init().unwrap();
    // new metadata needs no count
    assert_eq!(s.codec_counters().unwrap(), Some(BTreeMap::new()));
    let f = file(&s, ROOT_INO, "f");
    s.set_record(f, 0, &rec(4, 40, 40)).unwrap();
    s.set_record(
        f,
        1,
        &RecordRef {
            codec: 9,
            ..rec(4, 30, 50)
        },
    )
    .unwrap();
    let expected = s.count_codec_usage().unwrap();
    assert_eq!(s.codec_usage().unwrap(), expected);
    drop(s);
    let codec_counters = |c: &rusqlite::Connection| -> i64 {
        c.query_row(
            "SELECT count(*) FROM counters WHERE name LIKE 'codec%'",
            [],
            |r| r.get(0),
        )
        .unwrap()
    };
    // a pool from before the counters: none of them
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        assert!(codec_counters(&c) > 0);
        c.execute("DELETE FROM counters WHERE name LIKE 'codec%'", [])
            .unwrap();
    }
    let s = MetaStore::open_sqlite(&path).unwrap();
    assert_eq!(s.codec_usage().unwrap(), expected);
    drop(s);
    // counted once and stored; then a build that kept no counters overwrote a record
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        assert_eq!(codec_counters(&c), 1 + 1 + 2 * 3);
        c.execute_batch(
            "UPDATE records SET codec = 5, logical_len = 90 WHERE idx = 0;
             UPDATE counters SET value = value + 50 WHERE name = 'logical_bytes';",
        )
        .unwrap();
    }
    let s = MetaStore::open_sqlite(&path).unwrap();
    let now = s.count_codec_usage().unwrap();
    assert_ne!(now, expected);
    assert_eq!(s.codec_usage().unwrap(), now);
    assert_eq!(s.codec_usage().unwrap(), now);
    drop(s);
    remove_db(&path);
}

/// The secondary indexes every SQLite database has once opened.
const ALL_INDEXES: [&str; 3] = ["dentries_by_ino", "inodes_orphans", "records_by_segment"];

#[test]
fn sqlite_refuses_newer_schema() {
    let path = temp_db_path("schema");
    MetaStore::create_sqlite(&path).unwrap().init().unwrap();
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute("UPDATE meta_version SET version = 99", [])
            .unwrap();
    }
    let err = MetaStore::open_sqlite(&path).unwrap_err();
    assert_eq!(
        err,
        MetaError::SchemaTooNew {
            found: 99,
            supported: presso_meta::SCHEMA_VERSION
        }
    );
    assert_eq!(err.errno(), libc::EIO);
    assert!(err.to_string().contains("99"));
    remove_db(&path);
}

#[test]
fn sqlite_rejects_garbage_file() {
    let path = temp_db_path("garbage");
    std::fs::write(&path, vec![0x5au8; 4096]).unwrap();
    let err = MetaStore::open_sqlite(&path).unwrap_err();
    assert!(matches!(err, MetaError::Corrupt(_)), "{err:?}");
    assert_eq!(err.errno(), libc::EIO);
    remove_db(&path);
}

#[test]
fn sqlite_never_takes_a_missing_empty_or_foreign_database_as_empty_metadata() {
    let path = temp_db_path("never-empty");
    let err = MetaStore::open_sqlite(&path).unwrap_err();
    assert!(matches!(err, MetaError::NotInitialized(_)), "{err:?}");
    assert!(!path.exists(), "opening a missing database created it");

    std::fs::write(&path, b"").unwrap();
    let err = MetaStore::open_sqlite(&path).unwrap_err();
    assert!(matches!(err, MetaError::NotInitialized(_)), "{err:?}");
    assert!(err.to_string().contains("empty"), "{err}");
    assert_eq!(
        std::fs::read(&path).unwrap(),
        b"",
        "the empty file was written"
    );
    remove_db(&path);

    // A database, but not Presso's.
    {
        let c = rusqlite::Connection::open(&path).unwrap();
        c.execute_batch("CREATE TABLE notes (x TEXT); INSERT INTO notes VALUES ('mine');")
            .unwrap();
    }
    let before = std::fs::read(&path).unwrap();
    let err = MetaStore::open_sqlite(&path).unwrap_err();
    assert!(matches!(err, MetaError::NotInitialized(_)), "{err:?}");
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(
        std::fs::read(&path).unwrap(),
        before,
        "a foreign database was written"
    );
    remove_db(&path);

    // Creating never reuses a database.
    MetaStore::create_sqlite(&path).unwrap().init().unwrap();
    assert!(MetaStore::create_sqlite(&path).is_err());
    remove_db(&path);
}

#[test]
fn sqlite_checkpoint_leaves_the_database_file_complete() {
    let path = temp_db_path("checkpoint");
    let s = MetaStore::create_sqlite(&path).unwrap();
    s.init().unwrap();
    s.bind_pool("0123456789abcdef").unwrap();
    let d = mkdir(&s, ROOT_INO, "dir");
    s.checkpoint().unwrap();
    let mut wal = path.as_os_str().to_owned();
    wal.push("-wal");
    let wal_len = std::fs::metadata(&wal).map_or(0, |m| m.len());
    assert_eq!(wal_len, 0, "the log still holds {wal_len} bytes");
    // The database file alone, as a backup that skips the log would copy it.
    let copy = temp_db_path("checkpoint-copy");
    std::fs::copy(&path, &copy).unwrap();
    drop(s);
    let c = MetaStore::open_sqlite(&copy).unwrap();
    assert_eq!(c.lookup(ROOT_INO, b"dir").unwrap().ino, d);
    assert_eq!(c.pool_id().unwrap().as_deref(), Some("0123456789abcdef"));
    drop(c);
    remove_db(&path);
    remove_db(&copy);
}

// ---------------------------------------------------------------------------------------------
// model equivalence: random operation sequences give identical results on every engine, and the
// link-count invariants hold afterwards

mod model {
    use std::collections::BTreeMap;

    use proptest::prelude::*;

    use super::*;

    const NAMES: [&[u8]; 3] = [b"a", b"b", b"c"];

    /// Operations on abstract selectors; [`resolve`] maps them onto inodes that exist at the
    /// time the operation runs, so most operations do something.
    #[derive(Debug, Clone)]
    pub enum Op {
        Create(usize, usize),
        Mkdir(usize, usize),
        Symlink(usize, usize),
        Unlink(usize, usize),
        Rmdir(usize, usize),
        Rename(usize, usize, usize, usize),
        Link(usize, usize, usize),
    }

    fn op() -> impl Strategy<Value = Op> {
        // selectors >= 1000 pick among all inodes (so sometimes a non-directory parent)
        let dir = 0usize..1200;
        let name = 0usize..NAMES.len();
        prop_oneof![
            3 => (dir.clone(), name.clone()).prop_map(|(p, n)| Op::Create(p, n)),
            3 => (dir.clone(), name.clone()).prop_map(|(p, n)| Op::Mkdir(p, n)),
            1 => (dir.clone(), name.clone()).prop_map(|(p, n)| Op::Symlink(p, n)),
            2 => (dir.clone(), name.clone()).prop_map(|(p, n)| Op::Unlink(p, n)),
            2 => (dir.clone(), name.clone()).prop_map(|(p, n)| Op::Rmdir(p, n)),
            4 => (dir.clone(), name.clone(), dir.clone(), name.clone())
                .prop_map(|(p, n, q, m)| Op::Rename(p, n, q, m)),
            2 => (0usize..1000, dir, name).prop_map(|(i, p, n)| Op::Link(i, p, n)),
        ]
    }

    /// Directories and all inodes reachable from the root, in inode order.
    fn inventory(s: &MetaStore) -> (Vec<u64>, Vec<u64>) {
        let (mut dirs, mut all) = (vec![ROOT_INO], vec![ROOT_INO]);
        let mut stack = vec![ROOT_INO];
        while let Some(d) = stack.pop() {
            for e in s.readdir(d, None, usize::MAX).unwrap() {
                all.push(e.ino);
                if e.kind == FileKind::Dir {
                    dirs.push(e.ino);
                    stack.push(e.ino);
                }
            }
        }
        dirs.sort_unstable();
        all.sort_unstable();
        all.dedup();
        (dirs, all)
    }

    #[derive(Debug)]
    enum Concrete {
        Create(u64, usize),
        Mkdir(u64, usize),
        Symlink(u64, usize),
        Unlink(u64, usize),
        Rmdir(u64, usize),
        Rename(u64, usize, u64, usize),
        Link(u64, u64, usize),
    }

    fn resolve(s: &MetaStore, op: &Op) -> Concrete {
        let (dirs, all) = inventory(s);
        let d = |sel: usize| {
            if sel >= 1000 {
                all[sel % all.len()]
            } else {
                dirs[sel % dirs.len()]
            }
        };
        match *op {
            Op::Create(p, n) => Concrete::Create(d(p), n),
            Op::Mkdir(p, n) => Concrete::Mkdir(d(p), n),
            Op::Symlink(p, n) => Concrete::Symlink(d(p), n),
            Op::Unlink(p, n) => Concrete::Unlink(d(p), n),
            Op::Rmdir(p, n) => Concrete::Rmdir(d(p), n),
            Op::Rename(p, n, q, m) => Concrete::Rename(d(p), n, d(q), m),
            Op::Link(i, p, n) => Concrete::Link(all[i % all.len()], d(p), n),
        }
    }

    /// Runs one op and renders its result without timestamps.
    fn apply(s: &MetaStore, op: &Concrete) -> String {
        let attr = |r: presso_meta::Result<presso_meta::Attr>| {
            format!("{:?}", r.map(|a| (a.ino, a.kind, a.nlink, a.size, a.mode)))
        };
        match *op {
            Concrete::Create(p, n) => attr(s.make_node(p, NAMES[n], &NewNode::file(0o644, 1, 2))),
            Concrete::Mkdir(p, n) => attr(s.make_node(p, NAMES[n], &NewNode::dir(0o755, 1, 2))),
            Concrete::Symlink(p, n) => {
                attr(s.make_node(p, NAMES[n], &NewNode::symlink(b"target", 1, 2)))
            }
            Concrete::Unlink(p, n) => format!("{:?}", s.unlink(p, NAMES[n], &closed)),
            Concrete::Rmdir(p, n) => format!("{:?}", s.rmdir(p, NAMES[n])),
            Concrete::Rename(p, n, q, m) => {
                format!("{:?}", s.rename(p, NAMES[n], q, NAMES[m], &closed))
            }
            Concrete::Link(i, p, n) => attr(s.link(i, p, NAMES[n])),
        }
    }

    /// Walks the tree, checks link-count invariants and renders it without timestamps.
    fn dump(s: &MetaStore) -> Vec<String> {
        let mut out = Vec::new();
        let mut refs: BTreeMap<u64, u32> = BTreeMap::new();
        let mut stack = vec![(ROOT_INO, String::new())];
        while let Some((dir, path)) = stack.pop() {
            let entries = s.readdir(dir, None, usize::MAX).unwrap();
            let subdirs = entries.iter().filter(|e| e.kind == FileKind::Dir).count();
            let a = s.getattr(dir).unwrap();
            assert_eq!(a.nlink as usize, 2 + subdirs, "dir nlink at {path}/");
            for e in entries {
                let p = format!("{path}/{}", String::from_utf8_lossy(&e.name));
                let a = s.getattr(e.ino).unwrap();
                assert_eq!(a.kind, e.kind);
                out.push(format!("{p} {} {:?} {} {}", a.ino, a.kind, a.nlink, a.size));
                if e.kind == FileKind::Dir {
                    assert_eq!(s.dir_parent(e.ino).unwrap(), dir);
                    stack.push((e.ino, p));
                } else {
                    *refs.entry(e.ino).or_default() += 1;
                }
            }
        }
        for (ino, n) in refs {
            assert_eq!(s.getattr(ino).unwrap().nlink, n, "file nlink of {ino}");
        }
        out.sort();
        out
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

        #[test]
        fn engines_agree(ops in proptest::collection::vec(op(), 1..60)) {
            let mem = fixture(memory_engine);
            let sql = fixture(sqlite_engine);
            let pg = fixture(postgres_engine);
            for (i, op) in ops.iter().enumerate() {
                let op = resolve(&mem.store, op);
                let a = apply(&mem.store, &op);
                let b = apply(&sql.store, &op);
                prop_assert_eq!(&a, &b, "op #{} {:?}", i, op);
                let c = apply(&pg.store, &op);
                prop_assert_eq!(a, c, "op #{} {:?} (postgres)", i, op);
            }
            prop_assert_eq!(dump(&mem.store), dump(&sql.store));
            prop_assert_eq!(dump(&mem.store), dump(&pg.store));
        }
    }
}

// ---------------------------------------------------------------------------------------------
// space accounting against a model: random transaction groups mixed with unlink (closed or open),
// truncate, orphan purges and garbage release, on every engine

mod txg_model {
    use std::collections::{BTreeMap, BTreeSet};

    use proptest::prelude::*;

    use super::*;

    const SLOTS: usize = 3;

    /// A frame to hand over; its offset is assigned when the step runs, so every frame is new.
    #[derive(Debug, Clone)]
    struct Frame {
        segment: u64,
        stored: u32,
        logical: u32,
        inline: bool,
    }

    #[derive(Debug, Clone)]
    enum Op {
        Set(usize, u64, Frame),
        Clear(usize, u64),
        /// `true`: expect the record's current location (CAS may succeed); `false`: a stale one.
        Move(usize, u64, bool, Frame),
        Size(usize, u64),
    }

    #[derive(Debug, Clone)]
    enum Step {
        Create(usize),
        Unlink(usize, bool),
        Truncate(usize, u64),
        Purge,
        Release(u64),
        Txg(Vec<Op>, bool),
    }

    fn frame() -> impl Strategy<Value = Frame> {
        (1u64..5, 1u32..200, 1u32..1000, prop::bool::weighted(0.2)).prop_map(
            |(segment, stored, logical, inline)| Frame {
                segment,
                stored,
                logical,
                inline,
            },
        )
    }

    fn op() -> impl Strategy<Value = Op> {
        // targets >= 100 pick among every inode ever made (directory, symlink, missing, removed)
        let target = prop_oneof![3 => 0usize..SLOTS, 1 => 100usize..200];
        let index = 0u64..5;
        prop_oneof![
            5 => (target.clone(), index.clone(), frame()).prop_map(|(t, i, f)| Op::Set(t, i, f)),
            2 => (target.clone(), index.clone()).prop_map(|(t, i)| Op::Clear(t, i)),
            3 => (target.clone(), index, prop::bool::weighted(0.7), frame())
                .prop_map(|(t, i, c, f)| Op::Move(t, i, c, f)),
            1 => (target, 0u64..10_000).prop_map(|(t, n)| Op::Size(t, n)),
        ]
    }

    fn step() -> impl Strategy<Value = Step> {
        prop_oneof![
            2 => (0usize..SLOTS).prop_map(Step::Create),
            1 => (0usize..SLOTS, any::<bool>()).prop_map(|(s, o)| Step::Unlink(s, o)),
            1 => (0usize..SLOTS, 0u64..5).prop_map(|(s, f)| Step::Truncate(s, f)),
            1 => Just(Step::Purge),
            1 => (0u64..600).prop_map(Step::Release),
            6 => (proptest::collection::vec(op(), 0..10), any::<bool>())
                .prop_map(|(ops, d)| Step::Txg(ops, d)),
        ]
    }

    #[derive(Debug, Default)]
    struct Model {
        slots: [Option<u64>; SLOTS],
        /// Every inode ever used as a target, in creation order (some no longer exist).
        targets: Vec<u64>,
        /// Regular files that exist (linked or orphaned).
        files: BTreeSet<u64>,
        sizes: BTreeMap<u64, (u64, Timespec)>,
        records: BTreeMap<(u64, u64), RecordRef>,
        garbage: u64,
        handed: u64,
        released: u64,
        next_offset: u64,
    }

    impl Model {
        fn target(&self, sel: usize) -> u64 {
            if sel < SLOTS {
                // an empty slot names an inode that never exists
                self.slots[sel].unwrap_or(1_000_000 + sel as u64)
            } else {
                self.targets[sel % self.targets.len()]
            }
        }

        fn frame(&mut self, f: &Frame) -> RecordRef {
            self.next_offset += 1;
            let offset = self.next_offset * 1000;
            if f.inline {
                RecordRef {
                    segment: 0,
                    offset: 0,
                    stored_len: f.stored % 16,
                    logical_len: f.logical,
                    codec: 0,
                    checksum: offset,
                    inline: Some(vec![0xab; (f.stored % 16) as usize]),
                }
            } else {
                self.handed += u64::from(f.stored);
                // several codecs, so per-codec accounting is exercised
                RecordRef {
                    codec: 2 + (f.segment % 3) as u8,
                    ..rec_at(f.segment, offset, f.stored, f.logical)
                }
            }
        }

        fn waste(&mut self, r: &RecordRef, list: &mut Vec<RecordRef>) {
            if r.inline.is_none() {
                self.garbage += u64::from(r.stored_len);
                list.push(r.clone());
            }
        }

        fn remove_file(&mut self, ino: u64) {
            self.files.remove(&ino);
            self.sizes.remove(&ino);
            let keys: Vec<_> = self
                .records
                .range((ino, 0)..=(ino, u64::MAX))
                .map(|(k, _)| *k)
                .collect();
            for k in keys {
                let r = self.records.remove(&k).unwrap();
                self.waste(&r, &mut Vec::new());
            }
        }

        fn space(&self) -> SpaceUsage {
            SpaceUsage {
                logical: self
                    .records
                    .values()
                    .map(|r| u64::from(r.logical_len))
                    .sum(),
                stored: self.records.values().map(|r| u64::from(r.stored_len)).sum(),
                garbage: self.garbage,
            }
        }

        fn usage(&self) -> BTreeMap<u64, SegmentUsage> {
            let mut out: BTreeMap<u64, SegmentUsage> = BTreeMap::new();
            for r in self.records.values().filter(|r| r.inline.is_none()) {
                let u = out.entry(r.segment).or_default();
                u.records += 1;
                u.stored_bytes += u64::from(r.stored_len);
            }
            out
        }
    }

    /// Runs one step on the store and the model; returns the store's and the model's outcome.
    fn run(s: &MetaStore, m: &mut Model, step: &Step, n: usize) -> (String, String) {
        match step {
            Step::Create(slot) => {
                if m.slots[*slot].is_some() {
                    return (String::new(), String::new());
                }
                let ino = file(s, ROOT_INO, &format!("f{slot}"));
                m.slots[*slot] = Some(ino);
                m.targets.push(ino);
                m.files.insert(ino);
                let a = s.getattr(ino).unwrap();
                m.sizes.insert(ino, (0, a.mtime));
                (String::new(), String::new())
            }
            Step::Unlink(slot, keep_open) => {
                let Some(ino) = m.slots[*slot].take() else {
                    return (String::new(), String::new());
                };
                let is_open = |_: u64| *keep_open;
                let u = s
                    .unlink(ROOT_INO, format!("f{slot}").as_bytes(), &is_open)
                    .unwrap();
                if !keep_open {
                    m.remove_file(ino);
                }
                (
                    format!("{:?}", u.fate),
                    format!(
                        "{:?}",
                        if *keep_open {
                            LinkFate::Orphaned
                        } else {
                            LinkFate::Removed
                        }
                    ),
                )
            }
            Step::Truncate(slot, from) => {
                let Some(ino) = m.slots[*slot] else {
                    return (String::new(), String::new());
                };
                let got = s.truncate_records(ino, *from).unwrap();
                let keys: Vec<_> = m
                    .records
                    .range((ino, *from)..=(ino, u64::MAX))
                    .map(|(k, _)| *k)
                    .collect();
                let mut want = Vec::new();
                for k in keys {
                    let r = m.records.remove(&k).unwrap();
                    m.waste(&r, &mut Vec::new());
                    want.push((k.1, r));
                }
                (format!("{got:?}"), format!("{want:?}"))
            }
            Step::Purge => {
                let got = s.purge_orphans().unwrap();
                let live: BTreeSet<u64> = m.slots.iter().flatten().copied().collect();
                let orphans: Vec<u64> = m.files.difference(&live).copied().collect();
                let mut want = Vec::new();
                for ino in orphans {
                    want.extend(
                        m.records
                            .range((ino, 0)..=(ino, u64::MAX))
                            .map(|(_, r)| r.clone())
                            .filter(|r| r.inline.is_none()),
                    );
                    m.remove_file(ino);
                }
                (format!("{got:?}"), format!("{want:?}"))
            }
            Step::Release(bytes) => {
                s.release_garbage(*bytes).unwrap();
                let r = (*bytes).min(m.garbage);
                m.garbage -= r;
                m.released += r;
                (String::new(), String::new())
            }
            Step::Txg(ops, durable) => {
                let mut want = TxgOutcome::default();
                let mut txg = Vec::new();
                let mtime = ts(1_000 + n as i64);
                for op in ops {
                    match op {
                        Op::Set(t, index, f) => {
                            let ino = m.target(*t);
                            let rec = m.frame(f);
                            txg.push(TxgOp::SetRecord {
                                ino,
                                index: *index,
                                rec: rec.clone(),
                            });
                            if !m.files.contains(&ino) {
                                m.waste(&rec, &mut want.not_applied);
                            } else if let Some(old) = m.records.insert((ino, *index), rec) {
                                m.waste(&old, &mut want.replaced);
                            }
                        }
                        Op::Clear(t, index) => {
                            let ino = m.target(*t);
                            txg.push(TxgOp::ClearRecord { ino, index: *index });
                            if m.files.contains(&ino) {
                                if let Some(old) = m.records.remove(&(ino, *index)) {
                                    m.waste(&old, &mut want.replaced);
                                }
                            }
                        }
                        Op::Move(t, index, current, f) => {
                            let ino = m.target(*t);
                            let rec = m.frame(f);
                            let cur = m.records.get(&(ino, *index)).cloned();
                            let (from_segment, from_offset) = match &cur {
                                Some(c) if *current => (c.segment, c.offset),
                                _ => (f.segment, u64::MAX - 1),
                            };
                            txg.push(TxgOp::MoveRecord {
                                ino,
                                index: *index,
                                from_segment,
                                from_offset,
                                rec: rec.clone(),
                            });
                            let matches = m.files.contains(&ino)
                                && cur.as_ref().is_some_and(|c| {
                                    c.inline.is_none()
                                        && (c.segment, c.offset) == (from_segment, from_offset)
                                });
                            if matches {
                                let old = m.records.insert((ino, *index), rec).unwrap();
                                m.waste(&old, &mut want.replaced);
                            } else {
                                m.waste(&rec, &mut want.not_applied);
                            }
                        }
                        Op::Size(t, size) => {
                            let ino = m.target(*t);
                            txg.push(TxgOp::SetSize {
                                ino,
                                size: *size,
                                mtime,
                            });
                            if m.files.contains(&ino) {
                                m.sizes.insert(ino, (*size, mtime));
                            }
                        }
                    }
                }
                let got = s.apply_txg(&txg, *durable).unwrap();
                (format!("{got:?}"), format!("{want:?}"))
            }
        }
    }

    fn check(s: &MetaStore, m: &Model) -> Result<(), TestCaseError> {
        prop_assert_eq!(s.space().unwrap(), m.space());
        let usage = s.segment_usage().unwrap();
        prop_assert_eq!(&usage, &m.usage());
        let live: u64 = usage.values().map(|u| u.stored_bytes).sum();
        prop_assert_eq!(
            live + m.garbage,
            m.handed - m.released,
            "frames handed over - released"
        );
        Ok(())
    }

    fn check_final(s: &MetaStore, m: &Model) -> Result<(), TestCaseError> {
        let all: Vec<RecordLocation> = m
            .records
            .iter()
            .map(|(&(ino, index), r)| loc(ino, index, r.clone()))
            .collect();
        prop_assert_eq!(s.scan_records(None, usize::MAX).unwrap(), all.clone());
        for seg in 0..6 {
            let mut want: Vec<RecordLocation> = all
                .iter()
                .filter(|l| l.rec.inline.is_none() && l.rec.segment == seg)
                .cloned()
                .collect();
            want.sort_by_key(|l| (l.rec.offset, l.ino, l.index));
            prop_assert_eq!(s.records_in_segment(seg).unwrap(), want);
        }
        for (&ino, &(size, mtime)) in &m.sizes {
            let a = s.getattr(ino).unwrap();
            prop_assert_eq!((a.size, a.mtime), (size, mtime));
        }
        let mut by_codec: BTreeMap<u8, CodecSpace> = BTreeMap::new();
        for r in m.records.values() {
            let u = by_codec.entry(r.codec).or_default();
            u.records += 1;
            u.logical_bytes += u64::from(r.logical_len);
            u.stored_bytes += u64::from(r.stored_len);
        }
        prop_assert_eq!(s.codec_usage().unwrap(), by_codec);
        Ok(())
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 48, ..ProptestConfig::default() })]

        #[test]
        fn txg_accounting_matches_model(steps in proptest::collection::vec(step(), 1..40)) {
            for make in [memory_engine as fn() -> _, sqlite_engine, postgres_engine] {
                let fx = fixture(make);
                let s = &fx.store;
                let mut m = Model::default();
                m.targets.push(mkdir(s, ROOT_INO, "d"));
                m.targets.push(s.make_node(ROOT_INO, b"l", &NewNode::symlink(b"t", 0, 0)).unwrap().ino);
                m.targets.push(999_999);
                for (n, step) in steps.iter().enumerate() {
                    let (got, want) = run(s, &mut m, step, n);
                    prop_assert_eq!(got, want, "step #{} {:?}", n, step);
                    check(s, &m)?;
                }
                check_final(s, &m)?;
            }
        }
    }
}
