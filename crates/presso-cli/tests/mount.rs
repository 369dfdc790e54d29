//! Integration tests with real FUSE mounts: the `presso` binary mounts a fresh pool per test and
//! ordinary tools (cp, tar, git, rsync, df, ...) and system calls act on it as clients.
//!
//! Needs root, /dev/fuse and loop devices, and the tools of these Debian packages: fuse3 (the
//! mount itself), git, rsync, tar, diffutils, coreutils, e2fsprogs and mount (the ENOSPC test's
//! ext4 image), util-linux (setpriv, to act as another user). The tests install nothing: a test
//! checks its tools first, and a missing one fails it naming the package.

mod common;

use std::ffi::CString;
use std::fs::{File, OpenOptions};
use std::io::{Read, Seek, SeekFrom, Write};
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::os::unix::fs::{FileExt, MetadataExt, OpenOptionsExt, PermissionsExt};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::*;

const RECORD: usize = 128 << 10;

fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// The bytes of `data` in records that are not all zeros: what the pool stores as logical
/// bytes (all-zero records are holes).
fn non_hole_bytes(data: &[u8]) -> u64 {
    data.chunks(RECORD)
        .filter(|c| c.iter().any(|&b| b != 0))
        .map(|c| c.len() as u64)
        .sum()
}

// ---- 1. corpus round trip

/// Writes ~64 MB of mixed data below `dir`; returns (bytes written, bytes outside holes).
fn write_corpus(dir: &Path) -> (u64, u64) {
    let mut files: Vec<(String, Vec<u8>)> = vec![
        ("text/app-1.log".into(), text_like(1, 9 << 20)),
        ("text/app-2.log".into(), text_like(2, (7 << 20) + 12_345)),
        (
            "text/nested/deeper/app-3.log".into(),
            text_like(3, (5 << 20) - 777),
        ),
        ("fastq/sample-1.fastq".into(), fastq_like(4, 10 << 20)),
        (
            "fastq/sample-2.fastq".into(),
            fastq_like(5, (8 << 20) + 333),
        ),
        ("random/blob.bin".into(), random_bytes(6, (10 << 20) + 4321)),
        ("zeros/zeros.img".into(), vec![0; 8 << 20]),
    ];
    // Text, then zeros, then FASTQ, then zeros again up to an unaligned end.
    let mut mixed = text_like(7, (2 << 20) + 1000);
    mixed.resize(mixed.len() + (2 << 20), 0);
    mixed.extend(fastq_like(8, (1 << 20) + 17));
    mixed.resize(mixed.len() + 999_999, 0);
    files.push(("zeros/mixed.img".into(), mixed));
    let mut rng = Rng::new(9);
    for i in 0..40 {
        let n = rng.range(1, 64 << 10) as usize;
        files.push((format!("small/random-{i:02}.bin"), random_bytes(100 + i, n)));
    }
    for i in 0..120 {
        let n = rng.range(0, 20_000) as usize;
        files.push((
            format!("small/d{}/note-{i:03}.txt", i % 7),
            text_like(200 + i, n),
        ));
    }
    let (mut written, mut logical) = (0, 0);
    for (name, data) in &files {
        let path = dir.join(name);
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(&path, data).unwrap();
        written += data.len() as u64;
        logical += non_hole_bytes(data);
    }
    (written, logical)
}

#[test]
fn corpus_round_trip_compresses_and_survives_a_remount() {
    require_tool("cp", "coreutils");
    let mut f = Fixture::new("corpus");
    let src = f.scratch("corpus");
    let (written, logical) = write_corpus(&src);
    assert!(written > 60 << 20, "the corpus is {written} bytes");

    tool("cp", &[&"-r", &src, &f.p("corpus")]).ok();
    fsync_tree(&f.p("corpus"));
    let s = f.status();
    assert_eq!(s["logical_bytes"], logical, "status after the copy: {s}");
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "no compression: {s}");
    assert!(
        s["holes"].as_u64().unwrap() >= 64,
        "zeros not stored as holes: {s}"
    );
    assert!(s["stored_bytes"].as_u64().unwrap() < logical, "{s}");
    assert_eq!(s["corruptions"], 0, "{s}");
    assert_eq!(assert_trees_equal(&src, &f.p("corpus")), 168);

    f.remount(&[]);
    assert_eq!(assert_trees_equal(&src, &f.p("corpus")), 168);
    let s = f.status();
    assert_eq!(s["logical_bytes"], logical, "status after the remount: {s}");
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "{s}");
    let out = f.presso_on_mount(&["scrub", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert_eq!(report["damaged"], serde_json::json!([]), "{report}");
    assert!(
        report["records_checked"].as_u64().unwrap() > 300,
        "{report}"
    );
    // The same figures from the pool itself once unmounted.
    f.unmount();
    let offline = f.status();
    assert_eq!(offline["logical_bytes"], logical, "{offline}");
    assert_eq!(offline["stored_bytes"], s["stored_bytes"], "{offline}");
}

// ---- 2. tar

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("../..")
        .canonicalize()
        .expect("the workspace root")
}

#[test]
fn tar_of_a_source_tree_in_and_out() {
    require_tool("tar", "tar");
    require_tool("diff", "diffutils");
    let f = Fixture::new("tar");
    let tarball = f.p("crates.tar");
    let root = repo_root();
    tool("tar", &[&"-cf", &tarball, &"-C", &root, &"crates"]).ok();

    // Extract inside the mount, and (from the tarball in the mount) on the host.
    let inside = f.p("extracted");
    let outside = f.scratch("extracted");
    for dir in [&inside, &outside] {
        std::fs::create_dir(dir).unwrap();
        tool("tar", &[&"-xf", &tarball, &"-C", dir]).ok();
    }
    tool("diff", &[&"-r", &outside, &inside]).ok();
    // tar's own comparison also checks sizes, modes and modification times in the mount.
    tool("tar", &[&"-df", &tarball, &"-C", &inside]).ok();
    let files = assert_trees_equal(&outside.join("crates"), &inside.join("crates"));
    assert!(files > 20, "only {files} files in the source tree");

    // And out again: a tarball of the tree in the mount lists the same entries.
    let out_tar = f.scratch("out.tar");
    tool("tar", &[&"-cf", &out_tar, &"-C", &inside, &"crates"]).ok();
    let list = |t: &Path| {
        let out = tool("tar", &[&"-tvf", &t]).ok();
        let mut lines: Vec<String> = out.lines().map(str::to_string).collect();
        lines.sort();
        lines
    };
    assert_eq!(list(&tarball), list(&out_tar));
}

// ---- 3. git

fn git(repo: &Path, home: &Path, args: &[&str]) -> String {
    let mut c = cmd("git", args);
    c.current_dir(repo)
        .env("HOME", home)
        .env("GIT_CONFIG_NOSYSTEM", "1")
        .env("GIT_AUTHOR_NAME", "Test")
        .env("GIT_AUTHOR_EMAIL", "test@example.com")
        .env("GIT_COMMITTER_NAME", "Test")
        .env("GIT_COMMITTER_EMAIL", "test@example.com");
    exec(&mut c).ok()
}

#[test]
fn git_repository_in_the_mount_survives_a_remount() {
    require_tool("git", "git");
    let mut f = Fixture::new("git");
    let home = f.scratch("home");
    std::fs::create_dir(&home).unwrap();
    let repo = f.p("repo");
    std::fs::create_dir(&repo).unwrap();
    git(&repo, &home, &["init", "-q", "-b", "main"]);
    for i in 0..6u64 {
        std::fs::create_dir_all(repo.join("src")).unwrap();
        std::fs::write(repo.join(format!("src/file-{i}.txt")), text_like(i, 30_000)).unwrap();
        std::fs::write(
            repo.join("data.log"),
            text_like(50 + i, 200_000 + 999 * i as usize),
        )
        .unwrap();
        if i == 3 {
            std::fs::rename(repo.join("src/file-0.txt"), repo.join("renamed.txt")).unwrap();
            std::fs::remove_file(repo.join("src/file-1.txt")).unwrap();
        }
        git(&repo, &home, &["add", "-A"]);
        git(
            &repo,
            &home,
            &["commit", "-q", "-m", &format!("commit {i}")],
        );
        if i == 4 {
            // Pack files and their index, written and renamed by git itself.
            git(&repo, &home, &["gc", "-q"]);
        }
    }
    git(&repo, &home, &["fsck", "--full", "--strict"]);

    f.remount(&[]);
    git(&repo, &home, &["fsck", "--full", "--strict"]);
    let log = git(&repo, &home, &["log", "--format=%s"]);
    let subjects: Vec<&str> = log.lines().collect();
    assert_eq!(
        subjects,
        ["commit 5", "commit 4", "commit 3", "commit 2", "commit 1", "commit 0"]
    );
    assert_eq!(git(&repo, &home, &["status", "--porcelain"]), "");
    let shown = git(&repo, &home, &["show", "HEAD~2:data.log"]);
    assert_bytes_eq(
        shown.as_bytes(),
        &text_like(53, 200_000 + 999 * 3),
        "data.log at HEAD~2",
    );
    assert_file_eq(&repo.join("data.log"), &text_like(55, 200_000 + 999 * 5));
}

