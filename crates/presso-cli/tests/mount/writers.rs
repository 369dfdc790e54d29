//! Concurrent and unusual writers: many threads on one file and on many, a shared writable
//! mmap, O_DIRECT writers and rewrites, and readers that follow appends through compression.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// Writes `data` to `file` as disjoint ranges of 1..`max_chunk` bytes, shuffled by `seed` and
/// dealt round-robin to `threads` concurrent writers.
fn write_in_shuffled_ranges(file: &File, data: &[u8], max_chunk: u64, seed: u64, threads: usize) {
    let mut ranges = Vec::new();
    let mut rng = Rng::new(seed);
    let mut pos = 0;
    while pos < data.len() {
        let n = (rng.range(1, max_chunk) as usize).min(data.len() - pos);
        ranges.push((pos, n));
        pos += n;
    }
    rng.shuffle(&mut ranges);
    std::thread::scope(|s| {
        for t in 0..threads {
            let ranges = &ranges;
            s.spawn(move || {
                for &(off, n) in ranges.iter().skip(t).step_by(threads) {
                    file.write_all_at(&data[off..off + n], off as u64).unwrap();
                }
            });
        }
    });
}

#[test]
fn concurrent_writers_to_one_file_and_to_many_files() {
    let mut f = Fixture::new("concurrent");
    // One file, disjoint unaligned ranges written by 6 threads in random order.
    let size = (24 << 20) + 5_555;
    let expected = text_like(31, size);
    let shared = f.p("shared.dat");
    let file = File::create(&shared).unwrap();
    write_in_shuffled_ranges(&file, &expected, 400_000, 32, 6);
    file.sync_all().unwrap();
    drop(file);

    // Many files, each written by its own thread in odd-sized chunks.
    let contents = |t: u64, i: u64| -> Vec<u8> {
        let n = ((t * 7 + i * 13) % 23) as usize * 37_000 + i as usize;
        if i.is_multiple_of(3) {
            random_bytes(t * 100 + i, n)
        } else {
            fastq_like(t * 100 + i, n)
        }
    };
    std::thread::scope(|s| {
        for t in 0..8u64 {
            let dir = f.p(&format!("t{t}"));
            s.spawn(move || {
                std::fs::create_dir(&dir).unwrap();
                for i in 0..12u64 {
                    let data = contents(t, i);
                    let mut file = File::create(dir.join(format!("f{i}"))).unwrap();
                    for chunk in data.chunks(10_007 + 1000 * t as usize) {
                        file.write_all(chunk).unwrap();
                    }
                    file.sync_all().unwrap();
                }
            });
        }
    });

    let check = |f: &Fixture| {
        assert_file_eq(&f.p("shared.dat"), &expected);
        for t in 0..8 {
            for i in 0..12 {
                assert_file_eq(&f.p(&format!("t{t}/f{i}")), &contents(t, i));
            }
        }
    };
    check(&f);
    f.remount(&[]);
    check(&f);
}

#[test]
fn shared_writable_mmap_persists() {
    let mut f = Fixture::new("mmap");
    let path = f.p("mapped.bin");
    let size = (3 << 20) + 12_345;
    let mut expected = text_like(61, size);
    std::fs::write(&path, &expected).unwrap();

    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    // SAFETY: mapping `size` bytes of a file of that size, shared, for reading and writing.
    let map = unsafe {
        libc::mmap(
            std::ptr::null_mut(),
            size,
            libc::PROT_READ | libc::PROT_WRITE,
            libc::MAP_SHARED,
            file.as_raw_fd(),
            0,
        )
    };
    assert_ne!(map, libc::MAP_FAILED, "mmap: errno {}", errno());
    // SAFETY: the mapping is `size` bytes long and nothing else aliases it in this process.
    let bytes = unsafe { std::slice::from_raw_parts_mut(map.cast::<u8>(), size) };
    assert_bytes_eq(bytes, &expected, "mapped contents before writing");
    let mut rng = Rng::new(62);
    for _ in 0..200 {
        let off = rng.below(size as u64 - 5000) as usize;
        let n = rng.range(1, 5000) as usize;
        let patch = random_bytes(off as u64, n);
        bytes[off..off + n].copy_from_slice(&patch);
        expected[off..off + n].copy_from_slice(&patch);
    }
    // Across a record boundary and at the very end.
    bytes[RECORD - 3..RECORD + 3].copy_from_slice(b"<span>");
    expected[RECORD - 3..RECORD + 3].copy_from_slice(b"<span>");
    bytes[size - 4..].copy_from_slice(b"END!");
    expected[size - 4..].copy_from_slice(b"END!");
    // SAFETY: the mapping made above, synced and unmapped once.
    unsafe {
        assert_eq!(
            libc::msync(map, size, libc::MS_SYNC),
            0,
            "msync: errno {}",
            errno()
        );
        assert_eq!(libc::munmap(map, size), 0, "munmap: errno {}", errno());
    }
    file.sync_all().unwrap();
    drop(file);

    assert_file_eq(&path, &expected);
    f.remount(&[]);
    assert_file_eq(&path, &expected);
}

