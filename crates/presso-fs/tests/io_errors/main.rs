//! Host I/O errors under the pool, in process: the store's simulated directory and the memory
//! metadata engine inject EIO on segment writes, reads and syncs and on metadata commits and
//! reads, while the real file layer, pool and commit thread run above them.
//!
//! What every test holds the pool to: the error reaches the caller as EIO (no panic, no hang:
//! every call that could block runs with a deadline), data not stored stays in memory and
//! readable, nothing is reported durable that was not made durable — in particular no fsync
//! succeeds after a failed segment fsync, which may have dropped the unsynced writes — and a
//! reopen finds every byte an fsync reported durable, with a clean scrub.

#[path = "../sim/mod.rs"]
mod sim;

mod random;

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use presso_fs::pool::{OpenReport, Pool};
use presso_fs::vfs::Vfs;
use presso_fs::FsError;
use presso_meta::memory::MemoryEngine;
use presso_meta::{MetaStore, ROOT_INO};
use presso_store::segment::{segment_file_name, ENTRY_HEADER_LEN};
use sim::{Config, Fs, CONFIGS};

/// No compression, 4 KiB records: every record is a frame in a segment of its own size.
const CONFIG: Config = CONFIGS[0];
/// Longer than any of these calls takes on a loaded machine; reaching it means a hang.
const DEADLINE: Duration = Duration::from_secs(20);

fn pool() -> Fs {
    Fs::new_with(&CONFIG, MemoryEngine::simulated())
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| b"host I/O errors are reported "[(i % 29) as usize] ^ seed)
        .collect()
}

/// Runs `call` on the file layer with a deadline. On a hang the test fails, and the file layer
/// is leaked rather than shut down (which would hang too).
fn within<T: Send + 'static>(
    fs: &mut Fs,
    what: &str,
    call: impl FnOnce(&Vfs) -> T + Send + 'static,
) -> T {
    let vfs = fs.vfs().clone();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        let _ = tx.send(call(&vfs));
    });
    match rx.recv_timeout(DEADLINE) {
        Ok(result) => result,
        Err(_) => {
            std::mem::forget(fs.vfs.take());
            panic!("{what} did not return within {DEADLINE:?}");
        }
    }
}

fn expect_eio(result: Result<(), FsError>, what: &str) {
    match result {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{what}: {e}"),
        Ok(()) => panic!("{what} reported success"),
    }
}

/// Clean unmount with a deadline; its result.
fn unmount(fs: &mut Fs) -> Result<(), FsError> {
    let result = within(fs, "unmount", |vfs| vfs.shutdown());
    fs.vfs = None;
    result
}

/// Opens the pool again (after an unmount, failed or not) and returns what the open found.
fn reopen(fs: &mut Fs) -> OpenReport {
    let meta = MetaStore::new(Box::new(fs.meta.handle()));
    let (pool, report) = Pool::open_with(Arc::new(fs.dir.clone()), meta, sim::pool_options())
        .unwrap_or_else(|e| panic!("reopen: {e}"));
    fs.vfs = Some(Vfs::new(pool, sim::vfs_config()));
    fs.reopen_named();
    report
}

/// Cuts the power: unsynced segment writes lost, the metadata back at its last durable commit.
fn power_cut(fs: &mut Fs) {
    fs.dir.crash();
    fs.meta.crash(false);
    fs.halt();
    reopen(fs);
}

/// `f<id>` for test id `id`, holding `data`.
fn file_with(fs: &mut Fs, id: u64, data: &[u8]) {
    fs.create(id as u8, id).unwrap();
    fs.write(id, 0, data).unwrap();
}

fn check_file(fs: &mut Fs, id: u64, data: &[u8], when: &str) {
    assert_eq!(
        fs.size(id).unwrap(),
        data.len() as u64,
        "{when}: size of f{id}"
    );
    let got = fs.read(id, 0, data.len() as u64).unwrap();
    assert!(got == data, "{when}: the bytes of f{id} differ");
}

