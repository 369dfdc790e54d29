//! What garbage collection and scrub use: listing, rolling and removing segments, scanning a
//! segment's entries, rebuilding the live accounting, disk usage.

mod common;

use std::sync::Arc;

use common::{config, payload, sim_store, TempDir};
use presso_store::segment::{segment_file_name, ENTRY_HEADER_LEN, SEGMENT_HEADER_LEN};
use presso_store::{Committed, DamagedEntry, EnvelopeError, Location, Store, StoreError};

#[test]
fn roll_seals_and_syncs_the_open_segment() {
    let (sim, store) = sim_store(1 << 20);
    assert_eq!(store.segments(), vec![1]);
    assert_eq!(store.current_segment(), 1);
    let a = store.append(&payload(1, 300)).unwrap();
    assert_eq!(store.roll().unwrap(), 1);
    assert_eq!(store.current_segment(), 2);
    assert_eq!(store.segments(), vec![1, 2]);
    assert_eq!(store.durable_position().segment, 1);
    let b = store.append(&payload(2, 300)).unwrap();
    assert_eq!(b.segment, 2);
    // An empty segment rolls too.
    assert_eq!(store.roll().unwrap(), 2);
    assert_eq!(store.roll().unwrap(), 3);
    assert_eq!(store.segments(), vec![1, 2, 3, 4]);
    // Nothing was synced explicitly, yet the rolled entries survive a crash.
    drop(store);
    sim.crash();
    let store = Store::open(Arc::new(sim), config(1 << 20), &Committed::default()).unwrap();
    assert_eq!(store.read(a).unwrap(), payload(1, 300));
    assert_eq!(store.read(b).unwrap(), payload(2, 300));
    assert_eq!(store.current_segment(), 4);
}

#[test]
fn roll_after_a_failed_sync_is_refused() {
    let (sim, store) = sim_store(1 << 20);
    store.append(b"x").unwrap();
    sim.fail_next_sync(libc::EIO);
    assert!(store.sync().is_err());
    assert!(matches!(store.roll(), Err(StoreError::Failed { .. })));
    assert_eq!(store.segments(), vec![1]);
}

#[test]
fn remove_segment_refuses_the_open_one_and_removes_durably() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 100)).unwrap();
    match store.remove_segment(1) {
        Err(e @ StoreError::CurrentSegment { segment: 1 }) => assert_eq!(e.errno(), libc::EBUSY),
        other => panic!("{other:?}"),
    }
    store.roll().unwrap();
    let b = store.append(&payload(2, 100)).unwrap();
    store.roll().unwrap();
    let c = store.append(&payload(3, 100)).unwrap();
    store.sync().unwrap();
    let before = store.disk_usage();
    store.remove_segment(1).unwrap();
    assert_eq!(
        store.disk_usage(),
        before - SEGMENT_HEADER_LEN - a.entry_len()
    );
    assert_eq!(sim.contents(&segment_file_name(1)), None);
    assert_eq!(store.segments(), vec![2, 3]);
    match store.read(a) {
        Err(e @ StoreError::NoSuchSegment { segment: 1 }) => assert_eq!(e.errno(), libc::EIO),
        other => panic!("{other:?}"),
    }
    assert!(matches!(
        store.remove_segment(1),
        Err(StoreError::NoSuchSegment { segment: 1 })
    ));
    assert!(matches!(
        store.remove_segment(77),
        Err(StoreError::NoSuchSegment { segment: 77 })
    ));
    assert!(matches!(
        store.entries(1),
        Err(StoreError::NoSuchSegment { .. })
    ));
    assert!(store.segment_stats(1).is_none());
    // A gap in the numbers is fine on reopen, and after a crash.
    store.remove_segment(2).unwrap();
    drop(store);
    sim.crash();
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    assert_eq!(store.segments(), vec![3]);
    assert_eq!(store.read(c).unwrap(), payload(3, 100));
    assert!(matches!(
        store.read(b),
        Err(StoreError::NoSuchSegment { segment: 2 })
    ));
    assert_eq!(store.roll().unwrap(), 3);
    assert_eq!(store.append(b"next").unwrap().segment, 4);
}