#[test]
fn direct_io_writers_rewrites_and_renames_of_dirty_files() {
    let mut f = Fixture::new("direct");
    // Unaligned O_DIRECT writes from several threads reach the daemon as they are, without the
    // page cache merging them into pages.
    let size = (6 << 20) + 333;
    let expected = fastq_like(141, size);
    let path = f.p("direct.dat");
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    write_in_shuffled_ranges(&file, &expected, 90_000, 142, 4);
    assert_file_eq(&path, &expected);
    file.sync_all().unwrap();
    drop(file);

    // The same records rewritten again and again, each time flushed to the daemon.
    let hot = f.p("hot.dat");
    let mut current = text_like(143, 3 * RECORD + 99);
    std::fs::write(&hot, &current).unwrap();
    let file = OpenOptions::new()
        .write(true)
        .custom_flags(libc::O_DIRECT)
        .open(&hot)
        .unwrap();
    let mut rng = Rng::new(144);
    for round in 0..60u64 {
        let off = rng.below(current.len() as u64 - 70_000) as usize;
        let patch = random_bytes(round, rng.range(1, 70_000) as usize);
        file.write_all_at(&patch, off as u64).unwrap();
        current[off..off + patch.len()].copy_from_slice(&patch);
        if round.is_multiple_of(7) {
            file.sync_all().unwrap();
        }
    }
    drop(file);
    assert_file_eq(&hot, &current);

    // Truncated to nothing by O_TRUNC and rewritten while the old contents may still be in
    // compression.
    let edited = f.p("edited.txt");
    std::fs::write(&edited, text_like(145, 2 << 20)).unwrap();
    let new = text_like(146, 100_000);
    std::fs::write(&edited, &new).unwrap();

    // Renamed, and its directory renamed, before its data was ever flushed.
    std::fs::create_dir(f.p("from")).unwrap();
    let moved = text_like(147, (1 << 20) + 7);
    std::fs::write(f.p("from/moved.txt"), &moved).unwrap();
    std::fs::rename(f.p("from/moved.txt"), f.p("from/renamed.txt")).unwrap();
    std::fs::rename(f.p("from"), f.p("to")).unwrap();

    // Removed while its data was still being written.
    std::fs::write(f.p("gone.txt"), text_like(148, 3 << 20)).unwrap();
    std::fs::remove_file(f.p("gone.txt")).unwrap();

    assert_file_eq(&edited, &new);
    assert_file_eq(&f.p("to/renamed.txt"), &moved);
    f.remount(&[]);
    assert_file_eq(&path, &expected);
    assert_file_eq(&hot, &current);
    assert_file_eq(&edited, &new);
    assert_file_eq(&f.p("to/renamed.txt"), &moved);
    assert!(!f.p("gone.txt").exists());
    let logical = expected.len() + current.len() + new.len() + moved.len();
    assert_eq!(f.status()["logical_bytes"], logical as u64);
}

#[test]
fn readers_see_every_completed_append_while_records_move_through_compression() {
    let f = Fixture::new("overlay");
    let path = f.p("growing");
    let total = 12 << 20;
    let expected = Arc::new(text_like(181, total));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    // Reads completed: every few appends the writer waits for one more, so that reads overlap
    // the writer however fast it is.
    let reads = Arc::new(AtomicU64::new(0));
    let writer = {
        let (expected, done, appended, reads, path) = (
            expected.clone(),
            done.clone(),
            appended.clone(),
            reads.clone(),
            path.clone(),
        );
        std::thread::spawn(move || {
            let file = OpenOptions::new()
                .write(true)
                .create(true)
                .truncate(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .unwrap();
            let mut rng = Rng::new(182);
            let mut pos = 0;
            while pos < total {
                let n = (rng.range(1, 50_000) as usize).min(total - pos);
                file.write_all_at(&expected[pos..pos + n], pos as u64)
                    .unwrap();
                pos += n;
                appended.store(pos as u64, Ordering::SeqCst);
                if rng.below(40) == 0 {
                    file.sync_all().unwrap();
                }
                if rng.below(8) == 0 {
                    let seen = reads.load(Ordering::SeqCst);
                    let read = wait_until(Duration::from_secs(60), || {
                        reads.load(Ordering::SeqCst) > seen
                    });
                    assert!(read, "the reader made no progress in 60 s");
                }
            }
            done.store(true, Ordering::SeqCst);
        })
    };
    assert!(wait_until(Duration::from_secs(30), || path.exists()));
    let reader = OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(&path)
        .unwrap();
    let mut rounds = 0;
    let mut rng = Rng::new(183);
    while !done.load(Ordering::SeqCst) || rounds < 3 {
        // Everything appended before the read started must read back exactly.
        let upto = appended.load(Ordering::SeqCst) as usize;
        if upto == 0 {
            continue;
        }
        let from = rng.below(upto as u64) as usize;
        let mut got = vec![0u8; upto - from];
        reader.read_exact_at(&mut got, from as u64).unwrap();
        assert_bytes_eq(
            &got,
            &expected[from..upto],
            &format!("bytes {from}..{upto}"),
        );
        rounds += 1;
        reads.fetch_add(1, Ordering::SeqCst);
    }
    writer.join().unwrap();
    assert!(rounds > 10, "only {rounds} reads overlapped the writer");
    assert_file_eq(&path, &expected);
}
