//! Recovery against what the metadata committed: bytes below the committed end are never cut,
//! whatever is damaged there; only bytes past it (never acknowledged) may be.

mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{config, payload};
use presso_store::segment::segment_file_name;
use presso_store::{Committed, Location, SimDir, Store, StoreError};

/// The byte of an entry each field class starts at, relative to the entry.
const FIELDS: [(&str, u64); 5] = [
    ("envelope magic", 0),
    ("payload length", 4),
    ("payload CRC-32", 8),
    ("header CRC-32", 12),
    ("payload", 20),
];

/// A pool with five committed entries in segment 1; returns them.
fn five_entries(sim: &SimDir) -> Vec<Location> {
    let store = Store::create(Arc::new(sim.clone()), Default::default(), config(1 << 20)).unwrap();
    let locs = (0..5)
        .map(|i| store.append(&payload(i, 200)).unwrap())
        .collect();
    store.sync().unwrap();
    locs
}

fn committed_up_to(loc: &Location) -> Committed {
    Committed {
        last_entries: BTreeMap::from([(loc.segment, *loc)]),
        highest_segment: loc.segment,
    }
}

fn flip(sim: &SimDir, segment: u64, at: u64) -> Vec<u8> {
    let name = segment_file_name(segment);
    let mut bytes = sim.contents(&name).unwrap();
    bytes[at as usize] ^= 0x5a;
    sim.set_contents(&name, &bytes);
    bytes
}

/// A flipped byte in any field of a committed entry of the last segment, first, middle or last:
/// the segment keeps every byte, exactly that entry reads as corrupt, the others read back, and
/// new entries go to a new segment.
#[test]
fn damage_below_the_committed_end_is_kept_not_cut() {
    for (field, at) in FIELDS {
        for victim in [0usize, 2, 4] {
            let sim = SimDir::new();
            let locs = five_entries(&sim);
            let damaged = flip(&sim, 1, locs[victim].offset + at);
            let what = format!("{field} of entry {victim}");
            let store = Store::open(
                Arc::new(sim.clone()),
                config(1 << 20),
                &committed_up_to(&locs[4]),
            )
            .unwrap_or_else(|e| panic!("{what}: open refused: {e}"));
            assert_eq!(
                sim.contents(&segment_file_name(1)).unwrap(),
                damaged,
                "{what}: the segment changed"
            );
            for (i, loc) in locs.iter().enumerate() {
                match store.read(*loc) {
                    Ok(p) if i != victim => assert_eq!(p, payload(i as u64, 200), "{what}"),
                    Err(StoreError::CorruptEntry { offset, .. }) if i == victim => {
                        assert_eq!(offset, loc.offset, "{what}")
                    }
                    other => panic!("{what}: entry {i} read {:?}", other.map(|p| p.len())),
                }
            }
            let report = store.recovery();
            if report.stopped_at.is_some() {
                assert!(report.kept_damage, "{what}: {report:?}");
            }
            assert_eq!(report.discarded_bytes, 0, "{what}");
            let new = store.append(b"after").unwrap();
            store.sync().unwrap();
            assert_eq!(store.read(new).unwrap(), b"after");
            if report.kept_damage {
                assert_eq!(new.segment, 2, "{what}: appended into the damaged segment");
            }
        }
    }
}

/// Past the committed end, what does not verify is a torn tail of entries nobody was told
/// about, and it is cut: the committed entries before it stay.
#[test]
fn damage_past_the_committed_end_is_cut() {
    let sim = SimDir::new();
    let locs = five_entries(&sim);
    flip(&sim, 1, locs[3].offset);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &committed_up_to(&locs[2]),
    )
    .unwrap();
    let report = store.recovery();
    assert!(!report.kept_damage);
    assert_eq!(
        report.discarded_bytes,
        2 * locs[3].entry_len(),
        "{report:?}"
    );
    for (i, loc) in locs[..3].iter().enumerate() {
        assert_eq!(store.read(*loc).unwrap(), payload(i as u64, 200));
    }
    assert_eq!(store.append_position().segment, 1);
}

/// A segment file the metadata points into is missing (the last ones deleted): new segments are
/// numbered above it, so its number never names other entries.
#[test]
fn a_missing_segment_number_is_never_reused() {
    let sim = SimDir::new();
    let locs = five_entries(&sim);
    let committed = Committed {
        last_entries: BTreeMap::from([(1, locs[4])]),
        highest_segment: 3,
    };
    let store = Store::open(Arc::new(sim.clone()), config(1 << 20), &committed).unwrap();
    assert_eq!(store.append(b"new").unwrap().segment, 4);
    assert!(matches!(
        store.read(Location {
            segment: 3,
            offset: 40,
            len: 200
        }),
        Err(StoreError::NoSuchSegment { .. })
    ));
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(store.read(*loc).unwrap(), payload(i as u64, 200));
    }
}

/// A damaged header on a segment before the last does not stop the open: the segment is
/// reported and its entries read as before.
#[test]
fn a_damaged_sealed_header_is_reported_and_its_entries_read() {
    let sim = SimDir::new();
    let locs = five_entries(&sim);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &committed_up_to(&locs[4]),
    )
    .unwrap();
    store.roll().unwrap();
    drop(store);
    for at in [0u64, 4, 9, 20, 33] {
        let damaged = flip(&sim, 1, at);
        let store = Store::open(
            Arc::new(sim.clone()),
            config(1 << 20),
            &committed_up_to(&locs[4]),
        )
        .unwrap_or_else(|e| panic!("header byte {at}: open refused: {e}"));
        assert_eq!(store.recovery().bad_headers.len(), 1, "header byte {at}");
        assert_eq!(sim.contents(&segment_file_name(1)).unwrap(), damaged);
        for (i, loc) in locs.iter().enumerate() {
            assert_eq!(store.read(*loc).unwrap(), payload(i as u64, 200));
        }
        drop(store);
        flip(&sim, 1, at);
    }
}
