//! Tests of the write connection's row cache: what it holds is what the connection reads,
//! through commits, rollbacks and failed statements.

use rusqlite::OptionalExtension;

use super::tests::{limit_pages, TempDb};
use super::*;
use crate::engine::{InodeRow, Timespec};
use crate::ROOT_INO;

fn engine(tag: &str) -> (TempDb, SqliteEngine) {
    let db = TempDb::new(tag);
    let e = SqliteEngine::create(&db.0, SqliteOptions::default()).unwrap();
    let mut tx = e.write().unwrap();
    tx.put_inode(&crate::root_row(Timespec::now())).unwrap();
    tx.commit().unwrap();
    // SQLite has the root's row, not only the cache.
    e.checkpoint().unwrap();
    (db, e)
}

/// The root's row as SQLite holds it, read past the cache.
fn stored_root(e: &SqliteEngine) -> u32 {
    let w = e.writer.lock().unwrap();
    w.conn
        .query_row("SELECT mode FROM inodes WHERE ino = ?1", [ROOT_INO], |r| {
            r.get(0)
        })
        .unwrap()
}

fn root(e: &SqliteEngine) -> InodeRow {
    e.read().unwrap().get_inode(ROOT_INO).unwrap().unwrap()
}

fn put_root_mode(tx: &mut dyn Txn, mode: u32) {
    let mut row = tx.get_inode(ROOT_INO).unwrap().unwrap();
    row.attr.mode = mode;
    tx.put_inode(&row).unwrap();
}

/// Sets the root's mode in a grouped transaction of its own.
fn commit_root_mode(e: &SqliteEngine, mode: u32) {
    let mut tx = e.write().unwrap();
    put_root_mode(tx.as_mut(), mode);
    tx.commit().unwrap();
}

#[test]
fn reads_on_the_write_connection_come_from_the_cache() {
    let (_db, e) = engine("cache-hit");
    commit_root_mode(&e, 0o700);
    // A read of the row in the group is answered from the cache and leaves it pending; a scan
    // commits the group, which writes it.
    assert_eq!(root(&e).attr.mode, 0o700);
    assert_ne!(stored_root(&e), 0o700);
    assert_eq!(
        e.read_scan()
            .unwrap()
            .get_inode(ROOT_INO)
            .unwrap()
            .unwrap()
            .attr
            .mode,
        0o700
    );
    assert_eq!(stored_root(&e), 0o700);
    // Changed behind the cache's back, which nothing in the engine does: the cached row wins,
    // so the read did not reach SQLite.
    e.writer
        .lock()
        .unwrap()
        .conn
        .execute("UPDATE inodes SET mode = 83 WHERE ino = 1", [])
        .unwrap();
    assert_eq!(root(&e).attr.mode, 0o700);
    assert_eq!(stored_root(&e), 0o123); // 83
}

#[test]
fn an_undone_grouped_write_leaves_no_row_behind() {
    let (_db, e) = engine("cache-abort");
    let before = root(&e);
    let mut tx = e.write().unwrap();
    put_root_mode(tx.as_mut(), 0o700);
    assert_eq!(tx.get_inode(ROOT_INO).unwrap().unwrap().attr.mode, 0o700);
    drop(tx); // the transaction fails: the row it held goes back
    assert_eq!(root(&e), before);
    assert_eq!(stored_root(&e), before.attr.mode);
}

#[test]
fn an_undone_durable_write_leaves_no_row_behind() {
    let (_db, e) = engine("cache-rollback");
    let before = root(&e);
    let mut tx = e.write_durable().unwrap();
    put_root_mode(tx.as_mut(), 0o711);
    drop(tx);
    assert_eq!(root(&e), before);
}

#[test]
fn a_failed_statement_empties_the_cache() {
    let (_db, e) = engine("cache-full");
    limit_pages(&e, 2);
    let mut tx = e.write().unwrap();
    put_root_mode(tx.as_mut(), 0o700);
    let mut row = tx.get_inode(ROOT_INO).unwrap().unwrap();
    let mut failed = false;
    for ino in 2..10_000 {
        row.attr.ino = ino;
        row.target = Some(vec![b'x'; 2048]);
        if tx.put_inode(&row).is_err() {
            failed = true;
            break;
        }
    }
    assert!(failed, "the page limit was never reached");
    drop(tx);
    {
        let w = e.writer.lock().unwrap();
        assert_eq!(w.rows.borrow().inodes.len(), 0);
    }
    assert_eq!(root(&e).attr.mode, 0o755);
    assert_eq!(stored_root(&e), 0o755);
    assert!(e.read().unwrap().get_inode(2).unwrap().is_none());
}

