//! The file layer's own time per file of a `tar x`, without the kernel's FUSE: the requests a
//! mount receives for each extracted file (counted with `bench/fuse_requests.py` during a
//! `tar x` of the Linux source's `drivers/net`, 11.6 per file), in their order, served by [`Vfs`]
//! in process:
//!
//! GETATTR of the directory, LOOKUP (the name is new), CREATE, GETXATTR `security.capability`
//! (before the `write`), WRITE (the file's bytes), SETATTR of the times (the kernel's), SETATTR of
//! the times (tar's `utimensat`), GETXATTR and SETATTR of the owner (`fchown`), SETATTR of the
//! mode (`fchmod`), FLUSH and RELEASE (`close`).
//!
//! What a mount adds on top is the FUSE round trips (`bench/namespace.sh` measures those against
//! the FUSE floor). The compression, the store's appends and the commits of transaction groups
//! run on the pool's own threads meanwhile, as they do under a mount; on a two-CPU machine they
//! share the CPUs with the loop that makes the requests.
//!
//! Three groups: `tar_x_per_file` (wall-clock time per file) and `tar_x_cpu_per_file` (CPU time
//! of the thread making the requests, per file), and `rm_cpu_per_file`: the files made, then
//! removed as `rm -rf` does (an UNLINK per file, an RMDIR per directory), the removal's CPU time
//! per file.
//!
//! Run: `cargo bench -p presso-fs --bench tar_files -- --warm-up-time 2 --measurement-time 10`
//! (`PRESSO_BENCH_DIR` picks the pool's directory, default the temporary directory).

use criterion::{criterion_group, criterion_main, Criterion};
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Caller, Vfs, VfsConfig};
use presso_meta::{NewNode, SetAttr, Timespec, ROOT_INO};
use std::path::PathBuf;
use std::time::{Duration, Instant};

/// File sizes in turn: their mean, 17 KB, is the Linux source's mean file size.
const SIZES: [usize; 6] = [900, 2_600, 6_500, 14_000, 23_000, 55_000];
/// Files per directory before the next one is made (the Linux source has about 14).
const FILES_PER_DIR: u64 = 20;

/// Text that compresses about as well as source code (a few lines, numbered).
fn text(len: usize) -> Vec<u8> {
    let lines = [
        "static int probe(struct device *dev, const struct device_id *id)\n",
        "\tif (!dev->parent || dev->flags & FLAG_REMOVED)\n\t\treturn -ENODEV;\n",
        "/* Reset the controller before the first transfer. */\n",
        "\tret = regmap_update_bits(priv->map, REG_CTRL, CTRL_RESET, 0);\n",
    ];
    let mut out = Vec::with_capacity(len + 80);
    let mut n = 0u64;
    while out.len() < len {
        n = n.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
        out.extend_from_slice(lines[(n >> 60) as usize % lines.len()].as_bytes());
        out.extend_from_slice(format!("\t/* {} */\n", n >> 44).as_bytes());
    }
    out.truncate(len);
    out
}

/// A pool with `compression`, mounted in process, and the scratch directory holding it.
struct Mounted {
    vfs: std::sync::Arc<Vfs>,
    dir: PathBuf,
    dirs: u64,
    current: u64,
    files: u64,
    data: Vec<Vec<u8>>,
}

