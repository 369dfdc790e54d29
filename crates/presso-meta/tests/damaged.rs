//! Damaged metadata: values read back from the engine that no correct build writes must give a
//! typed error (`MetaError::Corrupt`), never a panic and never a silent change of other data.
//! Each case runs on every engine; the damage goes in through the engine's own primitives (for
//! SQLite, on a closed database file reopened afterwards, as damage on disk is met; for
//! PostgreSQL, by one client, met by another that opens the pool afterwards).

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};

use presso_meta::engine::COUNTER_NEXT_INODE;
use presso_meta::memory::MemoryEngine;
use presso_meta::postgres::test_server::TestServer;
use presso_meta::postgres::{PostgresEngine, PostgresOptions};
use presso_meta::sqlite::SqliteEngine;
use presso_meta::{MetaEngine, MetaError, MetaStore, NewNode, SqliteOptions, ROOT_INO};

/// A database file under the temp dir, removed with its log on drop.
struct TempDb(PathBuf);

impl TempDb {
    fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        Self(std::env::temp_dir().join(format!(
            "presso-meta-damaged-{tag}-{}-{}.db",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        )))
    }

    fn path(&self) -> &Path {
        &self.0
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}

/// The engines under test: each builds a store with a file and a directory in the root (inodes
/// 2 and 3), damages it with `damage` through the engine's primitives, and hands back the store
/// as a later open sees it.
fn on_each_engine(damage: impl Fn(&dyn MetaEngine), check: impl Fn(&str, MetaStore)) {
    let populate = |store: &MetaStore| {
        store.init().unwrap();
        let f = store
            .make_node(ROOT_INO, b"file", &NewNode::file(0o644, 0, 0))
            .unwrap();
        let d = store
            .make_node(ROOT_INO, b"dir", &NewNode::dir(0o755, 0, 0))
            .unwrap();
        assert_eq!((f.ino, d.ino), (2, 3));
    };

    let memory = MemoryEngine::new();
    populate(&MetaStore::new(Box::new(memory.handle())));
    damage(&memory);
    check("memory", MetaStore::new(Box::new(memory.handle())));

    let db = TempDb::new("sqlite");
    let store = MetaStore::create_sqlite(db.path()).unwrap();
    populate(&store);
    store.close().unwrap();
    drop(store);
    let engine = SqliteEngine::open(db.path(), SqliteOptions::default()).unwrap();
    damage(&engine);
    engine.close().unwrap();
    drop(engine);
    check("sqlite", MetaStore::open_sqlite(db.path()).unwrap());

    let target = TestServer::shared().target(&TestServer::fresh_schema("damaged"));
    let opts = PostgresOptions::default();
    populate(&MetaStore::create_postgres(&target, &opts).unwrap());
    damage(&PostgresEngine::open(&target, &opts).unwrap());
    check(
        "postgres",
        MetaStore::open_postgres(&target, &opts).unwrap(),
    );
}

fn set_next_inode(engine: &dyn MetaEngine, value: u64) {
    let mut tx = engine.write().unwrap();
    tx.set_counter(COUNTER_NEXT_INODE, value).unwrap();
    tx.commit().unwrap();
}

/// Creating a node must be refused as corrupt, and must change nothing.
fn assert_create_refused(engine: &str, store: &MetaStore, case: &str) {
    let before = (store.getattr(2).unwrap(), store.getattr(3).unwrap());
    let err = store
        .make_node(ROOT_INO, b"new", &NewNode::file(0o600, 7, 7))
        .unwrap_err();
    assert!(
        matches!(err, MetaError::Corrupt(_)),
        "{engine}, {case}: {err:?}"
    );
    assert_eq!(err.errno(), libc::EIO);
    assert_eq!(
        (store.getattr(2).unwrap(), store.getattr(3).unwrap()),
        before,
        "{engine}, {case}: an existing inode changed"
    );
    assert_eq!(
        store.lookup(ROOT_INO, b"new").unwrap_err(),
        MetaError::NotFound,
        "{engine}, {case}"
    );
    assert_eq!(store.readdir(ROOT_INO, None, 100).unwrap().len(), 2);
}

