//! Tests of the write connection's inode cache: what it holds is what the connection reads,
//! through commits, rollbacks and failed statements.

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

#[test]
fn reads_on_the_write_connection_come_from_the_cache() {
    let (_db, e) = engine("cache-hit");
    let mut tx = e.write().unwrap();
    put_root_mode(tx.as_mut(), 0o700);
    tx.commit().unwrap();
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
    drop(tx); // the transaction fails: its savepoint is rolled back
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
    assert_eq!(e.writer.lock().unwrap().inodes.len(), 0);
    assert_eq!(root(&e).attr.mode, 0o755);
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
    let held = e.writer.lock().unwrap().inodes.len();
    assert!(held > 0 && held <= 4096, "{held} rows held");
    // Rows that fell out are read from SQLite.
    assert_eq!(e.read().unwrap().get_inode(2).unwrap().unwrap().attr.ino, 2);
}
