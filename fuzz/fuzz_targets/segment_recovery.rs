//! Everything the store reads back from disk, on arbitrary bytes: the pool header, a segment
//! header, single entries, and the recovery scan of a whole segment. Nothing may panic, and what
//! the scan keeps must verify.
#![no_main]

use libfuzzer_sys::fuzz_target;
use presso_store::segment::{decode_entry, scan_segment, SegmentHeader};
use presso_store::{PoolHeader, SimDir, StorageDir};

fuzz_target!(|data: &[u8]| {
    let _ = PoolHeader::decode(data, "presso.pool");
    let _ = SegmentHeader::decode(data, "seg-1.dat");
    let _ = decode_entry(data);

    let dir = SimDir::new();
    dir.set_contents("seg-1.dat", data);
    let storage = dir.open("seg-1.dat").expect("the file was just written");
    if let Ok(scan) = scan_segment(storage.as_ref(), 0) {
        assert!(scan.good_end <= scan.file_len);
        // Every entry before good_end decodes again, one after another.
        let mut at = 0usize;
        for _ in 0..scan.entries {
            let rest = &data[at..scan.good_end as usize];
            let Ok(payload) = decode_entry(rest) else {
                assert!(scan.damaged.contains(&(at as u64)), "kept entry at {at} does not verify");
                let len = u32::from_le_bytes(rest[4..8].try_into().unwrap()) as usize;
                at += 16 + len;
                continue;
            };
            at += 16 + payload.len();
        }
        assert_eq!(at as u64, scan.good_end);
    }
});
