//! Helpers of the mount tests: running the `presso` binary and other tools with a time limit, a
//! pool and mount point per test that are always unmounted (also when a test panics), and
//! deterministic data.

#![allow(dead_code)]

use std::borrow::BorrowMut;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

use serde_json::Value;

/// Longest any single command of a test may take before the test fails instead of hanging.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The `presso` binary under test.
pub fn presso_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presso"))
}

/// A `presso` command.
pub fn presso() -> Command {
    Command::new(presso_bin())
}

/// Fails the test with a clear message if `tool` is not on the PATH: the tests install nothing
/// themselves (CI installs the packages they need).
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths).any(|dir| {
                std::fs::metadata(dir.join(tool))
                    .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{tool}` on the PATH (Debian package {package}); install it and run again"
    );
}

/// Fails the test with a clear message unless it runs as root (loop mounts, other users,
/// chown).
pub fn require_root(why: &str) {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test must run as root: {why}");
}

/// Fails the test with a clear message unless FUSE mounts can be made here.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "the mount tests need /dev/fuse (load the fuse module, or give the container the device)"
    );
    require_tool("fusermount3", "fuse3");
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    /// The command line, for messages.
    pub what: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Panics with everything the command printed unless it succeeded; returns stdout.
    pub fn ok(self) -> String {
        assert!(
            self.status.success(),
            "`{}` failed with {}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// Panics unless the command failed with a non-zero exit code; returns stderr.
    pub fn fails(self) -> String {
        assert!(
            !self.status.success() && self.status.code().is_some(),
            "`{}` should have failed with a non-zero exit code, got {}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self.stderr
    }
}

/// Runs `cmd` to the end with no standard input, failing the test if it takes longer than
/// [`COMMAND_TIMEOUT`] (the child is killed then).
pub fn exec(cmd: impl BorrowMut<Command>) -> Output {
    exec_within(cmd, COMMAND_TIMEOUT)
}

/// [`exec`] with a given time limit.
pub fn exec_within(mut cmd: impl BorrowMut<Command>, limit: Duration) -> Output {
    let cmd = cmd.borrow_mut();
    let what = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `{what}`: {e}"));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!("`{what}` did not finish within {limit:?}; killed it");
            }
            Err(e) => panic!("waiting for `{what}`: {e}"),
        }
    };
    Output {
        what,
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs `program` with `args` (see [`exec`]).
pub fn tool(program: &str, args: &[&dyn AsRef<OsStr>]) -> Output {
    exec(cmd(program, args.iter().map(|a| a.as_ref())))
}

/// A command from a program name and arguments.
pub fn cmd<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// Polls `condition` until it holds or `limit` passes; returns whether it held. For waiting on
/// something outside the test's control (a daemon exiting, a release reaching the daemon).
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// Whether something is mounted exactly at `path` (per /proc/self/mountinfo).
pub fn is_mounted(path: &Path) -> bool {
    mount_line(path).is_some()
}

/// The /proc/self/mountinfo line of the mount at `path`, if any.
pub fn mount_line(path: &Path) -> Option<String> {
    let text = std::fs::read_to_string("/proc/self/mountinfo").ok()?;
    let want = path.to_str()?;
    text.lines()
        .find(|line| {
            line.split(' ')
                .nth(4)
                .is_some_and(|m| m.replace("\\040", " ") == want)
        })
        .map(str::to_string)
}

/// A temporary directory for one test: the pool, the mount point and anything else, readable by
/// other users (so permission tests meet the mount's permissions, not the temp dir's).
pub fn scratch_dir(name: &str) -> tempfile::TempDir {
    let dir = tempfile::Builder::new()
        .prefix(&format!("presso-mount-{name}-"))
        .tempdir()
        .expect("create a temp dir");
    std::fs::set_permissions(dir.path(), std::fs::Permissions::from_mode(0o755))
        .expect("chmod the temp dir");
    dir
}

/// One test's pool and mount point. Unmounts on drop, also when the test panics: `presso
/// unmount` first, `fusermount3 -uz` if that fails.
pub struct Fixture {
    /// The pool directory.
    pub pool: PathBuf,
    /// The mount point.
    pub mnt: PathBuf,
    mounted: bool,
    // Dropped last: the temp dir holds the pool and the mount point.
    dir: Option<tempfile::TempDir>,
    root: PathBuf,
}

impl Fixture {
    /// A new pool (created with `presso create POOL -o PROPS...`) in a fresh temp dir, mounted.
    pub fn new(name: &str) -> Fixture {
        let mut f = Fixture::unmounted(name, &[]);
        f.mount(&[]);
        f
    }

    /// A new pool with creation properties, not mounted yet.
    pub fn unmounted(name: &str, props: &[&str]) -> Fixture {
        require_fuse();
        let dir = scratch_dir(name);
        let root = dir.path().to_path_buf();
        Fixture::create_in(root.join("pool"), root.join("mnt"), Some(dir), props)
    }

    /// A pool at `pool` (created here) mounted later at `mnt` (created here); `dir`, if given, is
    /// removed once everything is unmounted.
    pub fn create_in(
        pool: PathBuf,
        mnt: PathBuf,
        dir: Option<tempfile::TempDir>,
        props: &[&str],
    ) -> Fixture {
        std::fs::create_dir_all(&mnt).expect("create the mount point");
        let mut c = presso();
        c.arg("create").arg(&pool);
        for p in props {
            c.arg("-o").arg(p);
        }
        exec(&mut c).ok();
        let root = mnt
            .parent()
            .expect("mount point has a parent")
            .to_path_buf();
        Fixture {
            pool,
            mnt,
            mounted: false,
            dir,
            root,
        }
    }

    /// A scratch path beside the pool and the mount point (not inside the mount).
    pub fn scratch(&self, name: &str) -> PathBuf {
        self.root.join(name)
    }

    /// A path inside the mount.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.mnt.join(rel)
    }

    /// `presso mount POOL MNT [-o OPTIONS]`; asserts it worked and the mount is there.
    pub fn mount(&mut self, options: &[&str]) {
        assert!(!self.mounted, "already mounted");
        let mut c = presso();
        c.arg("mount").arg(&self.pool).arg(&self.mnt);
        if !options.is_empty() {
            c.arg("-o").arg(options.join(","));
        }
        exec(&mut c).ok();
        self.mounted = true;
        assert!(
            is_mounted(&self.mnt),
            "`presso mount` succeeded but nothing is mounted at {}",
            self.mnt.display()
        );
    }

    /// Records that the pool was mounted (or is unmounted) by other means, for the drop guard.
    pub fn set_mounted(&mut self, mounted: bool) {
        self.mounted = mounted;
    }

    /// `presso unmount MNT`; asserts it worked and the daemon let go of the pool.
    pub fn unmount(&mut self) {
        assert!(self.mounted, "not mounted");
        let out = exec(presso().arg("unmount").arg(&self.mnt));
        self.mounted = false;
        out.ok();
        assert!(
            !is_mounted(&self.mnt),
            "{} is still mounted after `presso unmount`",
            self.mnt.display()
        );
        self.assert_log_clean();
    }

    /// Fails if the daemon logged a panic (a request that got EIO for a bug).
    pub fn assert_log_clean(&self) {
        let log = std::fs::read_to_string(self.pool.join("presso.log")).unwrap_or_default();
        assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
    }

    /// Unmounts and mounts again with the same options.
    pub fn remount(&mut self, options: &[&str]) {
        self.unmount();
        self.mount(options);
    }

    /// `presso status --json` of the mount (or of the pool when not mounted).
    pub fn status(&self) -> Value {
        let target = if self.mounted { &self.mnt } else { &self.pool };
        let out = exec(presso().arg("status").arg("--json").arg(target)).ok();
        serde_json::from_str(&out).unwrap_or_else(|e| panic!("bad status JSON {out:?}: {e}"))
    }

    /// A `presso` subcommand run on the mount (`presso SUB ARGS... MNT`); returns its output.
    pub fn presso_on_mount(&self, args: &[&str]) -> Output {
        let mut c = presso();
        c.args(args).arg(&self.mnt);
        exec(&mut c)
    }
}

impl Drop for Fixture {
    fn drop(&mut self) {
        if self.mounted || is_mounted(&self.mnt) {
            force_unmount(&self.mnt);
        }
        if let Some(dir) = self.dir.take() {
            if is_mounted(&self.mnt) {
                // Never delete through a live mount; leave the directory behind instead.
                eprintln!("{} is still mounted; keeping it", self.mnt.display());
                let _ = dir.keep();
            }
        }
    }
}

/// Unmounts `mnt` however it can, without panicking (runs in drop guards).
pub fn force_unmount(mnt: &Path) {
    let clean = Command::new(presso_bin())
        .arg("unmount")
        .arg(mnt)
        .stdin(Stdio::null())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .status()
        .is_ok_and(|s| s.success());
    if !clean && is_mounted(mnt) {
        let _ = Command::new("fusermount3")
            .arg("-uz")
            .arg(mnt)
            .stdin(Stdio::null())
            .status();
    }
}

/// A child process killed and reaped on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// A deterministic pseudo-random generator (SplitMix64), so every run sees the same data.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    /// A generator from a seed.
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// The next 64 random bits.
    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    /// A number in `0..n`.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }

    /// A number in `lo..hi`.
    pub fn range(&mut self, lo: u64, hi: u64) -> u64 {
        lo + self.below(hi - lo)
    }

    /// Fills `buf` with random bytes.
    pub fn fill(&mut self, buf: &mut [u8]) {
        for chunk in buf.chunks_mut(8) {
            let v = self.next_u64().to_le_bytes();
            chunk.copy_from_slice(&v[..chunk.len()]);
        }
    }

    /// Shuffles `items` (Fisher–Yates).
    pub fn shuffle<T>(&mut self, items: &mut [T]) {
        for i in (1..items.len()).rev() {
            let j = self.below(i as u64 + 1) as usize;
            items.swap(i, j);
        }
    }
}

