//! Nothing the tools do on their own hides or destroys data: metadata that is missing, empty,
//! garbage or of another pool is refused without changing a byte of the pool; a clean unmount
//! leaves a pool that copies whole without its write-ahead log; create and mount refuse
//! directories that hold something.

use std::collections::BTreeMap;
use std::path::{Path, PathBuf};

use crate::common::*;

/// Every file of a directory tree (relative path -> bytes).
fn snapshot(dir: &Path) -> BTreeMap<PathBuf, Vec<u8>> {
    let mut out = BTreeMap::new();
    let mut todo = vec![dir.to_path_buf()];
    while let Some(d) = todo.pop() {
        for entry in std::fs::read_dir(&d).unwrap() {
            let path = entry.unwrap().path();
            if path.is_dir() {
                todo.push(path);
            } else {
                let rel = path.strip_prefix(dir).unwrap().to_path_buf();
                out.insert(rel, std::fs::read(&path).unwrap());
            }
        }
    }
    out
}

/// Asserts a refused command changed no file of the pool.
fn assert_unchanged(pool: &Path, before: &BTreeMap<PathBuf, Vec<u8>>, what: &str) {
    let after = snapshot(pool);
    let names = |m: &BTreeMap<PathBuf, Vec<u8>>| m.keys().cloned().collect::<Vec<_>>();
    // The daemon's log may grow with the refusal; nothing else may change.
    let log = Path::new("presso.log");
    let strip = |m: &BTreeMap<PathBuf, Vec<u8>>| {
        let mut m = m.clone();
        m.remove(log);
        m
    };
    assert_eq!(
        names(&strip(&after)),
        names(&strip(before)),
        "{what}: the pool's files changed"
    );
    for (name, bytes) in strip(before) {
        assert!(
            after[&name] == bytes,
            "{what}: {} changed ({} bytes before, {} after)",
            name.display(),
            bytes.len(),
            after[&name].len()
        );
    }
}

/// A pool with a few files in it, unmounted; returns the files written.
fn pool_with_files(f: &mut Fixture) -> Vec<(String, Vec<u8>)> {
    f.mount(&[]);
    let files: Vec<(String, Vec<u8>)> = (0..4)
        .map(|i| (format!("file{i}"), text_like(i, 300_000 + i as usize * 7)))
        .collect();
    std::fs::create_dir(f.p("dir")).unwrap();
    for (name, data) in &files {
        std::fs::write(f.p(&format!("dir/{name}")), data).unwrap();
    }
    f.unmount();
    files
}

fn assert_files(f: &Fixture, files: &[(String, Vec<u8>)]) {
    for (name, data) in files {
        assert_file_eq(&f.p(&format!("dir/{name}")), data);
    }
}

#[test]
fn metadata_that_is_missing_empty_garbage_or_foreign_is_refused_untouched() {
    let mut f = Fixture::unmounted("meta-refused", &[]);
    let files = pool_with_files(&mut f);
    let meta = f.pool.join("meta.db");
    let good = std::fs::read(&meta).unwrap();
    let mut other = Fixture::unmounted("meta-other", &[]);
    pool_with_files(&mut other);
    let foreign = std::fs::read(other.pool.join("meta.db")).unwrap();

    let cases: [(&str, Option<Vec<u8>>, &str); 4] = [
        ("missing", None, "meta.db"),
        ("empty", Some(Vec::new()), "empty"),
        ("garbage", Some(random_bytes(7, 64 << 10)), "meta.db"),
        ("of another pool", Some(foreign), "another pool"),
    ];
    for (what, content, says) in cases {
        match &content {
            None => std::fs::remove_file(&meta).unwrap(),
            Some(bytes) => std::fs::write(&meta, bytes).unwrap(),
        }
        let before = snapshot(&f.pool);
        let mut mount = presso();
        mount.arg("mount").arg(&f.pool).arg(&f.mnt);
        let err = exec(&mut mount).fails();
        assert!(!is_mounted(&f.mnt), "{what} metadata was mounted");
        assert!(
            err.contains(says),
            "{what} metadata: the message does not say so: {err}"
        );
        assert!(
            err.contains("presso recover") || err.contains("backup"),
            "{what} metadata: the message does not say what to do: {err}"
        );
        assert_unchanged(&f.pool, &before, &format!("mount with {what} metadata"));
        for sub in ["scrub", "gc", "status"] {
            exec(presso().arg(sub).arg(&f.pool)).fails();
            assert_unchanged(&f.pool, &before, &format!("{sub} with {what} metadata"));
        }
    }

    std::fs::write(&meta, &good).unwrap();
    f.mount(&[]);
    assert_files(&f, &files);
}

