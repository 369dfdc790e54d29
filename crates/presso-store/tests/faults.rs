//! Host I/O errors under the store, injected by the simulated directory: failed reads of one
//! entry or of everything, writes failing until the fault is cleared, and a failed sync that
//! forgets the writes it did not make durable (what Linux may do after a failed fsync).

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{config, payload, sim_store};
use presso_store::segment::{segment_file_name, SEGMENT_HEADER_LEN};
use presso_store::{Committed, Location, Store, StoreError};

/// The metadata committed everything up to and including `last`.
fn committed_through(last: &Location) -> Committed {
    Committed {
        last_entries: BTreeMap::from([(last.segment, *last)]),
        highest_segment: last.segment,
    }
}

#[test]
fn a_failed_read_fails_that_entry_only_and_reads_again_once_cleared() {
    let (sim, store) = sim_store(1 << 20);
    let locs: Vec<_> = (0..3)
        .map(|i| store.append(&payload(i, 300)).unwrap())
        .collect();
    store.sync().unwrap();
    let b = locs[1];
    sim.fail_reads_in(
        &segment_file_name(1),
        b.offset + 20..b.offset + 21,
        libc::EIO,
    );
    let before = sim.io_stats();
    match store.read(b) {
        Err(e @ StoreError::Io { op: "read", .. }) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("read of the failing entry: {other:?}"),
    }
    // An I/O error is not corruption: it is not counted as such.
    assert_eq!(store.corruptions(), 0);
    assert_eq!(store.read(locs[0]).unwrap(), payload(0, 300));
    assert_eq!(store.read(locs[2]).unwrap(), payload(2, 300));
    let after = sim.io_stats();
    assert_eq!(after.failed_reads - before.failed_reads, 1);
    assert!(after.reads - before.reads >= 3);

    sim.fail_reads(libc::EIO);
    assert!(matches!(store.read(locs[0]), Err(StoreError::Io { .. })));
    // Appends and syncs do not read.
    store.append(&payload(3, 10)).unwrap();
    store.sync().unwrap();
    sim.clear_faults();
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(store.read(*loc).unwrap(), payload(i as u64, 300));
    }
}

#[test]
fn writes_failing_until_cleared_leave_nothing_visible_and_do_not_poison() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 200)).unwrap();
    let end = store.append_position();
    sim.fail_writes(libc::EIO);
    for i in 0..3 {
        match store.append(&payload(10 + i, 200)) {
            Err(e @ StoreError::Io { op: "write", .. }) => assert_eq!(e.errno(), libc::EIO),
            other => panic!("append {i} under failing writes: {other:?}"),
        }
        assert_eq!(store.append_position(), end);
    }
    assert!(!store.is_failed());
    assert_eq!(sim.io_stats().failed_writes, 3);
    // Nothing past the last good entry, and syncing what is there works.
    store.sync().unwrap();
    assert_eq!(
        sim.contents(&segment_file_name(1)).unwrap().len() as u64,
        end.offset
    );
    sim.clear_faults();
    let b = store.append(&payload(2, 200)).unwrap();
    assert_eq!(b.offset, end.offset);
    store.sync().unwrap();
    assert_eq!(store.read(a).unwrap(), payload(1, 200));
    assert_eq!(store.read(b).unwrap(), payload(2, 200));
}

/// The fsyncgate case: the failed sync dropped the unsynced writes, so a retried sync would
/// succeed with nothing written. The store must keep failing instead, and never hand out the
/// lost entry's bytes.
#[test]
fn after_a_sync_that_forgot_the_writes_no_sync_succeeds_again() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 300)).unwrap();
    let durable = store.sync().unwrap();
    let b = store.append(&payload(2, 300)).unwrap();
    sim.fail_next_sync_forgetting(libc::EIO);
    match store.sync() {
        Err(e @ StoreError::Io { op: "sync", .. }) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("the failing sync: {other:?}"),
    }
    assert!(sim.io_stats().forgotten_writes > 0);
    // The fault is gone: a sync of the file would now succeed. The store's must not.
    for _ in 0..3 {
        assert!(matches!(store.sync(), Err(StoreError::Failed { .. })));
    }
    assert!(matches!(
        store.append(&payload(3, 10)),
        Err(StoreError::Failed { .. })
    ));
    assert_eq!(store.durable_position(), durable);
    // The forgotten entry reads as an error, never as other bytes.
    assert!(store.read(b).is_err());
    assert_eq!(store.read(a).unwrap(), payload(1, 300));
    assert!(matches!(store.close(), Err(StoreError::Failed { .. })));
    drop(store);

    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &committed_through(&a),
    )
    .unwrap();
    assert_eq!(store.read(a).unwrap(), payload(1, 300));
    assert!(store.read(b).is_err());
    let c = store.append(&payload(3, 300)).unwrap();
    store.sync().unwrap();
    assert_eq!(store.read(c).unwrap(), payload(3, 300));
}

/// Closing a store poisoned by a failed sync cuts the open segment back to the last durable
/// position: entries of unknown durability go, everything a sync covered (all the metadata can
/// have committed) stays.
#[test]
fn closing_a_poisoned_store_cuts_back_to_the_durable_end_and_no_further() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 300)).unwrap();
    let durable = store.sync().unwrap();
    assert_eq!(durable.offset, a.offset + a.entry_len());
    let b = store.append(&payload(2, 300)).unwrap();
    sim.fail_next_sync(libc::EIO);
    assert!(store.sync().is_err());
    assert!(store.read(b).is_ok(), "the bytes are still in the cache");
    assert!(store.close().is_err());
    let name = segment_file_name(1);
    assert_eq!(
        sim.contents(&name).unwrap().len() as u64,
        durable.offset,
        "cut to the durable end"
    );
    drop(store);
    sim.crash();
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &committed_through(&a),
    )
    .unwrap();
    assert_eq!(store.recovery().discarded_bytes, 0);
    assert!(!store.recovery().kept_damage);
    assert_eq!(store.read(a).unwrap(), payload(1, 300));
    assert!(store.read(b).is_err());
}

#[test]
fn closing_a_store_poisoned_after_a_roll_keeps_the_sealed_segment_whole() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 300)).unwrap();
    assert_eq!(store.roll().unwrap(), 1);
    let sealed_len = sim.contents(&segment_file_name(1)).unwrap().len();
    let b = store.append(&payload(2, 300)).unwrap();
    assert_eq!(b.segment, 2);
    sim.fail_syncs(libc::EIO);
    assert!(store.sync().is_err());
    sim.clear_faults();
    assert!(store.close().is_err());
    assert_eq!(
        sim.contents(&segment_file_name(1)).unwrap().len(),
        sealed_len
    );
    assert_eq!(
        sim.contents(&segment_file_name(2)).unwrap().len() as u64,
        SEGMENT_HEADER_LEN
    );
    drop(store);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &committed_through(&a),
    )
    .unwrap();
    assert_eq!(store.read(a).unwrap(), payload(1, 300));
    assert!(store.read(b).is_err());
    assert_eq!(store.current_segment(), 2);
}
