//! The store's three on-disk formats against their parse contracts (docs/design.md, "Parse
//! contracts"): the pool header, the segment header and the entry envelope. Arbitrary bytes and
//! edited valid encodings parse to `Ok` or a typed error, never a panic; what parses is the one
//! canonical encoding of what it holds; valid encodings round-trip; and every single-byte change
//! of a valid encoding (every position, every one of the 255 other values) is refused, with the
//! error its position calls for.

use std::collections::BTreeMap;

use presso_store::header::{
    OFF_MAGIC, OFF_PROPS, OFF_PROPS_LEN, OFF_RESERVED, OFF_VERSION, POOL_FILE, POOL_VERSION,
};
use presso_store::segment::{
    decode_entry, decode_entry_header, decode_tagged_entry, encode_entry, encode_entry_header,
    encode_entry_v1, encode_tagged_entry, EntryFormat, SegmentHeader, ENTRY_HEADER_LEN,
    SEGMENT_HEADER_LEN,
};
use presso_store::{EnvelopeError, PoolHeader, StoreError};
use proptest::prelude::*;

const SEG_FILE: &str = "seg-1.dat";

/// A property key the format accepts: non-empty, without '=', newline or NUL.
fn key() -> impl Strategy<Value = String> {
    "[a-z][a-z0-9._:-]{0,15}"
}

/// A property value the format accepts: no newline or NUL (other characters, '=' and non-ASCII
/// included, are fine).
fn value() -> impl Strategy<Value = String> {
    "[^\n\x00]{0,24}"
}

fn pool_header() -> impl Strategy<Value = PoolHeader> {
    (
        any::<[u8; 16]>(),
        any::<u64>(),
        0u32..1_000_000_000,
        proptest::collection::btree_map(key(), value(), 0..6),
    )
        .prop_map(
            |(uuid, created_secs, created_nanos, properties)| PoolHeader {
                version: POOL_VERSION,
                uuid,
                created_secs,
                created_nanos,
                properties,
            },
        )
}

/// Edits of a valid encoding: (position, kind, value) with kinds XOR, overwrite, cut, insert.
fn edits() -> impl Strategy<Value = Vec<(prop::sample::Index, u8, u8)>> {
    proptest::collection::vec((any::<prop::sample::Index>(), 0u8..4, any::<u8>()), 1..5)
}

fn apply(bytes: &mut Vec<u8>, edits: &[(prop::sample::Index, u8, u8)]) {
    for (at, kind, value) in edits {
        if bytes.is_empty() {
            bytes.push(*value);
            continue;
        }
        let at = at.index(bytes.len());
        match kind {
            0 => bytes[at] ^= value.max(&1),
            1 => bytes[at] = *value,
            2 => bytes.truncate(at),
            _ => bytes.insert(at, *value),
        }
    }
}

/// Rewrites the trailing CRC-32 of a pool header after an edit, so the checks behind it run.
fn reseal_pool_header(bytes: &mut [u8]) {
    if bytes.len() >= 4 {
        let n = bytes.len() - 4;
        let crc = crc32fast::hash(&bytes[..n]);
        bytes[n..].copy_from_slice(&crc.to_le_bytes());
    }
}

/// The pool-header contract for any bytes: a typed error, or a header whose encoding is exactly
/// these bytes.
fn check_pool_header_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    match PoolHeader::decode(bytes, POOL_FILE) {
        Ok(h) => prop_assert_eq!(h.encode(), bytes.to_vec(), "not its own encoding"),
        Err(StoreError::NotAPool { file, .. } | StoreError::Corrupt { file, .. }) => {
            prop_assert_eq!(file, POOL_FILE)
        }
        Err(StoreError::NewerVersion { found, .. }) => prop_assert!(found > POOL_VERSION),
        Err(other) => prop_assert!(false, "unexpected error {}", other),
    }
    Ok(())
}

fn check_segment_header_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    match SegmentHeader::decode(bytes, SEG_FILE) {
        // The header is the first 40 bytes; whatever follows is the segment's entries.
        Ok(h) => prop_assert_eq!(&h.encode()[..], &bytes[..SEGMENT_HEADER_LEN as usize]),
        Err(StoreError::Corrupt { file, offset, .. }) => {
            prop_assert_eq!(file, SEG_FILE);
            prop_assert!(offset <= SEGMENT_HEADER_LEN);
        }
        Err(other) => prop_assert!(false, "unexpected error {}", other),
    }
    Ok(())
}

