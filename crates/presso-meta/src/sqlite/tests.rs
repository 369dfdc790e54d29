//! Unit tests of the SQLite engine's internals: durability switching, query plans, the reader
//! pool.

use super::rows::{records_in_segment_sql, LIST_ORPHANS_SQL, SEGMENT_USAGE_SQL};
use super::*;
use crate::{Dentry, FileKind, Timespec, ROOT_INO};

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
        tx.list_dentries(root, Some(b"a"), 2 + round).unwrap();
        tx.list_dentries_with_inodes(root, None, 2).unwrap();
        tx.list_dentries_with_inodes(root, Some(b"a"), 2 + round)
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
        tx.list_dentries(root, Some(b"a"), 2 + round).unwrap();
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
        assert_eq!(e.readers.lock().unwrap().open, READ_CONNECTIONS);
        assert!(e.readers.lock().unwrap().idle.is_empty());
        drop(held);
    }
    assert_eq!(e.readers.lock().unwrap().idle.len(), READ_CONNECTIONS);
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
    let pool = e.readers.lock().unwrap();
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

fn log_path(db: &TempDb) -> PathBuf {
    intent::path_for(&db.0)
}

/// Commits one grouped write transaction setting counter `name`.
fn grouped_counter(e: &SqliteEngine, name: &str, value: u64) {
    let mut tx = e.begin_write(false).unwrap();
    assert!(tx.redo.is_some(), "an ordinary write is grouped");
    tx.set_counter(name, value).unwrap();
    Box::new(tx).commit().unwrap();
}

fn counter(e: &SqliteEngine, name: &str) -> u64 {
    e.begin_short_read().unwrap().get_counter(name).unwrap()
}

/// A killed process never commits its open group to SQLite; every write transaction that
/// returned is in the intent log, and the next open replays it, once.
#[test]
fn a_killed_engine_keeps_every_write_that_returned() {
    let db = TempDb::new("killed");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    for i in 0..50 {
        grouped_counter(&e, &format!("c{i}"), i + 1);
    }
    // A transaction that failed or was dropped is not in the log.
    let mut dropped = e.begin_write(false).unwrap();
    dropped.set_counter("dropped", 1).unwrap();
    drop(dropped);
    assert!(e.writer.lock().unwrap().in_group());
    e.abandon();
    assert!(std::fs::metadata(log_path(&db)).unwrap().len() > 0);

    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    for i in 0..50 {
        assert_eq!(counter(&e, &format!("c{i}")), i + 1, "c{i} lost");
    }
    assert_eq!(counter(&e, "dropped"), 0);
    assert_eq!(std::fs::metadata(log_path(&db)).unwrap().len(), 0);
    // Groups go on numbering after the replayed one, and a second kill replays only its own.
    let replayed = counter(&e, COUNTER_INTENT_GROUP);
    assert!(replayed >= 1);
    grouped_counter(&e, "c0", 100);
    e.abandon();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(counter(&e, "c0"), 100);
    assert_eq!(counter(&e, "c1"), 2);
    assert_eq!(counter(&e, COUNTER_INTENT_GROUP), replayed + 1);
    // A clean end commits the group and removes the log.
    e.close().unwrap();
    drop(e);
    assert!(!log_path(&db).exists());
}

/// A log cut inside a record (a power loss that kept part of it) replays the records before
/// the cut and nothing after it.
#[test]
fn a_torn_intent_log_replays_up_to_the_tear() {
    let db = TempDb::new("torn");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    for i in 0..3 {
        grouped_counter(&e, &format!("c{i}"), 7);
    }
    e.abandon();
    let log = std::fs::read(log_path(&db)).unwrap();
    let records = intent::parse_records(&log);
    assert_eq!(records.len(), 3);
    std::fs::write(log_path(&db), &log[..log.len() - 3]).unwrap();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(counter(&e, "c0"), 7);
    assert_eq!(counter(&e, "c1"), 7);
    assert_eq!(counter(&e, "c2"), 0, "a torn record was replayed");
}

