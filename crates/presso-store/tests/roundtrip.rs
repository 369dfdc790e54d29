mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use common::{config, payload, sim_store, TempDir};
use parking_lot::Mutex;
use presso_store::segment::{segment_file_name, ENTRY_HEADER_LEN, SEGMENT_HEADER_LEN};
use presso_store::{Committed, Location, Position, Store, StoreConfig, StoreError};

#[test]
fn round_trip_real_files_and_reopen() {
    let tmp = TempDir::new("rt");
    let mut props = BTreeMap::new();
    props.insert("compression".to_string(), "lz4".to_string());
    props.insert("recordsize".to_string(), "131072".to_string());
    let store = Store::create(tmp.dir(), props.clone(), config(4096)).unwrap();
    let uuid = store.header().uuid;
    let mut locs = Vec::new();
    for i in 0..200u64 {
        let p = payload(i, (i as usize * 37) % 1500);
        let loc = store.append(&p).unwrap();
        assert_eq!(store.read(loc).unwrap(), p);
        locs.push((loc, p));
    }
    let pos = store.sync().unwrap();
    assert_eq!(pos, store.append_position());
    assert!(locs.last().unwrap().0.segment > 1, "small segments roll");
    drop(store);

    let store = Store::open(tmp.dir(), config(4096), &Committed::default()).unwrap();
    assert_eq!(store.header().uuid, uuid);
    assert_eq!(store.header().properties, props);
    assert_eq!(store.recovery().discarded_bytes, 0);
    for (loc, p) in &locs {
        assert_eq!(&store.read(*loc).unwrap(), p);
    }
    // Every segment but the last stays within the size unless it holds one big entry.
    for s in store.all_segment_stats() {
        assert!(s.total_bytes + SEGMENT_HEADER_LEN <= 4096, "{s:?}");
    }
    assert_eq!(store.corruptions(), 0);
}

#[test]
fn empty_payload_and_entry_larger_than_segment() {
    let (_sim, store) = sim_store(1024);
    let a = store.append(b"").unwrap();
    let big = payload(7, 5000);
    let b = store.append(&big).unwrap();
    let c = store.append(b"after").unwrap();
    assert_eq!(store.read(a).unwrap(), b"");
    assert_eq!(store.read(b).unwrap(), big);
    assert_eq!(store.read(c).unwrap(), b"after");
    assert_ne!(a.segment, b.segment);
    assert_ne!(b.segment, c.segment);
}

