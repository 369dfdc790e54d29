//! The durability contract on real mounts: fsync, fdatasync, O_SYNC and O_DSYNC writes and
//! fsync on a directory are durable when they return; everything else the daemon received is
//! durable within `sync_interval`. Each test kills the daemon with SIGKILL at the moment the
//! contract says the data is safe, mounts the pool again and looks for every byte.
//!
//! A `kill -9` loses what only the daemon's memory held (partial records, queued sizes), not
//! what it had handed to the host's page cache; so each durability point is also checked on the
//! daemon's counter of durable commits (segment and metadata synced), which is what a power cut
//! needs. The in-process tests of presso-fs (tests/durability.rs) cut the power itself.

use std::fs::File;
use std::io::Write;
use std::os::unix::fs::OpenOptionsExt;
use std::os::unix::io::AsRawFd;
use std::path::Path;
use std::time::{Duration, Instant};

use crate::common::*;

/// `presso mount -f` as a child of the test, so that the test can SIGKILL it.
fn mount_foreground(f: &mut Fixture, options: &str) -> KillOnDrop {
    require_tool("fusermount3", "fuse3");
    let log = File::create(f.scratch("daemon.log")).unwrap();
    let child = std::process::Command::new(presso_bin())
        .arg("mount")
        .arg("-f")
        .arg("-o")
        .arg(options)
        .arg(&f.pool)
        .arg(&f.mnt)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start `presso mount -f`");
    let daemon = KillOnDrop(child);
    f.set_mounted(true);
    assert!(
        wait_until(Duration::from_secs(30), || is_mounted(&f.mnt)),
        "`presso mount -f -o {options}` did not mount"
    );
    daemon
}

/// SIGKILLs the daemon, detaches its dead mount and mounts the pool again (in the background,
/// default options), as a user would after a crash.
fn kill_9_and_remount(f: &mut Fixture, mut daemon: KillOnDrop) {
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(daemon.0.id() as i32, libc::SIGKILL) },
        0
    );
    let status = daemon.0.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL),
        "the daemon was not killed by the signal"
    );
    tool("fusermount3", &[&"-uz", &f.mnt]).ok();
    f.set_mounted(false);
    f.mount(&[]);
}

fn durable_commits(f: &Fixture) -> u64 {
    f.status()["durable_commits"]
        .as_u64()
        .expect("durable_commits in status")
}

/// Asserts that the daemon made a durable commit since `before` (what `what` promised).
fn assert_durable_commit(f: &Fixture, before: u64, what: &str) {
    let after = durable_commits(f);
    assert!(
        after > before,
        "{what} returned without a durable commit (durable_commits {before} before, {after} after)"
    );
}

/// Waits until the daemon reports nothing pending durability and returns how long that took
/// from `since`; fails the test if it does not happen within `limit`.
fn wait_durable(f: &Fixture, since: Instant, limit: Duration) -> Duration {
    let held = wait_until(limit, || f.status()["durability_pending"] == false);
    let waited = since.elapsed();
    assert!(
        held,
        "the daemon still reports changes pending durability {waited:?} after the last one"
    );
    waited
}

fn append(path: &Path, data: &[u8]) {
    let mut file = std::fs::OpenOptions::new().append(true).open(path).unwrap();
    file.write_all(data).unwrap();
}