#[test]
fn a_failed_segment_write_fails_fsync_keeps_the_data_and_a_later_fsync_stores_it() {
    let mut fs = pool();
    let data = pattern(1, 3 * CONFIG.recordsize + 1000);
    fs.dir.fail_writes(libc::EIO);
    file_with(&mut fs, 1, &data);
    let ino = fs.ino_of(1).unwrap();
    for attempt in 0..2 {
        let result = within(&mut fs, "fsync", move |vfs| vfs.fsync(ino));
        expect_eio(
            result,
            &format!("fsync {attempt} under failing segment writes"),
        );
    }
    assert!(fs.dir.io_stats().failed_writes > 0);
    // Kept in memory: reads see it, status names it.
    check_file(&mut fs, 1, &data, "while writes fail");
    let unstored = fs.vfs().unstored();
    assert_eq!(unstored.files.len(), 1, "{unstored:?}");
    assert!(unstored.bytes > 0);

    fs.dir.clear_faults();
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once writes work");
    assert!(fs.vfs().unstored().is_empty());
    power_cut(&mut fs);
    check_file(&mut fs, 1, &data, "after a power cut");
    fs.scrub().unwrap();
}

/// The fsyncgate case: a failed segment fsync dropped the writes it could not make durable (a
/// later fsync of the segment file would succeed with nothing to write). No fsync of the pool
/// may succeed afterwards, and what was fsync'd before stays.
#[test]
fn no_fsync_succeeds_after_a_segment_fsync_that_dropped_writes() {
    let mut fs = pool();
    let kept = pattern(2, 2 * CONFIG.recordsize + 10);
    file_with(&mut fs, 1, &kept);
    fs.fsync(1).unwrap();
    // Armed first: the next sync of a segment holding new frames fails (that of a background
    // group or of the fsync below, whichever comes first).
    fs.dir.fail_next_sync_forgetting(libc::EIO);
    let dropped = pattern(3, 2 * CONFIG.recordsize);
    file_with(&mut fs, 2, &dropped);
    let (one, two) = (fs.ino_of(1).unwrap(), fs.ino_of(2).unwrap());
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(two)),
        "the fsync whose segment sync fails",
    );
    // The fault is used up: syncing the segment file would now succeed.
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(two)),
        "fsync again",
    );
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(one)),
        "fsync of another file",
    );
    expect_eio(within(&mut fs, "sync", |vfs| vfs.sync_all()), "sync");
    expect_eio(
        within(&mut fs, "fsync of a directory", |vfs| vfs.fsync_dir()),
        "fsync of a directory",
    );
    assert!(unmount(&mut fs).is_err(), "unmount reported success");

    let report = reopen(&mut fs);
    assert!(!report.found_damage(), "{report:?}");
    check_file(&mut fs, 1, &kept, "after reopening");
    fs.scrub().unwrap();
    // The pool works again.
    fs.write(2, 0, &dropped).unwrap();
    fs.fsync(2).unwrap();
    power_cut(&mut fs);
    check_file(&mut fs, 2, &dropped, "written again after the reopen");
}

/// A failed segment fsync stops the commit pipeline; everyone waiting for a commit must get an
/// error, not wait forever.
#[test]
fn fsync_sync_and_unmount_return_after_a_failed_segment_fsync() {
    let mut fs = pool();
    fs.dir.fail_next_sync(libc::EIO);
    let data = pattern(4, CONFIG.recordsize + 7);
    file_with(&mut fs, 1, &data);
    let ino = fs.ino_of(1).unwrap();
    expect_eio(within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)), "fsync");
    fs.write(1, 0, b"more").unwrap();
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)),
        "the next fsync",
    );
    expect_eio(within(&mut fs, "sync", |vfs| vfs.sync_all()), "sync");
    expect_eio(
        within(&mut fs, "fsync of a directory", |vfs| vfs.fsync_dir()),
        "fsync of a directory",
    );
    assert!(unmount(&mut fs).is_err(), "unmount reported success");
    reopen(&mut fs);
    fs.scrub().unwrap();
}

