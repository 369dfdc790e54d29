//! The memory engine's injected I/O faults: a failed commit is an EIO-typed error that leaves no
//! trace (durable state included), a refused read is one too, and clearing the faults brings
//! everything back.

use presso_meta::memory::MemoryEngine;
use presso_meta::{MetaError, MetaStore, NewNode, Timespec, TxgOp, ROOT_INO};

fn store(engine: &MemoryEngine) -> MetaStore {
    let store = MetaStore::new(Box::new(engine.handle()));
    store.init().unwrap();
    store
}

fn size_op(ino: u64, size: u64) -> TxgOp {
    TxgOp::SetSize {
        ino,
        size,
        mtime: Timespec::now(),
    }
}

#[test]
fn failed_commits_leave_no_trace_until_cleared() {
    let engine = MemoryEngine::new();
    let s = store(&engine);
    engine.fail_commits();
    let before = engine.fault_stats();
    match s.make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0)) {
        Err(e @ MetaError::Io(_)) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("create under failing commits: {other:?}"),
    }
    assert_eq!(s.lookup(ROOT_INO, b"f"), Err(MetaError::NotFound));
    let after = engine.fault_stats();
    assert_eq!(after.failed_commits - before.failed_commits, 1);
    assert!(after.commits > before.commits);
    engine.clear_faults();
    let f = s
        .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0))
        .unwrap();
    assert_eq!(s.lookup(ROOT_INO, b"f").unwrap().ino, f.ino);
}

#[test]
fn a_failed_durable_commit_keeps_the_durable_state() {
    let engine = MemoryEngine::simulated();
    let s = store(&engine);
    let f = s
        .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    s.apply_txg(&[size_op(f, 10)], true).unwrap();
    engine.fail_durable_commits();
    assert!(matches!(
        s.apply_txg(&[size_op(f, 20)], true),
        Err(MetaError::Io(_))
    ));
    assert_eq!(s.getattr(f).unwrap().size, 10, "rolled back");
    // Ordinary commits still work.
    s.apply_txg(&[size_op(f, 30)], false).unwrap();
    assert_eq!(s.getattr(f).unwrap().size, 30);
    engine.crash(false);
    let s = MetaStore::new(Box::new(engine.handle()));
    assert_eq!(
        s.getattr(f).unwrap().size,
        10,
        "the durable state as before"
    );
    engine.clear_faults();
    s.apply_txg(&[size_op(f, 40)], true).unwrap();
    engine.crash(false);
    let s = MetaStore::new(Box::new(engine.handle()));
    assert_eq!(s.getattr(f).unwrap().size, 40);
}

#[test]
fn failed_reads_are_eio_and_are_counted() {
    let engine = MemoryEngine::new();
    let s = store(&engine);
    engine.fail_reads();
    match s.getattr(ROOT_INO) {
        Err(e @ MetaError::Io(_)) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("getattr under failing reads: {other:?}"),
    }
    let stats = engine.fault_stats();
    assert_eq!(stats.failed_reads, 1);
    assert!(stats.reads >= 1);
    engine.clear_faults();
    assert_eq!(s.getattr(ROOT_INO).unwrap().ino, ROOT_INO);
}