/// Files of several shapes written without fsync (close hands the kernel's cached pages to the
/// daemon), and names made and changed: once the daemon reports them durable, within the
/// interval, a kill -9 loses nothing.
#[test]
fn what_the_daemon_received_survives_a_kill_once_the_interval_has_passed() {
    let mut f = Fixture::unmounted("durable-bound", &[]);
    let interval = Duration::from_secs(1);
    let daemon = mount_foreground(&mut f, "sync_interval=1");
    let before = durable_commits(&f);
    let rs = 128 << 10;
    let mut expected: Vec<(&str, Vec<u8>)> = Vec::new();

    let partial = text_like(1, 1000);
    std::fs::write(f.p("partial"), &partial).unwrap();
    expected.push(("partial", partial));

    let several = text_like(2, 3 * rs + 5000);
    std::fs::write(f.p("several"), &several).unwrap();
    expected.push(("several", several));

    let mut appended = text_like(3, 2 * rs);
    std::fs::write(f.p("appended"), &appended).unwrap();
    File::open(f.p("appended")).unwrap().sync_all().unwrap();
    let tail = random_bytes(4, 777);
    append(&f.p("appended"), &tail);
    appended.extend_from_slice(&tail);
    expected.push(("appended", appended));

    std::fs::create_dir(f.p("dir")).unwrap();
    let moved = text_like(5, 3000);
    std::fs::write(f.p("dir/old"), &moved).unwrap();
    std::fs::rename(f.p("dir/old"), f.p("dir/new")).unwrap();
    expected.push(("dir/new", moved));
    let last_change = Instant::now();

    // The bound itself is checked tightly in process; the margin here covers polling a separate
    // `presso status` process on a loaded machine.
    let waited = wait_durable(&f, last_change, interval + Duration::from_secs(4));
    assert_durable_commit(&f, before, "the durability sweep");
    eprintln!("durable {waited:?} after the last change (sync_interval=1)");
    kill_9_and_remount(&mut f, daemon);

    for (name, data) in &expected {
        let path = f.p(name);
        let size = std::fs::metadata(&path)
            .unwrap_or_else(|e| panic!("{name} after the kill: {e}"))
            .len();
        assert_eq!(size, data.len() as u64, "size of {name} after the kill");
        assert_file_eq(&path, data);
    }
    assert!(!f.p("dir/old").exists(), "dir/old came back after the kill");
}

/// `sync` hands the kernel's cached writes to the daemon, but the kernel sends a FUSE file
/// system no sync request (only virtiofs gets FUSE_SYNCFS), so the daemon cannot tell `sync`
/// from ordinary writeback and `sync` is not a durability point by itself. What holds: when it
/// returns the daemon has every byte, the mount still answers, and the interval makes the bytes
/// durable.
#[test]
fn after_sync_the_daemon_has_every_byte_and_the_interval_makes_them_durable() {
    let mut f = Fixture::unmounted("durable-sync", &[]);
    let daemon = mount_foreground(&mut f, "sync_interval=1");
    let data = text_like(6, (128 << 10) + 12345);
    // Kept open, not closed before the sync: its pages may still sit in the kernel's cache (the
    // kernel writes a FUSE mount's pages back early, so some may have reached the daemon).
    let mut file = File::create(f.p("open")).unwrap();
    file.write_all(&data).unwrap();
    tool("sync", &[]).ok();
    let synced = Instant::now();
    assert!(is_mounted(&f.mnt), "the mount is gone after sync");
    let written = f.status()["throughput"]["written_bytes"].as_u64().unwrap();
    assert!(
        written >= data.len() as u64,
        "after sync the daemon had received {written} bytes, the file holds {}",
        data.len()
    );
    let waited = wait_durable(&f, synced, Duration::from_secs(5));
    eprintln!("durable {waited:?} after sync (sync_interval=1)");
    kill_9_and_remount(&mut f, daemon);
    drop(file);
    assert_file_eq(&f.p("open"), &data);
}

/// One write(2) on a descriptor opened with `flag`, then SIGKILL at once: the bytes and the
/// size are there. The interval is an hour, so only the write's own durability can save them.
fn synchronous_write_survives_a_kill(flag: i32, what: &str) {
    let mut f = Fixture::unmounted("durable-osync", &[]);
    let daemon = mount_foreground(&mut f, "sync_interval=3600");
    let data = text_like(7, 3 * (128 << 10) + 999);
    File::create(f.p("file")).unwrap();
    let before = durable_commits(&f);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .custom_flags(flag)
        .open(f.p("file"))
        .unwrap();
    file.write_all(&data).unwrap();
    assert_durable_commit(&f, before, what);
    kill_9_and_remount(&mut f, daemon);
    drop(file);
    assert_file_eq(&f.p("file"), &data);
}