#[test]
fn a_failed_read_of_a_committed_record_fails_that_record_only() {
    let mut fs = pool();
    let rs = CONFIG.recordsize;
    let one = pattern(5, 4 * rs);
    let two = pattern(6, 2 * rs);
    file_with(&mut fs, 1, &one);
    file_with(&mut fs, 2, &two);
    fs.fsync(1).unwrap();
    fs.fsync(2).unwrap();
    // Cold: nothing in the overlay or the record cache.
    fs.remount();
    let ino = fs.ino_of(1).unwrap();
    let rec = fs.vfs().pool().record(ino, 2).unwrap().expect("record 2");
    let at = rec.offset + ENTRY_HEADER_LEN as u64 + 100;
    fs.dir
        .fail_reads_in(&segment_file_name(rec.segment), at..at + 1, libc::EIO);

    let vfs = fs.vfs().clone();
    match vfs.read(ino, 2 * rs, 100) {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(_) => panic!("read of the failing record succeeded"),
    }
    // A partial write into it is taken (its other bytes are read when the record is next
    // read or stored); reading the record still fails, and storing it fails the fsync,
    // which names the file as holding bytes not stored.
    let partial = b"partial";
    assert_eq!(vfs.write(ino, 2 * rs + 10, partial).unwrap(), partial.len());
    match vfs.read(ino, 2 * rs, 100) {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(_) => panic!("read of the written-over failing record succeeded"),
    }
    let syncing = vfs.clone();
    expect_eio(
        within(&mut fs, "fsync", move |_| syncing.fsync(ino)),
        "fsync of a record whose other bytes cannot be read",
    );
    let unstored = vfs.unstored();
    assert_eq!(
        unstored.files.iter().map(|f| f.ino).collect::<Vec<_>>(),
        [ino],
        "{unstored:?}"
    );
    assert!(unstored
        .error
        .is_some_and(|e| e.contains("could not be read")));
    for index in [0, 1, 3] {
        let got = vfs.read(ino, index * rs, rs as u32).unwrap();
        assert!(
            got[..] == one[(index * rs) as usize..((index + 1) * rs) as usize],
            "record {index}"
        );
    }
    check_file(&mut fs, 2, &two, "another file");
    assert!(fs.dir.io_stats().failed_reads > 0);
    // An I/O error is not damage in the pool: status must not count it as a corruption.
    let corruptions = &vfs.pool().counters().corruptions;
    assert_eq!(corruptions.load(std::sync::atomic::Ordering::Relaxed), 0);

    fs.dir.clear_faults();
    let mut expected = one.clone();
    let at = (2 * rs + 10) as usize;
    expected[at..at + partial.len()].copy_from_slice(partial);
    check_file(&mut fs, 1, &expected, "once reads work");
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once reads work");
    assert!(vfs.unstored().is_empty());
    drop(vfs);
    power_cut(&mut fs);
    check_file(&mut fs, 1, &expected, "after a power cut");
    fs.scrub().unwrap();
}

#[test]
fn failing_metadata_commits_fail_fsync_and_lose_nothing_once_cleared() {
    let mut fs = pool();
    let data = pattern(7, 3 * CONFIG.recordsize + 99);
    file_with(&mut fs, 1, &data);
    let ino = fs.ino_of(1).unwrap();
    fs.meta.fail_commits();
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)),
        "fsync under failing metadata commits",
    );
    assert!(fs.meta.fault_stats().failed_commits > 0);
    check_file(&mut fs, 1, &data, "while commits fail");
    // Namespace changes commit at once: they fail, and change nothing.
    let vfs = fs.vfs().clone();
    assert!(vfs.rename(ROOT_INO, b"f1", ROOT_INO, b"f9").is_err());
    assert_eq!(fs.list_names().unwrap(), vec![1]);

    fs.meta.clear_faults();
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once commits work");
    power_cut(&mut fs);
    check_file(&mut fs, 1, &data, "after a power cut");
    fs.scrub().unwrap();
}