#[test]
fn next_inode_counter_naming_an_inode_in_use_is_corrupt() {
    // 0 reads as a missing counter (a fresh database), 1 is the root, 2 and 3 exist.
    for value in [0, 1, 2, 3] {
        on_each_engine(
            |e| set_next_inode(e, value),
            |engine, store| assert_create_refused(engine, &store, &format!("next_inode={value}")),
        );
    }
}

#[test]
fn next_inode_counter_out_of_range_is_corrupt() {
    // Inode numbers are kept below 2^43 (presso_meta::INO_LIMIT), so that SQLite keeps their
    // order and listing cookies carry them; u64::MAX would overflow the counter itself.
    let limit = presso_meta::INO_LIMIT;
    for value in [
        limit,
        limit + 1,
        i64::MAX as u64,
        i64::MAX as u64 + 1,
        u64::MAX,
    ] {
        on_each_engine(
            |e| set_next_inode(e, value),
            |engine, store| assert_create_refused(engine, &store, &format!("next_inode={value}")),
        );
    }
}

#[test]
fn next_inode_counter_ahead_of_the_inodes_is_used() {
    // A counter past every inode is what a pool that removed files has: the next create takes it.
    on_each_engine(
        |e| set_next_inode(e, 1000),
        |engine, store| {
            let a = store
                .make_node(ROOT_INO, b"new", &NewNode::file(0o600, 0, 0))
                .unwrap();
            assert_eq!(a.ino, 1000, "{engine}");
        },
    );
}

/// Runs `f` on its own thread and gives up after a minute, so a loop that never ends fails the
/// test instead of hanging the suite.
fn within_a_minute<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(f());
    });
    rx.recv_timeout(std::time::Duration::from_secs(60))
        .expect("still running after a minute: a loop over damaged parent pointers")
}

#[test]
fn a_parent_pointer_cycle_is_corrupt_not_a_hang() {
    // Directory 3 names itself as its parent: walking up from it never reaches the root.
    let damage = |e: &dyn MetaEngine| {
        let mut tx = e.write().unwrap();
        let mut row = tx.get_inode(3).unwrap().unwrap();
        row.parent = 3;
        tx.put_inode(&row).unwrap();
        tx.commit().unwrap();
    };
    let check = |engine: &str, store: MetaStore| {
        let store = std::sync::Arc::new(store);
        let moved = store
            .make_node(ROOT_INO, b"m", &NewNode::dir(0o755, 0, 0))
            .unwrap()
            .ino;
        // Moving a directory walks up from the destination to refuse a loop.
        let err = within_a_minute({
            let store = std::sync::Arc::clone(&store);
            move || {
                store
                    .rename(ROOT_INO, b"m", 3, b"m", &|_| false)
                    .unwrap_err()
            }
        });
        assert!(matches!(err, MetaError::Corrupt(_)), "{engine}: {err:?}");
        assert_eq!(store.lookup(ROOT_INO, b"m").unwrap().ino, moved, "{engine}");
        // Property inheritance walks up too.
        let err = store.get_prop_effective(3, "compression").unwrap_err();
        assert!(matches!(err, MetaError::Corrupt(_)), "{engine}: {err:?}");
    };
    on_each_engine(damage, check);
}

#[test]
fn a_name_without_its_inode_is_listed_without_attributes() {
    // The file's inode row is gone while its name stays: both listings still name it and the
    // directory beside it; only the damaged name has no attributes (a lookup of it fails).
    let damage = |e: &dyn MetaEngine| {
        let mut tx = e.write().unwrap();
        assert!(tx.delete_inode(2).unwrap());
        tx.commit().unwrap();
    };
    let check = |engine: &str, store: MetaStore| {
        let names: Vec<_> = store
            .readdir(ROOT_INO, None, 10)
            .unwrap()
            .into_iter()
            .map(|e| e.name)
            .collect();
        // In listing order: by inode number (the file was made first).
        assert_eq!(names, [b"file".to_vec(), b"dir".to_vec()], "{engine}");
        assert_eq!(
            store.lookup(ROOT_INO, b"file"),
            Err(MetaError::NotFound),
            "{engine}"
        );
        let plus = store.readdir_plus(ROOT_INO, None, 10).unwrap();
        let got: Vec<_> = plus
            .iter()
            .map(|(e, attr)| (e.name.clone(), e.ino, attr.as_ref().map(|a| a.ino)))
            .collect();
        let expected = [(b"file".to_vec(), 2, None), (b"dir".to_vec(), 3, Some(3))];
        assert_eq!(got, expected, "{engine}");
    };
    on_each_engine(damage, check);
}

