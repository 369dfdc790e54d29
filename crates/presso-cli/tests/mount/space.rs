//! Disk space: a full disk gives ENOSPC and the pool recovers, overwrites reclaim their space,
//! and online garbage collection runs while writers rewrite files.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use crate::common::*;

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

/// Fills the disk until ENOSPC with fsync'd 1 MiB files; returns the contents of those that
/// fitted (file `i` is named `f{i}`).
fn fill_until_full(f: &Fixture, contents: impl Fn(u64) -> Vec<u8>) -> Vec<u64> {
    let mut written = Vec::new();
    for i in 0..400u64 {
        let result = File::create(f.p(&format!("f{i}"))).and_then(|mut file| {
            file.write_all(&contents(i))?;
            file.sync_all()
        });
        match result {
            Ok(()) => written.push(i),
            Err(e) => {
                assert_eq!(e.raw_os_error(), Some(libc::ENOSPC), "file {i}: {e}");
                let _ = std::fs::remove_file(f.p(&format!("f{i}")));
                return written;
            }
        }
    }
    panic!("400 MB fitted on a small disk");
}

/// Deleting half of the data of a full pool makes room for new writes at once, without `presso
/// gc` or an unmount: short of space, the write path collects every segment holding garbage,
/// one at a time, most space freed first (every segment is half live here, which a pass
/// looking only for mostly dead segments leaves alone).
#[test]
fn deleting_half_of_a_full_pool_lets_new_writes_succeed() {
    let (_scratch, disk, mut f) = pool_on_small_disk("half", 128, "compression=off");
    let contents = |i: u64| random_bytes(3000 + i, 1 << 20);
    let written = fill_until_full(&f, contents);
    assert!(written.len() >= 8, "only {} files fitted", written.len());
    let (gone, kept): (Vec<u64>, Vec<u64>) = written.iter().partition(|&&i| i % 2 == 1);
    for i in &gone {
        std::fs::remove_file(f.p(&format!("f{i}"))).unwrap();
    }
    // A third of what was freed, written and fsync'd file by file.
    let fresh = |i: u64| random_bytes(9000 + i, 1 << 20);
    let new_files = (gone.len() / 3).max(2) as u64;
    for i in 0..new_files {
        let path = f.p(&format!("new{i}"));
        let result = File::create(&path).and_then(|mut file| {
            file.write_all(&fresh(i))?;
            file.sync_all()
        });
        if let Err(e) = result {
            let df = tool("df", &[&"-B1", &disk.dir]).stdout;
            panic!(
                "new file {i} of {new_files} after deleting {} of {} files: {e}\n{df}\n{}",
                gone.len(),
                written.len(),
                f.status()
            );
        }
    }
    f.remount(&[]);
    for &i in &kept {
        assert_file_eq(&f.p(&format!("f{i}")), &contents(i));
    }
    for i in 0..new_files {
        assert_file_eq(&f.p(&format!("new{i}")), &fresh(i));
    }
    f.presso_on_mount(&["scrub"]).ok();
    f.unmount();
    drop(f);
    drop(disk);
}

/// Takes every free block of the file system holding `path` (a file it creates there), as root,
/// so the reserved blocks go too.
fn take_all_space(path: &std::path::Path) -> File {
    let file = File::create(path).unwrap();
    let mut end = 0i64;
    for chunk in [1i64 << 20, 4096] {
        // SAFETY: fallocate on an open descriptor with valid offsets.
        while unsafe { libc::fallocate(std::os::fd::AsRawFd::as_raw_fd(&file), 0, end, chunk) } == 0
        {
            end += chunk;
        }
    }
    file
}

/// Gives back what [`take_all_space`] took, at once: its blocks are freed by truncating the
/// file before it is removed. Removing it alone frees them only once no process has the file
/// open, and a program another test starts holds a copy of every descriptor of this process
/// until its exec: a mount or an fsync right after the removal then found the disk still full.
fn give_space_back(filler: File, disk: &LoopMount) {
    filler.set_len(0).unwrap();
    drop(filler);
    std::fs::remove_file(disk.dir.join("filler")).unwrap();
}

