//! Segments in an object store, against a model: random appends, writes into the staged tail,
//! syncs, reads, truncations (also below what was uploaded), reopens (a `kill -9`: the staging
//! file stays) and power cuts (the staging file's unsynced bytes lost), on a real S3 server.
//! After each step every read must give the model's bytes; after a power cut, exactly what the
//! last sync covered.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use presso_objects::segments::ObjectDir;
use presso_objects::test_server::TestServer;
use presso_objects::Objects;
use presso_store::io::segment_file_name;
use presso_store::{FsDir, Storage, StorageDir};
use proptest::prelude::*;

#[derive(Debug, Clone)]
enum Op {
    Append(u16),
    /// Writes into the staged tail at this fraction of it.
    WriteTail(u8, u16),
    Sync,
    Read(u16, u16),
    /// Truncates to this fraction (of 256) of the length.
    Truncate(u8),
    Reopen,
    PowerCut,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        4 => any::<u16>().prop_map(|n| Op::Append(n % 5000 + 1)),
        2 => (any::<u8>(), any::<u16>()).prop_map(|(f, n)| Op::WriteTail(f, n % 3000 + 1)),
        3 => Just(Op::Sync),
        3 => (any::<u16>(), any::<u16>()).prop_map(|(a, b)| Op::Read(a, b)),
        1 => any::<u8>().prop_map(Op::Truncate),
        1 => Just(Op::Reopen),
        1 => Just(Op::PowerCut),
    ]
}

struct Place {
    local: std::path::PathBuf,
    objects: Arc<Objects>,
}

impl Place {
    fn new() -> Place {
        static N: AtomicU64 = AtomicU64::new(0);
        let local = std::env::temp_dir().join(format!(
            "presso-objseg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&local).unwrap();
        let server = TestServer::shared();
        let objects =
            Objects::connect(&TestServer::fresh_url("segments"), &server.options()).unwrap();
        Place {
            local,
            objects: Arc::new(objects),
        }
    }

    fn dir(&self) -> ObjectDir {
        // Small cache blocks and budget, so that these small segments go through the cache and
        // evict from it.
        ObjectDir::new(
            FsDir::open(&self.local).unwrap(),
            self.objects.clone(),
            64 << 10,
        )
        .with_cache_block(4096)
    }
}

impl Drop for Place {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.local);
    }
}

fn bytes(seed: usize, n: usize) -> Vec<u8> {
    (0..n).map(|i| ((seed * 31 + i * 7) % 251) as u8).collect()
}