#[test]
fn remove_segment_on_real_files() {
    let tmp = TempDir::new("remove");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    let a = store.append(&payload(1, 1000)).unwrap();
    store.roll().unwrap();
    store.append(&payload(2, 1000)).unwrap();
    let path = tmp.path().join(segment_file_name(1));
    assert_eq!(
        std::fs::metadata(&path).unwrap().len(),
        SEGMENT_HEADER_LEN + a.entry_len()
    );
    let files: u64 = [1, 2]
        .iter()
        .map(|&n| {
            std::fs::metadata(tmp.path().join(segment_file_name(n)))
                .unwrap()
                .len()
        })
        .sum();
    assert_eq!(store.disk_usage(), files);
    store.remove_segment(1).unwrap();
    assert!(!path.exists());
    drop(store);
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    assert_eq!(store.segments(), vec![2]);
}

#[test]
fn entries_lists_what_was_appended() {
    let (_sim, store) = sim_store(4096);
    let mut locs = Vec::new();
    for i in 0..60u64 {
        locs.push(store.append(&payload(i, (i as usize * 53) % 700)).unwrap());
    }
    let segments = store.segments();
    assert!(segments.len() > 3);
    let mut listed = Vec::new();
    for &n in &segments {
        let e = store.entries(n).unwrap();
        assert_eq!(e.segment, n);
        assert!(e.damaged.is_empty());
        assert_eq!(e.total_bytes, store.segment_stats(n).unwrap().total_bytes);
        assert_eq!(
            e.total_bytes,
            e.entries.iter().map(Location::entry_len).sum::<u64>()
        );
        listed.extend(e.entries);
    }
    assert_eq!(listed, locs);
    assert!(matches!(
        store.entries(999),
        Err(StoreError::NoSuchSegment { segment: 999 })
    ));
}

#[test]
fn entries_reports_damage_and_goes_on() {
    let (sim, store) = sim_store(1 << 20);
    let locs: Vec<Location> = (0..6u64)
        .map(|i| store.append(&payload(i, 200)).unwrap())
        .collect();
    store.sync().unwrap();
    let name = segment_file_name(1);
    let mut bytes = sim.contents(&name).unwrap();
    // A payload byte of entry 1, the length field of entry 3 (its envelope header no longer
    // verifies, so the scan must find entry 4 by itself).
    bytes[locs[1].offset as usize + ENTRY_HEADER_LEN + 7] ^= 0x04;
    bytes[locs[3].offset as usize + 5] ^= 0x01;
    sim.set_contents(&name, &bytes);
    let e = store.entries(1).unwrap();
    assert_eq!(e.entries, vec![locs[0], locs[2], locs[4], locs[5]]);
    assert_eq!(
        e.damaged,
        vec![
            DamagedEntry {
                offset: locs[1].offset,
                len: locs[1].entry_len(),
                error: EnvelopeError::BadPayloadCrc,
            },
            DamagedEntry {
                offset: locs[3].offset,
                len: locs[3].entry_len(),
                error: EnvelopeError::BadHeaderCrc,
            },
        ]
    );
    // Garbage after the last entry of a sealed segment (sealed segments are not scanned at
    // open) is one damaged stretch, up to the end.
    store.roll().unwrap();
    drop(store);
    let mut bytes = sim.contents(&name).unwrap();
    let garbage_at = bytes.len() as u64;
    bytes.extend_from_slice(&[0xAB; 50]);
    sim.set_contents(&name, &bytes);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    let e = store.entries(1).unwrap();
    assert_eq!(e.entries.len(), 4);
    assert_eq!(
        e.damaged.last(),
        Some(&DamagedEntry {
            offset: garbage_at,
            len: 50,
            error: EnvelopeError::BadMagic,
        })
    );
    assert_eq!(e.total_bytes, garbage_at + 50 - SEGMENT_HEADER_LEN);
    // A damaged segment header costs no entry: every entry verifies on its own, so the scan
    // still lists them all, and the next open reports the header.
    let mut bytes = sim.contents(&name).unwrap();
    bytes[20] ^= 1;
    sim.set_contents(&name, &bytes);
    assert_eq!(store.entries(1).unwrap().entries, e.entries);
    drop(store);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    assert_eq!(store.entries(1).unwrap().entries, e.entries);
    let bad: Vec<u64> = store
        .recovery()
        .bad_headers
        .iter()
        .map(|(n, _)| *n)
        .collect();
    assert_eq!(bad, vec![1]);
}

