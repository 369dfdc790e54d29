//! Tests of the intent log as the engine uses it: a killed engine keeps every write that
//! returned, and the next open replays exactly what continues SQLite's last group, up to a tear.

use super::tests::TempDb;
use super::*;

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
    // The records, then zeros to the end of the file's mapped part.
    let end = records
        .iter()
        .map(|(_, body)| intent::HEADER_LEN + body.len())
        .sum::<usize>();
    assert!(log[end..].iter().all(|&b| b == 0));
    std::fs::write(log_path(&db), &log[..end - 3]).unwrap();
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

/// Every row of every table as text, as the write connection sees it (the open group and the
/// rows pending in its cache included), without the engine's own bookkeeping counters.
fn dump(e: &SqliteEngine) -> Vec<String> {
    use rusqlite::types::ValueRef;
    let w = e.writer.lock().unwrap();
    w.write_pending(false).unwrap();
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

/// Another program cuts the intent log short under the engine: the transaction whose record
/// could not be written fails with an error and is undone, and the engine goes on. The group in
/// SQLite still holds what returned before, and a clean close commits it.
#[test]
fn a_log_cut_short_fails_one_transaction_and_the_engine_goes_on() {
    let db = TempDb::new("cut-engine");
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    grouped_counter(&e, "before", 1);
    std::fs::OpenOptions::new()
        .write(true)
        .open(log_path(&db))
        .unwrap()
        .set_len(0)
        .unwrap();
    let mut tx = e.begin_write(false).unwrap();
    tx.set_counter("lost", 2).unwrap();
    let err = Box::new(tx).commit().unwrap_err();
    assert!(matches!(err, MetaError::Io(_)), "{err}");
    assert_eq!(counter(&e, "lost"), 0);
    grouped_counter(&e, "after", 3);
    e.close().unwrap();
    drop(e);
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(counter(&e, "before"), 1);
    assert_eq!(counter(&e, "lost"), 0);
    assert_eq!(counter(&e, "after"), 3);
}