/// `n` random (incompressible) bytes.
pub fn random_bytes(seed: u64, n: usize) -> Vec<u8> {
    let mut v = vec![0; n];
    Rng::new(seed).fill(&mut v);
    v
}

const WORDS: &[&str] = &[
    "request",
    "served",
    "GET",
    "POST",
    "PUT",
    "/index.html",
    "/api/v1/items",
    "/api/v1/users",
    "status",
    "200",
    "201",
    "304",
    "404",
    "500",
    "user",
    "agent",
    "bytes",
    "latency",
    "ms",
    "cache",
    "hit",
    "miss",
    "upstream",
    "timeout",
    "retry",
    "session",
    "token",
    "expired",
    "worker",
    "queue",
    "depth",
    "scheduler",
    "compaction",
    "segment",
    "flushed",
    "committed",
];

/// `n` bytes of log-like text lines.
pub fn text_like(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = Vec::with_capacity(n + 256);
    let mut line = 0u64;
    while data.len() < n {
        let level = ["INFO", "DEBUG", "WARN", "ERROR"][rng.below(4) as usize];
        data.extend_from_slice(
            format!(
                "2024-05-{:02}T{:02}:{:02}:{:02}.{:03}Z {level} [pid {}] ",
                line / 86_400 % 28 + 1,
                line / 3600 % 24,
                line / 60 % 60,
                line % 60,
                rng.below(1000),
                1000 + rng.below(64)
            )
            .as_bytes(),
        );
        for _ in 0..rng.range(4, 14) {
            data.extend_from_slice(WORDS[rng.below(WORDS.len() as u64) as usize].as_bytes());
            data.push(b' ');
        }
        data.extend_from_slice(format!("id={:x}\n", rng.next_u64() >> 24).as_bytes());
        line += 1;
    }
    data.truncate(n);
    data
}

