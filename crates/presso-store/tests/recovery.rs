mod common;

use std::sync::Arc;

use common::{config, payload, TempDir};
use presso_store::segment::{
    decode_entry, encode_entry, scan_segment, segment_file_name, EntryFormat, EnvelopeError,
    SegmentHeader, ENTRY_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use presso_store::{Committed, SimDir, StorageDir, Store, StoreError};
use proptest::prelude::*;

/// Truncating the last segment to every length inside its last entry (real files): the earlier
/// entries survive, the last one is gone (never returned damaged), and appends go on.
#[test]
fn torn_tail_at_every_byte_of_the_last_entry() {
    let tmp = TempDir::new("torn");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    let sizes = [10usize, 0, 300, 57, 180];
    let locs: Vec<_> = sizes
        .iter()
        .enumerate()
        .map(|(i, &n)| store.append(&payload(i as u64, n)).unwrap())
        .collect();
    store.sync().unwrap();
    drop(store);
    let seg_path = tmp.path().join(segment_file_name(1));
    let full = std::fs::read(&seg_path).unwrap();
    let last = *locs.last().unwrap();
    assert_eq!(full.len() as u64, last.offset + last.entry_len());

    for cut in last.offset..last.offset + last.entry_len() {
        std::fs::write(&seg_path, &full[..cut as usize]).unwrap();
        let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
        let rec = store.recovery();
        assert_eq!(rec.discarded_bytes, cut - last.offset, "cut {cut}");
        assert_eq!(rec.entries, sizes.len() as u64 - 1);
        assert_eq!(std::fs::metadata(&seg_path).unwrap().len(), last.offset);
        for (i, loc) in locs[..locs.len() - 1].iter().enumerate() {
            assert_eq!(store.read(*loc).unwrap(), payload(i as u64, sizes[i]));
        }
        assert!(
            matches!(store.read(last), Err(StoreError::BadLocation { .. })),
            "cut {cut}"
        );
        let again = store.append(b"again").unwrap();
        assert_eq!(again.offset, last.offset);
        assert_eq!(store.read(again).unwrap(), b"again");
        assert_eq!(store.corruptions(), 0);
    }
}

/// Flipping any byte of the last entry: recovery cuts it; nothing invalid is returned.
#[test]
fn damaged_last_entry_at_every_byte() {
    let sim = SimDir::new();
    let store = Store::create(Arc::new(sim.clone()), Default::default(), config(1 << 20)).unwrap();
    let a = store.append(&payload(1, 64)).unwrap();
    let b = store.append(&payload(2, 64)).unwrap();
    store.sync().unwrap();
    drop(store);
    let name = segment_file_name(1);
    let full = sim.contents(&name).unwrap();
    for i in b.offset..b.offset + b.entry_len() {
        let mut bytes = full.clone();
        bytes[i as usize] ^= 0x10;
        sim.set_contents(&name, &bytes);
        let store = Store::open(
            Arc::new(sim.clone()),
            config(1 << 20),
            &Committed::default(),
        )
        .unwrap();
        assert_eq!(store.read(a).unwrap(), payload(1, 64));
        match store.read(b) {
            Err(StoreError::BadLocation { .. }) => {}
            other => panic!("byte {i}: {other:?}"),
        }
    }
}

/// A crash while the segment header was being written: the segment is set up again.
#[test]
fn torn_segment_header_is_rewritten() {
    let sim = SimDir::new();
    let store = Store::create(Arc::new(sim.clone()), Default::default(), config(1 << 20)).unwrap();
    drop(store);
    let name = segment_file_name(1);
    let full = sim.contents(&name).unwrap();
    for cut in 0..=SEGMENT_HEADER_LEN as usize {
        let mut bytes = full[..cut].to_vec();
        if cut == SEGMENT_HEADER_LEN as usize {
            bytes[33] ^= 1; // full length but bad CRC
        }
        sim.set_contents(&name, &bytes);
        let store = Store::open(
            Arc::new(sim.clone()),
            config(1 << 20),
            &Committed::default(),
        )
        .unwrap();
        assert!(store.recovery().reinitialized, "cut {cut}");
        let loc = store.append(b"x").unwrap();
        assert_eq!(store.read(loc).unwrap(), b"x");
    }
    // A damaged header on a segment with entries is damage, not a crash: the file is kept byte
    // for byte and reported, its entries still read, and appends go to a new segment.
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    let entry = store.append(b"entry").unwrap();
    store.sync().unwrap();
    drop(store);
    let mut bytes = sim.contents(&name).unwrap();
    bytes[9] ^= 1;
    sim.set_contents(&name, &bytes);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    let report = store.recovery();
    assert!(report.kept_damage);
    assert_eq!(report.bad_headers.len(), 1, "{:?}", report.bad_headers);
    assert_eq!(report.bad_headers[0].0, 1);
    assert_eq!(
        sim.contents(&name).unwrap(),
        bytes,
        "the damaged segment changed"
    );
    assert_eq!(store.read(entry).unwrap(), b"entry");
    assert_eq!(store.current_segment(), 2);
}

#[test]
fn segment_file_names() {
    use presso_store::segment::parse_segment_file_name as parse;
    assert_eq!(segment_file_name(12), "seg-12.dat");
    assert_eq!(parse("seg-12.dat"), Some(12));
    for bad in [
        "seg-.dat",
        "seg-012.dat",
        "seg-1x.dat",
        "seg-1.dat.tmp",
        "presso.pool",
    ] {
        assert_eq!(parse(bad), None, "{bad}");
    }
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    #[test]
    fn envelope_round_trip(data in proptest::collection::vec(any::<u8>(), 0..2048)) {
        let entry = encode_entry(&data);
        prop_assert_eq!(entry.len(), data.len() + ENTRY_HEADER_LEN);
        prop_assert_eq!(decode_entry(&entry).unwrap(), &data[..]);
        let mut longer = entry.clone();
        longer.push(0);
        prop_assert_eq!(decode_entry(&longer), Err(EnvelopeError::TrailingBytes(1)));
    }

    #[test]
    fn envelope_detects_damage(
        data in proptest::collection::vec(any::<u8>(), 0..512),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
        cut in any::<prop::sample::Index>(),
    ) {
        let entry = encode_entry(&data);
        let mut bad = entry.clone();
        bad[pos.index(entry.len())] ^= 1 << bit;
        prop_assert!(decode_entry(&bad).is_err());
        let cut = cut.index(entry.len());
        let is_truncated = matches!(decode_entry(&entry[..cut]), Err(EnvelopeError::Truncated { .. }));
        prop_assert!(is_truncated);
    }

    /// Random bytes after a valid segment header (sometimes mixed with valid entries): recovery
    /// never panics, and whatever it keeps verifies.
    #[test]
    fn recovery_never_panics_on_random_bytes(
        chunks in proptest::collection::vec(
            prop_oneof![
                proptest::collection::vec(any::<u8>(), 0..300).prop_map(|d| encode_entry(&d)),
                proptest::collection::vec(any::<u8>(), 0..100),
            ],
            0..8,
        ),
        raw_header in any::<bool>(),
    ) {
        let sim = SimDir::new();
        let store = Store::create(Arc::new(sim.clone()), Default::default(), config(1 << 20)).unwrap();
        let uuid = store.header().uuid;
        drop(store);
        let mut bytes = if raw_header {
            Vec::new()
        } else {
            SegmentHeader::new(1, uuid).encode().to_vec()
        };
        for c in &chunks {
            bytes.extend_from_slice(c);
        }
        let name = segment_file_name(1);
        sim.set_contents(&name, &bytes);
        let storage = sim.open(&name).unwrap();
        let scan = scan_segment(storage.as_ref(), SEGMENT_HEADER_LEN, EntryFormat::V2).unwrap();
        prop_assert!(scan.good_end <= bytes.len().max(SEGMENT_HEADER_LEN as usize) as u64);
        if let Ok(store) = Store::open(Arc::new(sim.clone()), config(1 << 20), &Committed::default()) {
            let len = storage_len(&sim, &name);
            if store.recovery().kept_damage {
                // Entries after a damaged header: kept byte for byte, appends elsewhere.
                prop_assert!(raw_header);
                prop_assert_eq!(sim.contents(&name).unwrap(), bytes.clone());
                prop_assert_eq!(store.append_position().segment, 2);
                return Ok(());
            }
            prop_assert_eq!(store.append_position().offset, len);
            // Reading back everything kept: each entry verifies or is reported damaged.
            let mut pos = SEGMENT_HEADER_LEN;
            let contents = sim.contents(&name).unwrap();
            while pos < len {
                let h = &contents[pos as usize..pos as usize + ENTRY_HEADER_LEN];
                let n = u32::from_le_bytes(h[4..8].try_into().unwrap());
                let loc = presso_store::Location { segment: 1, offset: pos, len: n };
                match store.read(loc) {
                    Ok(p) => prop_assert_eq!(decode_entry(&contents[pos as usize..(pos + loc.entry_len()) as usize]).unwrap(), &p[..]),
                    Err(StoreError::CorruptEntry { .. }) => prop_assert!(store.recovery().damaged.contains(&pos)),
                    Err(e) => prop_assert!(false, "{}", e),
                }
                pos += loc.entry_len();
            }
            prop_assert_eq!(pos, len);
        }
    }
}

fn storage_len(sim: &SimDir, name: &str) -> u64 {
    sim.open(name).unwrap().len().unwrap()
}
