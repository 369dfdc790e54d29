//! Entry envelopes of format 2 (self-describing: a record's entry names its inode, record index,
//! txg and record size) and the reading of format 1, which older pools hold.

use std::sync::Arc;

use presso_store::segment::{
    decode_entry, decode_tagged_entry, encode_entry_v1, encode_tagged_entry, segment_file_name,
    EntryFormat, EntryTag, SegmentHeader, ENTRY_HEADER_LEN, ENTRY_V1_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use presso_store::{Committed, EnvelopeError, SimDir, StorageDir, Store, StoreConfig};
use proptest::prelude::*;

mod common;

use common::payload;

fn any_tag() -> impl Strategy<Value = Option<EntryTag>> {
    proptest::option::of(
        (any::<u64>(), any::<u64>(), any::<u64>(), any::<u32>()).prop_map(
            |(ino, index, txg, record_size)| EntryTag {
                ino,
                index,
                txg,
                record_size,
            },
        ),
    )
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(512))]

    /// Any payload and any tag (or none) come back exactly; one byte more is refused.
    #[test]
    fn tagged_envelope_round_trip(
        data in proptest::collection::vec(any::<u8>(), 0..2048),
        tag in any_tag(),
    ) {
        let entry = encode_tagged_entry(&data, tag.as_ref());
        prop_assert_eq!(entry.len(), data.len() + ENTRY_HEADER_LEN);
        let (header, payload) = decode_tagged_entry(&entry).unwrap();
        prop_assert_eq!(payload, &data[..]);
        prop_assert_eq!(header.tag, tag);
        prop_assert_eq!(header.format, EntryFormat::V2);
        prop_assert_eq!(header.entry_len(), entry.len() as u64);
        let mut longer = entry.clone();
        longer.push(0);
        prop_assert_eq!(decode_entry(&longer), Err(EnvelopeError::TrailingBytes(1)));
    }

    /// A flipped bit anywhere in a tagged entry (tag included) is caught, and every cut is
    /// truncation.
    #[test]
    fn tagged_envelope_detects_damage(
        data in proptest::collection::vec(any::<u8>(), 0..512),
        tag in any_tag(),
        pos in any::<prop::sample::Index>(),
        bit in 0u8..8,
        cut in any::<prop::sample::Index>(),
    ) {
        let entry = encode_tagged_entry(&data, tag.as_ref());
        let mut bad = entry.clone();
        bad[pos.index(entry.len())] ^= 1 << bit;
        prop_assert!(decode_entry(&bad).is_err());
        let cut = cut.index(entry.len());
        let truncated = matches!(
            decode_entry(&entry[..cut]),
            Err(EnvelopeError::Truncated { .. })
        );
        prop_assert!(truncated);
    }

    /// Format 1 entries (what older pools hold) still decode, with no tag.
    #[test]
    fn format_1_entries_still_decode(data in proptest::collection::vec(any::<u8>(), 0..1024)) {
        let entry = encode_entry_v1(&data);
        prop_assert_eq!(entry.len(), data.len() + ENTRY_V1_HEADER_LEN);
        let (header, payload) = decode_tagged_entry(&entry).unwrap();
        prop_assert_eq!(payload, &data[..]);
        prop_assert_eq!(header.tag, None);
        prop_assert_eq!(header.format, EntryFormat::V1);
    }
}