/// `n` bytes of FASTQ-like sequencing records.
pub fn fastq_like(seed: u64, n: usize) -> Vec<u8> {
    let mut rng = Rng::new(seed);
    let mut data = Vec::with_capacity(n + 512);
    let mut read = 0u64;
    while data.len() < n {
        read += 1;
        let len = 100 + rng.below(51) as usize;
        data.extend_from_slice(
            format!(
                "@SIM:1:FCX:{}:{}:{}:{} 1:N:0:ACGTAC\n",
                1 + read % 8,
                1101 + read % 16,
                rng.below(30_000),
                rng.below(30_000)
            )
            .as_bytes(),
        );
        for _ in 0..len {
            data.push(b"ACGT"[rng.below(4) as usize]);
        }
        data.extend_from_slice(b"\n+\n");
        // Qualities drift slowly, as real ones do.
        let mut q = 30 + rng.below(10) as i64;
        for _ in 0..len {
            q = (q + rng.below(5) as i64 - 2).clamp(2, 41);
            data.push(b'!' + q as u8);
        }
        data.push(b'\n');
    }
    data.truncate(n);
    data
}

/// Byte-compares the file at `path` in a mount with `expected`, read both through the page
/// cache and with O_DIRECT (past the cache, from the daemon); panics at the first difference.
pub fn assert_file_eq(path: &Path, expected: &[u8]) {
    let got = std::fs::read(path).unwrap_or_else(|e| panic!("read {}: {e}", path.display()));
    assert_bytes_eq(&got, expected, &path.display().to_string());
    let direct = read_direct(path);
    assert_bytes_eq(&direct, expected, &format!("{} (O_DIRECT)", path.display()));
}