#[test]
fn the_cache_stays_within_its_capacity() {
    let (_db, e) = engine("cache-cap");
    let mut tx = e.write().unwrap();
    let mut row = tx.get_inode(ROOT_INO).unwrap().unwrap();
    for ino in 2..10_000 {
        row.attr.ino = ino;
        tx.put_inode(&row).unwrap();
    }
    tx.commit().unwrap();
    let held = e.writer.lock().unwrap().rows.borrow().inodes.len();
    assert!(held > 0 && held <= 4096, "{held} rows held");
    // Rows that fell out are read from SQLite.
    assert_eq!(e.read().unwrap().get_inode(2).unwrap().unwrap().attr.ino, 2);
}

/// A regular file's row named `name` in the root, made in a transaction of its own.
fn make_file(e: &SqliteEngine, ino: u64, name: &[u8]) -> InodeRow {
    let mut tx = e.write().unwrap();
    let mut row = tx.get_inode(ROOT_INO).unwrap().unwrap();
    row.attr.ino = ino;
    row.attr.kind = crate::engine::FileKind::File;
    row.attr.mode = 0o644;
    row.attr.nlink = 1;
    row.parent = ROOT_INO;
    tx.put_inode(&row).unwrap();
    let entry = crate::engine::Dentry {
        ino,
        kind: crate::engine::FileKind::File,
    };
    tx.put_dentry(ROOT_INO, name, entry).unwrap();
    tx.commit().unwrap();
    row
}

fn listed_mode(tx: &mut dyn Txn) -> u32 {
    let listed = tx.list_dentries_with_inodes(ROOT_INO, None, 10).unwrap();
    listed[0].2.as_ref().unwrap().attr.mode
}

#[test]
fn a_grouped_row_write_reaches_sqlite_with_the_group() {
    let (db, e) = engine("cache-pending");
    let before = stored_root(&e);
    commit_root_mode(&e, 0o700);
    // Committed by its intent-log record; SQLite gets the row with the group.
    assert_eq!(stored_root(&e), before);
    e.checkpoint().unwrap();
    assert_eq!(stored_root(&e), 0o700);

    commit_root_mode(&e, 0o711);
    e.close().unwrap();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(root(&e).attr.mode, 0o711);
}

#[test]
fn a_killed_process_keeps_a_row_that_was_only_pending() {
    let (db, e) = engine("cache-kill");
    commit_root_mode(&e, 0o701);
    e.abandon();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(root(&e).attr.mode, 0o701);
    assert_eq!(stored_root(&e), 0o701);
}

#[test]
fn statements_see_pending_rows() {
    let (_db, e) = engine("cache-listing");
    let mut file = make_file(&e, 2, b"f");
    file.attr.mode = 0o600;
    let mut tx = e.write().unwrap();
    tx.put_inode(&file).unwrap();
    tx.commit().unwrap();
    // A read in the group joins the rows in one statement.
    assert_eq!(listed_mode(e.read().unwrap().as_mut()), 0o600);
    // So does a later statement of the transaction that holds the row.
    file.attr.mode = 0o640;
    let mut tx = e.write().unwrap();
    tx.put_inode(&file).unwrap();
    assert_eq!(listed_mode(tx.as_mut()), 0o640);
    tx.commit().unwrap();
    // And a scan, on a read connection, after the group is committed.
    assert_eq!(listed_mode(e.read_scan().unwrap().as_mut()), 0o640);
}

#[test]
fn an_undone_transaction_leaves_earlier_rows_pending() {
    let (_db, e) = engine("cache-undo");
    make_file(&e, 2, b"f");
    commit_root_mode(&e, 0o700);
    // The next transaction's first statement writes the pending root under its savepoint;
    // undoing the transaction undoes that write, so the root must be pending again.
    let mut tx = e.write().unwrap();
    let mut other = tx.get_inode(2).unwrap().unwrap();
    other.attr.mode = 0o600;
    tx.put_inode(&other).unwrap();
    tx.delete_dentry(ROOT_INO, b"f").unwrap();
    assert_eq!(tx.count_dentries(ROOT_INO).unwrap(), 0);
    drop(tx);
    e.checkpoint().unwrap();
    assert_eq!(stored_root(&e), 0o700);
    assert_eq!(root(&e).attr.mode, 0o700);
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_inode(2).unwrap().unwrap().attr.mode, 0o644);
    assert_eq!(listed_mode(tx.as_mut()), 0o644);
}