/// A pool whose disk another program filled while it was unmounted, as ext4 would be: its
/// files read whole, `fsync` of a file or directory only read succeeds (it failed with ENOSPC:
/// the empty durable commit wrote a counter, and a group opened by a transaction the full disk
/// undid wrote its number) and the unmount is clean. The mount itself either works or, if
/// opening the metadata needs room the disk lacks, says the disk is full and what to do, never
/// that the metadata is damaged and needs `presso recover`. Once there is room the pool mounts
/// with every file whole.
#[test]
fn a_pool_on_a_disk_filled_while_unmounted_reads_syncs_and_unmounts() {
    let (_scratch, disk, mut f) = pool_on_small_disk("fullmount", 128, "compression=off");
    let data = random_bytes(41, 3 << 20);
    std::fs::write(f.p("kept"), &data).unwrap();
    f.unmount();
    let filler = take_all_space(&disk.dir.join("filler"));
    let mounted = exec(presso().arg("mount").arg(&f.pool).arg(&f.mnt));
    if mounted.status.success() {
        f.set_mounted(true);
        assert_file_eq(&f.p("kept"), &data);
        File::open(f.p("kept"))
            .and_then(|file| file.sync_all())
            .expect("fsync of a file only read, on a full disk");
        File::open(&f.mnt)
            .and_then(|dir| dir.sync_all())
            .expect("fsync of a directory only read, on a full disk");
        f.unmount();
    } else {
        let why = &mounted.stderr;
        assert!(
            why.contains("the disk holding the pool is full") && why.contains("Free space"),
            "{why}"
        );
        assert!(!why.contains("recover"), "a full disk is not damage: {why}");
        assert!(!is_mounted(&f.mnt));
    }
    give_space_back(filler, &disk);
    f.mount(&[]);
    assert_file_eq(&f.p("kept"), &data);
    f.unmount();
    drop(f);
    drop(disk);
}

/// Metadata still changes on a disk another program has filled, as on ext4: the intent log
/// keeps blocks of its own, so a chmod, and an unlink that would free space, commit. The
/// directory's fsync first commits the group and empties the log, so without its own blocks
/// the chmod's record would need a new one.
#[test]
fn modes_and_names_change_on_a_disk_another_program_filled() {
    use std::os::unix::fs::PermissionsExt;
    let (_scratch, disk, mut f) = pool_on_small_disk("metafull", 128, "compression=off");
    File::create(f.p("a")).unwrap();
    File::create(f.p("b")).unwrap();
    File::open(&f.mnt).unwrap().sync_all().unwrap();
    let filler = take_all_space(&disk.dir.join("filler"));
    std::fs::set_permissions(f.p("a"), std::fs::Permissions::from_mode(0o600))
        .expect("chmod on a full disk");
    std::fs::remove_file(f.p("b")).expect("unlink on a full disk");
    give_space_back(filler, &disk);
    f.remount(&[]);
    let mode = std::fs::metadata(f.p("a")).unwrap().permissions().mode();
    assert_eq!(mode & 0o777, 0o600);
    assert!(!f.p("b").exists());
}

/// A record the disk has no room for is never dropped behind anyone's back: fsync says ENOSPC,
/// the file keeps its size, status names it, `presso unmount` refuses (non-zero, naming the
/// file) and keeps the mount; once space returns the same data is stored and the unmount
/// succeeds. `--force` unmounts anyway and names what was lost (with the disk full, its size
/// could not be committed either).
/// A file written by a process of its own, which keeps it open and fsyncs it when asked. This
/// test process starts programs for other tests meanwhile, and a program's start closes its
/// copy of every descriptor open here (at exec), which FUSE hands to the daemon as a flush of
/// the file: the daemon stores the file's partial record then, before the test fills the disk.
/// A file held by a process that starts nothing gets no flush but its own.
struct PendingWriter {
    child: std::process::Child,
    replies: std::io::BufReader<std::process::ChildStdout>,
}

