//! Entries appended from several buffers: what lands on disk is exactly the entry of the
//! buffers' concatenation, on real files (one vectored write) and on the simulated disk.

mod common;

use std::fs::OpenOptions;
use std::sync::Arc;

use common::{config, payload, sim_store, TempDir};
use presso_store::segment::segment_file_name;
use presso_store::{Committed, EntryTag, FsStorage, Storage, Store};

#[test]
fn a_file_written_in_parts_holds_their_concatenation() {
    let tmp = TempDir::new("parts-file");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create_new(true)
        .open(tmp.path().join("f"))
        .unwrap();
    let storage = FsStorage::new(file);
    // More parts than one system call takes, empty ones among them, written past the end.
    let owned: Vec<Vec<u8>> = (0..1_500u64)
        .map(|i| payload(i, (i as usize * 7) % 23))
        .collect();
    let parts: Vec<&[u8]> = owned.iter().map(Vec::as_slice).collect();
    let whole = owned.concat();
    storage.write_parts_at(&parts, 100).unwrap();
    assert_eq!(storage.len().unwrap(), 100 + whole.len() as u64);
    let mut back = vec![1u8; 100 + whole.len()];
    storage.read_at(&mut back, 0).unwrap();
    assert!(
        back[..100].iter().all(|&b| b == 0),
        "nothing before the offset"
    );
    assert_eq!(&back[100..], whole.as_slice());
    storage.write_parts_at(&[], 7).unwrap();
    storage.write_parts_at(&[b"", b"ab", b"", b"c"], 1).unwrap();
    storage.read_at(&mut back[..4], 0).unwrap();
    assert_eq!(&back[..4], b"\0abc");
}

fn tag(index: u64) -> EntryTag {
    EntryTag {
        ino: 42,
        index,
        txg: 3,
        record_size: 131_072,
    }
}

/// Appends the same payload whole and in parts on `store`; returns both locations.
fn append_both(store: &Store, parts: &[&[u8]]) -> (presso_store::Location, presso_store::Location) {
    let whole = parts.concat();
    let in_parts = store
        .append_parts(parts, crc32fast::hash(&whole), Some(&tag(1)))
        .unwrap();
    let at_once = store.append_tagged(&whole, Some(&tag(1))).unwrap();
    (in_parts, at_once)
}

#[test]
fn an_entry_appended_in_parts_is_the_entry_of_the_whole_payload() {
    let tmp = TempDir::new("parts-store");
    let store = Store::create(tmp.dir(), Default::default(), config(1 << 20)).unwrap();
    let (header, body, tail) = (payload(1, 32), payload(2, 70_000), payload(3, 9));
    let parts: [&[u8]; 4] = [&header, &body, b"", &tail];
    let whole = parts.concat();
    let (a, b) = append_both(&store, &parts);
    assert_eq!(a.len, b.len);
    for loc in [a, b] {
        assert_eq!(
            store.read_entry(loc).unwrap(),
            (whole.clone(), Some(tag(1)))
        );
    }
    store.sync().unwrap();
    drop(store);

    // The two entries are the same bytes on disk, and read back after a reopen.
    let segment = std::fs::read(tmp.path().join(segment_file_name(a.segment))).unwrap();
    let entry_len = (b.offset - a.offset) as usize;
    assert_eq!(
        segment[a.offset as usize..a.offset as usize + entry_len],
        segment[b.offset as usize..b.offset as usize + entry_len]
    );
    let store = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap();
    assert_eq!(store.recovery().discarded_bytes, 0);
    assert_eq!(store.read(a).unwrap(), whole);
    assert_eq!(store.corruptions(), 0);
}

#[test]
fn an_entry_appended_in_parts_reads_back_from_the_simulated_disk() {
    let (sim, store) = sim_store(4096);
    let parts: [&[u8]; 3] = [b"head", &payload(5, 3000), b"end"];
    let (a, b) = append_both(&store, &parts);
    assert_ne!(
        a.segment, b.segment,
        "a second entry of 3 KB rolls a 4 KiB segment"
    );
    store.sync().unwrap();
    drop(store);
    let store = Store::open(Arc::new(sim), config(4096), &Committed::default()).unwrap();
    assert_eq!(store.read(a).unwrap(), parts.concat());
    assert_eq!(store.read(b).unwrap(), parts.concat());
}