/// The root's entry `name` and counter `counter` as SQLite holds them, read past the cache.
fn stored_name_and_counter(e: &SqliteEngine, name: &[u8], counter: &str) -> (bool, Option<i64>) {
    let w = e.writer.lock().unwrap();
    let named = w
        .conn
        .query_row(
            "SELECT count(*) FROM dentries WHERE parent = ?1 AND name = ?2",
            rusqlite::params![ROOT_INO, name],
            |r| r.get::<_, i64>(0),
        )
        .unwrap()
        > 0;
    let value = w
        .conn
        .query_row(
            "SELECT value FROM counters WHERE name = ?1",
            [counter],
            |r| r.get(0),
        )
        .optional()
        .unwrap();
    (named, value)
}

/// Names `name` in the root for inode `ino` and sets counter `c` to `value`, in a grouped
/// transaction of its own that first reads both, as a CREATE does.
fn commit_name_and_counter(e: &SqliteEngine, name: &[u8], ino: u64, value: u64) {
    let mut tx = e.write().unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, name).unwrap(), None);
    assert!(tx.get_counter("c").unwrap() < value);
    let entry = crate::engine::Dentry {
        ino,
        kind: crate::engine::FileKind::File,
    };
    tx.put_dentry(ROOT_INO, name, entry).unwrap();
    tx.set_counter("c", value).unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, name).unwrap(), Some(entry));
    assert_eq!(tx.get_counter("c").unwrap(), value);
    tx.commit().unwrap();
}

#[test]
fn names_and_counters_wait_in_the_cache_and_survive_a_kill() {
    let (db, e) = engine("cache-names");
    commit_name_and_counter(&e, b"n", 2, 7);
    // Committed by the intent-log record alone: no statement wrote either, not even inside the
    // open group, which the write connection would see.
    assert_eq!(stored_name_and_counter(&e, b"n", "c"), (false, None));
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, b"n").unwrap().unwrap().ino, 2);
    assert_eq!(tx.get_counter("c").unwrap(), 7);
    drop(tx);
    e.abandon();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(stored_name_and_counter(&e, b"n", "c"), (true, Some(7)));
    assert_eq!(
        e.read()
            .unwrap()
            .get_dentry(ROOT_INO, b"n")
            .unwrap()
            .unwrap()
            .ino,
        2
    );
}

#[test]
fn statements_see_pending_names_and_counters() {
    let (_db, e) = engine("cache-names-listing");
    commit_name_and_counter(&e, b"n", 2, 3);
    // A listing is a statement: the pending rows are written into the group before it.
    let mut tx = e.read().unwrap();
    assert_eq!(tx.count_dentries(ROOT_INO).unwrap(), 1);
    drop(tx);
    assert_eq!(stored_name_and_counter(&e, b"n", "c"), (true, Some(3)));
}

#[test]
fn an_undone_transaction_takes_back_its_names_and_counters() {
    let (_db, e) = engine("cache-names-undo");
    commit_name_and_counter(&e, b"a", 2, 1);
    let mut tx = e.write().unwrap();
    let entry = crate::engine::Dentry {
        ino: 3,
        kind: crate::engine::FileKind::File,
    };
    tx.put_dentry(ROOT_INO, b"b", entry).unwrap();
    tx.set_counter("c", 2).unwrap();
    assert!(tx.delete_dentry(ROOT_INO, b"a").unwrap());
    assert_eq!(tx.get_dentry(ROOT_INO, b"a").unwrap(), None);
    // A statement: writes every pending row under the transaction's savepoint first.
    assert_eq!(tx.count_dentries(ROOT_INO).unwrap(), 1);
    drop(tx);
    // The earlier transaction's rows are back (pending again), the undone one's gone.
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, b"a").unwrap().unwrap().ino, 2);
    assert_eq!(tx.get_dentry(ROOT_INO, b"b").unwrap(), None);
    assert_eq!(tx.get_counter("c").unwrap(), 1);
    drop(tx);
    e.checkpoint().unwrap();
    assert_eq!(stored_name_and_counter(&e, b"a", "c"), (true, Some(1)));
    assert_eq!(stored_name_and_counter(&e, b"b", "c"), (false, Some(1)));
}