#[test]
fn bad_locations_are_refused() {
    let (_sim, store) = sim_store(1 << 20);
    let loc = store.append(b"hello world").unwrap();
    match store.read(Location { segment: 99, ..loc }) {
        Err(StoreError::NoSuchSegment { segment: 99 }) => {}
        other => panic!("{other:?}"),
    }
    let cases = [
        Location { offset: 0, ..loc },
        Location {
            offset: loc.offset + 1,
            ..loc
        },
        Location {
            len: loc.len + 1,
            ..loc
        },
        Location {
            offset: u64::MAX - 3,
            ..loc
        },
        Location {
            len: u32::MAX,
            ..loc
        },
    ];
    for bad in cases {
        match store.read(bad) {
            Err(StoreError::BadLocation { .. }) | Err(StoreError::CorruptEntry { .. }) => {}
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    // A shorter length inside the entry: the envelope disagrees.
    match store.read(Location { len: 3, ..loc }) {
        Err(StoreError::CorruptEntry {
            segment, offset, ..
        }) => {
            assert_eq!((segment, offset), (loc.segment, loc.offset))
        }
        other => panic!("{other:?}"),
    }
    assert!(store.corruptions() >= 1);
    assert_eq!(store.read(loc).unwrap(), b"hello world");
}

#[test]
fn damaged_entry_names_segment_and_offset() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(&payload(1, 100)).unwrap();
    let b = store.append(&payload(2, 100)).unwrap();
    store.sync().unwrap();
    drop(store);
    let name = segment_file_name(b.segment);
    let mut bytes = sim.contents(&name).unwrap();
    bytes[(b.offset as usize) + ENTRY_HEADER_LEN + 50] ^= 0x40;
    sim.set_contents(&name, &bytes);
    // Reopening cuts the damaged last entry (it looks like a torn tail)...
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    assert_eq!(store.recovery().discarded_bytes, b.entry_len());
    assert!(matches!(store.read(b), Err(StoreError::BadLocation { .. })));
    // ...while damage in the middle is found on read.
    let c = store.append(&payload(3, 100)).unwrap();
    store.sync().unwrap();
    drop(store);
    let mut bytes = sim.contents(&name).unwrap();
    bytes[(a.offset as usize) + ENTRY_HEADER_LEN + 3] ^= 1;
    sim.set_contents(&name, &bytes);
    let store = Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default(),
    )
    .unwrap();
    assert_eq!(store.recovery().damaged, vec![a.offset]);
    assert_eq!(store.recovery().discarded_bytes, 0);
    assert_eq!(store.read(c).unwrap(), payload(3, 100));
    match store.read(a) {
        Err(e @ StoreError::CorruptEntry { .. }) => {
            let msg = e.to_string();
            assert!(msg.contains(&format!("segment {}", a.segment)), "{msg}");
            assert!(msg.contains(&format!("offset {}", a.offset)), "{msg}");
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.corruptions(), 1);
}

#[test]
fn space_accounting() {
    let (_sim, store) = sim_store(1 << 20);
    let a = store.append(&[1u8; 52]).unwrap();
    let b = store.append(&[2u8; 252]).unwrap();
    let seg = a.segment;
    assert_eq!(store.live_fraction(seg), Some(1.0));
    let stats = store.segment_stats(seg).unwrap();
    assert_eq!(stats.total_bytes, 100 + 300);
    store.mark_dead(a).unwrap();
    assert_eq!(store.segment_stats(seg).unwrap().dead_bytes, 100);
    assert_eq!(store.dead_bytes(), 100);
    assert!((store.live_fraction(seg).unwrap() - 0.75).abs() < 1e-9);
    store.mark_dead(b).unwrap();
    assert_eq!(store.live_fraction(seg), Some(0.0));
    assert_eq!(store.dead_bytes(), 400);
    assert!(store.mark_dead(Location { segment: 42, ..a }).is_err());
    assert_eq!(store.live_fraction(42), None);
}

#[test]
fn too_large_payload_is_refused() {
    let (_sim, store) = sim_store(1 << 20);
    let huge = vec![0u8; presso_store::segment::MAX_PAYLOAD_LEN as usize + 1];
    assert!(matches!(
        store.append(&huge),
        Err(StoreError::TooLarge { .. })
    ));
    assert!(store.append(b"ok").is_ok());
}

#[test]
fn concurrent_readers_during_appends() {
    let tmp = TempDir::new("conc");
    let store = Arc::new(Store::create(tmp.dir(), Default::default(), config(256 << 10)).unwrap());
    let published: Arc<Mutex<Vec<(u64, Location)>>> = Arc::default();
    let done = Arc::new(AtomicBool::new(false));
    let size = |i: u64| 1 + (i as usize * 7919) % 8000;

    let readers: Vec<_> = (0..3)
        .map(|r| {
            let (store, published, done) = (store.clone(), published.clone(), done.clone());
            std::thread::spawn(move || {
                let mut reads = 0u64;
                let mut k = r as usize;
                while !done.load(Ordering::Acquire) || reads < 100 {
                    let pick = {
                        let p = published.lock();
                        if p.is_empty() {
                            None
                        } else {
                            k = k.wrapping_mul(31).wrapping_add(17);
                            Some(p[k % p.len()])
                        }
                    };
                    if let Some((i, loc)) = pick {
                        assert_eq!(store.read(loc).unwrap(), payload(i, size(i)));
                        reads += 1;
                    }
                }
                reads
            })
        })
        .collect();
    let syncer = {
        let (store, done) = (store.clone(), done.clone());
        std::thread::spawn(move || {
            let mut last = Position {
                segment: 0,
                offset: 0,
            };
            while !done.load(Ordering::Acquire) {
                let p = store.sync().unwrap();
                assert!(p >= last);
                last = p;
            }
        })
    };
    for i in 0..3000u64 {
        let loc = store.append(&payload(i, size(i))).unwrap();
        published.lock().push((i, loc));
    }
    done.store(true, Ordering::Release);
    let total: u64 = readers.into_iter().map(|h| h.join().unwrap()).sum();
    syncer.join().unwrap();
    assert!(total >= 300);
    let end = store.sync().unwrap();
    assert_eq!(end, store.append_position());
    assert_eq!(store.corruptions(), 0);
}

#[test]
fn default_config() {
    assert_eq!(StoreConfig::default().segment_size, 256 << 20);
}

#[test]
fn real_files_read_into_fresh_buffers_whole_or_not_at_all() {
    let tmp = TempDir::new("readvec");
    let file = tmp.dir().create("data").unwrap();
    let data = payload(7, 300_000);
    file.write_at(&data, 0).unwrap();
    assert_eq!(file.read_vec_at(data.len(), 0).unwrap(), data);
    assert_eq!(
        file.read_vec_at(1000, 4096).unwrap(),
        data[4096..5096].to_vec()
    );
    assert!(file.read_vec_at(0, 1 << 40).unwrap().is_empty());
    for (len, offset) in [(1000, 299_500), (10, 300_000), (1, 1 << 40)] {
        let err = file.read_vec_at(len, offset).unwrap_err();
        assert_eq!(
            err.kind(),
            std::io::ErrorKind::UnexpectedEof,
            "{len} bytes at {offset}"
        );
    }
}