/// A log whose records do not continue the last group the database committed (a power loss
/// kept a later group's records but not the commit before them) is not replayed: that would
/// mix two moments. The database opens as of its last commit.
#[test]
fn an_intent_log_that_skips_a_group_is_not_replayed() {
    let db = TempDb::new("skips");
    let before = TempDb::new("skips-before");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    grouped_counter(&e, "first", 1);
    drop(e.commit_open_group().unwrap());
    e.checkpoint().unwrap();
    drop(e);
    std::fs::copy(&db.0, &before.0).unwrap();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    grouped_counter(&e, "second", 2);
    drop(e.commit_open_group().unwrap());
    grouped_counter(&e, "third", 3);
    e.abandon();
    // The database as of "first", beside a log holding the group after "second"'s.
    std::fs::copy(log_path(&db), log_path(&before)).unwrap();
    let e = SqliteEngine::open(&before.0, SqliteOptions::default()).unwrap();
    assert_eq!(counter(&e, "first"), 1);
    assert_eq!(counter(&e, "second"), 0);
    assert_eq!(
        counter(&e, "third"),
        0,
        "a group was replayed over a missing one"
    );
    assert_eq!(std::fs::metadata(log_path(&before)).unwrap().len(), 0);
    drop(e);
    // The whole database replays it.
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(counter(&e, "third"), 3);
}

/// A new database refuses to start beside a log some earlier database left.
#[test]
fn a_new_database_refuses_a_leftover_intent_log() {
    let db = TempDb::new("leftover");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    grouped_counter(&e, "x", 1);
    e.abandon();
    std::fs::remove_file(&db.0).unwrap();
    let _ = std::fs::remove_file(db.0.with_extension("db-wal"));
    let err = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap_err();
    assert!(err.to_string().contains("-intent"), "{err}");
}

/// With `synchronous=FULL` every commit is durable on its own, so nothing is grouped; a log left
/// by an earlier open is still replayed first.
#[test]
fn full_durability_replays_the_log_then_commits_each_write() {
    let db = TempDb::new("full-sync");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    grouped_counter(&e, "x", 1);
    e.abandon();
    let full = SqliteOptions {
        synchronous: Synchronous::Full,
    };
    let e = SqliteEngine::open(&db.0, full).unwrap();
    assert_eq!(counter(&e, "x"), 1);
    assert!(!log_path(&db).exists());
    let tx = e.begin_write(false).unwrap();
    assert!(tx.redo.is_none());
}

/// Delegates to a shared engine, so that a test can end the engine as a killed process would
/// after a `MetaStore` used it.
struct Shared(std::sync::Arc<SqliteEngine>);

impl MetaEngine for Shared {
    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        self.0.read()
    }
    fn read_scan(&self) -> Result<Box<dyn Txn + '_>> {
        self.0.read_scan()
    }
    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        self.0.write()
    }
    fn write_durable(&self) -> Result<Box<dyn Txn + '_>> {
        self.0.write_durable()
    }
}

/// Every row of every table as text, as the write connection sees it (the open group
/// included), without the engine's own bookkeeping counters.
fn dump(e: &SqliteEngine) -> Vec<String> {
    use rusqlite::types::ValueRef;
    let w = e.writer.lock().unwrap();
    let mut out = Vec::new();
    for table in [
        "inodes", "dentries", "xattrs", "records", "props", "counters",
    ] {
        let mut st = w
            .conn
            .prepare(&format!("SELECT * FROM {table} ORDER BY 1, 2"))
            .unwrap();
        let n = st.column_count();
        let rows = st
            .query_map([], |r| {
                (0..n)
                    .map(|i| {
                        Ok(match r.get_ref(i)? {
                            ValueRef::Null => "null".to_string(),
                            ValueRef::Integer(v) => v.to_string(),
                            ValueRef::Real(v) => v.to_string(),
                            ValueRef::Text(v) | ValueRef::Blob(v) => format!("{v:?}"),
                        })
                    })
                    .collect::<rusqlite::Result<Vec<_>>>()
            })
            .unwrap();
        for row in rows {
            out.push(format!("{table}: {}", row.unwrap().join(", ")));
        }
    }
    let own = [COUNTER_INTENT_GROUP, COUNTER_DURABLE_COMMITS];
    out.retain(|row| {
        !own.iter()
            .any(|c| row.contains(&format!("{:?}", c.as_bytes())))
    });
    out
}

