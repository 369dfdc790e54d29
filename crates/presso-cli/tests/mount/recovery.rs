//! Crash recovery: `kill -9` of the daemon keeps every fsynced byte.

use std::fs::File;
use std::io::Write;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

/// The contents the crash test appends: chunk `i` of an odd size.
fn chunk(i: u64) -> Vec<u8> {
    let mut c = text_like(i, 70_001);
    c[..8].copy_from_slice(&i.to_le_bytes());
    c
}

#[test]
fn kill_9_of_the_daemon_keeps_every_fsynced_byte() {
    let mut daemon = Daemon::start("kill9", &[]).unwrap_or_else(|e| panic!("{e}"));
    let mnt = daemon.mnt().to_path_buf();

    // A file unlinked while open when the daemon dies: the next mount removes it.
    std::fs::write(mnt.join("orphan"), text_like(99, 1 << 20)).unwrap();
    let orphan = File::open(mnt.join("orphan")).unwrap();
    orphan.sync_all().unwrap();
    std::fs::remove_file(mnt.join("orphan")).unwrap();

    let synced = Arc::new(AtomicU64::new(0));
    let path = mnt.join("log.bin");
    let writer = {
        let (synced, path) = (synced.clone(), path.clone());
        std::thread::spawn(move || -> std::io::Error {
            let mut file = match File::create(&path) {
                Ok(file) => file,
                Err(e) => return e,
            };
            let mut len = 0u64;
            for i in 0.. {
                let c = chunk(i);
                if let Err(e) = file.write_all(&c) {
                    return e;
                }
                len += c.len() as u64;
                if i % 8 == 7 {
                    if let Err(e) = file.sync_all() {
                        return e;
                    }
                    synced.store(len, Ordering::SeqCst);
                }
            }
            unreachable!()
        })
    };
    assert!(
        wait_until(Duration::from_secs(60), || synced.load(Ordering::SeqCst)
            >= 6 << 20),
        "the writer did not get 6 MB fsynced in time"
    );
    daemon.kill();
    let error = writer.join().expect("writer thread");
    eprintln!("the writer stopped with: {error}");
    let synced = synced.load(Ordering::SeqCst);
    // The orphan's descriptor keeps the dead mount busy.
    drop(orphan);
    daemon.detach().unwrap_or_else(|e| panic!("{e}"));
    // At once: the dead daemon's lock is gone with it.
    daemon.mount().unwrap_or_else(|e| panic!("{e}"));
    let data = std::fs::read(&path).unwrap();
    assert!(
        data.len() as u64 >= synced,
        "{} bytes survived, {synced} were fsynced",
        data.len()
    );
    let mut expected = Vec::with_capacity(data.len() + 70_001);
    let mut i = 0;
    while (expected.len() as u64) < synced {
        expected.extend(chunk(i));
        i += 1;
    }
    assert_eq!(expected.len() as u64, synced);
    assert_bytes_eq(&data[..synced as usize], &expected, "the fsynced prefix");
    let log = daemon.log_text();
    // The orphan's 1 MiB in 128K records.
    assert!(
        log.contains(": 8 records of files unlinked while open removed"),
        "the daemon's log: {log}"
    );
    let f = daemon.fixture();
    let logical = f.status()["logical_bytes"].as_u64().unwrap();
    assert!(
        logical <= data.len() as u64,
        "the orphan is still counted: {logical}"
    );

    let out = f.presso_on_mount(&["scrub", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["damaged"], serde_json::json!([]), "{report}");
    assert_eq!(report["damaged_entries"], serde_json::json!([]), "{report}");
    assert!(report["records_checked"].as_u64().unwrap() > 0, "{report}");
}

/// fsync(2) of a directory asks the daemon for a durable commit, as a file's does: a name is
/// its own metadata transaction at once, but only a durable commit makes it survive a power cut
/// (docs/design.md, "What a crash keeps"). The kernel answers success by itself for a daemon
/// without a handler, having done nothing, so only the daemon's count of groups shows it.
#[test]
fn fsync_of_a_directory_commits_durably() {
    let f = Fixture::new("fsyncdir");
    std::fs::create_dir(f.p("d")).unwrap();
    File::create(f.p("d/new")).unwrap();
    // A file's fsync commits whatever is pending, so nothing else is left to commit below.
    File::open(f.p("d/new")).unwrap().sync_all().unwrap();
    let txgs = || f.status()["txgs"].as_u64().expect("`txgs` in the status");
    let before = txgs();
    File::open(f.p("d")).unwrap().sync_all().unwrap();
    let after = txgs();
    assert!(
        after > before,
        "fsync of a directory committed no transaction group ({before} before it, {after} after)"
    );
}