#[test]
fn set_live_bytes_rebuilds_the_dead_count() {
    let (_sim, store) = sim_store(1 << 20);
    let a = store.append(&[1u8; 52]).unwrap();
    let b = store.append(&[2u8; 252]).unwrap();
    let total = a.entry_len() + b.entry_len();
    assert_eq!(total, 400);
    store.set_live_bytes(1, b.entry_len()).unwrap();
    let s = store.segment_stats(1).unwrap();
    assert_eq!((s.total_bytes, s.dead_bytes), (400, 100));
    assert!((store.live_fraction(1).unwrap() - 0.75).abs() < 1e-9);
    // The caller's formula: payload bytes plus one envelope header per entry.
    store
        .set_live_bytes(1, 52 + 252 + 2 * presso_store::ENTRY_HEADER_LEN as u64)
        .unwrap();
    assert_eq!(store.segment_stats(1).unwrap().dead_bytes, 0);
    store.set_live_records(1, 1, 252).unwrap();
    assert_eq!(store.segment_stats(1).unwrap().dead_bytes, 100);
    store.set_live_bytes(1, 0).unwrap();
    assert_eq!(store.live_fraction(1), Some(0.0));
    match store.set_live_bytes(1, total + 1) {
        Err(
            e @ StoreError::LiveBytesTooLarge {
                segment: 1,
                live: 401,
                total: 400,
            },
        ) => assert_eq!(e.errno(), libc::EINVAL),
        other => panic!("{other:?}"),
    }
    assert_eq!(
        store.live_fraction(1),
        Some(0.0),
        "unchanged by the refusal"
    );
    assert!(matches!(
        store.set_live_bytes(5, 0),
        Err(StoreError::NoSuchSegment { segment: 5 })
    ));
    // Marking dead on top of a rebuilt count.
    store.set_live_bytes(1, total).unwrap();
    store.mark_dead(a).unwrap();
    assert_eq!(store.segment_stats(1).unwrap().dead_bytes, 100);
}

#[test]
fn disk_usage_counts_every_segment_file() {
    let (sim, store) = sim_store(2048);
    assert_eq!(store.disk_usage(), SEGMENT_HEADER_LEN);
    for i in 0..40u64 {
        store.append(&payload(i, 300)).unwrap();
    }
    let files: u64 = store
        .segments()
        .iter()
        .map(|&n| sim.contents(&segment_file_name(n)).unwrap().len() as u64)
        .sum();
    assert_eq!(store.disk_usage(), files);
    assert_eq!(
        store.disk_usage(),
        store
            .all_segment_stats()
            .iter()
            .map(|s| s.total_bytes + SEGMENT_HEADER_LEN)
            .sum::<u64>()
    );
}

/// A segment file shorter than its header (damage, kept as it is at open: sealed, or the last
/// one with committed entries) holds no entry bytes: its scan, its stats and its live accounting
/// say so instead of underflowing.
#[test]
fn a_segment_shorter_than_its_header_holds_no_entry_bytes() {
    for last in [false, true] {
        let (sim, store) = sim_store(1 << 20);
        store.append(&payload(1, 100)).unwrap();
        store.roll().unwrap();
        let second = store.append(&payload(2, 100)).unwrap();
        store.sync().unwrap();
        drop(store);
        let short = if last { 2 } else { 1 };
        let name = segment_file_name(short);
        let bytes = sim.contents(&name).unwrap();
        sim.set_contents(&name, &bytes[..10]);
        let mut committed = Committed::default();
        committed.last_entries.insert(2, second);
        committed.highest_segment = 2;
        let store = Store::open(Arc::new(sim.clone()), config(1 << 20), &committed).unwrap();
        assert!(
            store
                .recovery()
                .bad_headers
                .iter()
                .any(|(n, _)| *n == short),
            "{:?}",
            store.recovery()
        );
        let entries = store.entries(short).unwrap();
        assert_eq!((entries.total_bytes, entries.entries.len()), (0, 0));
        let stats = store.segment_stats(short).unwrap();
        assert_eq!((stats.total_bytes, stats.dead_bytes), (0, 0));
        assert!(store
            .all_segment_stats()
            .iter()
            .all(|s| s.total_bytes < 1 << 20));
        assert_eq!(store.live_fraction(short), Some(1.0));
        store.set_live_bytes(short, 0).unwrap();
        assert!(matches!(
            store.set_live_bytes(short, 1),
            Err(StoreError::LiveBytesTooLarge { .. })
        ));
        // The pool goes on.
        let loc = store.append(b"after").unwrap();
        store.sync().unwrap();
        assert_eq!(store.read(loc).unwrap(), b"after");
    }
}