// ---- 4. rsync

/// A tree with nested directories, small and large files, symlinks, modes and old mtimes.
fn make_tree(dir: &Path) {
    let mut rng = Rng::new(77);
    for i in 0..60u64 {
        let sub = dir.join(format!("d{}/e{}", i % 5, i % 3));
        std::fs::create_dir_all(&sub).unwrap();
        let n = match i % 4 {
            0 => rng.range(0, 4096),
            1 => rng.range(4096, 300_000),
            2 => rng.range(300_000, 2_000_000),
            _ => rng.range(1, 100),
        } as usize;
        let data = if i % 2 == 0 {
            text_like(1000 + i, n)
        } else {
            random_bytes(1000 + i, n)
        };
        let path = sub.join(format!("f{i}.dat"));
        std::fs::write(&path, data).unwrap();
        std::fs::set_permissions(
            &path,
            std::fs::Permissions::from_mode(0o600 + (i as u32 % 0o100)),
        )
        .unwrap();
        set_mtime(&path, 1_600_000_000 + i as i64 * 1000);
    }
    std::os::unix::fs::symlink("d0/e0/f0.dat", dir.join("link-to-f0")).unwrap();
    std::os::unix::fs::symlink("nowhere", dir.join("dangling")).unwrap();
}

fn set_mtime(path: &Path, secs: i64) {
    let times = [
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
        libc::timespec {
            tv_sec: secs,
            tv_nsec: 0,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c_path(path).as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat {}: errno {}", path.display(), errno());
}

#[test]
fn rsync_in_and_checksummed_rsync_out() {
    require_tool("rsync", "rsync");
    let mut f = Fixture::new("rsync");
    let src = f.scratch("src");
    make_tree(&src);
    let slash = |p: &Path| format!("{}/", p.display());
    let dst = f.p("dst");
    tool("rsync", &[&"-a", &slash(&src), &slash(&dst)]).ok();
    f.remount(&[]);

    // Nothing to transfer by checksum: contents, modes, times and links all arrived.
    let changes = tool(
        "rsync",
        &[
            &"-a",
            &"--checksum",
            &"--dry-run",
            &"--itemize-changes",
            &slash(&src),
            &slash(&dst),
        ],
    )
    .ok();
    assert_eq!(
        changes.trim(),
        "",
        "rsync sees differences after the remount"
    );

    let fresh = f.scratch("fresh");
    tool(
        "rsync",
        &[&"-a", &"--checksum", &slash(&dst), &slash(&fresh)],
    )
    .ok();
    assert_eq!(assert_trees_equal(&src, &fresh), 60);
    for i in 0..60u64 {
        let rel = format!("d{}/e{}/f{i}.dat", i % 5, i % 3);
        let (a, b) = (
            std::fs::metadata(src.join(&rel)).unwrap(),
            std::fs::metadata(fresh.join(&rel)).unwrap(),
        );
        assert_eq!(a.mode(), b.mode(), "mode of {rel}");
        assert_eq!(a.mtime(), b.mtime(), "mtime of {rel}");
    }
}

// ---- 5. concurrent writers

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

// ---- 6. shared writable mmap

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

// ---- 7. kill -9 of the daemon

/// The contents the crash test appends: chunk `i` of an odd size.
fn chunk(i: u64) -> Vec<u8> {
    let mut c = text_like(i, 70_001);
    c[..8].copy_from_slice(&i.to_le_bytes());
    c
}

#[test]
fn kill_9_of_the_daemon_keeps_every_fsynced_byte() {
    require_tool("fusermount3", "fuse3");
    let mut f = Fixture::unmounted("kill9", &[]);
    let log = File::create(f.scratch("daemon.log")).unwrap();
    let child = std::process::Command::new(presso_bin())
        .arg("mount")
        .arg("-f")
        .arg(&f.pool)
        .arg(&f.mnt)
        .stdin(std::process::Stdio::null())
        .stdout(log.try_clone().unwrap())
        .stderr(log)
        .spawn()
        .expect("start `presso mount -f`");
    let mut daemon = KillOnDrop(child);
    f.set_mounted(true);
    assert!(
        wait_until(Duration::from_secs(30), || is_mounted(&f.mnt)),
        "`presso mount -f` did not mount"
    );

    // A file unlinked while open when the daemon dies: the next mount removes it.
    std::fs::write(f.p("orphan"), text_like(99, 1 << 20)).unwrap();
    let orphan = File::open(f.p("orphan")).unwrap();
    orphan.sync_all().unwrap();
    std::fs::remove_file(f.p("orphan")).unwrap();

    let synced = Arc::new(AtomicU64::new(0));
    let path = f.p("log.bin");
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
    // SAFETY: signalling our own child.
    assert_eq!(
        unsafe { libc::kill(daemon.0.id() as i32, libc::SIGKILL) },
        0
    );
    let status = daemon.0.wait().unwrap();
    assert_eq!(
        std::os::unix::process::ExitStatusExt::signal(&status),
        Some(libc::SIGKILL)
    );
    let error = writer.join().expect("writer thread");
    eprintln!("the writer stopped with: {error}");
    let synced = synced.load(Ordering::SeqCst);

    tool("fusermount3", &[&"-uz", &f.mnt]).ok();
    f.set_mounted(false);
    assert!(!is_mounted(&f.mnt));
    // At once: the dead daemon's lock is gone with it.
    f.mount(&[]);
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
    drop(orphan);
    let log = std::fs::read_to_string(f.pool.join("presso.log")).unwrap();
    // The orphan's 1 MiB in 128K records.
    assert!(
        log.contains(": 8 records of files unlinked while open removed"),
        "presso.log: {log}"
    );
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

// ---- 8. property change half way through a file

#[test]
fn compression_change_half_way_through_a_file() {
    let mut f = Fixture::new("props");
    let dir = f.p("logs");
    std::fs::create_dir(&dir).unwrap();
    exec(presso().args(["set", "compression=gzip-6"]).arg(&dir)).ok();
    let data = text_like(81, 8 << 20);
    let half = (4 << 20) + 1234;
    let path = dir.join("big.log");
    let mut file = File::create(&path).unwrap();
    file.write_all(&data[..half]).unwrap();
    file.sync_all().unwrap();
    let codec_records = |f: &Fixture, name: &str| -> u64 {
        let s = f.status();
        s["codecs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["codec"] == name)
            .map(|c| c["records"].as_u64().unwrap())
            .sum()
    };
    assert!(codec_records(&f, "gzip") >= 32);
    assert_eq!(codec_records(&f, "zstd"), 0);

    let out = exec(presso().args(["set", "compression=zstd-3"]).arg(&dir)).ok();
    assert!(out.contains("zstd-3"), "{out}");
    let got = exec(presso().args(["get", "compression", "--json"]).arg(&dir)).ok();
    assert!(got.contains("\"zstd-3\"") && got.contains("local"), "{got}");
    file.write_all(&data[half..]).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let second = fastq_like(82, (3 << 20) + 5);
    std::fs::write(dir.join("second.fastq"), &second).unwrap();
    File::open(dir.join("second.fastq"))
        .unwrap()
        .sync_all()
        .unwrap();

    assert!(codec_records(&f, "zstd") >= 32 + 24);
    let s = f.status();
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "{s}");
    assert_file_eq(&path, &data);
    assert_file_eq(&dir.join("second.fastq"), &second);

    // Other record sizes and codecs below it; a file keeps the record size it was created with.
    let small = dir.join("small");
    let large = dir.join("large");
    std::fs::create_dir(&small).unwrap();
    std::fs::create_dir(&large).unwrap();
    exec(presso().args(["set", "recordsize=4K"]).arg(&small)).ok();
    exec(presso().args(["set", "compression=lz4"]).arg(&small)).ok();
    exec(presso().args(["set", "recordsize=16M"]).arg(&large)).ok();
    exec(presso().args(["set", "compression=off"]).arg(&large)).ok();
    let small_data = text_like(83, 300_001);
    let large_data = fastq_like(84, (20 << 20) + 9);
    std::fs::write(small.join("f"), &small_data).unwrap();
    std::fs::write(large.join("f"), &large_data).unwrap();
    exec(presso().args(["set", "recordsize=64K"]).arg(&small)).ok();
    let mut patched = small_data.clone();
    patched[5000..5010].copy_from_slice(b"0123456789");
    let file = OpenOptions::new()
        .write(true)
        .open(small.join("f"))
        .unwrap();
    file.write_all_at(b"0123456789", 5000).unwrap();
    file.sync_all().unwrap();
    drop(file);
    File::open(large.join("f")).unwrap().sync_all().unwrap();
    assert!(codec_records(&f, "lz4") >= 300_001 / 4096);
    assert_file_eq(&small.join("f"), &patched);
    assert_file_eq(&large.join("f"), &large_data);

    f.remount(&[]);
    assert_file_eq(&path, &data);
    assert_file_eq(&dir.join("second.fastq"), &second);
    assert_file_eq(&small.join("f"), &patched);
    assert_file_eq(&large.join("f"), &large_data);
    let got = exec(presso().args(["get", "compression"]).arg(&dir)).ok();
    assert!(got.contains("zstd-3"), "{got}");
    let got = exec(presso().args(["get", "recordsize"]).arg(small.join("f"))).ok();
    assert!(got.contains("4K"), "the file's record size changed: {got}");
}

// ---- 9. ENOSPC

/// An ext4 image loop-mounted for one test; unmounted and its loop device detached on drop.
struct LoopMount {
    image: PathBuf,
    dir: PathBuf,
}

impl LoopMount {
    fn new(image: PathBuf, dir: PathBuf, megabytes: u64) -> LoopMount {
        File::create(&image)
            .unwrap()
            .set_len(megabytes << 20)
            .unwrap();
        tool("mkfs.ext4", &[&"-q", &"-F", &"-m", &"0", &image]).ok();
        std::fs::create_dir_all(&dir).unwrap();
        let guard = LoopMount { image, dir };
        tool("mount", &[&"-o", &"loop", &guard.image, &guard.dir]).ok();
        guard
    }
}

impl Drop for LoopMount {
    fn drop(&mut self) {
        let run = |program: &str, args: &[&std::ffi::OsStr]| {
            std::process::Command::new(program)
                .args(args)
                .stdin(std::process::Stdio::null())
                .status()
                .is_ok_and(|s| s.success())
        };
        // The daemon may still be closing its files for a moment after it let go of its lock.
        let unmounted = wait_until(Duration::from_secs(10), || {
            !is_mounted(&self.dir) || run("umount", &[self.dir.as_os_str()])
        });
        if !unmounted {
            run("umount", &["-l".as_ref(), self.dir.as_os_str()]);
        }
        // `mount -o loop` detaches on unmount; detach explicitly if that did not happen.
        if let Ok(out) = std::process::Command::new("losetup")
            .arg("-j")
            .arg(&self.image)
            .output()
        {
            for line in String::from_utf8_lossy(&out.stdout).lines() {
                if let Some((dev, _)) = line.split_once(':') {
                    run("losetup", &["-d".as_ref(), dev.as_ref()]);
                }
            }
        }
    }
}

/// A pool with property `prop` on a fresh `megabytes` MB ext4 image, mounted. Drop the fixture,
/// then the disk, then the scratch directory.
fn pool_on_small_disk(
    name: &str,
    megabytes: u64,
    prop: &str,
) -> (tempfile::TempDir, LoopMount, Fixture) {
    require_root("it makes and loop-mounts an ext4 image");
    require_tool("mkfs.ext4", "e2fsprogs");
    require_tool("losetup", "mount");
    let scratch = scratch_dir(name);
    let disk = LoopMount::new(
        scratch.path().join("disk.img"),
        scratch.path().join("disk"),
        megabytes,
    );
    let mut f = Fixture::create_in(
        disk.dir.join("pool"),
        scratch.path().join("mnt"),
        None,
        &[prop],
    );
    f.mount(&[]);
    (scratch, disk, f)
}

#[test]
fn a_full_disk_gives_enospc_and_the_pool_recovers() {
    let (_scratch, disk, mut f) = pool_on_small_disk("enospc", 96, "compression=lz4");

    // Incompressible files until the disk is full.
    let contents = |i: u64| random_bytes(900 + i, (1 << 20) + 4099 * i as usize);
    let (done_tx, done_rx) = std::sync::mpsc::channel();
    let mnt = f.mnt.clone();
    std::thread::spawn(move || {
        let mut written = Vec::new();
        let failure = (|| {
            for i in 0..400u64 {
                let mut file = File::create(mnt.join(format!("f{i}")))?;
                file.write_all(&contents(i))?;
                file.sync_all()?;
                written.push(i);
            }
            Ok(())
        })();
        let _ = done_tx.send((written, failure));
    });
    let (written, failure): (Vec<u64>, std::io::Result<()>) = done_rx
        .recv_timeout(Duration::from_secs(120))
        .expect("writing to a full disk hangs");
    let error = failure.expect_err("400 MB fitted on a 96 MB disk");
    assert_eq!(
        error.raw_os_error(),
        Some(libc::ENOSPC),
        "a full disk should fail with ENOSPC, got {error}"
    );
    assert!(written.len() >= 4, "only {} files fitted", written.len());
    for &i in &written {
        assert_file_eq(&f.p(&format!("f{i}")), &contents(i));
    }

    // Free space: remove the file that failed and two good files in three, then collect.
    let failed = f.p(&format!("f{}", written.last().unwrap() + 1));
    if failed.exists() {
        std::fs::remove_file(&failed).unwrap();
    }
    let (gone, kept): (Vec<u64>, Vec<u64>) = written.iter().partition(|&&i| i % 3 != 0);
    for i in &gone {
        if let Err(e) = std::fs::remove_file(f.p(&format!("f{i}"))) {
            let df = tool("df", &[&"-B1", &disk.dir]).stdout;
            panic!("cannot delete a file to free space: {e}\n{df}");
        }
    }
    let out = f.presso_on_mount(&["gc", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["bytes_removed"].as_u64().unwrap() > 0,
        "gc freed nothing: {report}"
    );
    for &i in &kept {
        assert_file_eq(&f.p(&format!("f{i}")), &contents(i));
    }
    // New writes fit again.
    let fresh = random_bytes(5, 3 << 20);
    let mut file = File::create(f.p("after-gc")).expect("create after gc");
    file.write_all(&fresh).expect("write after gc");
    file.sync_all().expect("fsync after gc");
    drop(file);

    f.remount(&[]);
    for &i in &kept {
        assert_file_eq(&f.p(&format!("f{i}")), &contents(i));
    }
    assert_file_eq(&f.p("after-gc"), &fresh);
    let out = f.presso_on_mount(&["scrub"]);
    out.ok();
    f.unmount();
    drop(f);
    drop(disk);
}

#[test]
fn overwrites_on_a_small_disk_reclaim_their_space_automatically() {
    let (_scratch, disk, mut f) = pool_on_small_disk("reclaim", 256, "compression=off");
    // Eight generations of a 40 MiB file overwritten in place: 320 MiB through a 256 MB disk
    // that also keeps 64 MiB free. Only collecting the old generations makes room.
    let path = f.p("table.db");
    let mut last = Vec::new();
    for generation in 0..8u64 {
        let data = random_bytes(700 + generation, 40 << 20);
        let mut file = OpenOptions::new()
            .write(true)
            .create(true)
            .truncate(false)
            .open(&path)
            .unwrap();
        if let Err(e) = file.write_all(&data).and_then(|()| file.sync_all()) {
            let df = tool("df", &[&"-B1", &disk.dir]).stdout;
            panic!("generation {generation}: {e}\n{df}\n{}", f.status());
        }
        drop(file);
        last = data;
    }
    let log = std::fs::read_to_string(f.pool.join("presso.log")).unwrap();
    assert!(
        log.contains("presso: reclaimed"),
        "no automatic collection:\n{log}"
    );
    f.remount(&[]);
    assert_file_eq(&path, &last);
    f.presso_on_mount(&["scrub"]).ok();
    f.unmount();
    drop(f);
    drop(disk);
}

// ---- 10. permissions for another user

/// Runs `program args` as nobody; returns (success, stderr).
fn as_nobody(program: &str, args: &[&Path]) -> (bool, String) {
    let mut c = cmd(
        "setpriv",
        ["--reuid=65534", "--regid=65534", "--clear-groups", program],
    );
    c.args(args);
    let out = exec(&mut c);
    (out.status.success(), out.stderr)
}

#[test]
fn other_users_meet_permissions_and_allow_other() {
    require_root("it acts as another user and mounts with allow_other");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("perms", &[]);
    f.mount(&["allow_other"]);
    let private = f.p("private");
    std::fs::create_dir(&private).unwrap();
    std::fs::set_permissions(&private, std::fs::Permissions::from_mode(0o700)).unwrap();
    std::fs::write(private.join("secret"), b"secret").unwrap();
    std::fs::write(f.p("public"), b"hello\n").unwrap();
    std::fs::set_permissions(f.p("public"), std::fs::Permissions::from_mode(0o644)).unwrap();
    std::fs::write(f.p("mine"), b"root only\n").unwrap();
    std::fs::set_permissions(f.p("mine"), std::fs::Permissions::from_mode(0o600)).unwrap();

    // Allowed in, so the root directory and a world-readable file are readable...
    let (ok, err) = as_nobody("ls", &[&f.mnt]);
    assert!(ok, "nobody cannot list the root with allow_other: {err}");
    let (ok, err) = as_nobody("cat", &[&f.p("public")]);
    assert!(ok, "nobody cannot read a 0644 file: {err}");
    // ...but the mode bits still apply.
    for (program, path) in [
        ("ls", private.clone()),
        ("cat", private.join("secret")),
        ("cat", f.p("mine")),
    ] {
        let (ok, err) = as_nobody(program, &[&path]);
        assert!(!ok, "nobody could {program} {}", path.display());
        assert!(err.contains("Permission denied"), "{program}: {err}");
    }
    let (ok, err) = as_nobody("touch", &[&f.p("new-file")]);
    assert!(!ok && err.contains("Permission denied"), "touch: {err}");
    // Where the mode allows, files another user creates are theirs.
    let shared = f.p("shared");
    std::fs::create_dir(&shared).unwrap();
    std::fs::set_permissions(&shared, std::fs::Permissions::from_mode(0o1777)).unwrap();
    let (ok, err) = as_nobody("mkdir", &[&shared.join("theirs")]);
    assert!(ok, "mkdir in a 1777 directory: {err}");
    let (ok, err) = as_nobody("touch", &[&shared.join("theirs/file")]);
    assert!(ok, "touch in their own directory: {err}");
    let m = std::fs::metadata(shared.join("theirs/file")).unwrap();
    assert_eq!((m.uid(), m.gid()), (65534, 65534));

    // Without allow_other nobody else gets in at all, not even to the root.
    f.remount(&[]);
    for (program, path) in [
        ("ls", f.mnt.clone()),
        ("cat", f.p("public")),
        ("stat", f.mnt.clone()),
    ] {
        let (ok, err) = as_nobody(program, &[&path]);
        assert!(
            !ok,
            "nobody could {program} {} without allow_other",
            path.display()
        );
        assert!(err.contains("Permission denied"), "{program}: {err}");
    }
    assert_eq!(std::fs::read(f.p("public")).unwrap(), b"hello\n");
}

// ---- 11. POSIX basics

#[test]
fn hard_links_symlinks_and_renames() {
    let mut f = Fixture::new("links");
    let a = f.p("a");
    std::fs::write(&a, b"first").unwrap();
    std::fs::create_dir(f.p("dir")).unwrap();
    let b = f.p("dir/b");
    std::fs::hard_link(&a, &b).unwrap();
    let (ma, mb) = (
        std::fs::metadata(&a).unwrap(),
        std::fs::metadata(&b).unwrap(),
    );
    assert_eq!((ma.nlink(), mb.nlink()), (2, 2));
    assert_eq!(ma.ino(), mb.ino());
    OpenOptions::new()
        .append(true)
        .open(&b)
        .unwrap()
        .write_all(b" second")
        .unwrap();
    assert_eq!(std::fs::read(&a).unwrap(), b"first second");

    std::os::unix::fs::symlink("dir/b", f.p("sym")).unwrap();
    std::os::unix::fs::symlink("/no/such/target", f.p("dangling")).unwrap();
    // Special files: a FIFO, a socket and a character device node.
    let special = |name: &str, mode: u32, dev: u64| {
        // SAFETY: a valid path.
        let rc = unsafe { libc::mknod(c_path(&f.p(name)).as_ptr(), mode | 0o644, dev) };
        assert_eq!(rc, 0, "mknod {name}: errno {}", errno());
    };
    special("fifo", libc::S_IFIFO, 0);
    special("socket", libc::S_IFSOCK, 0);
    special("null", libc::S_IFCHR, libc::makedev(1, 3));
    assert_eq!(std::fs::read_link(f.p("sym")).unwrap(), Path::new("dir/b"));
    assert!(std::fs::symlink_metadata(f.p("sym"))
        .unwrap()
        .file_type()
        .is_symlink());
    assert_eq!(std::fs::read(f.p("sym")).unwrap(), b"first second");
    assert!(std::fs::metadata(f.p("dangling")).is_err());

    // Rename over an existing file replaces it.
    std::fs::write(f.p("old"), b"old contents").unwrap();
    std::fs::write(f.p("new"), b"new contents").unwrap();
    let new_ino = std::fs::metadata(f.p("new")).unwrap().ino();
    std::fs::rename(f.p("new"), f.p("old")).unwrap();
    assert!(!f.p("new").exists());
    assert_eq!(std::fs::read(f.p("old")).unwrap(), b"new contents");
    assert_eq!(std::fs::metadata(f.p("old")).unwrap().ino(), new_ino);
    // Rename of a directory, and across directories.
    std::fs::rename(f.p("dir"), f.p("moved")).unwrap();
    std::fs::rename(f.p("old"), f.p("moved/old")).unwrap();
    // Directories: over an empty one is fine, over a non-empty one or a file is not.
    std::fs::create_dir(f.p("empty")).unwrap();
    std::fs::create_dir_all(f.p("full/sub")).unwrap();
    std::fs::create_dir(f.p("victim")).unwrap();
    std::fs::rename(f.p("victim"), f.p("empty")).unwrap();
    let code = |r: std::io::Result<()>| r.unwrap_err().raw_os_error();
    assert_eq!(
        code(std::fs::rename(f.p("empty"), f.p("full"))),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        code(std::fs::remove_dir(f.p("full"))),
        Some(libc::ENOTEMPTY)
    );
    assert_eq!(
        code(std::fs::rename(f.p("sym"), f.p("full"))),
        Some(libc::EISDIR)
    );
    assert_eq!(
        code(std::fs::rename(f.p("empty"), f.p("a"))),
        Some(libc::ENOTDIR)
    );
    assert_eq!(code(std::fs::remove_dir(f.p("a"))), Some(libc::ENOTDIR));
    assert_eq!(
        code(std::fs::hard_link(f.p("full"), f.p("dirlink"))),
        Some(libc::EPERM)
    );
    std::fs::remove_dir(f.p("full/sub")).unwrap();
    std::fs::remove_dir(f.p("full")).unwrap();
    std::fs::remove_dir(f.p("empty")).unwrap();
    // renameat2: RENAME_NOREPLACE refuses an existing target and leaves both files alone;
    // RENAME_EXCHANGE is not supported and says so.
    let rename2 = |from: &str, to: &str, flags: libc::c_uint| -> Option<i32> {
        let (from, to) = (c_path(&f.p(from)), c_path(&f.p(to)));
        let rc = unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                from.as_ptr(),
                libc::AT_FDCWD,
                to.as_ptr(),
                flags,
            )
        };
        (rc != 0).then(|| std::io::Error::last_os_error().raw_os_error().unwrap())
    };
    std::fs::write(f.p("keep"), b"keep me").unwrap();
    assert_eq!(
        rename2("moved/old", "keep", libc::RENAME_NOREPLACE),
        Some(libc::EEXIST)
    );
    assert_eq!(std::fs::read(f.p("keep")).unwrap(), b"keep me");
    assert_eq!(std::fs::read(f.p("moved/old")).unwrap(), b"new contents");
    assert_eq!(rename2("keep", "kept", libc::RENAME_NOREPLACE), None);
    assert_eq!(std::fs::read(f.p("kept")).unwrap(), b"keep me");
    assert!(!f.p("keep").exists());
    assert_eq!(
        rename2("kept", "moved/old", libc::RENAME_EXCHANGE),
        Some(libc::EINVAL)
    );
    std::fs::remove_file(f.p("kept")).unwrap();

    std::fs::remove_file(&a).unwrap();
    assert_eq!(std::fs::metadata(f.p("moved/b")).unwrap().nlink(), 1);

    f.remount(&[]);
    assert_eq!(std::fs::read(f.p("moved/b")).unwrap(), b"first second");
    assert_eq!(std::fs::metadata(f.p("moved/b")).unwrap().nlink(), 1);
    assert_eq!(std::fs::read(f.p("moved/old")).unwrap(), b"new contents");
    assert_eq!(
        std::fs::read_link(f.p("dangling")).unwrap(),
        Path::new("/no/such/target")
    );
    assert_eq!(std::fs::read_link(f.p("sym")).unwrap(), Path::new("dir/b"));
    let mut names: Vec<_> = std::fs::read_dir(&f.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name().into_string().unwrap())
        .collect();
    names.sort();
    assert_eq!(
        names,
        ["dangling", "fifo", "moved", "null", "socket", "sym"]
    );
    use std::os::unix::fs::FileTypeExt;
    let kind = |name: &str| std::fs::symlink_metadata(f.p(name)).unwrap();
    assert!(kind("fifo").file_type().is_fifo());
    assert!(kind("socket").file_type().is_socket());
    assert!(kind("null").file_type().is_char_device());
    assert_eq!(kind("null").rdev(), libc::makedev(1, 3));
}

#[test]
fn unlinked_open_file_stays_readable_and_its_space_is_released_after_close() {
    let mut f = Fixture::new("unlink");
    let doomed = text_like(111, (3 << 20) + 17);
    let victim = random_bytes(112, (2 << 20) + 5);
    let replacement = text_like(113, 100_000);
    std::fs::write(f.p("doomed"), &doomed).unwrap();
    std::fs::write(f.p("victim"), &victim).unwrap();
    fsync_tree(&f.mnt);
    // With a cold page cache, reads through the descriptors below reach the daemon.
    f.remount(&[]);

    let mut file = File::open(f.p("doomed")).unwrap();
    std::fs::remove_file(f.p("doomed")).unwrap();
    assert!(!f.p("doomed").exists());
    let mut got = Vec::new();
    file.read_to_end(&mut got).unwrap();
    assert_bytes_eq(&got, &doomed, "read through the unlinked file's descriptor");
    file.seek(SeekFrom::Start(RECORD as u64 + 5)).unwrap();
    let mut some = [0u8; 100];
    file.read_exact(&mut some).unwrap();
    assert_eq!(&some[..], &doomed[RECORD + 5..RECORD + 105]);

    // Renaming over an open file leaves the descriptor on the old contents.
    let old = File::open(f.p("victim")).unwrap();
    std::fs::write(f.p("replacement"), &replacement).unwrap();
    std::fs::rename(f.p("replacement"), f.p("victim")).unwrap();
    let mut got = vec![0u8; victim.len()];
    old.read_exact_at(&mut got, 0).unwrap();
    assert_bytes_eq(&got, &victim, "read through the replaced file's descriptor");
    assert_file_eq(&f.p("victim"), &replacement);
    let names: Vec<_> = std::fs::read_dir(&f.mnt)
        .unwrap()
        .map(|e| e.unwrap().file_name())
        .collect();
    assert_eq!(names, ["victim"]);

    File::open(f.p("victim")).unwrap().sync_all().unwrap();
    let all = (doomed.len() + victim.len() + replacement.len()) as u64;
    assert_eq!(
        f.status()["logical_bytes"],
        all,
        "released while still open"
    );
    drop((file, old));
    // The kernel sends the release after close() returns.
    let released = wait_until(Duration::from_secs(20), || {
        f.status()["logical_bytes"] == replacement.len() as u64
    });
    assert!(
        released,
        "space not released after the last close: {}",
        f.status()
    );
    let s = f.status();
    assert!(
        s["garbage_bytes"].as_u64().unwrap() >= victim.len() as u64,
        "{s}"
    );
    let out = f.presso_on_mount(&["gc", "--json"]).ok();
    let report: serde_json::Value = serde_json::from_str(&out).unwrap();
    assert!(
        report["bytes_removed"].as_u64().unwrap() >= victim.len() as u64,
        "{report}"
    );
    let after = f.status();
    assert!(
        after["disk_bytes"].as_u64().unwrap() < s["disk_bytes"].as_u64().unwrap(),
        "gc left the disk usage as it was: {after}"
    );
    assert_file_eq(&f.p("victim"), &replacement);

    f.remount(&[]);
    assert_eq!(f.status()["logical_bytes"], replacement.len() as u64);
    assert_file_eq(&f.p("victim"), &replacement);
}

fn stat_times(path: &Path) -> (i64, i64, i64, i64) {
    let m = std::fs::metadata(path).unwrap();
    (m.atime(), m.atime_nsec(), m.mtime(), m.mtime_nsec())
}

#[test]
fn chmod_chown_and_utimens_show_in_stat() {
    require_root("it gives files to other owners");
    let mut f = Fixture::new("attrs");
    let path = f.p("file");
    std::fs::write(&path, b"x").unwrap();
    std::fs::create_dir(f.p("dir")).unwrap();
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o4751)).unwrap();
    std::fs::set_permissions(f.p("dir"), std::fs::Permissions::from_mode(0o1777)).unwrap();
    std::os::unix::fs::chown(&path, Some(1234), Some(5678)).unwrap();
    std::os::unix::fs::lchown(f.p("dir"), Some(42), None).unwrap();
    let times = [
        libc::timespec {
            tv_sec: 1_000_000_000,
            tv_nsec: 123_456_789,
        },
        libc::timespec {
            tv_sec: 1_500_000_000,
            tv_nsec: 500_000_000,
        },
    ];
    // SAFETY: a valid path and two timespecs.
    let rc = unsafe { libc::utimensat(libc::AT_FDCWD, c_path(&path).as_ptr(), times.as_ptr(), 0) };
    assert_eq!(rc, 0, "utimensat: errno {}", errno());

    let check = |f: &Fixture| {
        let m = std::fs::metadata(f.p("file")).unwrap();
        // The chown after the chmod may clear set-user-ID, as on other file systems.
        assert_eq!(m.mode() & 0o777, 0o751, "mode {:o}", m.mode());
        assert_eq!((m.uid(), m.gid()), (1234, 5678));
        assert_eq!(
            stat_times(&f.p("file")),
            (1_000_000_000, 123_456_789, 1_500_000_000, 500_000_000)
        );
        let d = std::fs::metadata(f.p("dir")).unwrap();
        assert_eq!(d.mode() & 0o7777, 0o1777, "dir mode {:o}", d.mode());
        assert_eq!((d.uid(), d.gid()), (42, 0));
    };
    check(&f);
    f.remount(&[]);
    check(&f);

    // A later write moves the modification time on, and that sticks too.
    let before = std::time::SystemTime::now() - Duration::from_secs(5);
    OpenOptions::new()
        .append(true)
        .open(&path)
        .unwrap()
        .write_all(b"more")
        .unwrap();
    let modified = std::fs::metadata(&path).unwrap().modified().unwrap();
    assert!(
        modified > before,
        "mtime not updated by a write: {modified:?}"
    );
    f.remount(&[]);
    let m = std::fs::metadata(&path).unwrap();
    assert!(m.modified().unwrap() > before, "mtime lost at the remount");
    assert_eq!(std::fs::read(&path).unwrap(), b"xmore");
}

