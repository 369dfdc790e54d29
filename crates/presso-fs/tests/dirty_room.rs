//! Writers that find the record buffers full of records still being written make room by
//! storing the least recently touched of them. Small random writes touch many records and
//! finish none; waiting for room then waited for the flusher's tick or the durability sweep,
//! which a record touched again and again never meets (fio 4K random writes over 2 × 256 MiB
//! ran at 25 MB/s).

mod sim;

use std::sync::mpsc;
use std::time::Duration;

use presso_fs::vfs::VfsConfig;
use presso_meta::{NewNode, ROOT_INO};

/// Record size of the default pool.
const RS: u64 = 128 << 10;
/// Records the file spreads over, four times what the buffers hold.
const RECORDS: u64 = 32;
/// Longest a test's writes may take; they take well under a second when room is made.
const DEADLINE: Duration = Duration::from_secs(30);

#[test]
fn small_writes_over_more_records_than_the_buffers_hold_make_room() {
    let config = VfsConfig {
        dirty_limit: (RECORDS / 4 * RS) as usize,
        // Neither the tick nor the sweep may be what makes room.
        flush_after: Duration::from_secs(3600),
        sync_interval: Duration::from_secs(3600),
        ..sim::vfs_config()
    };
    let (vfs, _pool, _) = sim::mounted_with(config);
    let ino = vfs
        .make_node(ROOT_INO, b"f", &NewNode::file(0o644, 0, 0))
        .unwrap()
        .ino;
    // 4 KiB at a time into every record in turn, each record touched again on every round.
    let mut expected = vec![0u8; (RECORDS * RS) as usize];
    let mut writes = Vec::new();
    for round in 0..4u64 {
        for record in 0..RECORDS {
            let offset = record * RS + ((round * 7 + record * 3) % 32) * 4096;
            let data: Vec<u8> = (0..4096u64)
                .map(|i| (i ^ record ^ (round * 13)) as u8 | 1)
                .collect();
            expected[offset as usize..offset as usize + 4096].copy_from_slice(&data);
            writes.push((offset, data));
        }
    }
    let size = writes
        .iter()
        .map(|(o, d)| o + d.len() as u64)
        .max()
        .unwrap();
    expected.truncate(size as usize);
    let (tx, rx) = mpsc::channel();
    let writer = vfs.clone();
    std::thread::spawn(move || {
        for (offset, data) in &writes {
            writer.write(ino, *offset, data).unwrap();
        }
        let _ = tx.send(());
    });
    rx.recv_timeout(DEADLINE)
        .expect("small random writes beyond the buffer limit waited for a tick or a sweep");
    let held = vfs.dirty_bytes();
    assert!(
        held <= (RECORDS / 4 * RS) as usize + RS as usize,
        "{held} bytes held"
    );
    check(&vfs, ino, &expected, "as written");
    vfs.sync_all().unwrap();
    check(&vfs, ino, &expected, "after a sync");
}

/// Reads the file a record at a time, as the kernel asks, and compares it with `expected`.
fn check(vfs: &presso_fs::vfs::Vfs, ino: u64, expected: &[u8], when: &str) {
    for (record, want) in expected.chunks(RS as usize).enumerate() {
        let got = vfs.read(ino, record as u64 * RS, RS as u32).unwrap();
        assert!(got[..] == want[..], "record {record} reads {when}");
    }
}