/// Reads a whole file in a FUSE mount with O_DIRECT, so the daemon answers rather than the
/// kernel's page cache (the kernel writes cached dirty pages back first).
pub fn read_direct(path: &Path) -> Vec<u8> {
    use std::os::unix::fs::OpenOptionsExt;
    let mut file = std::fs::OpenOptions::new()
        .read(true)
        .custom_flags(libc::O_DIRECT)
        .open(path)
        .unwrap_or_else(|e| panic!("open {} with O_DIRECT: {e}", path.display()));
    let mut data = Vec::new();
    file.read_to_end(&mut data)
        .unwrap_or_else(|e| panic!("read {} with O_DIRECT: {e}", path.display()));
    data
}

/// Panics with the first differing offset unless `got == expected`.
pub fn assert_bytes_eq(got: &[u8], expected: &[u8], what: &str) {
    if got == expected {
        return;
    }
    let first = got
        .iter()
        .zip(expected)
        .position(|(a, b)| a != b)
        .unwrap_or(got.len().min(expected.len()));
    panic!(
        "{what}: {} bytes, expected {}; first difference at offset {first}",
        got.len(),
        expected.len()
    );
}

/// Compares two trees: the same names, kinds, symlink targets and file contents. Returns the
/// number of regular files compared.
pub fn assert_trees_equal(a: &Path, b: &Path) -> usize {
    let mut files = 0;
    compare_dirs(a, b, &mut files);
    files
}

fn sorted_names(dir: &Path) -> Vec<std::ffi::OsString> {
    let mut names: Vec<_> = std::fs::read_dir(dir)
        .unwrap_or_else(|e| panic!("list {}: {e}", dir.display()))
        .map(|e| e.expect("directory entry").file_name())
        .collect();
    names.sort();
    names
}

fn compare_dirs(a: &Path, b: &Path, files: &mut usize) {
    let (na, nb) = (sorted_names(a), sorted_names(b));
    assert_eq!(
        na,
        nb,
        "{} and {} list different names",
        a.display(),
        b.display()
    );
    for name in na {
        let (pa, pb) = (a.join(&name), b.join(&name));
        let ma = std::fs::symlink_metadata(&pa).expect("stat a");
        let mb = std::fs::symlink_metadata(&pb).expect("stat b");
        let (ta, tb) = (ma.file_type(), mb.file_type());
        if ta.is_symlink() {
            assert!(tb.is_symlink(), "{} is not a symlink", pb.display());
            assert_eq!(
                std::fs::read_link(&pa).unwrap(),
                std::fs::read_link(&pb).unwrap(),
                "symlink target of {}",
                pb.display()
            );
        } else if ta.is_dir() {
            assert!(tb.is_dir(), "{} is not a directory", pb.display());
            compare_dirs(&pa, &pb, files);
        } else {
            assert!(tb.is_file(), "{} is not a regular file", pb.display());
            assert_eq!(ma.len(), mb.len(), "size of {}", pb.display());
            assert_same_contents(&pa, &pb);
            *files += 1;
        }
    }
}

/// Streams two files and panics at the first differing byte.
pub fn assert_same_contents(a: &Path, b: &Path) {
    let mut fa = std::fs::File::open(a).unwrap_or_else(|e| panic!("open {}: {e}", a.display()));
    let mut fb = std::fs::File::open(b).unwrap_or_else(|e| panic!("open {}: {e}", b.display()));
    let (mut ba, mut bb) = (vec![0u8; 1 << 20], vec![0u8; 1 << 20]);
    let mut offset = 0u64;
    loop {
        let n = read_full(&mut fa, &mut ba);
        let m = read_full(&mut fb, &mut bb);
        if ba[..n] != bb[..m] {
            let at = ba[..n]
                .iter()
                .zip(&bb[..m])
                .position(|(x, y)| x != y)
                .unwrap_or(n.min(m));
            panic!(
                "{} and {} differ at offset {}",
                a.display(),
                b.display(),
                offset + at as u64
            );
        }
        if n == 0 {
            return;
        }
        offset += n as u64;
    }
}

fn read_full(f: &mut std::fs::File, buf: &mut [u8]) -> usize {
    let mut got = 0;
    while got < buf.len() {
        match f.read(&mut buf[got..]) {
            Ok(0) => break,
            Ok(n) => got += n,
            Err(e) if e.kind() == std::io::ErrorKind::Interrupted => {}
            Err(e) => panic!("read: {e}"),
        }
    }
    got
}

/// Calls fsync on every regular file below `dir`.
pub fn fsync_tree(dir: &Path) {
    for name in sorted_names(dir) {
        let path = dir.join(name);
        let meta = std::fs::symlink_metadata(&path).expect("stat");
        if meta.is_dir() {
            fsync_tree(&path);
        } else if meta.is_file() {
            std::fs::File::open(&path)
                .and_then(|f| f.sync_all())
                .unwrap_or_else(|e| panic!("fsync {}: {e}", path.display()));
        }
    }
}
