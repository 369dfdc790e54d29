//! Everything the store reads back from disk, on arbitrary bytes: the pool header, a segment
//! header, single entries, the recovery scan of a whole segment and the scrub scan of its
//! entries. Nothing may panic, and what the scans keep must verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use presso_store::segment::{
    decode_entry, decode_entry_header, decode_tagged_entry, scan_entries, scan_segment,
    EntryFormat, SegmentHeader,
};
use presso_store::{PoolHeader, SimDir, StorageDir};

/// Length of the entry starting at `at`, from its envelope header (kept entries' headers verify).
fn entry_len(data: &[u8], at: usize) -> usize {
    let header = decode_entry_header(&data[at..]).expect("a kept entry's header verifies");
    header.entry_len() as usize
}

fuzz_target!(|data: &[u8]| {
    let _ = PoolHeader::decode(data, "presso.pool");
    let _ = SegmentHeader::decode(data, "seg-1.dat");
    let _ = decode_entry(data);

    // The segment's format (its header names it): odd lengths scan as format 1, the rest as 2.
    let format = if data.len() % 2 == 1 {
        EntryFormat::V1
    } else {
        EntryFormat::V2
    };
    let dir = SimDir::new();
    dir.set_contents("seg-1.dat", data);
    let storage = dir.open("seg-1.dat").expect("the file was just written");
    if let Ok(scan) = scan_segment(storage.as_ref(), 0, format) {
        assert!(scan.good_end <= scan.file_len);
        // Every entry before good_end decodes again, one after another (the damaged ones only
        // by their envelope header).
        let mut at = 0usize;
        for _ in 0..scan.entries {
            let end = at + entry_len(data, at);
            if decode_entry(&data[at..end]).is_err() {
                assert!(
                    scan.damaged.contains(&(at as u64)),
                    "kept entry at {at} does not verify"
                );
            }
            at = end;
        }
        assert_eq!(at as u64, scan.good_end);
    }

    // The scrub scan tiles the file exactly with valid entries and damaged stretches.
    if let Ok(scan) = scan_entries(storage.as_ref(), 0, u64::MAX, format) {
        let mut pieces: Vec<(u64, u64, bool)> = scan
            .entries
            .iter()
            .map(|e| (e.offset, e.entry_len(), true))
            .chain(scan.damaged.iter().map(|d| (d.offset, d.len, false)))
            .collect();
        pieces.sort_unstable();
        let mut at = 0u64;
        for (off, len, valid) in pieces {
            assert_eq!(off, at, "gap or overlap at {at}");
            assert!(len > 0);
            let bytes = &data[off as usize..(off + len) as usize];
            if valid {
                let entry = decode_tagged_entry(bytes);
                assert!(
                    entry.is_ok_and(|(h, _)| h.format == format),
                    "listed entry at {off} does not verify as one of its segment's format"
                );
            }
            at = off + len;
        }
        assert_eq!(at, data.len() as u64);
    }
});
