//! File data at the edges: truncate, fallocate and sparse files, appends from two descriptors
//! with fsync and statfs, and offsets past 4 GiB (with large directories).

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};

use crate::common::*;

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

/// The reproductions of stale bytes after truncate: durable data truncated away must read as
/// zeros when the file grows again — at once (while the truncate's ops are still queued) and
/// after a remount.
#[test]
fn truncated_bytes_never_come_back() {
    let mut f = Fixture::new("stale");
    let a = vec![b'A'; 262_144];

    // truncate -s 0; truncate -s 262144 on a synced file.
    let down_up = f.p("down-up");
    std::fs::write(&down_up, &a).unwrap();
    // SAFETY: sync(2) takes no arguments.
    unsafe { libc::sync() };
    let file = OpenOptions::new().write(true).open(&down_up).unwrap();
    file.set_len(0).unwrap();
    file.set_len(262_144).unwrap();
    drop(file);
    let zeros = vec![0u8; 262_144];
    assert_file_eq(&down_up, &zeros);

    // open(O_TRUNC), then a write past the end.
    let otrunc = f.p("otrunc");
    std::fs::write(&otrunc, &a).unwrap();
    // SAFETY: as above.
    unsafe { libc::sync() };
    let file = OpenOptions::new()
        .write(true)
        .truncate(true)
        .open(&otrunc)
        .unwrap();
    file.write_all_at(b"Z", 200_000).unwrap();
    drop(file);
    let mut one_z = vec![0u8; 200_001];
    one_z[200_000] = b'Z';
    assert_file_eq(&otrunc, &one_z);

    // Down into a record, up, and down again before anything commits (found by the model test).
    let twice = f.p("twice");
    std::fs::write(&twice, &a).unwrap();
    let file = OpenOptions::new().write(true).open(&twice).unwrap();
    file.sync_all().unwrap();
    file.set_len(1000).unwrap();
    file.set_len(262_144).unwrap();
    file.set_len(200_000).unwrap();
    drop(file);
    let mut kept = vec![0u8; 200_000];
    kept[..1000].fill(b'A');
    assert_file_eq(&twice, &kept);

    f.remount(&[]);
    assert_file_eq(&down_up, &zeros);
    assert_file_eq(&otrunc, &one_z);
    assert_file_eq(&twice, &kept);
}

#[test]
fn a_file_read_again_after_reopening_comes_from_the_kernels_cache() {
    let f = Fixture::new("reread");
    let data = fastq_like(503, 4 << 20);
    std::fs::write(f.p("reads.fq"), &data).unwrap();
    let read_bytes = || f.status()["throughput"]["read_bytes"].as_u64().unwrap();
    // Each read opens the file anew, as `cat` or a pipeline's next step does.
    assert_eq!(std::fs::read(f.p("reads.fq")).unwrap(), data);
    let after_first = read_bytes();
    assert_eq!(std::fs::read(f.p("reads.fq")).unwrap(), data);
    let again = read_bytes() - after_first;
    assert!(
        again < data.len() as u64 / 2,
        "reading the {} bytes again after reopening asked the daemon for {again}: the open \
         dropped the pages the kernel had cached",
        data.len()
    );
}