fn check_entry_parse(bytes: &[u8]) -> Result<(), TestCaseError> {
    if let Ok((header, payload)) = decode_tagged_entry(bytes) {
        // Its own encoding, in its own format and with its own tag.
        let again = match header.format {
            EntryFormat::V1 => encode_entry_v1(payload),
            EntryFormat::V2 => encode_tagged_entry(payload, header.tag.as_ref()),
        };
        prop_assert_eq!(again, bytes.to_vec());
    }
    if let Some(h) = bytes.get(..ENTRY_HEADER_LEN) {
        let h: &[u8; ENTRY_HEADER_LEN] = h.try_into().unwrap();
        if let Ok(header) = decode_entry_header(h) {
            prop_assert!(header.payload_len <= presso_store::segment::MAX_PAYLOAD_LEN);
        }
    }
    Ok(())
}

/// The error a single changed byte at `at` of a valid pool header must give.
fn expect_pool_header_error(good: &[u8], at: usize, err: &StoreError) -> Result<(), TestCaseError> {
    match err {
        StoreError::NotAPool { .. } => prop_assert!(at < OFF_VERSION, "byte {}", at),
        StoreError::NewerVersion { .. } => {
            prop_assert!((OFF_VERSION..OFF_RESERVED).contains(&at), "byte {}", at)
        }
        StoreError::Corrupt { offset, .. } => {
            prop_assert!(at >= OFF_VERSION, "byte {}", at);
            // The error points at the changed byte's field, the length it broke, or the CRC.
            prop_assert!(
                *offset as usize <= good.len(),
                "byte {} offset {}",
                at,
                offset
            );
        }
        other => prop_assert!(false, "byte {}: {}", at, other),
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(256))]

    #[test]
    fn pool_header_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_pool_header_parse(&bytes)?;
        // With the magic and a matching CRC-32, so the field checks meet the bytes too.
        let mut magic = b"PRESSOPL".to_vec();
        magic.extend_from_slice(&bytes);
        check_pool_header_parse(&magic)?;
        reseal_pool_header(&mut magic);
        check_pool_header_parse(&magic)?;
    }

    #[test]
    fn pool_header_round_trips(h in pool_header()) {
        let bytes = h.encode();
        prop_assert_eq!(&bytes[OFF_MAGIC..OFF_VERSION], b"PRESSOPL");
        prop_assert_eq!(PoolHeader::decode(&bytes, POOL_FILE).unwrap(), h);
    }

    #[test]
    fn pool_header_edits_are_refused_or_canonical(h in pool_header(), edits in edits(), reseal in any::<bool>()) {
        let good = h.encode();
        let mut bytes = good.clone();
        apply(&mut bytes, &edits);
        if reseal {
            reseal_pool_header(&mut bytes);
        }
        check_pool_header_parse(&bytes)?;
        if !reseal && bytes != good {
            prop_assert!(PoolHeader::decode(&bytes, POOL_FILE).is_err());
        }
    }

    #[test]
    fn segment_header_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..100)) {
        check_segment_header_parse(&bytes)?;
        let mut sealed = b"PSEG".to_vec();
        sealed.extend_from_slice(&bytes);
        if sealed.len() >= 36 {
            let crc = crc32fast::hash(&sealed[..32]);
            sealed[32..36].copy_from_slice(&crc.to_le_bytes());
        }
        check_segment_header_parse(&sealed)?;
    }

    #[test]
    fn segment_header_round_trips(number in any::<u64>(), pool_uuid in any::<[u8; 16]>()) {
        let h = SegmentHeader::new(number, pool_uuid);
        let bytes = h.encode();
        prop_assert_eq!(bytes.len() as u64, SEGMENT_HEADER_LEN);
        prop_assert_eq!(SegmentHeader::decode(&bytes, SEG_FILE).unwrap(), h);
    }

    #[test]
    fn envelope_arbitrary_bytes(bytes in proptest::collection::vec(any::<u8>(), 0..200)) {
        check_entry_parse(&bytes)?;
        // With the magic and a matching header CRC-32, so the length and payload checks run.
        let mut sealed = b"PENT".to_vec();
        sealed.extend_from_slice(&bytes);
        if sealed.len() >= ENTRY_HEADER_LEN {
            let crc = crc32fast::hash(&sealed[..12]);
            sealed[12..16].copy_from_slice(&crc.to_le_bytes());
        }
        check_entry_parse(&sealed)?;
        // The same for the tagged format (48-byte header, CRC-32 at 44).
        let mut sealed = b"PEN2".to_vec();
        sealed.extend_from_slice(&bytes);
        if sealed.len() >= ENTRY_HEADER_LEN {
            let crc = crc32fast::hash(&sealed[..44]);
            sealed[44..48].copy_from_slice(&crc.to_le_bytes());
        }
        check_entry_parse(&sealed)?;
    }

    #[test]
    fn envelope_round_trips(payload in proptest::collection::vec(any::<u8>(), 0..600)) {
        let entry = encode_entry(&payload);
        prop_assert_eq!(&entry[..ENTRY_HEADER_LEN], &encode_entry_header(&payload, None)[..]);
        prop_assert_eq!(decode_entry(&entry).unwrap(), &payload[..]);
    }

    #[test]
    fn envelope_edits_are_refused(payload in proptest::collection::vec(any::<u8>(), 0..300), edits in edits()) {
        let good = encode_entry(&payload);
        let mut bytes = good.clone();
        apply(&mut bytes, &edits);
        check_entry_parse(&bytes)?;
        if bytes != good {
            prop_assert!(decode_entry(&bytes).is_err());
        }
    }

}