/// File capabilities granting CAP_NET_RAW: a `vfs_cap_data` of revision 2 (magic and flags,
/// then permitted and inheritable sets, low words first).
const NET_RAW_CAPABILITY: [u8; 20] = [
    0x01, 0, 0, 0x02, 0, 0x20, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0,
];

fn mode_of(path: &Path) -> u32 {
    std::fs::metadata(path).unwrap().mode() & 0o7777
}

/// A file of `mode` created by root, with the file capability set when `capability`.
fn privileged_file(path: &Path, mode: u32, capability: bool) {
    std::fs::write(path, b"x").unwrap();
    std::fs::set_permissions(path, std::fs::Permissions::from_mode(mode)).unwrap();
    if capability {
        assert_eq!(
            set_xattr(path, "security.capability", &NET_RAW_CAPABILITY, 0),
            0
        );
    }
    assert_eq!(mode_of(path), mode);
}

#[test]
fn writes_truncates_and_chowns_drop_set_id_bits_and_capabilities() {
    require_root("it acts as another user and sets file capabilities");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("killpriv", &[]);
    f.mount(&["allow_other"]);
    let append = |path: &Path| {
        let (ok, err) = as_nobody(
            "sh",
            &[Path::new("-c"), Path::new("echo y >> \"$0\""), path],
        );
        assert!(ok, "nobody cannot append to {}: {err}", path.display());
    };

    // Another user's write drops set-user-ID and set-group-ID (when group-executable) and the
    // file's capabilities, as on a kernel file system.
    let written = f.p("written");
    privileged_file(&written, 0o6777, true);
    append(&written);
    assert_eq!(mode_of(&written), 0o777);
    assert_eq!(
        get_xattr(&written, "security.capability"),
        Err(libc::ENODATA)
    );
    // Set-group-ID without group execute marks mandatory locking and stays.
    let locking = f.p("locking");
    privileged_file(&locking, 0o2766, false);
    append(&locking);
    assert_eq!(mode_of(&locking), 0o2766);
    // Root keeps the bits on a write (CAP_FSETID).
    let roots = f.p("roots");
    privileged_file(&roots, 0o6777, false);
    OpenOptions::new()
        .append(true)
        .open(&roots)
        .unwrap()
        .write_all(b"y")
        .unwrap();
    assert_eq!(mode_of(&roots), 0o6777);
    // Another user's truncate drops them too...
    let truncated = f.p("truncated");
    privileged_file(&truncated, 0o6777, false);
    let (ok, err) = as_nobody("truncate", &[Path::new("-s0"), &truncated]);
    assert!(ok, "nobody cannot truncate: {err}");
    assert_eq!(mode_of(&truncated), 0o777);
    // ...and so does a chown, even by root.
    let chowned = f.p("chowned");
    privileged_file(&chowned, 0o6777, true);
    std::os::unix::fs::chown(&chowned, Some(1234), None).unwrap();
    assert_eq!(mode_of(&chowned), 0o777);
    assert_eq!(
        get_xattr(&chowned, "security.capability"),
        Err(libc::ENODATA)
    );

    f.remount(&[]);
    for (name, mode) in [
        ("written", 0o777),
        ("locking", 0o2766),
        ("roots", 0o6777),
        ("truncated", 0o777),
        ("chowned", 0o777),
    ] {
        assert_eq!(mode_of(&f.p(name)), mode, "{name} after the remount");
    }
    assert_eq!(std::fs::read(&written).unwrap(), b"xy\n");
    assert_eq!(std::fs::read(&roots).unwrap(), b"xy");
    assert_eq!(std::fs::metadata(&truncated).unwrap().len(), 0);
}