#[test]
fn failing_metadata_reads_are_eio_and_come_back() {
    let mut fs = pool();
    let data = pattern(8, CONFIG.recordsize);
    file_with(&mut fs, 1, &data);
    fs.fsync(1).unwrap();
    fs.remount();
    fs.meta.fail_reads();
    let vfs = fs.vfs().clone();
    match vfs.lookup(ROOT_INO, b"f1") {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(_) => panic!("lookup succeeded with failing metadata reads"),
    }
    match vfs.readdir(ROOT_INO, None, 100) {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(_) => panic!("readdir succeeded with failing metadata reads"),
    }
    assert!(fs.meta.fault_stats().failed_reads >= 2);
    fs.meta.clear_faults();
    check_file(&mut fs, 1, &data, "once reads work");
}

/// Unmounting while every metadata commit fails: the unmount must end with an error in bounded
/// time (not retry forever), and the pool reopens with everything fsync'd before.
#[test]
fn unmount_ends_with_an_error_while_metadata_commits_keep_failing() {
    let mut fs = pool();
    let kept = pattern(9, 2 * CONFIG.recordsize + 3);
    file_with(&mut fs, 1, &kept);
    fs.fsync(1).unwrap();
    file_with(&mut fs, 2, &pattern(10, CONFIG.recordsize * 2));
    fs.meta.fail_commits();
    assert!(unmount(&mut fs).is_err(), "unmount reported success");
    fs.meta.clear_faults();
    reopen(&mut fs);
    check_file(&mut fs, 1, &kept, "after the failed unmount");
    fs.scrub().unwrap();
}

/// Data that cannot be stored when the pool is unmounted is lost with it: the unmount must say
/// so instead of succeeding, and every byte fsync'd before is still there.
#[test]
fn unmount_with_data_that_cannot_be_stored_reports_an_error() {
    let mut fs = pool();
    let kept = pattern(11, CONFIG.recordsize + 5);
    file_with(&mut fs, 1, &kept);
    fs.fsync(1).unwrap();
    fs.dir.fail_writes(libc::EIO);
    fs.write(1, 0, &pattern(12, 100)).unwrap();
    assert!(unmount(&mut fs).is_err(), "unmount reported success");
    fs.dir.clear_faults();
    reopen(&mut fs);
    check_file(&mut fs, 1, &kept, "after the failed unmount");
    fs.scrub().unwrap();
}

/// A store poisoned by a failed segment sync, closed: the open segment is cut back to the last
/// durable end, never below what the metadata committed, so every committed record still reads.
#[test]
fn a_poisoned_store_is_cut_on_close_never_below_the_committed_end() {
    let mut fs = pool();
    let rs = CONFIG.recordsize;
    let kept = pattern(13, 3 * rs);
    file_with(&mut fs, 1, &kept);
    fs.fsync(1).unwrap();
    let segment = fs.vfs().pool().store().current_segment();
    let committed_end = {
        let meta = MetaStore::new(Box::new(fs.meta.handle()));
        meta.records_in_segment(segment)
            .unwrap()
            .iter()
            .map(|r| r.rec.offset + ENTRY_HEADER_LEN as u64 + u64::from(r.rec.stored_len))
            .max()
            .expect("committed records in the open segment")
    };
    // Segment syncs fail from now on, and frames are appended past the committed end.
    fs.dir.fail_syncs(libc::EIO);
    file_with(&mut fs, 2, &pattern(14, 4 * rs));
    let two = fs.ino_of(2).unwrap();
    expect_eio(within(&mut fs, "fsync", move |vfs| vfs.fsync(two)), "fsync");
    fs.dir.clear_faults();
    assert!(unmount(&mut fs).is_err(), "unmount reported success");
    let len = fs.dir.contents(&segment_file_name(segment)).unwrap().len() as u64;
    assert!(
        len >= committed_end,
        "segment {segment} cut to {len}, below the committed end {committed_end}"
    );
    fs.dir.crash();
    fs.meta.crash(false);
    let report = reopen(&mut fs);
    assert!(!report.found_damage(), "{report:?}");
    assert_eq!(report.torn_bytes, 0, "the close left no tail to cut");
    check_file(&mut fs, 1, &kept, "after the reopen");
    fs.scrub().unwrap();
}

