//! The checked-in version-1 pool (tests/fixtures/pool-v1) must open and read back, byte for byte,
//! in every later build: files written with gzip, zstd, lz4 and off, a sparse file with a hole,
//! a tiny file kept inline, a symlink, a hard link and an extended attribute.
//!
//! Regenerate it (only when the format version changes, as a new fixture directory) with
//! `PRESSO_WRITE_FIXTURE=1 cargo test -p presso-fs --test fixture_pool`.

use std::path::{Path, PathBuf};

use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_meta::{NewNode, ROOT_INO};

fn fixture_dir() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).join("tests/fixtures/pool-v1")
}

/// Deterministic text-like bytes.
fn text(len: usize, seed: u64) -> Vec<u8> {
    let words = [
        "pool", "record", "frame", "segment", "deflate", "offload", "ratio", "quality", "read",
        "GATTACA", "\n", "chr7", "12345", "the", "of",
    ];
    let mut state = seed
        .wrapping_mul(6364136223846793005)
        .wrapping_add(1442695040888963407);
    let mut out = Vec::with_capacity(len + 16);
    while out.len() < len {
        state = state
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        out.extend_from_slice(words[(state >> 33) as usize % words.len()].as_bytes());
        out.push(b' ');
    }
    out.truncate(len);
    out
}

/// (directory, name, compression of the directory, contents)
fn files() -> Vec<(&'static str, &'static str, &'static str, Vec<u8>)> {
    let mut sparse = text(200_000, 5);
    sparse.extend(std::iter::repeat_n(0u8, 1 << 20));
    sparse.extend(text(70_000, 6));
    vec![
        ("gz", "text.txt", "gzip-6", text(400_000, 1)),
        ("zs", "text.txt", "zstd-3", text(300_000, 2)),
        ("lz", "text.txt", "lz4", text(200_000, 3)),
        ("raw", "text.txt", "off", text(100_000, 4)),
        ("gz", "sparse.bin", "gzip-6", sparse),
        (
            "gz",
            "tiny.txt",
            "gzip-6",
            b"a tiny file kept inline in the metadata\n".to_vec(),
        ),
    ]
}

fn write_fixture(dir: &Path) {
    let _ = std::fs::remove_dir_all(dir);
    Pool::create(dir, &[("compression".into(), "gzip-6".into())]).unwrap();
    let (pool, _) = Pool::open(dir, PoolOptions::default()).unwrap();
    let vfs = Vfs::new(pool.clone(), VfsConfig::default());
    let mut dirs = std::collections::HashMap::new();
    for (d, name, compression, data) in files() {
        let dino = *dirs.entry(d).or_insert_with(|| {
            let ino = vfs
                .make_node(ROOT_INO, d.as_bytes(), &NewNode::dir(0o755, 0, 0))
                .unwrap()
                .ino;
            vfs.set_prop(ino, "compression", compression).unwrap();
            ino
        });
        let ino = vfs
            .make_node(dino, name.as_bytes(), &NewNode::file(0o644, 0, 0))
            .unwrap()
            .ino;
        let fh = vfs.open(ino).unwrap();
        vfs.write(ino, 0, &data).unwrap();
        vfs.release(ino, fh).unwrap();
    }
    let gz = vfs.lookup(ROOT_INO, b"gz").unwrap().ino;
    let text = vfs.lookup(gz, b"text.txt").unwrap().ino;
    vfs.link(text, ROOT_INO, b"hardlink.txt").unwrap();
    vfs.make_node(ROOT_INO, b"link", &NewNode::symlink(b"gz/text.txt", 0, 0))
        .unwrap();
    vfs.setxattr(text, b"user.origin", b"fixture v1", 0)
        .unwrap();
    vfs.shutdown().unwrap();
    drop(vfs);
    // The readahead threads let go of the pool once the file layer is gone; the last reference
    // closes SQLite, which folds its write-ahead log into meta.db.
    while std::sync::Arc::strong_count(&pool) > 1 {
        std::thread::yield_now();
    }
    drop(pool);
    assert!(!dir.join("meta.db-wal").exists(), "SQLite kept its log");
    let _ = std::fs::remove_file(dir.join("presso.lock"));
}

fn copy_dir(from: &Path, to: &Path) {
    std::fs::create_dir_all(to).unwrap();
    for entry in std::fs::read_dir(from).unwrap() {
        let entry = entry.unwrap();
        std::fs::copy(entry.path(), to.join(entry.file_name())).unwrap();
    }
}

fn read_all(vfs: &Vfs, ino: u64) -> Vec<u8> {
    let size = vfs.getattr(ino).unwrap().size;
    let mut out = Vec::new();
    while (out.len() as u64) < size {
        let chunk = vfs.read(ino, out.len() as u64, 1 << 20).unwrap();
        assert!(!chunk.as_ref().is_empty(), "short read at {}", out.len());
        out.extend_from_slice(chunk.as_ref());
    }
    out
}