/// Every kind of row change a namespace or data operation makes, replayed from the intent log
/// after a simulated kill, gives the very rows the killed engine held.
#[test]
fn a_replayed_log_gives_back_every_row_the_killed_engine_held() {
    use crate::{MetaStore, NewNode, RecordRef, SetAttr, TxgOp, XattrFlags, POOL_INO, ROOT_INO};
    let db = TempDb::new("rows");
    let engine =
        std::sync::Arc::new(SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap());
    let s = MetaStore::new(Box::new(Shared(engine.clone())));
    s.init().unwrap();
    s.set_prop(POOL_INO, "compression", "zstd-3").unwrap();
    let d = s
        .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 1, 2))
        .unwrap()
        .ino;
    let f = s
        .make_node(d, b"f", &NewNode::file(0o644, 3, 4))
        .unwrap()
        .ino;
    s.make_node(ROOT_INO, b"l", &NewNode::symlink(b"d/f", 0, 0))
        .unwrap();
    s.link(f, ROOT_INO, b"hard").unwrap();
    s.set_xattr(f, b"user.a", b"1", XattrFlags::Any).unwrap();
    s.set_xattr(f, b"user.b", b"2", XattrFlags::Any).unwrap();
    s.remove_xattr(f, b"user.a").unwrap();
    s.set_prop(d, "compression", "lz4").unwrap();
    s.set_prop(d, "recordsize", "65536").unwrap();
    s.remove_prop(d, "recordsize").unwrap();
    let rec = |segment: u64, offset: u64, inline: Option<Vec<u8>>| RecordRef {
        segment,
        offset,
        stored_len: inline.as_ref().map_or(900, |b| b.len() as u32),
        logical_len: 4096,
        codec: 2,
        checksum: offset ^ 0x5555,
        inline,
    };
    let ops: Vec<TxgOp> = (0..6)
        .map(|i| TxgOp::SetRecord {
            ino: f,
            index: i,
            rec: rec(1, 40 + i * 1000, (i % 2 == 0).then(|| vec![i as u8; 30])),
        })
        .chain([TxgOp::SetSize {
            ino: f,
            size: 6 * 4096,
            mtime: crate::Timespec {
                secs: 1_700_000_000,
                nsec: 9,
            },
        }])
        .collect();
    s.apply_txg(&ops, false).unwrap();
    s.set_record(f, 2, &rec(2, 7, None)).unwrap();
    s.truncate_records(f, 4).unwrap();
    let set = SetAttr {
        mode: Some(0o600),
        uid: Some(9),
        ..Default::default()
    };
    s.setattr(f, &set).unwrap();
    s.rename(d, b"f", ROOT_INO, b"g", &|_| false).unwrap();
    s.make_node(ROOT_INO, b"gone", &NewNode::file(0o600, 0, 0))
        .unwrap();
    s.unlink(ROOT_INO, b"gone", &|_| false).unwrap();
    let e = s
        .make_node(ROOT_INO, b"empty", &NewNode::dir(0o700, 0, 0))
        .unwrap()
        .ino;
    s.rmdir(ROOT_INO, b"empty").unwrap();
    let open = s
        .make_node(ROOT_INO, b"open", &NewNode::file(0o600, 0, 0))
        .unwrap()
        .ino;
    s.unlink(ROOT_INO, b"open", &|ino| ino == open).unwrap();
    assert!(e < open);
    let held = dump(&engine);
    drop(s);
    let engine = std::sync::Arc::try_unwrap(engine).ok().unwrap();
    engine.abandon();
    assert!(std::fs::metadata(log_path(&db)).unwrap().len() > 0);
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(dump(&e), held);
}