/// Column values no build writes, put in with SQL on a closed database: a number out of its
/// field's range, nanoseconds of a second or more, text where a number belongs.
#[test]
fn sqlite_values_out_of_range_are_corrupt() {
    for (column, value) in [
        ("mode", "-1"),
        ("uid", "4294967296"),
        ("nlink", "-5"),
        ("mtime_ns", "1000000000"),
        ("atime_ns", "-1"),
        ("ctime_ns", "4294967296"),
        ("kind", "'file'"),
        ("size", "x'00'"),
    ] {
        let db = TempDb::new("values");
        let store = MetaStore::create_sqlite(db.path()).unwrap();
        store.init().unwrap();
        let ino = store
            .make_node(ROOT_INO, b"file", &NewNode::file(0o644, 0, 0))
            .unwrap()
            .ino;
        store.close().unwrap();
        drop(store);
        let conn = rusqlite::Connection::open(db.path()).unwrap();
        conn.execute(
            &format!("UPDATE inodes SET {column} = {value} WHERE ino = {ino}"),
            [],
        )
        .unwrap();
        drop(conn);
        let store = MetaStore::open_sqlite(db.path()).unwrap();
        let err = store.getattr(ino).unwrap_err();
        assert!(
            matches!(err, MetaError::Corrupt(_)),
            "{column} = {value}: {err:?}"
        );
        // The listing of the directory reads the entries, not the inode: it still works.
        assert_eq!(store.readdir(ROOT_INO, None, 10).unwrap().len(), 1);
    }
}

/// The same for PostgreSQL: values no build writes, put in with SQL by another client.
#[test]
fn postgres_values_out_of_range_are_corrupt() {
    let server = TestServer::shared();
    let mut sql = postgres::Client::connect(&server.conninfo(), postgres::NoTls).unwrap();
    for (table, column, value) in [
        ("inodes", "mode", "-1"),
        ("inodes", "uid", "4294967296"),
        ("inodes", "nlink", "-5"),
        ("inodes", "mtime_ns", "1000000000"),
        ("inodes", "atime_ns", "-1"),
        ("inodes", "kind", "99"),
        ("inodes", "kind", "-1"),
        ("records", "stored_len", "-1"),
        ("records", "codec", "300"),
    ] {
        let target = server.target(&TestServer::fresh_schema("values"));
        let opts = PostgresOptions::default();
        let store = MetaStore::create_postgres(&target, &opts).unwrap();
        store.init().unwrap();
        let ino = store
            .make_node(ROOT_INO, b"file", &NewNode::file(0o644, 0, 0))
            .unwrap()
            .ino;
        let rec = presso_meta::RecordRef {
            segment: 1,
            offset: 0,
            stored_len: 10,
            logical_len: 20,
            codec: 1,
            checksum: 5,
            inline: None,
        };
        store.set_record(ino, 0, &rec).unwrap();
        sql.batch_execute(&format!(
            "UPDATE {}.{table} SET {column} = {value} WHERE ino = {ino}",
            target.schema
        ))
        .unwrap();
        let case = format!("{table}.{column} = {value}");
        let err = match table {
            "inodes" => store.getattr(ino).unwrap_err(),
            _ => store.get_record(ino, 0).unwrap_err(),
        };
        assert!(matches!(err, MetaError::Corrupt(_)), "{case}: {err:?}");
        assert_eq!(err.errno(), libc::EIO, "{case}");
        assert_eq!(
            store.readdir(ROOT_INO, None, 10).unwrap().len(),
            1,
            "{case}"
        );
    }
}