fn set_xattr(path: &Path, name: &str, value: &[u8], flags: i32) -> i32 {
    let name = CString::new(name).unwrap();
    // SAFETY: valid path, name and value buffer.
    let rc = unsafe {
        libc::setxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if rc == 0 {
        0
    } else {
        errno()
    }
}

fn get_xattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid path and name; a null buffer of length 0 asks for the value's size.
    let size = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    if size < 0 {
        return Err(errno());
    }
    if size > 1 {
        let mut small = vec![0u8; size as usize - 1];
        // SAFETY: as below, with a buffer one byte too small (not empty: that asks the size).
        let n = unsafe {
            libc::getxattr(
                c_path(path).as_ptr(),
                name.as_ptr(),
                small.as_mut_ptr().cast(),
                small.len(),
            )
        };
        assert_eq!((n, errno()), (-1, libc::ERANGE), "a too small buffer");
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: valid path and name, and a buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

fn list_xattrs(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid path and a buffer of the given length.
    let n = unsafe { libc::listxattr(c_path(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: errno {}", errno());
    buf.truncate(n as usize);
    let mut names: Vec<String> = buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect();
    names.sort();
    names
}

#[test]
fn extended_attributes() {
    let mut f = Fixture::new("xattr");
    let path = f.p("file");
    std::fs::write(&path, b"x").unwrap();
    assert_eq!(set_xattr(&path, "user.colour", b"blue", 0), 0);
    assert_eq!(set_xattr(&path, "user.binary", &[0, 1, 2, 255], 0), 0);
    assert_eq!(
        set_xattr(&path, "user.colour", b"red", libc::XATTR_CREATE),
        libc::EEXIST
    );
    assert_eq!(
        set_xattr(&path, "user.none", b"v", libc::XATTR_REPLACE),
        libc::ENODATA
    );
    assert_eq!(
        set_xattr(&path, "user.colour", b"green", libc::XATTR_REPLACE),
        0
    );
    assert_eq!(get_xattr(&path, "user.colour").unwrap(), b"green");
    assert_eq!(get_xattr(&path, "user.binary").unwrap(), [0, 1, 2, 255]);
    let big = random_bytes(131, 60_000);
    assert_eq!(set_xattr(&path, "user.big", &big, 0), 0);
    assert_eq!(get_xattr(&path, "user.big").unwrap(), big);
    assert_eq!(set_xattr(&f.mnt, "user.on-a-dir", b"d", 0), 0);
    assert_eq!(get_xattr(&f.mnt, "user.on-a-dir").unwrap(), b"d");
    assert_eq!(get_xattr(&path, "user.missing"), Err(libc::ENODATA));
    assert_eq!(
        list_xattrs(&path),
        ["user.big", "user.binary", "user.colour"]
    );
    let name = CString::new("user.binary").unwrap();
    // SAFETY: valid path and name.
    assert_eq!(
        unsafe { libc::removexattr(c_path(&path).as_ptr(), name.as_ptr()) },
        0
    );
    assert_eq!(get_xattr(&path, "user.binary"), Err(libc::ENODATA));

    f.remount(&[]);
    assert_eq!(list_xattrs(&path), ["user.big", "user.colour"]);
    assert_eq!(get_xattr(&path, "user.colour").unwrap(), b"green");
    assert_eq!(get_xattr(&path, "user.big").unwrap(), big);
    assert_eq!(get_xattr(&f.mnt, "user.on-a-dir").unwrap(), b"d");
}

#[test]
fn truncate_fallocate_and_sparse_files() {
    let mut f = Fixture::new("sizes");
    // Truncate up and down.
    let path = f.p("trunc");
    let data = random_bytes(121, 300_001);
    std::fs::write(&path, &data).unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&path)
        .unwrap();
    file.set_len(1_000_000).unwrap();
    let mut expected = data.clone();
    expected.resize(1_000_000, 0);
    assert_file_eq(&path, &expected);
    file.set_len(100_000).unwrap();
    file.set_len(400_000).unwrap();
    expected.truncate(100_000);
    expected.resize(400_000, 0);
    assert_file_eq(&path, &expected);
    file.sync_all().unwrap();
    drop(file);

    // fallocate mode 0 extends the size with zeros.
    let falloc = f.p("falloc");
    std::fs::write(&falloc, b"0123456789").unwrap();
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .open(&falloc)
        .unwrap();
    // SAFETY: fallocate on an open descriptor.
    let rc = unsafe { libc::fallocate(file.as_raw_fd(), 0, 0, 5 << 20) };
    assert_eq!(rc, 0, "fallocate: errno {}", errno());
    assert_eq!(file.metadata().unwrap().len(), 5 << 20);
    file.sync_all().unwrap();
    drop(file);
    let mut falloc_expected = b"0123456789".to_vec();
    falloc_expected.resize(5 << 20, 0);
    assert_file_eq(&falloc, &falloc_expected);

    // A 10 MB hole between two megabytes of data.
    let sparse = f.p("sparse");
    let head = text_like(122, 1 << 20);
    let tail = text_like(123, 1 << 20);
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&sparse)
        .unwrap();
    file.write_all_at(&head, 0).unwrap();
    file.write_all_at(&tail, 11 << 20).unwrap();
    file.sync_all().unwrap();
    let check_sparse = |file: &File| {
        let fd = file.as_raw_fd();
        let seek = |offset: i64, whence: i32| -> Result<i64, i32> {
            // SAFETY: lseek on an open descriptor.
            let r = unsafe { libc::lseek(fd, offset, whence) };
            if r < 0 {
                Err(errno())
            } else {
                Ok(r)
            }
        };
        assert_eq!(seek(0, libc::SEEK_DATA), Ok(0));
        assert_eq!(seek(0, libc::SEEK_HOLE), Ok(1 << 20));
        assert_eq!(seek(1 << 20, libc::SEEK_DATA), Ok(11 << 20));
        assert_eq!(seek(5 << 20, libc::SEEK_HOLE), Ok(5 << 20));
        assert_eq!(seek(11 << 20, libc::SEEK_HOLE), Ok(12 << 20));
        assert_eq!(seek(12 << 20, libc::SEEK_DATA), Err(libc::ENXIO));
        let mut hole = vec![1u8; 10 << 20];
        file.read_exact_at(&mut hole, 1 << 20).unwrap();
        assert!(hole.iter().all(|&b| b == 0), "the hole reads as non-zero");
    };
    check_sparse(&file);
    drop(file);

    f.remount(&[]);
    assert_file_eq(&path, &expected);
    assert_file_eq(&falloc, &falloc_expected);
    // Truncating committed records: the partial record keeps its head, later ones go.
    let file = OpenOptions::new().write(true).open(&path).unwrap();
    file.set_len(150_000).unwrap();
    file.set_len(700_000).unwrap();
    file.sync_all().unwrap();
    drop(file);
    expected.truncate(150_000);
    expected.resize(700_000, 0);
    assert_file_eq(&path, &expected);
    let file = File::open(&sparse).unwrap();
    check_sparse(&file);
    assert_eq!(file.metadata().unwrap().len(), 12 << 20);
    let mut got = vec![0u8; 1 << 20];
    file.read_exact_at(&mut got, 11 << 20).unwrap();
    assert_bytes_eq(&got, &tail, "data after the hole");
    drop(file);

    f.remount(&[]);
    assert_file_eq(&path, &expected);
    // Whole records of zeros written explicitly are holes too.
    let zeros = f.p("zeros");
    let mut data = text_like(124, 2 * RECORD);
    data.resize(6 * RECORD, 0);
    data.extend(text_like(125, RECORD + 1));
    std::fs::write(&zeros, &data).unwrap();
    let file = File::open(&zeros).unwrap();
    file.sync_all().unwrap();
    // SAFETY: lseek on an open descriptor.
    let hole = unsafe { libc::lseek(file.as_raw_fd(), 0, libc::SEEK_HOLE) };
    assert_eq!(hole, 2 * RECORD as i64, "errno {}", errno());
    // SAFETY: as above.
    let next = unsafe { libc::lseek(file.as_raw_fd(), hole, libc::SEEK_DATA) };
    assert_eq!(next, 6 * RECORD as i64, "errno {}", errno());
    assert_file_eq(&zeros, &data);
}

#[test]
fn append_from_two_descriptors_fsync_and_statfs() {
    let mut f = Fixture::new("append");
    let path = f.p("appended");
    let open = || {
        OpenOptions::new()
            .create(true)
            .append(true)
            .mode(0o644)
            .open(&path)
            .unwrap()
    };
    let (mut one, mut two) = (open(), open());
    let mut expected = Vec::new();
    for i in 0..200 {
        let (fd, tag) = if i % 3 == 0 {
            (&mut two, "two")
        } else {
            (&mut one, "one")
        };
        let line = format!("{tag} line {i} {}\n", "x".repeat(i * 37 % 500));
        fd.write_all(line.as_bytes()).unwrap();
        expected.extend_from_slice(line.as_bytes());
    }
    // SAFETY: fsync and fdatasync on open descriptors.
    unsafe {
        assert_eq!(libc::fsync(one.as_raw_fd()), 0, "fsync: errno {}", errno());
        assert_eq!(
            libc::fdatasync(two.as_raw_fd()),
            0,
            "fdatasync: errno {}",
            errno()
        );
    }
    drop((one, two));
    assert_file_eq(&path, &expected);

    // SAFETY: a zeroed statvfs filled in by the call.
    let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
    // SAFETY: a valid path and out-parameter.
    assert_eq!(unsafe { libc::statvfs(c_path(&f.mnt).as_ptr(), &mut s) }, 0);
    assert!(
        s.f_blocks > 0 && s.f_bsize > 0 && s.f_bavail > 0,
        "statvfs: {} blocks",
        s.f_blocks
    );
    require_tool("df", "coreutils");
    let df = tool("df", &[&"-B1", &"--output=size,avail", &f.mnt]).ok();
    let numbers: Vec<u64> = df
        .lines()
        .nth(1)
        .unwrap_or_default()
        .split_whitespace()
        .map(|n| n.parse().unwrap())
        .collect();
    assert!(
        numbers.len() == 2 && numbers.iter().all(|&n| n > 0),
        "df: {df}"
    );

    f.remount(&[]);
    assert_file_eq(&path, &expected);
}

// ---- 12. the mount helper

#[test]
fn mount_helper_mounts_with_options() {
    require_root("it mounts with allow_other and acts as another user");
    require_tool("setpriv", "util-linux");
    let mut f = Fixture::unmounted("helper", &[]);
    let bin = f.scratch("bin");
    std::fs::create_dir(&bin).unwrap();
    let helper = bin.join("mount.fuse.presso");
    std::os::unix::fs::symlink(presso_bin(), &helper).unwrap();
    let out = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(&f.mnt)
            .args(["-o", "allow_other"]),
    );
    f.set_mounted(out.status.success() || is_mounted(&f.mnt));
    out.ok();
    let line = mount_line(&f.mnt).expect("the helper mounted nothing");
    assert!(line.contains("allow_other"), "no allow_other in {line}");
    assert!(
        line.contains(f.pool.to_str().unwrap()),
        "the source is not the pool: {line}"
    );
    std::fs::write(f.p("hello"), b"through the helper\n").unwrap();
    std::fs::set_permissions(f.p("hello"), std::fs::Permissions::from_mode(0o644)).unwrap();
    let (ok, err) = as_nobody("cat", &[&f.p("hello")]);
    assert!(ok, "allow_other did not let another user in: {err}");
    f.remount(&[]);
    assert_eq!(
        std::fs::read(f.p("hello")).unwrap(),
        b"through the helper\n"
    );
    f.unmount();

    // As mount(8) calls it for an fstab line: options it adds are taken, noexec is honoured.
    let out = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(&f.mnt)
            .args([
                "-o",
                "rw,nosuid,nodev,noexec,noatime,_netdev,x-systemd.automount",
            ]),
    );
    f.set_mounted(out.status.success() || is_mounted(&f.mnt));
    out.ok();
    let line = mount_line(&f.mnt).expect("the helper mounted nothing");
    let flags = line.split(' ').nth(5).unwrap_or_default();
    for flag in ["nosuid", "nodev", "noexec"] {
        assert!(flags.split(',').any(|f| f == flag), "no {flag} in {line}");
    }
    let script = f.p("script.sh");
    std::fs::write(&script, "#!/bin/sh\necho ran\n").unwrap();
    std::fs::set_permissions(&script, std::fs::Permissions::from_mode(0o755)).unwrap();
    let err = std::process::Command::new(&script).output().unwrap_err();
    assert_eq!(
        err.raw_os_error(),
        Some(libc::EACCES),
        "exec on noexec: {err}"
    );
    let err = exec(
        std::process::Command::new(&helper)
            .arg(&f.pool)
            .arg(f.scratch("bin"))
            .args(["-o", "compression=lz4"]),
    )
    .fails();
    assert!(
        err.contains("compression=lz4") && err.contains("allow_other"),
        "{err}"
    );
}

// ---- 13. a pool in use

#[test]
fn a_pool_in_use_is_refused() {
    let f = Fixture::new("inuse");
    let other = f.scratch("mnt2");
    std::fs::create_dir(&other).unwrap();
    for target in [&other, &f.mnt] {
        let err = exec(presso().arg("mount").arg(&f.pool).arg(target)).fails();
        assert!(
            err.contains("in use"),
            "no mention of the pool being in use: {err}"
        );
        assert!(!is_mounted(&other));
    }
    // The first mount is unharmed.
    std::fs::write(f.p("still"), b"works").unwrap();
    assert_eq!(std::fs::read(f.p("still")).unwrap(), b"works");

    // Unmounting while a file is open fails clearly and leaves the mount working.
    let mut busy = File::create(f.p("busy")).unwrap();
    let err = exec(presso().arg("unmount").arg(&f.mnt)).fails();
    assert!(err.contains("busy") || err.contains("still using"), "{err}");
    assert!(is_mounted(&f.mnt));
    busy.write_all(b"still open").unwrap();
    drop(busy);
    assert_file_eq(&f.p("busy"), b"still open");
}

// ---- 14. bad input

#[test]
fn bad_input_is_refused_with_a_clear_message() {
    let f = Fixture::new("badinput");
    let not_pool = f.scratch("not-a-pool");
    std::fs::create_dir(&not_pool).unwrap();
    let other = f.scratch("mnt2");
    std::fs::create_dir(&other).unwrap();
    let err = exec(presso().arg("mount").arg(&not_pool).arg(&other)).fails();
    assert!(err.contains("not a Presso pool"), "{err}");
    assert!(!is_mounted(&other));

    let err = exec(presso().arg("create").arg(&f.pool)).fails();
    assert!(err.contains("already") || err.contains("in use"), "{err}");
    let err = exec(presso().args(["set", "compression=brotli"]).arg(&f.mnt)).fails();
    assert!(err.contains("brotli") && err.contains("zstd"), "{err}");
    let err = exec(presso().args(["get", "nosuchprop"]).arg(&f.mnt)).fails();
    assert!(
        err.contains("nosuchprop") && err.contains("compression"),
        "{err}"
    );
    let err = exec(
        presso()
            .arg("mount")
            .arg(&f.pool)
            .arg(&other)
            .args(["-o", "bogus"]),
    )
    .fails();
    assert!(err.contains("bogus"), "{err}");

    // The same, on a pool that is not mounted.
    let unmounted = f.scratch("pool2");
    exec(presso().arg("create").arg(&unmounted)).ok();
    let err = exec(presso().arg("create").arg(&unmounted)).fails();
    assert!(err.contains("already"), "{err}");
    let err = exec(presso().args(["set", "compression=brotli"]).arg(&unmounted)).fails();
    assert!(err.contains("brotli"), "{err}");
    let err = exec(presso().args(["get", "nosuchprop"]).arg(&unmounted)).fails();
    assert!(err.contains("nosuchprop"), "{err}");
}

// ---- more of the write path: direct I/O, rewrites, big offsets, large directories

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
fn offsets_past_4_gib_and_large_directories() {
    let mut f = Fixture::new("big");
    let far = f.p("far");
    let data = text_like(151, 300_000);
    let at = (5u64 << 30) + 12_345;
    let file = OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(true)
        .open(&far)
        .unwrap();
    file.write_all_at(b"head", 0).unwrap();
    file.write_all_at(&data, at).unwrap();
    file.sync_all().unwrap();
    drop(file);

    // 1500 entries with long names: more than one readdir batch.
    let dir = f.p("many");
    std::fs::create_dir(&dir).unwrap();
    let name = |i: usize| format!("{i:05}-{}", "n".repeat(200));
    for i in 0..1500 {
        std::fs::write(dir.join(name(i)), i.to_string()).unwrap();
    }
    for i in (0..1500).step_by(3) {
        std::fs::remove_file(dir.join(name(i))).unwrap();
    }
    let list = || {
        let mut names: Vec<String> = std::fs::read_dir(&dir)
            .unwrap()
            .map(|e| e.unwrap().file_name().into_string().unwrap())
            .collect();
        names.sort();
        names
    };
    let want: Vec<String> = (0..1500).filter(|i| i % 3 != 0).map(name).collect();
    assert_eq!(list(), want);

    f.remount(&[]);
    assert_eq!(list(), want);
    assert_eq!(
        std::fs::read_to_string(dir.join(name(1499))).unwrap(),
        "1499"
    );

    // Removing entries as they are read must not make the listing skip the others.
    let mut seen = 0;
    for entry in std::fs::read_dir(&dir).unwrap() {
        std::fs::remove_file(entry.unwrap().path()).unwrap();
        seen += 1;
    }
    assert_eq!(
        seen,
        want.len(),
        "entries skipped while unlinking during readdir"
    );
    assert!(list().is_empty());
    std::fs::remove_dir(&dir).unwrap();
    let file = File::open(&far).unwrap();
    assert_eq!(file.metadata().unwrap().len(), at + data.len() as u64);
    let mut got = vec![0u8; data.len()];
    file.read_exact_at(&mut got, at).unwrap();
    assert_bytes_eq(&got, &data, "data past 4 GiB");
    let mut head = [0u8; 4];
    file.read_exact_at(&mut head, 0).unwrap();
    assert_eq!(&head, b"head");
    // SAFETY: lseek on an open descriptor.
    let next = unsafe { libc::lseek(file.as_raw_fd(), RECORD as i64, libc::SEEK_DATA) };
    assert_eq!(
        next as u64,
        at / RECORD as u64 * RECORD as u64,
        "errno {}",
        errno()
    );
    let mut middle = vec![1u8; 1 << 20];
    file.read_exact_at(&mut middle, 3 << 30).unwrap();
    assert!(middle.iter().all(|&b| b == 0));
}

#[test]
fn read_only_mount_refuses_writes() {
    let mut f = Fixture::new("ro");
    std::fs::write(f.p("kept"), b"kept\n").unwrap();
    f.remount(&["ro"]);
    assert_eq!(std::fs::read(f.p("kept")).unwrap(), b"kept\n");
    let err = std::fs::write(f.p("new"), b"x").unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = OpenOptions::new()
        .write(true)
        .open(f.p("kept"))
        .unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
    let err = std::fs::remove_file(f.p("kept")).unwrap_err();
    assert_eq!(err.raw_os_error(), Some(libc::EROFS), "{err}");
}

#[test]
fn online_gc_while_writers_rewrite_files() {
    let mut f = Fixture::new("gcrace");
    let files = 4;
    let size = 2 << 20;
    let stop = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut writers = Vec::new();
    for t in 0..files {
        let (stop, path) = (stop.clone(), f.p(&format!("w{t}")));
        writers.push(std::thread::spawn(move || -> Vec<u8> {
            let mut current = text_like(160 + t, size);
            std::fs::write(&path, &current).unwrap();
            let file = OpenOptions::new()
                .write(true)
                .custom_flags(libc::O_DIRECT)
                .open(&path)
                .unwrap();
            let mut rng = Rng::new(170 + t);
            let mut round = 0u64;
            while !stop.load(Ordering::SeqCst) {
                let off = rng.below((size - 200_000) as u64) as usize;
                let patch = text_like(1000 * t + round, rng.range(1, 200_000) as usize);
                file.write_all_at(&patch, off as u64).unwrap();
                current[off..off + patch.len()].copy_from_slice(&patch);
                round += 1;
                if round.is_multiple_of(5) {
                    file.sync_all().unwrap();
                }
            }
            file.sync_all().unwrap();
            current
        }));
    }
    for _ in 0..25 {
        f.presso_on_mount(&["gc", "--min-live", "100%"]).ok();
    }
    stop.store(true, Ordering::SeqCst);
    let contents: Vec<Vec<u8>> = writers.into_iter().map(|w| w.join().unwrap()).collect();
    for (t, data) in contents.iter().enumerate() {
        assert_file_eq(&f.p(&format!("w{t}")), data);
    }
    f.presso_on_mount(&["scrub"]).ok();
    f.remount(&[]);
    for (t, data) in contents.iter().enumerate() {
        assert_file_eq(&f.p(&format!("w{t}")), data);
    }
    f.presso_on_mount(&["scrub"]).ok();
}

#[test]
fn readers_see_every_completed_append_while_records_move_through_compression() {
    let f = Fixture::new("overlay");
    let path = f.p("growing");
    let total = 12 << 20;
    let expected = Arc::new(text_like(181, total));
    let done = Arc::new(std::sync::atomic::AtomicBool::new(false));
    let appended = Arc::new(AtomicU64::new(0));
    let writer = {
        let (expected, done, appended, path) = (
            expected.clone(),
            done.clone(),
            appended.clone(),
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
    }
    writer.join().unwrap();
    assert!(rounds > 10, "only {rounds} reads overlapped the writer");
    assert_file_eq(&path, &expected);
}