#[test]
fn an_o_sync_write_is_durable_when_it_returns() {
    synchronous_write_survives_a_kill(libc::O_SYNC, "an O_SYNC write");
}

#[test]
fn an_o_dsync_write_is_durable_when_it_returns() {
    synchronous_write_survives_a_kill(libc::O_DSYNC, "an O_DSYNC write");
}

#[test]
fn fdatasync_is_a_durability_point() {
    let mut f = Fixture::unmounted("durable-fdatasync", &[]);
    let daemon = mount_foreground(&mut f, "sync_interval=3600");
    let data = text_like(8, 5000);
    let mut file = File::create(f.p("file")).unwrap();
    file.write_all(&data).unwrap();
    let before = durable_commits(&f);
    file.sync_data().unwrap();
    assert_durable_commit(&f, before, "fdatasync");
    kill_9_and_remount(&mut f, daemon);
    drop(file);
    assert_file_eq(&f.p("file"), &data);
}

/// fsync on a directory after creating and renaming names in it makes them durable.
#[test]
fn fsync_of_a_directory_is_a_durability_point() {
    let mut f = Fixture::unmounted("durable-fsyncdir", &[]);
    let daemon = mount_foreground(&mut f, "sync_interval=3600");
    std::fs::create_dir(f.p("dir")).unwrap();
    std::fs::write(f.p("dir/first"), b"").unwrap();
    std::fs::rename(f.p("dir/first"), f.p("dir/renamed")).unwrap();
    std::fs::create_dir(f.p("dir/sub")).unwrap();
    let before = durable_commits(&f);
    let dir = File::open(f.p("dir")).unwrap();
    // SAFETY: fsync on a descriptor this test owns.
    let rc = unsafe { libc::fsync(dir.as_raw_fd()) };
    assert_eq!(rc, 0, "fsync of the directory: errno {}", errno());
    assert_durable_commit(&f, before, "fsync of a directory");
    kill_9_and_remount(&mut f, daemon);
    drop(dir);
    let mut names: Vec<String> = std::fs::read_dir(f.p("dir"))
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(names, ["renamed", "sub"], "names in dir after the kill");
}

/// fsync with nothing left to commit syncs the metadata's files without opening the database
/// file beside SQLite: closing such a descriptor drops the lock SQLite holds on the file for the
/// daemon, and another process could then open and change the metadata of a mounted pool.
#[test]
fn the_metadata_stays_locked_to_the_daemon_across_fsync() {
    let mut f = Fixture::new("durable-locked");
    std::fs::write(f.p("a"), b"written").unwrap();
    File::open(f.p("a")).unwrap().sync_all().unwrap();
    // Nothing pending now: these durable commits have nothing to apply.
    File::open(f.p("a")).unwrap().sync_all().unwrap();
    File::open(&f.mnt).unwrap().sync_all().unwrap();
    let other = rusqlite::Connection::open(f.pool.join("meta.db")).unwrap();
    other.busy_timeout(Duration::from_millis(200)).unwrap();
    let read = other.query_row("SELECT count(*) FROM inodes", [], |r| r.get::<_, i64>(0));
    assert!(
        read.is_err(),
        "another process read the metadata of a mounted pool: {read:?}"
    );
    drop(other);
    f.remount(&[]);
    assert_file_eq(&f.p("a"), b"written");
    f.unmount();
}

#[test]
fn syncfs_succeeds_after_files_were_written_and_removed() {
    let f = Fixture::new("syncfs-removed");
    // The kernel keeps the modification time of a written file and sends it with the inode's
    // writeback at the next sync, even when the file was removed (or renamed over) meanwhile.
    std::fs::write(f.p("removed"), b"gone soon").unwrap();
    std::fs::remove_file(f.p("removed")).unwrap();
    std::fs::write(f.p("config"), b"old").unwrap();
    std::fs::write(f.p("config.lock"), b"new").unwrap();
    std::fs::rename(f.p("config.lock"), f.p("config")).unwrap();
    syncfs(&f.mnt).expect("syncfs after a removal and a rename over a file (ext4: success)");
    assert_eq!(std::fs::read(f.p("config")).unwrap(), b"new");
}