/// The durability sweep must not report data durable that it could not store: while segment
/// writes fail, the change stays pending (and is retried); once they work, the next sweep makes
/// it durable without any fsync.
#[test]
fn the_sweep_keeps_unstored_data_pending_and_stores_it_once_writes_work() {
    let mut fs = pool();
    fs.close();
    fs.mount_with(presso_fs::vfs::VfsConfig {
        flush_after: Duration::from_secs(3600),
        sync_interval: Duration::from_millis(200),
        ..sim::vfs_config()
    })
    .unwrap();
    let sweeps = |vfs: &Vfs| {
        vfs.pool()
            .counters()
            .durable_commits
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let vfs = fs.vfs().clone();
    let start = sweeps(&vfs);
    fs.dir.fail_writes(libc::EIO);
    let data = pattern(15, CONFIG.recordsize / 2);
    file_with(&mut fs, 1, &data);
    // Only a sweep stores a partial record here.
    wait_for("a sweep over the write", || {
        fs.dir.io_stats().failed_writes > 0 && sweeps(&vfs) > start
    });
    let swept = sweeps(&vfs);
    wait_for("the sweep to retry the record it could not store", || {
        sweeps(&vfs) > swept
    });
    assert!(
        vfs.durability_pending(),
        "data that could not be stored is reported durable"
    );
    fs.dir.clear_faults();
    wait_for("the sweep to store the data", || {
        !vfs.durability_pending() && vfs.unstored().is_empty()
    });
    drop(vfs);
    power_cut(&mut fs);
    check_file(&mut fs, 1, &data, "after a power cut");
}

/// Polls `condition` (a bounded wait on background threads, not synchronisation between the
/// test's own steps) until it holds, failing the test after [`DEADLINE`].
fn wait_for(what: &str, mut condition: impl FnMut() -> bool) {
    let start = std::time::Instant::now();
    while !condition() {
        assert!(start.elapsed() < DEADLINE, "waited {DEADLINE:?} for {what}");
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Writers wait while the record buffers are full; when records cannot be stored at all, no
/// room will come, and a writer must get the error instead of waiting forever. What was written
/// before stays, and is stored once writes work.
#[test]
fn writers_get_the_error_instead_of_waiting_when_nothing_can_be_stored() {
    let rs = CONFIG.recordsize;
    let mut fs = pool();
    fs.close();
    fs.mount_with(presso_fs::vfs::VfsConfig {
        dirty_limit: 4 * rs as usize,
        ..sim::vfs_config()
    })
    .unwrap();
    fs.create(1, 1).unwrap();
    let ino = fs.ino_of(1).unwrap();
    fs.dir.fail_writes(libc::EIO);
    let data = pattern(16, 16 * rs);
    let chunks = data.clone();
    let (written, result) = within(&mut fs, "writes with nothing stored", move |vfs| {
        let mut written = 0;
        for chunk in chunks.chunks(rs as usize) {
            if let Err(e) = vfs.write(ino, written, chunk) {
                return (written, Err(e));
            }
            written += chunk.len() as u64;
        }
        (written, Ok(()))
    });
    expect_eio(result, "writing past the buffer limit");
    assert!(written < data.len() as u64);
    let data = &data[..written as usize];
    check_file(&mut fs, 1, data, "while writes fail");

    fs.dir.clear_faults();
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once writes work");
    power_cut(&mut fs);
    check_file(&mut fs, 1, data, "after a power cut");
}

/// A write over two records whose second needs its old bytes (a partial overwrite) and cannot
/// read them: the write is taken whole, the fsync fails (and, like every later call, returns:
/// a record taken for compression while another failed once left every later fsync and the
/// unmount waiting for it forever), and once reads work again the next fsync stores both.
#[test]
fn a_write_failing_midway_on_a_read_leaves_nothing_waiting() {
    let rs = CONFIG.recordsize;
    let mut fs = pool();
    let old = pattern(17, 2 * rs);
    file_with(&mut fs, 1, &old);
    fs.fsync(1).unwrap();
    fs.remount();
    let ino = fs.ino_of(1).unwrap();
    let rec = fs.vfs().pool().record(ino, 1).unwrap().expect("record 1");
    let at = rec.offset + ENTRY_HEADER_LEN as u64;
    fs.dir
        .fail_reads_in(&segment_file_name(rec.segment), at..at + 1, libc::EIO);
    // Record 0 whole (no read needed), then the first bytes of record 1 (a read needed).
    let new = pattern(18, rs + 10);
    let written = new.clone();
    let result = within(&mut fs, "write", move |vfs| vfs.write(ino, 0, &written));
    assert_eq!(result.unwrap(), new.len());
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)),
        "fsync of a record whose other bytes cannot be read",
    );
    fs.dir.clear_faults();
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once reads work");
    let mut expected = old.clone();
    expected[..new.len()].copy_from_slice(&new);
    check_file(&mut fs, 1, &expected, "after the fsync");
    power_cut(&mut fs);
    check_file(&mut fs, 1, &expected, "after a power cut");
    fs.scrub().unwrap();
}