#[test]
fn version_1_pool_reads_back_in_this_build() {
    let fixture = fixture_dir();
    if std::env::var_os("PRESSO_WRITE_FIXTURE").is_some() {
        write_fixture(&fixture);
    }
    assert!(
        fixture.join("presso.pool").is_file(),
        "fixture missing; see this file's header"
    );
    // Opening takes the lock and may write; work on a copy.
    let work = std::env::temp_dir().join(format!("presso-fixture-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    copy_dir(&fixture, &work);
    let (pool, _) = Pool::open(&work, PoolOptions::default()).unwrap();
    let vfs = Vfs::new(pool.clone(), VfsConfig::default());
    let mut codecs = std::collections::BTreeSet::new();
    for (d, name, compression, data) in files() {
        let dino = vfs.lookup(ROOT_INO, d.as_bytes()).unwrap().ino;
        assert_eq!(vfs.get_prop(dino, "compression").unwrap().0, compression);
        let ino = vfs.lookup(dino, name.as_bytes()).unwrap().ino;
        assert_eq!(read_all(&vfs, ino), data, "{d}/{name}");
        for (_, rec) in pool.records(ino, ..).unwrap() {
            codecs.insert(rec.codec);
        }
    }
    // gzip, zstd, lz4 and off frames are all present.
    assert!(codecs.len() >= 4, "codecs in the fixture: {codecs:?}");
    let gz = vfs.lookup(ROOT_INO, b"gz").unwrap().ino;
    let text = vfs.lookup(gz, b"text.txt").unwrap();
    assert_eq!(text.nlink, 2);
    assert_eq!(vfs.lookup(ROOT_INO, b"hardlink.txt").unwrap().ino, text.ino);
    let link = vfs.lookup(ROOT_INO, b"link").unwrap().ino;
    assert_eq!(vfs.readlink(link).unwrap(), b"gz/text.txt");
    assert_eq!(
        vfs.getxattr(text.ino, b"user.origin").unwrap(),
        b"fixture v1"
    );
    let sparse = vfs.lookup(gz, b"sparse.bin").unwrap().ino;
    assert!(
        pool.records(sparse, ..).unwrap().len() < 12,
        "the zero megabyte is stored as holes"
    );
    let tiny = vfs.lookup(gz, b"tiny.txt").unwrap().ino;
    assert!(pool.record(tiny, 0).unwrap().unwrap().inline.is_some());
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert!(report.clean(), "{report:?}");
    assert_eq!(report.orphan_frames, 0);
    vfs.shutdown().unwrap();
    drop(vfs);
    drop(pool);
    let _ = std::fs::remove_dir_all(&work);
}

/// Writes into a version-1 pool go to a new segment of entry format 2 (the old segment stays
/// byte for byte as it was), and garbage collection copies the old untagged frames into tagged
/// entries naming their file and record: after it, every entry of the pool names the record the
/// metadata says it holds.
#[test]
fn version_1_frames_get_tags_when_collected() {
    let fixture = fixture_dir();
    let work = std::env::temp_dir().join(format!("presso-fixture-gc-{}", std::process::id()));
    let _ = std::fs::remove_dir_all(&work);
    copy_dir(&fixture, &work);
    let old_segment = std::fs::read(work.join("seg-1.dat")).unwrap();
    let (pool, _) = Pool::open(&work, PoolOptions::default()).unwrap();
    let vfs = Vfs::new(pool.clone(), VfsConfig::default());
    let gz = vfs.lookup(ROOT_INO, b"gz").unwrap().ino;
    let text = vfs.lookup(gz, b"text.txt").unwrap().ino;
    let mut expected = files()[0].3.clone();
    let fresh = text_bytes_for_overwrite();
    expected[..fresh.len()].copy_from_slice(&fresh);
    let fh = vfs.open(text).unwrap();
    vfs.write(text, 0, &fresh).unwrap();
    vfs.fsync(text).unwrap();
    vfs.release(text, fh).unwrap();
    assert_eq!(
        std::fs::read(work.join("seg-1.dat")).unwrap(),
        old_segment,
        "the version-1 segment changed"
    );
    assert!(pool.store().segments().len() >= 2);
    let report = maintenance::gc(&pool, 1.0, &mut |_| {}).unwrap();
    assert!(report.segments_collected >= 1, "{report:?}");
    assert!(
        !pool.store().segments().contains(&1),
        "segment 1 was not collected"
    );
    assert_eq!(read_all(&vfs, text), expected);
    for (d, name, _, data) in files().into_iter().skip(1) {
        let dino = vfs.lookup(ROOT_INO, d.as_bytes()).unwrap().ino;
        let ino = vfs.lookup(dino, name.as_bytes()).unwrap().ino;
        assert_eq!(read_all(&vfs, ino), data, "{d}/{name}");
    }
    // Every record in a segment is held by an entry whose tag names it.
    let mut checked = 0;
    for segment in pool.store().segments() {
        let scan = pool.store().entries(segment).unwrap();
        let mut tags = std::collections::HashMap::new();
        for (loc, tag) in scan.entries.iter().zip(&scan.tags) {
            tags.insert(loc.offset, tag.expect("an untagged entry"));
        }
        for ino in [text, vfs.lookup(gz, b"sparse.bin").unwrap().ino] {
            for (index, rec) in pool.records(ino, ..).unwrap() {
                if rec.inline.is_some() || rec.segment != segment {
                    continue;
                }
                let tag = tags[&rec.offset];
                assert_eq!((tag.ino, tag.index), (ino, index));
                assert_eq!(tag.record_size, 128 << 10);
                checked += 1;
            }
        }
    }
    assert!(checked > 5, "only {checked} records checked");
    let report = maintenance::scrub(&pool, &mut |_| {}).unwrap();
    assert!(report.clean(), "{report:?}");
    vfs.shutdown().unwrap();
    drop(vfs);
    drop(pool);
    let _ = std::fs::remove_dir_all(&work);
}

/// Bytes that overwrite the start of gz/text.txt (two records and a bit).
fn text_bytes_for_overwrite() -> Vec<u8> {
    text(300_000, 99)
}