/// The byte map of docs/design.md, field by field.
#[test]
fn tagged_envelope_byte_map() {
    let tag = EntryTag {
        ino: 0x0102_0304_0506_0708,
        index: 9,
        txg: 0x1122,
        record_size: 131072,
    };
    let e = encode_tagged_entry(b"abc", Some(&tag));
    assert_eq!(&e[0..4], b"PEN2");
    assert_eq!(u32::from_le_bytes(e[4..8].try_into().unwrap()), 3);
    assert_eq!(
        u32::from_le_bytes(e[8..12].try_into().unwrap()),
        crc32fast::hash(b"abc")
    );
    assert_eq!(e[12], 1);
    assert_eq!(&e[13..16], &[0, 0, 0]);
    assert_eq!(u64::from_le_bytes(e[16..24].try_into().unwrap()), tag.ino);
    assert_eq!(u64::from_le_bytes(e[24..32].try_into().unwrap()), 9);
    assert_eq!(u64::from_le_bytes(e[32..40].try_into().unwrap()), 0x1122);
    assert_eq!(u32::from_le_bytes(e[40..44].try_into().unwrap()), 131072);
    assert_eq!(
        u32::from_le_bytes(e[44..48].try_into().unwrap()),
        crc32fast::hash(&e[..44])
    );
    assert_eq!(&e[48..], b"abc");
    let untagged = encode_tagged_entry(b"abc", None);
    assert!(untagged[12..44].iter().all(|&b| b == 0));
}

/// A kind this version does not know, or a tag on an untagged entry, is refused even with a
/// valid header CRC-32 (written by something else than this version).
#[test]
fn unknown_kind_is_refused() {
    let mut e = encode_tagged_entry(b"xyz", None);
    for (at, value) in [(12usize, 7u8), (13, 1), (20, 1)] {
        let mut bad = e.clone();
        bad[at] = value;
        let crc = crc32fast::hash(&bad[..44]);
        bad[44..48].copy_from_slice(&crc.to_le_bytes());
        assert!(
            matches!(decode_entry(&bad), Err(EnvelopeError::UnknownField(_))),
            "byte {at}"
        );
    }
    e[12] = 1;
    let crc = crc32fast::hash(&e[..44]);
    e[44..48].copy_from_slice(&crc.to_le_bytes());
    assert!(decode_tagged_entry(&e).unwrap().0.tag.is_some());
}

/// The store writes the tag and gives it back, on read and in the segment scan.
/// A new store on a simulated directory.
fn new_store() -> (SimDir, Store) {
    let sim = SimDir::new();
    let store = Store::create(
        Arc::new(sim.clone()),
        Default::default(),
        StoreConfig::default(),
    )
    .unwrap();
    (sim, store)
}

#[test]
fn the_store_keeps_tags() {
    let (_, store) = new_store();
    let tag = EntryTag {
        ino: 5,
        index: 3,
        txg: 17,
        record_size: 4096,
    };
    let a = store.append_tagged(&payload(1, 700), Some(&tag)).unwrap();
    let b = store.append(&payload(2, 300)).unwrap();
    assert_eq!(store.read_entry(a).unwrap(), (payload(1, 700), Some(tag)));
    assert_eq!(store.read_entry(b).unwrap(), (payload(2, 300), None));
    let scan = store.entries(a.segment).unwrap();
    assert_eq!(scan.entries, vec![a, b]);
    assert_eq!(scan.tags, vec![Some(tag), None]);
    assert_eq!(b.offset, a.offset + a.entry_len());
}

/// A read whose caller verifies the payload itself checks every byte of the envelope header
/// (a change anywhere in it is refused and counted) and hands the payload over as it is; the
/// usual read refuses a changed payload.
#[test]
fn a_read_verified_by_its_caller_checks_the_header_and_leaves_the_payload_to_it() {
    let (sim, store) = new_store();
    let tag = EntryTag {
        ino: 9,
        index: 0,
        txg: 2,
        record_size: 4096,
    };
    let loc = store.append_tagged(&payload(3, 500), Some(&tag)).unwrap();
    assert_eq!(
        store.read_entry_verified_by_caller(loc).unwrap(),
        (payload(3, 500), Some(tag))
    );
    let name = segment_file_name(loc.segment);
    let intact = sim.contents(&name).unwrap();
    let flipped = |at: u64| {
        let mut bytes = intact.clone();
        bytes[(loc.offset + at) as usize] ^= 0x5a;
        sim.set_contents(&name, &bytes);
    };
    for at in 0..ENTRY_HEADER_LEN as u64 {
        flipped(at);
        let before = store.corruptions();
        assert!(
            store.read_entry_verified_by_caller(loc).is_err(),
            "a change at envelope byte {at} was not refused"
        );
        assert_eq!(store.corruptions(), before + 1, "byte {at}: not counted");
    }
    let at = ENTRY_HEADER_LEN as u64 + 100;
    flipped(at);
    let (handed, _) = store.read_entry_verified_by_caller(loc).unwrap();
    let mut expected = payload(3, 500);
    expected[100] ^= 0x5a;
    assert_eq!(
        handed, expected,
        "the payload was not handed over as stored"
    );
    assert!(
        store.read_entry(loc).is_err(),
        "the usual read took a changed payload"
    );
}