impl Mounted {
    fn new(compression: &str) -> Mounted {
        let base = std::env::var_os("PRESSO_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        let dir = base.join(format!(
            "presso-bench-tar-{compression}-{}",
            std::process::id()
        ));
        let _ = std::fs::remove_dir_all(&dir);
        let props = [("compression".to_string(), compression.to_string())];
        Pool::create(&dir, &props).expect("create the pool");
        let (pool, _) = Pool::open(&dir, PoolOptions::default()).expect("open the pool");
        Mounted {
            vfs: Vfs::new(pool, VfsConfig::default()),
            dir,
            dirs: 0,
            current: ROOT_INO,
            files: 0,
            data: SIZES.iter().map(|&n| text(n)).collect(),
        }
    }

    /// One file, as `tar x` makes it through a mount.
    fn extract_one(&mut self) {
        if self.files.is_multiple_of(FILES_PER_DIR) {
            let name = format!("d{}", self.dirs);
            self.dirs += 1;
            self.current = self
                .vfs
                .make_node(ROOT_INO, name.as_bytes(), &NewNode::dir(0o755, 0, 0))
                .expect("mkdir")
                .ino;
        }
        let (vfs, dir) = (&self.vfs, self.current);
        let name = format!("file{}.c", self.files);
        let data = &self.data[self.files as usize % SIZES.len()];
        self.files += 1;
        let root = Caller::ROOT;

        vfs.getattr(dir).expect("getattr");
        assert!(vfs.lookup(dir, name.as_bytes()).is_err());
        let attr = vfs
            .make_node(dir, name.as_bytes(), &NewNode::file(0o600, 0, 0))
            .expect("create");
        let ino = attr.ino;
        let fh = vfs.open_created(dir, &attr).expect("open");
        let _ = vfs.getxattr(ino, b"security.capability");
        let (_, submission) = vfs.write_by(ino, 0, data, false, root).expect("write");
        submission.submit();
        let stamp = Timespec {
            secs: 1_670_000_000,
            nsec: 0,
        };
        let times = |atime| SetAttr {
            atime,
            mtime: Some(stamp),
            ctime: Some(Timespec::now()),
            ..SetAttr::default()
        };
        vfs.setattr_by(ino, times(None), root).expect("times");
        vfs.setattr_by(ino, times(Some(stamp)), root)
            .expect("utimensat");
        let _ = vfs.getxattr(ino, b"security.capability");
        let owner = SetAttr {
            uid: Some(0),
            gid: Some(0),
            ctime: Some(Timespec::now()),
            ..SetAttr::default()
        };
        vfs.setattr_by(ino, owner, root).expect("fchown");
        let mode = SetAttr {
            mode: Some(0o644),
            ctime: Some(Timespec::now()),
            ..SetAttr::default()
        };
        vfs.setattr_by(ino, mode, root).expect("fchmod");
        vfs.flush(ino).expect("flush");
        vfs.release(ino, fh).expect("release");
    }

    /// Removes every file and directory `extract_one` made, as `rm -rf` does through a mount
    /// (the kernel has the names from its listing: an UNLINK per file, an RMDIR per directory);
    /// returns how many files it removed.
    fn remove_all(&mut self) -> u64 {
        let mut removed = 0;
        for d in 0..self.dirs {
            let name = format!("d{d}");
            let dir = self
                .vfs
                .lookup(ROOT_INO, name.as_bytes())
                .expect("lookup")
                .ino;
            let first = d * FILES_PER_DIR;
            for f in first..(first + FILES_PER_DIR).min(self.files) {
                let file = format!("file{f}.c");
                self.vfs.unlink(dir, file.as_bytes()).expect("unlink");
                removed += 1;
            }
            self.vfs.rmdir(ROOT_INO, name.as_bytes()).expect("rmdir");
        }
        self.dirs = 0;
        self.files = 0;
        removed
    }
}

impl Drop for Mounted {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.dir);
    }
}

/// The CPU time the calling thread has used.
fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid timespec for the call to fill in.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    assert_eq!(rc, 0, "clock_gettime(CLOCK_THREAD_CPUTIME_ID)");
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

/// Two measures of the same requests: `tar_x_per_file` is the wall-clock time per file, which
/// includes waits for the pool's threads and their share of the CPUs; `tar_x_cpu_per_file` is
/// the CPU time of the thread making the requests, which the machine's other load barely moves
/// (the figure to compare builds by on a shared machine).
fn bench(c: &mut Criterion) {
    for (group_name, clock) in [
        ("tar_x_per_file", Clock::Wall),
        ("tar_x_cpu_per_file", Clock::ThreadCpu),
    ] {
        let mut group = c.benchmark_group(group_name);
        for compression in ["off", "gzip-6"] {
            let mut mounted = Mounted::new(compression);
            group.bench_function(compression, |b| {
                b.iter_custom(|files| {
                    let started = clock.now();
                    for _ in 0..files {
                        mounted.extract_one();
                    }
                    clock.now() - started
                })
            });
            mounted.vfs.shutdown().expect("shut down");
        }
        group.finish();
    }
    let mut group = c.benchmark_group("rm_cpu_per_file");
    let mut mounted = Mounted::new("off");
    group.bench_function("off", |b| {
        b.iter_custom(|files| {
            for _ in 0..files {
                mounted.extract_one();
            }
            let started = Clock::ThreadCpu.now();
            let removed = mounted.remove_all();
            let spent = Clock::ThreadCpu.now() - started;
            assert_eq!(removed, files);
            spent
        })
    });
    mounted.vfs.shutdown().expect("shut down");
    group.finish();
}

/// What a benchmark measures its time with.
#[derive(Clone, Copy)]
enum Clock {
    Wall,
    ThreadCpu,
}

impl Clock {
    /// The time now, since a fixed start.
    fn now(self) -> Duration {
        static START: std::sync::OnceLock<Instant> = std::sync::OnceLock::new();
        match self {
            Clock::Wall => START.get_or_init(Instant::now).elapsed(),
            Clock::ThreadCpu => thread_cpu_time(),
        }
    }
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(10));
    targets = bench
}
criterion_main!(benches);
