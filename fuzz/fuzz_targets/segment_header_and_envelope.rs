//! A segment file through everything that reads one: its header, its entries' envelopes, the
//! recovery scan of a pool open (as the last segment or as a sealed one), the entries scan of
//! scrub and GC, reads of the entries found, and appends after the open. Nothing may panic; what
//! the scans list must read back; the store must take appends once it opened.
//!
//! The first input byte picks what the rest is (bits 0-1) and where the file sits (bit 2: the
//! last segment, or a sealed one before an empty last segment); bits 3-7 pick how much of the
//! file the metadata says it committed. Modes: the file's bytes themselves (0); a valid segment
//! of a few entries, then edits (1); the same with every CRC-32 the edits broke made right again
//! (2), so the checks behind the CRCs (version, reserved fields, segment number, pool uuid,
//! payload length) meet damage too; a valid segment left as it is but cut short (3).
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use presso_store::header::{POOL_FILE, POOL_VERSION};
use presso_store::segment::{
    decode_entry, decode_tagged_entry, encode_entry, encode_entry_v1, encode_tagged_entry,
    segment_file_name, EntryFormat, SegmentHeader, ENTRY_HEADER_LEN, SEGMENT_HEADER_LEN,
};
use presso_store::{Committed, Location, PoolHeader, SimDir, Store, StoreConfig, StoreError};

const UUID: [u8; 16] = *b"fedcba9876543210";
const HEADER_LEN: usize = SEGMENT_HEADER_LEN as usize;

/// A valid segment 1 of the pool `UUID`: entries of the lengths the length bytes ask for (three
/// bytes each per unit, so empty and multi-window-sized entries both occur).
fn valid_segment(lengths: &[u8]) -> Vec<u8> {
    let mut bytes = SegmentHeader::new(1, UUID).encode().to_vec();
    for (i, &n) in lengths.iter().enumerate() {
        bytes.extend_from_slice(&encode_entry(&common::pattern(
            i as u64,
            usize::from(n) * 3,
        )));
    }
    bytes
}

/// Makes the segment header's CRC-32 and every envelope's two CRC-32s right again, walking the
/// entries by their (possibly edited) length fields.
fn reseal(bytes: &mut [u8]) {
    if bytes.len() >= HEADER_LEN {
        let crc = crc32fast::hash(&bytes[..32]);
        bytes[32..36].copy_from_slice(&crc.to_le_bytes());
    }
    let mut at = HEADER_LEN;
    while at + ENTRY_HEADER_LEN <= bytes.len() {
        let n = u32::from_le_bytes(bytes[at + 4..at + 8].try_into().unwrap()) as usize;
        let end = at + ENTRY_HEADER_LEN + n;
        if end <= bytes.len() {
            let crc = crc32fast::hash(&bytes[at + ENTRY_HEADER_LEN..end]);
            bytes[at + 8..at + 12].copy_from_slice(&crc.to_le_bytes());
        }
        let crc_at = at + ENTRY_HEADER_LEN - 4;
        let crc = crc32fast::hash(&bytes[at..crc_at]);
        bytes[crc_at..crc_at + 4].copy_from_slice(&crc.to_le_bytes());
        if end > bytes.len() {
            break;
        }
        at = end;
    }
}