#[test]
fn a_clean_unmount_leaves_a_pool_that_copies_without_its_log() {
    let mut f = Fixture::unmounted("self-contained", &[]);
    let files = pool_with_files(&mut f);
    for log in ["meta.db-wal", "meta.db-shm"] {
        assert!(
            !f.pool.join(log).exists(),
            "{log} is left after a clean unmount"
        );
    }
    // A backup that copies only the database file and the segments.
    let copy = f.scratch("copy");
    std::fs::create_dir(&copy).unwrap();
    for entry in std::fs::read_dir(&f.pool).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if !name.starts_with("meta.db-") && path.is_file() {
            std::fs::copy(&path, copy.join(&name)).unwrap();
        }
    }
    let mut restored = Fixture::create_in_existing(copy, f.scratch("copy-mnt"));
    restored.mount(&[]);
    assert_files(&restored, &files);
    restored.unmount();

    // And the everyday tools, each copying the whole directory.
    let pool = f.pool.display().to_string();
    for (tool, script) in [
        ("cp -a", "cp -a \"$1\" \"$2\""),
        (
            "tar",
            "mkdir \"$2\" && tar -C \"$1\" -cf - . | tar -C \"$2\" -xf -",
        ),
        ("rsync -a", "rsync -a \"$1/\" \"$2/\""),
    ] {
        let copy = f.scratch(&format!("copy-{}", tool.replace(' ', "")));
        let copy_arg = copy.display().to_string();
        exec(cmd("sh", ["-c", script, "copy", &pool, &copy_arg])).ok();
        let mut restored =
            Fixture::create_in_existing(copy, f.scratch(&format!("mnt-{}", tool.replace(' ', ""))));
        restored.mount(&[]);
        assert_files(&restored, &files);
        restored.unmount();
    }
}

#[test]
fn create_and_mount_refuse_directories_that_hold_something() {
    let f = Fixture::unmounted("refusals", &[]);
    let busy = f.scratch("busy");
    std::fs::create_dir(&busy).unwrap();
    std::fs::write(busy.join("thesis.tex"), b"years of work").unwrap();

    let err = exec(presso().arg("create").arg(&busy)).fails();
    assert!(err.contains("--force"), "no way forward in: {err}");
    assert_eq!(std::fs::read_dir(&busy).unwrap().count(), 1);
    exec(presso().arg("create").arg("--force").arg(&busy)).ok();
    assert_eq!(
        std::fs::read(busy.join("thesis.tex")).unwrap(),
        b"years of work"
    );
    // Never over a pool, not even forced.
    let err = exec(presso().arg("create").arg("--force").arg(&f.pool)).fails();
    assert!(err.contains("already"), "{err}");

    // A mount point with files in it would hide them.
    let mnt = f.scratch("full-mnt");
    std::fs::create_dir(&mnt).unwrap();
    std::fs::write(mnt.join("notes"), b"hidden?").unwrap();
    let err = exec(presso().arg("mount").arg(&f.pool).arg(&mnt)).fails();
    assert!(err.contains("nonempty"), "no way forward in: {err}");
    assert!(!is_mounted(&mnt));
    let mut over = Fixture::create_in_existing(f.pool.clone(), mnt.clone());
    over.mount(&["nonempty"]);
    assert!(
        !over.p("notes").exists(),
        "the mount does not cover the directory"
    );
    over.unmount();
    assert_eq!(std::fs::read(mnt.join("notes")).unwrap(), b"hidden?");

    // A pool inside its own mount point would vanish under the mount.
    let outer = f.scratch("outer");
    exec(presso().arg("create").arg(outer.join("pool"))).ok();
    let err = exec(presso().arg("mount").arg(outer.join("pool")).arg(&outer)).fails();
    assert!(err.contains("inside"), "{err}");
    assert!(!is_mounted(&outer));
}

#[test]
fn a_mount_left_by_a_killed_daemon_is_named_and_removed() {
    let mut f = Fixture::unmounted("dead-mount", &[]);
    f.mount(&[]);
    let data = text_like(5, 200_000);
    std::fs::write(f.p("kept"), &data).unwrap();
    std::fs::File::open(f.p("kept"))
        .unwrap()
        .sync_all()
        .unwrap();
    // A file still open when the daemon dies keeps its dead mount busy.
    let still_open = std::fs::File::open(f.p("kept")).unwrap();
    // The lock file names the daemon holding the pool.
    let pid: i32 = std::fs::read_to_string(f.pool.join("presso.lock"))
        .unwrap()
        .trim()
        .parse()
        .expect("the lock file holds the daemon's pid");
    // SAFETY: signalling the daemon this test started.
    assert_eq!(unsafe { libc::kill(pid, libc::SIGKILL) }, 0);
    assert!(
        wait_until(std::time::Duration::from_secs(10), || {
            std::fs::metadata(&f.mnt)
                .err()
                .and_then(|e| e.raw_os_error())
                == Some(libc::ENOTCONN)
        }),
        "the mount point did not go stale"
    );

    let mut again = presso();
    again.arg("mount").arg(&f.pool).arg(&f.mnt);
    let err = exec(&mut again).fails();
    assert!(err.contains("presso unmount"), "no way forward in: {err}");
    let out = exec(presso().arg("unmount").arg(&f.mnt)).ok();
    assert!(out.contains("dead mount"), "{out}");
    assert!(out.contains("still open"), "{out}");
    assert!(!is_mounted(&f.mnt));
    drop(still_open);
    f.set_mounted(false);
    f.mount(&[]);
    assert_file_eq(&f.p("kept"), &data);
}