fn check(seg: &dyn Storage, model: &[u8], what: &str) -> Result<(), TestCaseError> {
    prop_assert_eq!(
        seg.len().unwrap(),
        model.len() as u64,
        "length after {}",
        what
    );
    if !model.is_empty() {
        let got = seg.read_vec_at(model.len(), 0).unwrap();
        prop_assert!(got == model, "bytes after {}", what);
    }
    Ok(())
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn segments_in_objects_behave_like_files(ops in proptest::collection::vec(op(), 1..40)) {
        let place = Place::new();
        let mut dir = place.dir();
        let mut seg = dir.create(&segment_file_name(7)).unwrap();
        let mut model: Vec<u8> = Vec::new();
        // What the last sync made durable (and truncations below it).
        let mut synced: Vec<u8> = Vec::new();
        for (i, op) in ops.iter().enumerate() {
            let what = format!("step {i} {op:?}");
            match *op {
                Op::Append(n) => {
                    let b = bytes(i, n as usize);
                    seg.write_at(&b, model.len() as u64).unwrap();
                    model.extend_from_slice(&b);
                }
                Op::WriteTail(f, n) => {
                    let tail = model.len() - synced.len();
                    let at = synced.len() + tail * f as usize / 256;
                    let b = bytes(i + 1000, n as usize);
                    seg.write_at(&b, at as u64).unwrap();
                    if model.len() < at + b.len() {
                        model.resize(at + b.len(), 0);
                    }
                    model[at..at + b.len()].copy_from_slice(&b);
                }
                Op::Sync => {
                    seg.sync().unwrap();
                    synced = model.clone();
                }
                Op::Read(a, b) => {
                    if !model.is_empty() {
                        let a = a as usize % model.len();
                        let b = (a + b as usize % 20_000).min(model.len());
                        let got = seg.read_vec_at(b - a, a as u64).unwrap();
                        prop_assert!(got[..] == model[a..b], "read {}..{} at {}", a, b, what);
                    }
                    let past = seg.read_vec_at(1, model.len() as u64);
                    prop_assert!(past.is_err(), "a read past the end at {}", what);
                }
                Op::Truncate(f) => {
                    let len = model.len() * f as usize / 256;
                    seg.set_len(len as u64).unwrap();
                    model.truncate(len);
                    synced.truncate(len);
                }
                Op::Reopen => {
                    drop(seg);
                    dir = place.dir();
                    seg = dir.open(&segment_file_name(7)).unwrap();
                }
                Op::PowerCut => {
                    drop(seg);
                    // The staging file keeps only what was in the object store.
                    let staging = place.local.join(segment_file_name(7));
                    let f = std::fs::OpenOptions::new().write(true).open(&staging).unwrap();
                    f.set_len(synced.len() as u64).unwrap();
                    model = synced.clone();
                    dir = place.dir();
                    seg = dir.open(&segment_file_name(7)).unwrap();
                }
            }
            check(&*seg, &model, &what)?;
        }
        // Removing the segment removes its objects and its staging file.
        drop(seg);
        dir.remove(&segment_file_name(7)).unwrap();
        prop_assert!(place.objects.list().unwrap().is_empty());
        prop_assert!(!place.local.join(segment_file_name(7)).exists());
    }
}

#[test]
fn a_segment_is_listed_and_cannot_be_created_twice() {
    let place = Place::new();
    let dir = place.dir();
    let seg = dir.create_segment(3).unwrap();
    seg.write_at(b"header", 0).unwrap();
    seg.sync().unwrap();
    assert_eq!(
        dir.create_segment(3).err().map(|e| e.kind()),
        Some(std::io::ErrorKind::AlreadyExists)
    );
    // Segment 30's objects share the start of segment 3's names, not their path.
    let other = dir.create_segment(30).unwrap();
    other.write_at(b"thirty bytes, not segment 3's", 0).unwrap();
    other.sync().unwrap();
    drop((seg, other));
    std::fs::remove_file(place.local.join(segment_file_name(3))).unwrap();
    // Only in the object store now: still a segment, still not creatable, and it reads back.
    let dir = place.dir();
    assert_eq!(dir.list_segments().unwrap(), vec![3, 30]);
    assert_eq!(dir.open_segment(3).unwrap().len().unwrap(), 6);
    assert!(dir.create_segment(3).is_err());
    assert_eq!(
        dir.open_segment(3).unwrap().read_vec_at(6, 0).unwrap(),
        b"header"
    );
    // Bytes in the object store are not written again.
    let seg = dir.open_segment(3).unwrap();
    assert_eq!(
        seg.write_at(b"x", 2).unwrap_err().kind(),
        std::io::ErrorKind::InvalidInput
    );
}