fn pool_header() -> Vec<u8> {
    PoolHeader {
        version: POOL_VERSION,
        uuid: UUID,
        created_secs: 1_700_000_000,
        created_nanos: 0,
        properties: BTreeMap::new(),
    }
    .encode()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = match mode % 4 {
        0 => rest.to_vec(),
        3 => {
            let (&count, rest) = rest.split_first().unwrap_or((&0, &[]));
            let lengths = &rest[..rest.len().min(usize::from(count % 8))];
            let valid = valid_segment(lengths);
            let cut = rest
                .get(lengths.len())
                .map_or(valid.len(), |&b| valid.len() * usize::from(b) / 255);
            valid[..cut].to_vec()
        }
        kind => {
            let (&count, rest) = rest.split_first().unwrap_or((&0, &[]));
            let (lengths, ops) = rest.split_at(rest.len().min(usize::from(count % 8)));
            let mut bytes = valid_segment(lengths);
            common::mutate(&mut bytes, ops, 6);
            if kind == 2 {
                reseal(&mut bytes);
            }
            bytes
        }
    };
    let sealed = mode & 4 != 0;
    let committed_end = (bytes.len() as u64) * u64::from(mode >> 3) / 31;

    // The formats on their own: a header that parses is its own encoding, and so is an entry.
    let name = segment_file_name(1);
    if let Ok(h) = SegmentHeader::decode(&bytes, &name) {
        assert_eq!(h.encode()[..], bytes[..HEADER_LEN]);
    }
    if bytes.len() > HEADER_LEN {
        if let Ok((header, payload)) = decode_tagged_entry(&bytes[HEADER_LEN..]) {
            // Its own encoding, in its own format and with its own tag.
            let again = match header.format {
                EntryFormat::V1 => encode_entry_v1(payload),
                EntryFormat::V2 => encode_tagged_entry(payload, header.tag.as_ref()),
            };
            assert_eq!(again, bytes[HEADER_LEN..]);
        }
    }

    // The file in a pool, opened.
    let sim = SimDir::new();
    sim.set_contents(POOL_FILE, &pool_header());
    sim.set_contents(&name, &bytes);
    let mut committed = Committed::default();
    if committed_end > 0 {
        // What the metadata claims is its last entry there: any place, as damaged metadata
        // could claim, with a length that ends at `committed_end` when it can.
        let offset = committed_end.saturating_sub(ENTRY_HEADER_LEN as u64 + 1);
        let len = committed_end.saturating_sub(offset + ENTRY_HEADER_LEN as u64) as u32;
        committed.last_entries.insert(
            1,
            Location {
                segment: 1,
                offset,
                len,
            },
        );
        committed.highest_segment = 1;
    }
    if sealed {
        let empty = SegmentHeader::new(2, UUID).encode();
        sim.set_contents(&segment_file_name(2), &empty);
    }
    let config = StoreConfig {
        segment_size: 1 << 20,
        ..StoreConfig::default()
    };
    let store = match Store::open(Arc::new(sim.clone()), config, &committed) {
        Ok(store) => store,
        // Only a header that decodes but names another pool or segment refuses the open.
        Err(StoreError::Corrupt { file, .. }) => {
            assert_eq!(file, name);
            let h = SegmentHeader::decode(&bytes, &name).expect("refused over a damaged header");
            assert!(h.number != 1 || h.pool_uuid != UUID);
            return;
        }
        Err(e) => panic!("open failed: {e}"),
    };

    // Every entry the scrub scan lists reads back as it lies in the file (the recovery may have
    // cut the tail: read what is there now).
    let now = sim.contents(&name).unwrap_or_default();
    for segment in store.segments() {
        let Ok(scan) = store.entries(segment) else {
            // Only a damaged header makes the entries scan fail.
            assert!(store
                .recovery()
                .bad_headers
                .iter()
                .any(|(n, _)| *n == segment));
            continue;
        };
        for loc in &scan.entries {
            let payload = store.read(*loc).expect("a listed entry reads");
            if segment == 1 {
                let at = loc.offset as usize;
                assert_eq!(
                    decode_entry(&now[at..at + loc.entry_len() as usize]),
                    Ok(&payload[..])
                );
            }
        }
        for damaged in &scan.damaged {
            assert!(damaged.len > 0);
        }
    }

    // Whatever was found, the pool takes new entries.
    let loc = store.append(b"after the open").expect("append");
    store.sync().expect("sync");
    assert_eq!(store.read(loc).expect("read"), b"after the open");
});