proptest! {
    // Each case tries every byte at every value: 255 decodes per byte.
    #![proptest_config(ProptestConfig::with_cases(16))]

    /// Every position, every other value: CRC-32 detects any change within 32 bits.
    #[test]
    fn pool_header_every_byte_change_is_refused(h in pool_header()) {
        let good = h.encode();
        for at in 0..good.len() {
            for x in 1..=255u8 {
                let mut bytes = good.clone();
                bytes[at] ^= x;
                let err = PoolHeader::decode(&bytes, POOL_FILE).unwrap_err();
                expect_pool_header_error(&good, at, &err)?;
            }
        }
        for len in 0..good.len() {
            prop_assert!(PoolHeader::decode(&good[..len], POOL_FILE).is_err(), "cut at {}", len);
        }
        let mut longer = good.clone();
        longer.push(0);
        prop_assert!(PoolHeader::decode(&longer, POOL_FILE).is_err());
    }

    #[test]
    fn segment_header_every_byte_change_is_refused(number in any::<u64>(), pool_uuid in any::<[u8; 16]>()) {
        let good = SegmentHeader::new(number, pool_uuid).encode();
        for at in 0..good.len() {
            for x in 1..=255u8 {
                let mut bytes = good;
                bytes[at] ^= x;
                match SegmentHeader::decode(&bytes, SEG_FILE) {
                    Err(StoreError::Corrupt { .. }) => {}
                    other => prop_assert!(false, "byte {} ^ {:#x}: {:?}", at, x, other),
                }
            }
        }
        for len in 0..good.len() {
            let is_corrupt = matches!(SegmentHeader::decode(&good[..len], SEG_FILE), Err(StoreError::Corrupt { .. }));
            prop_assert!(is_corrupt, "cut at {}", len);
        }
    }

    #[test]
    fn envelope_every_byte_change_is_refused(payload in proptest::collection::vec(any::<u8>(), 0..64)) {
        let good = encode_entry(&payload);
        for at in 0..good.len() {
            for x in 1..=255u8 {
                let mut bytes = good.clone();
                bytes[at] ^= x;
                let err = decode_entry(&bytes).unwrap_err();
                let expected = match at {
                    // A changed magic is unknown, or the other format's, whose header CRC-32
                    // then does not match.
                    0..4 => matches!(err, EnvelopeError::BadMagic | EnvelopeError::BadHeaderCrc),
                    4..ENTRY_HEADER_LEN => matches!(err, EnvelopeError::BadHeaderCrc),
                    _ => matches!(err, EnvelopeError::BadPayloadCrc),
                };
                prop_assert!(expected, "byte {} ^ {:#x}: {:?}", at, x, err);
            }
        }
        for len in 0..good.len() {
            let is_truncated = matches!(decode_entry(&good[..len]), Err(EnvelopeError::Truncated { .. }));
            prop_assert!(is_truncated, "cut at {}", len);
        }
    }
}

/// The properties block holds its lines sorted by key, so a header has one encoding. A block out
/// of order (with a correct CRC-32) is not what any build writes: it is refused, like a key that
/// appears twice.
#[test]
fn pool_header_properties_out_of_order_are_refused() {
    let properties: BTreeMap<String, String> = [("a", "1"), ("b", "2")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    let h = PoolHeader {
        version: POOL_VERSION,
        uuid: [3; 16],
        created_secs: 1,
        created_nanos: 2,
        properties,
    };
    let good = h.encode();
    assert_eq!(&good[OFF_PROPS..good.len() - 4], b"a=1\nb=2\n");
    let mut swapped = good.clone();
    swapped[OFF_PROPS..good.len() - 4].copy_from_slice(b"b=2\na=1\n");
    reseal_pool_header(&mut swapped);
    assert_eq!(
        u32::from_le_bytes(swapped[OFF_PROPS_LEN..OFF_PROPS].try_into().unwrap()),
        8
    );
    match PoolHeader::decode(&swapped, POOL_FILE) {
        Err(StoreError::Corrupt { offset, .. }) => assert_eq!(offset as usize, OFF_PROPS + 4),
        other => panic!("{other:?}"),
    }
}