/// A pool written before format 2: a segment of version 1 with format-1 entries opens, reads,
/// is accounted with 16-byte envelopes, and is never appended to (the first append starts a new
/// segment of format 2); its bytes stay as they were.
#[test]
fn a_format_1_segment_reads_and_is_sealed_at_the_first_append() {
    let (sim, store) = new_store();
    let uuid = store.header().uuid;
    drop(store);
    let mut bytes = SegmentHeader {
        number: 1,
        pool_uuid: uuid,
        version: 1,
    }
    .encode()
    .to_vec();
    let mut locs = Vec::new();
    for i in 0..3u64 {
        let p = payload(i, 200 + i as usize);
        locs.push(presso_store::Location {
            segment: 1,
            offset: bytes.len() as u64,
            len: p.len() as u32,
        });
        bytes.extend_from_slice(&encode_entry_v1(&p));
    }
    let name = segment_file_name(1);
    sim.set_contents(&name, &bytes);
    let last = *locs.last().unwrap();
    let committed = Committed {
        last_entries: [(1, last)].into(),
        highest_segment: 1,
    };
    let store = Store::open(Arc::new(sim.clone()), StoreConfig::default(), &committed).unwrap();
    assert_eq!(store.recovery().discarded_bytes, 0);
    assert!(!store.recovery().kept_damage);
    for (i, loc) in locs.iter().enumerate() {
        assert_eq!(
            store.read_entry(*loc).unwrap(),
            (payload(i as u64, 200 + i), None)
        );
    }
    let scan = store.entries(1).unwrap();
    assert_eq!(scan.entries, locs);
    assert_eq!(scan.tags, vec![None; 3]);
    // Accounting by the segment's own envelope length.
    let payloads: u64 = locs.iter().map(|l| u64::from(l.len)).sum();
    store.set_live_records(1, 3, payloads).unwrap();
    assert_eq!(store.segment_stats(1).unwrap().dead_bytes, 0);
    store.mark_dead(locs[0]).unwrap();
    assert_eq!(
        store.segment_stats(1).unwrap().dead_bytes,
        ENTRY_V1_HEADER_LEN as u64 + 200
    );
    let tag = EntryTag {
        ino: 2,
        index: 0,
        txg: 1,
        record_size: 4096,
    };
    let new = store.append_tagged(b"new", Some(&tag)).unwrap();
    assert_eq!(new.segment, 2);
    assert_eq!(new.offset, SEGMENT_HEADER_LEN);
    assert_eq!(store.read_entry(new).unwrap(), (b"new".to_vec(), Some(tag)));
    assert_eq!(sim.contents(&name).unwrap(), bytes);
    drop(store);
    // Reopened: both formats side by side.
    let store = Store::open(Arc::new(sim.clone()), StoreConfig::default(), &committed).unwrap();
    assert_eq!(store.read(locs[2]).unwrap(), payload(2, 202));
    assert_eq!(store.read_entry(new).unwrap().1, Some(tag));
    assert_eq!(sim.open(&name).unwrap().len().unwrap(), bytes.len() as u64);
}