/// The writer: reads the data from stdin, writes it and hands its pages to the daemon without
/// asking for them to be stored (sync_file_range), then fsyncs at each `fsync` line, answering
/// with the errno (0: it worked), until stdin closes.
const PENDING_WRITER: &str = r#"
import ctypes, os, sys
data = sys.stdin.buffer.read(int(sys.argv[2]))
fd = os.open(sys.argv[1], os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
os.pwrite(fd, data, 0)
libc = ctypes.CDLL(None, use_errno=True)
if libc.sync_file_range(fd, ctypes.c_longlong(0), ctypes.c_longlong(0), 7) != 0:
    sys.exit("sync_file_range: " + os.strerror(ctypes.get_errno()))
print("written", flush=True)
for line in sys.stdin.buffer:
    try:
        os.fsync(fd)
        print(0, flush=True)
    except OSError as e:
        print(e.errno, flush=True)
"#;

impl PendingWriter {
    /// Writes `data` to `path`, which stays open.
    fn start(path: &std::path::Path, data: &[u8]) -> PendingWriter {
        use std::io::BufRead;
        use std::process::{Command, Stdio};
        require_tool("python3", "python3");
        let mut child = Command::new("python3")
            .args(["-c", PENDING_WRITER])
            .arg(path)
            .arg(data.len().to_string())
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .spawn()
            .expect("start the writer");
        child.stdin.as_mut().unwrap().write_all(data).unwrap();
        let mut replies = std::io::BufReader::new(child.stdout.take().unwrap());
        let mut line = String::new();
        replies.read_line(&mut line).unwrap();
        assert_eq!(line.trim(), "written", "the writer failed: {line}");
        PendingWriter { child, replies }
    }

    /// fsync of the file, in the writer.
    fn fsync(&mut self) -> std::io::Result<()> {
        use std::io::BufRead;
        writeln!(self.child.stdin.as_mut().unwrap(), "fsync").unwrap();
        let mut line = String::new();
        self.replies.read_line(&mut line).unwrap();
        match line.trim().parse::<i32>() {
            Ok(0) => Ok(()),
            Ok(errno) => Err(std::io::Error::from_raw_os_error(errno)),
            Err(_) => panic!("the writer answered {line:?}"),
        }
    }

    /// Closes the file: the writer exits.
    fn close(mut self) {
        drop(self.child.stdin.take());
        let status = self.child.wait().unwrap();
        assert!(status.success(), "the writer failed: {status}");
    }
}

#[test]
fn data_that_cannot_be_stored_is_kept_shown_and_never_dropped_silently() {
    let (_scratch, disk, mut f) = pool_on_small_disk("unstored", 128, "compression=off");
    // The pending record must wait for its fsync however long filling the disk takes on a
    // busy machine: no flush of idle records, no durability sweep, before that fsync.
    let hold = ["flush_after=3600,sync_interval=3600"];
    f.remount(&hold);
    let write_pending = |path: std::path::PathBuf, seed: u64| {
        let data = random_bytes(seed, 100_000);
        (PendingWriter::start(&path, &data), data)
    };

    let (mut file, data) = write_pending(f.p("pending"), 77);
    let filler = take_all_space(&disk.dir.join("filler"));
    let error = file.fsync().expect_err("fsync on a full disk succeeded");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    assert_eq!(std::fs::metadata(f.p("pending")).unwrap().len(), 100_000);
    let status = f.status();
    assert_eq!(status["unstored"]["bytes"], 100_000, "{status}");
    assert_eq!(
        status["unstored"]["files"][0]["path"], "/pending",
        "{status}"
    );
    let refused = exec(presso().arg("unmount").arg(&f.mnt)).fails();
    assert!(
        refused.contains("/pending") && refused.contains("--force"),
        "{refused}"
    );
    assert!(is_mounted(&f.mnt), "the refused unmount unmounted");

    give_space_back(filler, &disk);
    file.fsync().expect("fsync once space is back");
    file.close();
    assert_eq!(f.status()["unstored"]["bytes"], 0);
    f.remount(&hold);
    assert_file_eq(&f.p("pending"), &data);

    let (mut file, _) = write_pending(f.p("lost"), 78);
    let filler = take_all_space(&disk.dir.join("filler"));
    assert!(file.fsync().is_err());
    file.close();
    let out = exec(presso().arg("unmount").arg("--force").arg(&f.mnt)).ok();
    f.set_mounted(false);
    // Its record could not be stored, and is named; or, on a busy machine, it was stored and
    // the commit naming it found no room, and everything since the last commit is declared
    // lost. Never silence.
    assert!(
        out.contains("lost: ") && (out.contains("/lost") || out.contains("last commit failed")),
        "{out}"
    );
    give_space_back(filler, &disk);
    f.mount(&hold);
    // What was declared lost is lost (the disk had no room for its size either; if its commit
    // failed, for its name too); nothing else is, and nothing reads as bytes never written.
    let lost = match std::fs::read(f.p("lost")) {
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Vec::new(),
        read => read.unwrap(),
    };
    assert!(
        lost.iter().all(|&b| b == 0),
        "the lost file reads other bytes"
    );
    assert_file_eq(&f.p("pending"), &data);
    f.unmount();
    drop(f);
    drop(disk);
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

/// Bytes the disk had no room for never show while mounted as if stored. On a disk under
/// `min_free` from the mount on, the writes the kernel cached are refused when it hands them over
/// (fsync says ENOSPC), and the mounted file then reads, size and bytes, as it does after a
/// remount: zeros where the refused bytes were (the kernel keeps the size it grew the file to),
/// never the refused bytes the remount does not show.
#[test]
fn bytes_refused_for_space_read_the_same_before_and_after_a_remount() {
    let (_scratch, disk, mut f) = pool_on_small_disk("refused", 128, "compression=off");
    let kept = random_bytes(91, 50_000);
    std::fs::write(f.p("f"), &kept).unwrap();
    File::open(f.p("f")).unwrap().sync_all().unwrap();
    f.unmount();
    // Room to mount, under the 64 MiB kept free for metadata and deletes.
    let filler = take_all_space(&disk.dir.join("filler"));
    let taken = filler.metadata().unwrap().len();
    filler.set_len(taken - (16 << 20)).unwrap();
    f.mount(&[]);
    // An overwrite of stored bytes and an append.
    let file = OpenOptions::new().write(true).open(f.p("f")).unwrap();
    file.write_all_at(&random_bytes(92, 10_000), 20_000)
        .and_then(|()| file.write_all_at(&random_bytes(93, 100_000), kept.len() as u64))
        .expect("the writes reach the kernel's cache");
    let error = file.sync_all().expect_err("fsync on a full disk succeeded");
    assert_eq!(error.raw_os_error(), Some(libc::ENOSPC), "{error}");
    drop(file);
    // Counted once the kernel has been told to drop the refused pages.
    assert!(
        wait_until(Duration::from_secs(30), || f.status()["refused_writes"]
            .as_u64()
            .is_some_and(|n| n > 0)),
        "status never counted the refused write: {}",
        f.status()
    );
    let status = f.status();
    assert!(
        status["refused_bytes"].as_u64().unwrap() >= 110_000,
        "{status}"
    );
    let shown = exec(presso().arg("status").arg(&f.mnt)).ok();
    assert!(shown.contains("REFUSED"), "{shown}");
    let mounted = std::fs::read(f.p("f")).unwrap();
    let mounted_size = std::fs::metadata(f.p("f")).unwrap().len();
    give_space_back(filler, &disk);
    f.remount(&[]);
    let remounted = std::fs::read(f.p("f")).unwrap();
    assert_eq!(mounted_size, mounted.len() as u64);
    assert_eq!(&remounted[..kept.len()], &kept[..], "stored bytes changed");
    assert_eq!(
        (mounted.len(), mounted == remounted),
        (remounted.len(), true),
        "the mounted file read other bytes than after the remount"
    );
    f.unmount();
    drop(f);
    drop(disk);
}