#[test]
fn reads_of_tables_never_held_leave_the_rows_pending() {
    let (_db, e) = engine("cache-names-unheld");
    commit_name_and_counter(&e, b"n", 2, 5);
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_prop(2, "compression").unwrap(), None);
    assert_eq!(tx.list_props(2).unwrap(), Vec::new());
    assert_eq!(tx.get_xattr(2, b"user.a").unwrap(), None);
    assert!(tx.list_xattrs(2).unwrap().is_empty());
    assert_eq!(tx.get_record(2, 0).unwrap(), None);
    assert!(tx.list_records(2, 0..8).unwrap().is_empty());
    drop(tx);
    assert_eq!(stored_name_and_counter(&e, b"n", "c"), (false, None));
}

#[test]
fn an_unlink_waits_in_the_cache_and_survives_a_kill() {
    let (db, e) = engine("cache-unlink");
    make_file(&e, 2, b"f");
    e.checkpoint().unwrap();
    let mut tx = e.write().unwrap();
    assert!(tx.delete_dentry(ROOT_INO, b"f").unwrap());
    assert!(tx.delete_inode(2).unwrap());
    assert!(!tx.delete_dentry(ROOT_INO, b"f").unwrap());
    assert!(!tx.delete_inode(2).unwrap());
    put_root_mode(tx.as_mut(), 0o700);
    tx.commit().unwrap();
    // Committed by the intent-log record alone: SQLite still has both rows.
    assert_eq!(stored_name_and_counter(&e, b"f", "c"), (true, None));
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, b"f").unwrap(), None);
    assert_eq!(tx.get_inode(2).unwrap(), None);
    drop(tx);
    e.abandon();
    let e = SqliteEngine::open(&db.0, SqliteOptions::default()).unwrap();
    assert_eq!(stored_name_and_counter(&e, b"f", "c"), (false, None));
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_inode(2).unwrap(), None);
    assert_eq!(tx.get_inode(ROOT_INO).unwrap().unwrap().attr.mode, 0o700);
}

#[test]
fn an_undone_unlink_puts_the_name_and_the_inode_back() {
    let (_db, e) = engine("cache-unlink-undo");
    make_file(&e, 2, b"f");
    let mut tx = e.write().unwrap();
    assert!(tx.delete_dentry(ROOT_INO, b"f").unwrap());
    assert!(tx.delete_inode(2).unwrap());
    drop(tx);
    let mut tx = e.read().unwrap();
    assert_eq!(tx.get_dentry(ROOT_INO, b"f").unwrap().unwrap().ino, 2);
    assert_eq!(tx.get_inode(2).unwrap().unwrap().attr.ino, 2);
    assert_eq!(listed_mode(tx.as_mut()), 0o644);
}

#[test]
fn a_transaction_undone_before_any_statement_keeps_the_rows_sqlite_has() {
    // A SETATTR of a file just unlinked fails on its first read, from the cache. Undoing it
    // must cost only its own changes: no statement ran, so SQLite's rows did not go back, and
    // the cache keeps what it read. Forgetting them made each such failure scan the cache.
    let (_db, e) = engine("cache-undo-early");
    for ino in 2..40 {
        make_file(&e, ino, format!("f{ino}").as_bytes());
    }
    e.checkpoint().unwrap(); // the group commits: SQLite has every row, none is pending
    let held = || {
        let w = e.writer.lock().unwrap();
        let rows = w.rows.borrow();
        (rows.inodes.len(), rows.names.len(), rows.pending_len())
    };
    let before = held();
    assert!(
        before.0 >= 39 && before.1 >= 38 && before.2 == 0,
        "{before:?}"
    );
    let mut tx = e.write().unwrap();
    put_root_mode(tx.as_mut(), 0o700);
    assert!(tx.get_inode(1_000).unwrap().is_none());
    drop(tx);
    assert_eq!(root(&e).attr.mode, 0o755);
    assert_eq!(stored_root(&e), 0o755);
    let after = held();
    assert_eq!((after.0, after.1, after.2), (before.0 + 1, before.1, 0));
}
