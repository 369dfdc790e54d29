//! Unit tests of the SQLite engine's internals: durability switching, query plans and statements
//! compiled once, the reader pool, failures and copies (the intent log's are in `intent_tests`).

use super::rows::{records_in_segment_sql, LIST_ORPHANS_SQL, SEGMENT_USAGE_SQL};
use super::*;
use crate::{Dentry, FileKind, ListAfter, Timespec, ROOT_INO};

/// A database path in the temporary directory, removed with its companions on drop.
pub(super) struct TempDb(pub(super) PathBuf);

impl TempDb {
    pub(super) fn new(tag: &str) -> Self {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.subsec_nanos())
            .unwrap_or(0);
        TempDb(std::env::temp_dir().join(format!(
            "presso-meta-unit-{tag}-{}-{nanos}.db",
            std::process::id()
        )))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm", "-intent"] {
            let mut p = self.0.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

impl SqliteEngine {
    /// Ends the engine as a killed process would: the open group is never committed to SQLite,
    /// the intent log keeps it.
    pub(super) fn abandon(self) {
        let mut w = self.writer.lock().unwrap();
        w.groups = None;
        if !w.conn.is_autocommit() {
            w.rollback().unwrap();
        }
    }
}

/// Caps the database at `extra` pages beyond those it has, so that writes soon find it full.
pub(super) fn limit_pages(e: &SqliteEngine, extra: i64) {
    let w = e.writer.lock().unwrap();
    let pages: i64 = w
        .conn
        .query_row("PRAGMA page_count", [], |r| r.get(0))
        .unwrap();
    let _: i64 = w
        .conn
        .query_row(
            &format!("PRAGMA max_page_count={}", pages + extra),
            [],
            |r| r.get(0),
        )
        .unwrap();
}

fn pragma_synchronous(tx: &SqliteTxn<'_>) -> i64 {
    tx.c()
        .unwrap()
        .query_row("PRAGMA synchronous", [], |r| r.get(0))
        .unwrap()
}

#[test]
fn durable_writes_switch_to_full_and_back() {
    let db = TempDb::new("sync");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    let tx = e.begin_write(false).unwrap();
    assert_eq!(pragma_synchronous(&tx), 1, "NORMAL");
    drop(tx);
    let tx = e.begin_write(true).unwrap();
    assert_eq!(pragma_synchronous(&tx), 2, "FULL");
    Box::new(tx).commit().unwrap();
    let mut tx = e.begin_write(false).unwrap();
    assert_eq!(pragma_synchronous(&tx), 1, "back to NORMAL");
    // the empty durable transaction still wrote (and so synced) the log
    assert_eq!(tx.get_counter(COUNTER_DURABLE_COMMITS).unwrap(), 1);
    drop(tx);

    // an engine opened with FULL stays FULL
    drop(e);
    let e = SqliteEngine::open(
        &db.0,
        SqliteOptions {
            synchronous: Synchronous::Full,
        },
    )
    .unwrap();
    for durable in [true, false] {
        let tx = e.begin_write(durable).unwrap();
        assert_eq!(pragma_synchronous(&tx), 2);
    }
}

fn plan(tx: &SqliteTxn<'_>, sql: &str) -> String {
    let c = tx.c().unwrap();
    let mut st = c.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let args = vec![7i64; st.parameter_count()];
    let rows = st
        .query_map(rusqlite::params_from_iter(args), |r| r.get::<_, String>(3))
        .unwrap();
    rows.map(|r| r.unwrap()).collect::<Vec<_>>().join("; ")
}

#[test]
fn queries_use_the_secondary_indexes() {
    let db = TempDb::new("plan");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    let tx = e.begin_read().unwrap();
    let p = plan(&tx, SEGMENT_USAGE_SQL);
    assert!(p.contains("COVERING INDEX records_by_segment"), "{p}");
    let p = plan(&tx, &records_in_segment_sql());
    assert!(p.contains("records_by_segment (segment=?)"), "{p}");
    let p = plan(&tx, LIST_ORPHANS_SQL);
    assert!(p.contains("inodes_orphans"), "{p}");
    assert!(!p.contains("TEMP B-TREE"), "{p}");
}

/// How many times the statements `conn` holds, its statement cache's included, were compiled
/// again after their first preparation.
fn reprepares(conn: &Connection) -> i32 {
    use rusqlite::ffi;
    let mut total = 0;
    // SAFETY: the handle is live for `conn`'s lifetime, and the walk neither finalizes nor
    // prepares statements, so the list it follows stays valid.
    unsafe {
        let db = conn.handle();
        let mut st = ffi::sqlite3_next_stmt(db, std::ptr::null_mut());
        while !st.is_null() {
            total += ffi::sqlite3_stmt_status(st, ffi::SQLITE_STMTSTATUS_REPREPARE, 0);
            st = ffi::sqlite3_next_stmt(db, st);
        }
    }
    total
}

#[test]
fn cached_statements_run_again_without_being_compiled_again() {
    let db = TempDb::new("reprepare");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    let root = ROOT_INO;
    let entry = Dentry {
        ino: root,
        kind: FileKind::Dir,
    };
    let mut tx = e.write().unwrap();
    tx.put_inode(&crate::root_row(Timespec::now())).unwrap();
    for name in [&b"a"[..], b"b", b"c"] {
        tx.put_dentry(root, name, entry).unwrap();
    }
    tx.commit().unwrap();
    // Rebinding a parameter the planner looked at (a LIMIT's, for one) expires a statement,
    // so each run compiled it anew: a third of the daemon's time in a `find`.
    let mut tx = e.begin_read().unwrap();
    for round in 0..3 {
        tx.list_dentries(root, None, 2).unwrap();
        tx.list_dentries(root, Some(ListAfter::entry(2, b"a")), 2 + round)
            .unwrap();
        tx.list_dentries_with_inodes(root, None, 2).unwrap();
        tx.list_dentries_with_inodes(root, Some(ListAfter::entry(2, b"a")), 2 + round)
            .unwrap();
        tx.scan_records(None, 2 + round).unwrap();
        tx.scan_records(Some((root, 0)), 2 + round).unwrap();
        tx.get_inode(root).unwrap();
        tx.get_dentry(root, b"b").unwrap();
        tx.count_dentries(root).unwrap();
    }
    assert_eq!(reprepares(tx.c().unwrap()), 0);
    drop(tx);
    // The write connection, in grouped transactions.
    for round in 0..3 {
        let name = format!("w{round}");
        let mut tx = e.write().unwrap();
        tx.put_dentry(root, name.as_bytes(), entry).unwrap();
        tx.list_dentries(root, Some(ListAfter::entry(2, b"a")), 2 + round)
            .unwrap();
        tx.list_dentries_with_inodes(root, None, 2 + round).unwrap();
        tx.set_counter("test", round as u64).unwrap();
        tx.get_counter("test").unwrap();
        tx.delete_dentry(root, name.as_bytes()).unwrap();
        tx.commit().unwrap();
    }
    assert_eq!(reprepares(&e.writer.lock().unwrap().conn), 0);
}

#[test]
fn read_connections_are_pooled_and_capped() {
    let db = TempDb::new("pool");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    {
        let held: Vec<_> = (0..READ_CONNECTIONS)
            .map(|_| e.begin_read().unwrap())
            .collect();
        assert_eq!(e.readers.pool.lock().unwrap().open, READ_CONNECTIONS);
        assert!(e.readers.pool.lock().unwrap().idle.is_empty());
        drop(held);
    }
    assert_eq!(e.readers.pool.lock().unwrap().idle.len(), READ_CONNECTIONS);
    std::thread::scope(|s| {
        for _ in 0..3 * READ_CONNECTIONS {
            s.spawn(|| {
                for _ in 0..50 {
                    let mut tx = e.begin_read().unwrap();
                    assert_eq!(tx.get_counter("x").unwrap(), 0);
                }
            });
        }
    });
    let pool = e.readers.pool.lock().unwrap();
    assert_eq!(pool.open, READ_CONNECTIONS);
    assert_eq!(pool.idle.len(), READ_CONNECTIONS);
    assert_eq!(pool.waiting, 0);
}

#[test]
fn a_full_database_is_reported_as_full() {
    let db = TempDb::new("full");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    limit_pages(&e, 8);
    let store = crate::MetaStore::new(Box::new(e));
    store.init().unwrap();
    let value = vec![7u8; 16 * 1024];
    let mut failure = None;
    for i in 0..1000 {
        let name = format!("user.fill{i}");
        if let Err(err) =
            store.set_xattr(crate::ROOT_INO, name.as_bytes(), &value, Default::default())
        {
            failure = Some(err);
            break;
        }
    }
    let err = failure.expect("the page limit was never reached");
    assert_eq!(err, MetaError::Full);
    assert_eq!(err.errno(), libc::ENOSPC);
    // The failed transaction left no trace and the store still answers.
    assert_eq!(store.getattr(crate::ROOT_INO).unwrap().ino, crate::ROOT_INO);
}

#[test]
fn failures_are_classified_by_result_code() {
    let fail = |code| rusqlite::Error::SqliteFailure(rusqlite::ffi::Error::new(code), None);
    let conn = Connection::open_in_memory().unwrap();
    assert_eq!(eng(fail(rusqlite::ffi::SQLITE_FULL)), MetaError::Full);
    for code in [rusqlite::ffi::SQLITE_CORRUPT, rusqlite::ffi::SQLITE_NOTADB] {
        assert!(matches!(eng(fail(code)), MetaError::Corrupt(_)));
    }
    // an I/O error is "full" only when the OS said ENOSPC, which it did not here
    let io = eng_on(&conn)(fail(rusqlite::ffi::SQLITE_IOERR));
    assert!(matches!(io, MetaError::Io(_)), "{io:?}");
    assert_eq!(io.errno(), libc::EIO);
    // the engine's own connections never wait past the busy timeout: another process holds it
    let busy = eng(fail(rusqlite::ffi::SQLITE_BUSY));
    assert!(matches!(busy, MetaError::InUse(_)), "{busy:?}");
    assert_eq!(busy.errno(), libc::EBUSY);
}

#[test]
fn a_copy_opens_on_its_own_with_everything_committed() {
    let db = TempDb::new("copy-src");
    let copy = TempDb::new("copy-dst");
    let store = crate::MetaStore::create_sqlite(&db.0).unwrap();
    store.init().unwrap();
    let node = crate::NewNode::file(0o600, 7, 8);
    let f = store
        .make_node(crate::ROOT_INO, b"kept", &node)
        .unwrap()
        .ino;
    store
        .set_xattr(f, b"user.k", b"v", Default::default())
        .unwrap();
    // Uncheckpointed commits are in the log only; the copy must hold them.
    assert!(store.copy_to(&copy.0).unwrap());
    let copied = crate::MetaStore::open_sqlite(&copy.0).unwrap();
    assert_eq!(copied.lookup(crate::ROOT_INO, b"kept").unwrap().ino, f);
    assert_eq!(copied.get_xattr(f, b"user.k").unwrap(), b"v");
    // A copy never overwrites a file.
    assert!(store.copy_to(&copy.0).is_err());
}

/// A copy stays current through what changes nothing but statistics, reopening included, and
/// stops being current with any change: of a name, an attribute, an extended attribute, a
/// property, the record map or the accounting.
#[test]
fn a_copy_is_current_until_the_metadata_changes() {
    let db = TempDb::new("tag-src");
    let store = crate::MetaStore::create_sqlite(&db.0).unwrap();
    store.init().unwrap();
    let f = store
        .make_node(crate::ROOT_INO, b"f", &crate::NewNode::file(0o600, 7, 8))
        .unwrap()
        .ino;
    let mut copies = Vec::new();
    let mut copy = |store: &crate::MetaStore| {
        let path = TempDb::new(&format!("tag-copy-{}", copies.len()));
        assert!(store.copy_to(&path.0).unwrap());
        assert!(store.copy_is_current(&path.0).unwrap());
        copies.push(path);
        copies.last().unwrap().0.clone()
    };
    let rec = crate::RecordRef {
        segment: 1,
        offset: 0,
        stored_len: 10,
        logical_len: 20,
        codec: 0,
        checksum: 5,
        inline: None,
    };
    type Change<'a> = Box<dyn Fn(&crate::MetaStore) + 'a>;
    let changes: Vec<(&str, Change)> = vec![
        (
            "a name",
            Box::new(move |s| assert_eq!(s.link(f, crate::ROOT_INO, b"g").unwrap().nlink, 2)),
        ),
        (
            "a mode",
            Box::new(move |s| {
                let set = crate::SetAttr {
                    mode: Some(0o644),
                    ..Default::default()
                };
                assert_eq!(s.setattr(f, &set).unwrap().mode, 0o644);
            }),
        ),
        (
            "an xattr",
            Box::new(move |s| s.set_xattr(f, b"user.k", b"v", Default::default()).unwrap()),
        ),
        (
            "a property",
            Box::new(move |s| s.set_prop(f, "compression", "zstd-3").unwrap()),
        ),
        (
            "a record",
            Box::new(move |s| drop(s.set_record(f, 0, &rec).unwrap())),
        ),
        (
            "a group",
            Box::new(move |s| {
                let op = crate::TxgOp::SetSize {
                    ino: f,
                    size: 1,
                    mtime: Timespec::now(),
                };
                drop(s.apply_txg_numbered(9, &[op], false).unwrap())
            }),
        ),
        (
            "garbage reclaimed",
            Box::new(move |s| s.release_garbage(1).unwrap()),
        ),
    ];
    for (what, change) in changes {
        let path = copy(&store);
        // What a mount that only reads does: statistics, empty groups, a purge with no orphans.
        store.add_statistics(&[("stat.read_bytes", 4096)]).unwrap();
        store.apply_txg_numbered(100, &[], false).unwrap();
        store.apply_txg(&[], true).unwrap();
        assert!(store.purge_orphans().unwrap().is_empty());
        assert!(store.copy_is_current(&path).unwrap(), "before {what}");
        change(&store);
        assert!(!store.copy_is_current(&path).unwrap(), "after {what}");
    }
    let path = copy(&store);
    drop(store);
    let store = crate::MetaStore::open_sqlite(&db.0).unwrap();
    assert!(store.copy_is_current(&path).unwrap(), "after reopening");
    // A copy that is missing or not a database is not current.
    assert!(!store.copy_is_current(&db.0.with_extension("none")).unwrap());
    std::fs::write(&path, b"not a database").unwrap();
    assert!(!store.copy_is_current(&path).unwrap());
}

/// A database whose main file is damaged while its write-ahead log still holds commits (a
/// daemon killed, then the file damaged): the refused open keeps both files byte for byte.
/// SQLite checkpoints and deletes the log when the last connection closes, and the refused
/// open's connection was such a one: the log, which `presso recover` moves aside with the
/// database, was gone before it ran.
#[test]
fn a_refused_open_keeps_the_log_and_the_file() {
    let live = TempDb::new("live-wal");
    let e = SqliteEngine::create(&live.0, SqliteOptions::default()).unwrap();
    // The schema in the file; the commit below only in the log (the file's header page not).
    e.checkpoint().unwrap();
    let mut tx = e.begin_write(false).unwrap();
    tx.set_counter("x", 7).unwrap();
    Box::new(tx).commit().unwrap();
    drop(e.commit_open_group().unwrap());
    // Copies taken while it is open: the commit is only in the log.
    let copy = TempDb::new("damaged-wal");
    let with = |p: &PathBuf, suffix: &str| {
        let mut s = p.as_os_str().to_owned();
        s.push(suffix);
        PathBuf::from(s)
    };
    // The log's index is in the process's memory (the `unix-excl` VFS), never in a file.
    assert!(!with(&live.0, "-shm").exists());
    for suffix in ["", "-wal"] {
        std::fs::copy(with(&live.0, suffix), with(&copy.0, suffix)).unwrap();
    }
    drop(e);
    let mut main = std::fs::read(&copy.0).unwrap();
    for (i, b) in main.iter_mut().take(16384).enumerate() {
        *b = (i as u8).wrapping_mul(31) ^ 0xA5;
    }
    std::fs::write(&copy.0, &main).unwrap();
    let log = std::fs::read(with(&copy.0, "-wal")).unwrap();
    assert!(!log.is_empty());
    assert!(SqliteEngine::open(&copy.0, SqliteOptions::default()).is_err());
    assert!(
        std::fs::read(&copy.0).unwrap() == main,
        "the refused open wrote the file"
    );
    assert!(
        std::fs::read(with(&copy.0, "-wal")).ok() == Some(log),
        "the refused open removed or changed the log"
    );
}

/// The write-ahead log's length in bytes (0 when there is none).
fn wal_len(db: &Path) -> u64 {
    std::fs::metadata(wal_path(db)).map_or(0, |m| m.len())
}

/// Making what is committed durable writes nothing when nothing is pending (an fsync of a file
/// only read must work on a full disk), and commits the open group when it holds a change.
#[test]
fn syncing_what_is_committed_writes_only_what_the_open_group_holds() {
    let db = TempDb::new("synccommitted");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    let mut tx = e.begin_write(false).unwrap();
    tx.set_counter("x", 7).unwrap();
    Box::new(tx).commit().unwrap();
    e.checkpoint().unwrap();
    assert_eq!(wal_len(&db.0), 0, "the checkpoint emptied the log");

    // A grouped transaction that only reads opens a group and puts nothing in it.
    let mut tx = e.begin_write(false).unwrap();
    assert_eq!(tx.get_counter("x").unwrap(), 7);
    Box::new(tx).commit().unwrap();
    assert!(e.writer.lock().unwrap().in_group());
    assert!(e.sync_committed().unwrap());
    assert!(
        !e.writer.lock().unwrap().in_group(),
        "the empty group ended"
    );
    assert_eq!(
        wal_len(&db.0),
        0,
        "ending a group without a change wrote to the log"
    );
    // A group holding a change is committed to SQLite's own files, which then hold it without
    // the intent log, also when the engine is killed right after.
    let mut tx = e.begin_write(false).unwrap();
    tx.set_counter("x", 8).unwrap();
    Box::new(tx).commit().unwrap();
    assert!(e.sync_committed().unwrap());
    assert!(!e.writer.lock().unwrap().in_group());
    assert!(wal_len(&db.0) > 0);
    e.abandon();
    std::fs::remove_file(intent::path_for(&db.0)).unwrap();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    let mut tx = e.begin_write(false).unwrap();
    assert_eq!(tx.get_counter("x").unwrap(), 8);
    Box::new(tx).commit().unwrap();

    // A durable transaction group of the layer above with no ops, nothing pending.
    e.checkpoint().unwrap();
    assert_eq!(wal_len(&db.0), 0);
    let store = crate::MetaStore::new(Box::new(e));
    store.apply_txg_numbered(5, &[], true).unwrap();
    assert_eq!(wal_len(&db.0), 0, "an empty durable group wrote to the log");
}