/// The envelope header length of the entry at `at`: 48 bytes for format 2 (`PEN2`), which this
/// build writes, 16 for format 1 (`PENT`).
fn envelope_len(segment: &[u8], at: usize) -> usize {
    if &segment[at..at + 4] == b"PEN2" {
        48
    } else {
        16
    }
}

/// Where the last entry of a segment file starts (following the envelopes' lengths).
fn last_entry_offset(segment: &[u8]) -> usize {
    let mut at = 40;
    let mut last = None;
    while at + 16 <= segment.len() {
        let len = u32::from_le_bytes(segment[at + 4..at + 8].try_into().unwrap()) as usize;
        last = Some(at);
        at += envelope_len(segment, at) + len;
    }
    last.expect("the segment holds no entry")
}

/// A flipped byte in the last committed entry of the last segment, which recovery once took for
/// a torn tail and cut with everything after it: the pool mounts and says so, only the record
/// holding the byte fails to read (EIO), every other file reads back, nothing is cut, and
/// `presso scrub` names the file and offset and exits non-zero.
#[test]
fn damage_in_the_last_committed_entry_costs_only_its_record() {
    let mut f = Fixture::unmounted("last-entry", &[]);
    let files = pool_with_files(&mut f);
    let last = std::fs::read_dir(&f.pool)
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter_map(|n| {
            let number = n.strip_prefix("seg-")?.strip_suffix(".dat")?.parse::<u64>();
            Some((number.ok()?, n))
        })
        .max()
        .expect("a segment file")
        .1;
    let segment = f.pool.join(last);
    let mut bytes = std::fs::read(&segment).unwrap();
    let last = last_entry_offset(&bytes);
    let at = last + envelope_len(&bytes, last) + 10;
    bytes[at] ^= 0x5a;
    std::fs::write(&segment, &bytes).unwrap();

    f.mount(&[]);
    let log = std::fs::read_to_string(f.pool.join("presso.log")).unwrap_or_default();
    assert!(
        log.contains("damaged below its committed entries") && log.contains("presso scrub"),
        "the mount did not report the damage:\n{log}"
    );
    let mut failed = Vec::new();
    for (name, data) in &files {
        match std::fs::read(f.p(&format!("dir/{name}"))) {
            Ok(got) => assert_bytes_eq(&got, data, name),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::EIO), "{name}: {e}");
                failed.push(name.clone());
            }
        }
    }
    assert_eq!(failed.len(), 1, "files that failed to read: {failed:?}");
    let out = f.presso_on_mount(&["scrub"]);
    let listing = out.stdout.clone();
    out.fails();
    let named = format!("/dir/{} at offset ", failed[0]);
    assert!(
        listing.contains(&named),
        "scrub does not name {named:?}:\n{listing}"
    );
    f.unmount();
    assert_eq!(
        std::fs::read(&segment).unwrap(),
        bytes,
        "the damaged segment changed"
    );
}

/// The pool keeps its own copy of the metadata, refreshed at every clean unmount: with meta.db
/// deleted, emptied or overwritten, the refusal names the copy, and copying it over meta.db
/// gives back every file.
#[test]
fn the_metadata_copy_gives_back_a_pool_whose_metadata_is_lost() {
    let mut f = Fixture::unmounted("meta-copy", &[]);
    let files = pool_with_files(&mut f);
    let meta = f.pool.join("meta.db");
    let copy = f.pool.join("meta.db.copy");
    assert!(copy.is_file(), "no metadata copy after a clean unmount");
    let damages: [(&str, &dyn Fn()); 3] = [
        ("deleted", &|| std::fs::remove_file(&meta).unwrap()),
        ("emptied", &|| std::fs::write(&meta, b"").unwrap()),
        ("overwritten", &|| {
            std::fs::write(&meta, text_like(9, 8192)).unwrap()
        }),
    ];
    for (what, damage) in damages {
        damage();
        let refused = exec(presso().arg("mount").arg(&f.pool).arg(&f.mnt)).fails();
        assert!(
            refused.contains("meta.db.copy"),
            "{what}: the refusal does not name the copy: {refused}"
        );
        std::fs::copy(&copy, &meta).unwrap();
        f.mount(&[]);
        assert_files(&f, &files);
        f.unmount();
    }
}