/// A record rewritten but not committed yet reads from its new frame; when that read fails, the
/// answer is EIO, never the record's older committed version (which a read-modify-write would
/// then write back over the new bytes).
#[test]
fn a_failed_read_of_an_uncommitted_record_never_returns_its_older_version() {
    let rs = CONFIG.recordsize;
    let mut fs = pool();
    let old = pattern(19, 2 * rs);
    file_with(&mut fs, 1, &old);
    fs.fsync(1).unwrap();
    fs.remount();
    // The committed records are in the record cache now.
    check_file(&mut fs, 1, &old, "before");
    let ino = fs.ino_of(1).unwrap();
    // Record 0 rewritten and stored, its commit held back.
    fs.meta.fail_commits();
    let new = pattern(20, rs);
    fs.write(1, 0, &new).unwrap();
    expect_eio(
        within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)),
        "fsync under failing metadata commits",
    );
    fs.dir.fail_reads(libc::EIO);
    let vfs = fs.vfs().clone();
    match vfs.read(ino, 0, rs as u32) {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(got) => assert!(got[..] == new[..], "the read returned the older version"),
    }
    // A partial write into it must not be built on the older version either.
    match vfs.write(ino, 10, b"partial") {
        Err(e) => assert_eq!(e.errno(), libc::EIO, "{e}"),
        Ok(_) => {
            let mut expected = new.clone();
            expected[10..17].copy_from_slice(b"partial");
            fs.dir.clear_faults();
            let got = vfs.read(ino, 0, rs as u32).unwrap();
            assert!(
                got[..] == expected[..],
                "the write was built on the older version"
            );
        }
    }
    drop(vfs);
    fs.dir.clear_faults();
    fs.meta.clear_faults();
    within(&mut fs, "fsync", move |vfs| vfs.fsync(ino)).expect("fsync once faults clear");
    power_cut(&mut fs);
    let got = fs.read(1, 0, rs).unwrap();
    assert!(
        got[17..] == new[17..],
        "record 0 after the power cut holds older bytes"
    );
}
