//! Partial overwrites of stored records read the record's other bytes only when they are
//! needed. A sequential overwrite in pieces that do not start at a record's start (the
//! kernel's writeback sends them so) read a quarter of what it wrote from the disk, each piece
//! waiting for it; now writes that cover a record whole never read its older version, and
//! those that leave bytes of it read them once, when the record is read, cut or stored.

mod sim;

use presso_meta::memory::MemoryEngine;
use sim::{Config, Fs, CONFIGS};

/// No compression, 4 KiB records, in segments of the simulated directory.
const CONFIG: Config = CONFIGS[0];
const RECORDS: u64 = 8;

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| b"written over in pieces "[(i % 23) as usize] ^ seed)
        .collect()
}

/// A pool with `f1` of `RECORDS` records committed and nothing of it in memory.
fn stored_file() -> (Fs, Vec<u8>) {
    let mut fs = Fs::new_with(&CONFIG, MemoryEngine::simulated());
    let old = pattern(1, RECORDS * CONFIG.recordsize);
    fs.create(1, 1).unwrap();
    fs.write(1, 0, &old).unwrap();
    fs.fsync(1).unwrap();
    fs.remount();
    (fs, old)
}

fn reads(fs: &Fs) -> u64 {
    fs.dir.io_stats().reads
}

#[test]
fn a_sequential_overwrite_in_unaligned_pieces_reads_nothing_it_overwrites() {
    let (mut fs, old) = stored_file();
    let rs = CONFIG.recordsize;
    // Every read fails: one of the old records would fail the overwrite and its fsync.
    fs.dir.fail_reads(libc::EIO);
    let new = pattern(2, RECORDS * rs);
    // Pieces of 3000 bytes from byte 1000 on, then the first 1000 bytes last.
    let mut at = 1000;
    while at < new.len() {
        let end = (at + 3000).min(new.len());
        fs.write(1, at as u64, &new[at..end]).unwrap();
        at = end;
    }
    fs.write(1, 0, &new[..1000]).unwrap();
    fs.fsync(1).unwrap();
    assert_eq!(fs.dir.io_stats().failed_reads, 0, "an old record was read");
    fs.dir.clear_faults();
    assert_eq!(fs.read(1, 0, new.len() as u64).unwrap(), new);
    fs.remount();
    assert_eq!(fs.read(1, 0, old.len() as u64).unwrap(), new);
    fs.scrub().unwrap();
}

#[test]
fn bytes_left_by_partial_writes_are_read_once_when_the_record_is_stored_or_read() {
    let (mut fs, old) = stored_file();
    let rs = CONFIG.recordsize;
    let mut expected = old.clone();
    let mut write = |fs: &mut Fs, at: u64, data: &[u8]| {
        fs.write(1, at, data).unwrap();
        expected[at as usize..at as usize + data.len()].copy_from_slice(data);
    };
    let before = reads(&fs);
    // Record 0: two pieces with a gap between them; record 1: its tail; record 2: its head.
    write(&mut fs, 100, b"first piece");
    write(&mut fs, 3000, b"second piece");
    write(&mut fs, 2 * rs - 50, &[7; 50]);
    write(&mut fs, 2 * rs, &[9; 60]);
    assert_eq!(reads(&fs), before, "a partial write waited for a read");
    // A read of record 0 reads its older version once, and shows both pieces over it.
    let got = fs.read(1, 0, rs).unwrap();
    assert_eq!(got, expected[..rs as usize]);
    let after_read = reads(&fs);
    assert!(
        after_read > before,
        "record 0 read without its older version"
    );
    assert_eq!(fs.read(1, 0, rs).unwrap(), expected[..rs as usize]);
    // Stored (at fsync): records 1 and 2 read their older versions then.
    fs.fsync(1).unwrap();
    assert!(
        reads(&fs) > after_read,
        "records 1 and 2 stored without their older bytes"
    );
    fs.remount();
    assert_eq!(fs.read(1, 0, old.len() as u64).unwrap(), expected);
    fs.scrub().unwrap();
}

/// A truncate into a record written in part, then growth past the cut: the older version's
/// bytes past the cut never come back, those below it do.
#[test]
fn a_cut_through_a_record_written_in_part_keeps_zeros_past_it() {
    let (mut fs, old) = stored_file();
    let rs = CONFIG.recordsize;
    fs.write(1, 3 * rs + 10, b"new bytes").unwrap();
    let cut = 3 * rs + 2000;
    fs.truncate(1, cut).unwrap();
    fs.truncate(1, 4 * rs).unwrap();
    let mut expected = old[..4 * rs as usize].to_vec();
    expected[3 * rs as usize + 10..3 * rs as usize + 19].copy_from_slice(b"new bytes");
    expected[cut as usize..].fill(0);
    assert_eq!(fs.read(1, 0, 4 * rs).unwrap(), expected);
    fs.fsync(1).unwrap();
    fs.remount();
    assert_eq!(fs.read(1, 0, 4 * rs).unwrap(), expected);
    fs.scrub().unwrap();
}