/// The pool store itself on a directory whose segments are objects: entries appended over
/// several segments and synced read back after the store is reopened (in a new directory
/// object, as after a restart), the store appends again after recovery, and the local staging
/// area holds no synced bytes.
#[test]
fn the_pool_store_runs_on_object_segments() {
    use std::collections::BTreeMap;
    use std::os::unix::fs::MetadataExt;

    use presso_store::{Committed, Store, StoreConfig};

    let place = Place::new();
    let config = StoreConfig {
        segment_size: 256 << 10,
        ..StoreConfig::default()
    };
    let store = Store::create(Arc::new(place.dir()), BTreeMap::new(), config).unwrap();
    let mut written = Vec::new();
    for i in 0..40 {
        let payload = bytes(i, 20_000 + i * 97);
        let loc = store.append(&payload).unwrap();
        written.push((loc, payload));
        if i % 7 == 6 {
            store.sync().unwrap();
        }
    }
    store.sync().unwrap();
    let segments: std::collections::BTreeSet<u64> =
        written.iter().map(|(l, _)| l.segment).collect();
    assert!(segments.len() >= 3, "several segments: {segments:?}");
    drop(store);
    for n in &segments {
        let staged = std::fs::metadata(place.local.join(segment_file_name(*n))).unwrap();
        assert!(
            staged.blocks() * 512 < 64 << 10,
            "segment {n}: {} bytes still staged after the sync",
            staged.blocks() * 512
        );
    }
    let mut committed = Committed::default();
    for (loc, _) in &written {
        committed.last_entries.insert(loc.segment, *loc);
        committed.highest_segment = committed.highest_segment.max(loc.segment);
    }
    let store = Store::open(Arc::new(place.dir()), config, &committed).unwrap();
    for (loc, payload) in &written {
        assert_eq!(&store.read(*loc).unwrap(), payload, "{loc:?}");
    }
    let more = bytes(99, 5_000);
    let loc = store.append(&more).unwrap();
    store.sync().unwrap();
    assert_eq!(store.read(loc).unwrap(), more);
}

/// Reads of uploaded bytes go through the cache: a block read once is not asked for again until
/// it is evicted, and a truncation drops the blocks it cuts.
#[test]
fn the_read_cache_saves_requests_and_forgets_what_truncation_cut() {
    use presso_objects::fault_proxy::FaultProxy;

    let server = TestServer::shared();
    let proxy = FaultProxy::start(&server.address()).unwrap();
    let opts = presso_objects::ObjectOptions {
        endpoint: Some(proxy.endpoint()),
        ..server.options()
    };
    let objects = Arc::new(Objects::connect(&TestServer::fresh_url("cache"), &opts).unwrap());
    let local = Place::new();
    // Two blocks of 64 KiB fit.
    let dir = ObjectDir::new(FsDir::open(&local.local).unwrap(), objects, 128 << 10)
        .with_cache_block(64 << 10);
    let seg = dir.create_segment(1).unwrap();
    let data = bytes(5, 300 << 10);
    seg.write_at(&data, 0).unwrap();
    seg.sync().unwrap();
    let read = |a: usize, b: usize| {
        let got = seg.read_vec_at(b - a, a as u64).unwrap();
        assert_eq!(got, &data[a..b]);
        proxy.requests()
    };
    let before = proxy.requests();
    let after_first = read(10, 100);
    assert_eq!(after_first, before + 1, "a first read fetches its block");
    assert_eq!(
        read(200, 60_000),
        after_first,
        "the same block again: no request"
    );
    let two = read(70_000, 70_100);
    assert_eq!(two, after_first + 1, "another block");
    assert_eq!(read(0, 10), two, "still cached");
    let three = read(140_000, 140_010);
    assert_eq!(
        three,
        two + 1,
        "a third block evicts the least recently used"
    );
    assert_eq!(
        read(0, 10),
        three,
        "block 0 was used more recently than block 1"
    );
    assert_eq!(read(70_000, 70_001), three + 1, "block 1 was evicted");
    // The end of the uploaded bytes is not a whole block: read directly each time.
    let tail = read(299 << 10, 300 << 10);
    assert_eq!(read(299 << 10, 300 << 10), tail + 1);
    // Truncating into block 1 and writing other bytes: block 1 is not served from the cache.
    seg.set_len(100_000).unwrap();
    let other = bytes(6, 60_000);
    seg.write_at(&other, 100_000).unwrap();
    seg.sync().unwrap();
    let got = seg.read_vec_at(40_000, 90_000).unwrap();
    assert_eq!(&got[..10_000], &data[90_000..100_000]);
    assert_eq!(&got[10_000..], &other[..30_000]);
}
