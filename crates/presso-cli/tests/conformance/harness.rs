//! The differential harness: a reference ext4 and a Presso mount side by side ([`Env`]), the
//! observations a scenario records on one side ([`Rec`]), and [`run`], which runs each scenario
//! on both sides and reports every step where they differ.

use std::fmt::Debug;
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};
use std::time::{Duration, Instant};

use crate::common::*;
use crate::sys::Res;

/// One scenario: the steps it takes under `rec.root`, recording what it sees.
pub type Scenario = fn(&mut Rec);

/// The two file systems of one topic: a fresh ext4 image loop-mounted with `noatime` (Presso
/// mounts with `noatime` too) and a fresh Presso pool mounted with `allow_other`, so threads
/// acting as another user reach both. A directory of the host's file system stands for "another
/// file system" of both.
pub struct Env {
    // Dropped in this order: the Presso mount, the ext4 image, the scratch directory.
    presso: Fixture,
    ext4: LoopMount,
    scratch: tempfile::TempDir,
}

impl Env {
    /// Mounts both file systems for `topic`, ext4 on a 32 MB image.
    pub fn new(topic: &str) -> Env {
        Env::with_megabytes(topic, 32)
    }

    /// Mounts both file systems for `topic`, ext4 on an image of `megabytes`.
    pub fn with_megabytes(topic: &str, megabytes: u64) -> Env {
        require_root("it loop-mounts ext4, makes device nodes and acts as other users");
        require_tool("mkfs.ext4", "e2fsprogs");
        require_tool("losetup", "mount");
        let scratch = scratch_dir(&format!("conformance-{topic}"));
        let ext4 = reference_ext4(scratch.path(), megabytes);
        let mut presso = Fixture::create_in(
            scratch.path().join("pool"),
            scratch.path().join("presso"),
            None,
            &[],
        );
        presso.mount(&["allow_other"]);
        Env {
            presso,
            ext4,
            scratch,
        }
    }

    /// Each side's name and the directory its scenarios go under.
    pub fn sides(&self) -> [(&'static str, PathBuf); 2] {
        [
            ("ext4", self.ext4.dir.clone()),
            ("presso", self.presso.mnt.clone()),
        ]
    }
}

impl Env {
    /// Unmounts Presso and mounts it again, with the options it had.
    pub fn remount_presso(&mut self) {
        self.presso.remount(&["allow_other"]);
    }

    /// Fails if the Presso daemon logged a panic.
    pub fn assert_presso_log_clean(&self) {
        self.presso.assert_log_clean();
    }
}

/// The reference ext4: a fresh image of `megabytes` in `scratch`, loop-mounted with `noatime`
/// at `scratch/ext4`.
pub fn reference_ext4(scratch: &Path, megabytes: u64) -> LoopMount {
    LoopMount::with_options(
        scratch.join("ext4.img"),
        scratch.join("ext4"),
        megabytes,
        // 4 KiB blocks as on any ext4 of ordinary size (mkfs picks 1 KiB for small ones,
        // which shortens symlink targets and the room for xattrs).
        &["-b", "4096"],
        &["noatime"],
    )
}

/// What one scenario saw on one side: a list of (step, observation).
pub struct Rec {
    /// The scenario's directory on this side (mode 0755, owned by root).
    pub root: PathBuf,
    /// A directory of the scenario on another file system (for EXDEV).
    pub outside: PathBuf,
    obs: Vec<(String, String)>,
}

impl Rec {
    /// `rel` under the scenario's directory.
    pub fn p(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// Records `value` as what `step` saw.
    pub fn see(&mut self, step: impl Into<String>, value: impl Debug) {
        self.obs.push((step.into(), format!("{value:?}")));
    }

    /// Records a system call's result: its value, or the errno's name.
    pub fn call(&mut self, step: impl Into<String>, r: Res) {
        self.obs.push((step.into(), outcome(&r)));
    }

    /// Records a result whose success value differs between file systems (a descriptor): only
    /// success or the errno.
    pub fn ok(&mut self, step: impl Into<String>, r: Res) -> Res {
        self.obs.push((step.into(), ok_or_errno(&r)));
        r
    }

    /// Records that `step` is left out of the comparison: FUSE cannot behave like ext4 there
    /// (docs/testing.md, "Where a mount differs from ext4, and why"). What this side saw is
    /// printed, not compared.
    pub fn exception(&mut self, step: impl Into<String>, value: impl Debug) {
        let step = step.into();
        eprintln!("{}: {step}: {value:?} (not compared)", self.root.display());
        self.obs.push((step, "not compared".into()));
    }

    /// Takes the last observation back (to record it as an [`Rec::exception`] instead).
    pub fn take_last(&mut self) -> String {
        self.obs.pop().map(|(_, v)| v).unwrap_or_default()
    }

    /// Records the POSIX stat fields of `rel` (not following a symlink): type, mode with the
    /// set-id and sticky bits, link count, owner, group, size (not of directories, whose size
    /// is the file system's own business), and the device number of device nodes.
    pub fn stat(&mut self, rel: &str) {
        let shown = describe(&self.p(rel));
        self.obs.push((format!("stat {rel}"), shown));
    }

    /// Runs `op` (recording its result as `step`) and records which of atime, mtime and ctime
    /// of each of `watched` it changed. Waits first until the clock has moved past every
    /// timestamp of `watched`, so a change is always a different value.
    pub fn times(&mut self, step: &str, watched: &[&str], op: impl FnOnce(&Rec) -> Res) {
        let moves: Vec<(&str, &str)> = watched.iter().map(|w| (*w, *w)).collect();
        self.times_moved(step, &moves, op);
    }

    /// [`Rec::times`] for nodes `op` moves: each of `watched` is (its path before, its path
    /// after), so the stamps compared are always one node's.
    pub fn times_moved(
        &mut self,
        step: &str,
        watched: &[(&str, &str)],
        op: impl FnOnce(&Rec) -> Res,
    ) {
        let before_paths: Vec<PathBuf> = watched.iter().map(|(b, _)| self.p(b)).collect();
        settle(&before_paths);
        let before: Vec<Option<[i128; 3]>> = before_paths.iter().map(|p| stamps(p)).collect();
        let r = op(self);
        self.call(step, r);
        for (&(w, after_path), b) in watched.iter().zip(before) {
            let changed = match (b, stamps(&self.p(after_path))) {
                (Some(b), Some(a)) => ["atime", "mtime", "ctime"]
                    .iter()
                    .zip(b.iter().zip(a))
                    .filter(|(_, (b, a))| *b != a)
                    .map(|(n, _)| *n)
                    .collect::<Vec<_>>()
                    .join(" "),
                (b, a) => format!("exists before {} after {}", b.is_some(), a.is_some()),
            };
            let shown = if w == after_path {
                w.to_string()
            } else {
                format!("{w} (now {after_path})")
            };
            self.obs
                .push((format!("  times of {shown}"), format!("[{changed}]")));
        }
    }
}

/// A result as recorded: `ok N` or the errno's name.
fn outcome(r: &Res) -> String {
    match r {
        Ok(n) => format!("ok {n}"),
        Err(e) => errno_name(*e),
    }
}

/// A result whose success value differs between file systems (a descriptor, a byte count), as
/// it is compared: `ok` or the errno's name.
pub fn ok_or_errno(r: &Res) -> String {
    match r {
        Ok(_) => "ok".to_string(),
        Err(e) => errno_name(*e),
    }
}

/// The symbolic name of an errno the scenarios meet (the number for others).
pub fn errno_name(e: i32) -> String {
    let names = [
        (libc::EPERM, "EPERM"),
        (libc::ENOENT, "ENOENT"),
        (libc::EIO, "EIO"),
        (libc::EBADF, "EBADF"),
        (libc::EACCES, "EACCES"),
        (libc::EEXIST, "EEXIST"),
        (libc::EXDEV, "EXDEV"),
        (libc::ENOTDIR, "ENOTDIR"),
        (libc::EISDIR, "EISDIR"),
        (libc::EINVAL, "EINVAL"),
        (libc::EMLINK, "EMLINK"),
        (libc::ENOSPC, "ENOSPC"),
        (libc::ERANGE, "ERANGE"),
        (libc::ENAMETOOLONG, "ENAMETOOLONG"),
        (libc::ENOTEMPTY, "ENOTEMPTY"),
        (libc::ELOOP, "ELOOP"),
        (libc::ENODATA, "ENODATA"),
        (libc::E2BIG, "E2BIG"),
        (libc::EOPNOTSUPP, "EOPNOTSUPP"),
        (libc::EBUSY, "EBUSY"),
        (libc::ETXTBSY, "ETXTBSY"),
    ];
    names
        .iter()
        .find(|(n, _)| *n == e)
        .map_or_else(|| format!("errno {e}"), |(_, s)| s.to_string())
}

/// The POSIX stat fields of `path` (not following a symlink), as [`Rec::stat`] records them.
pub fn describe(path: &Path) -> String {
    let m = match std::fs::symlink_metadata(path) {
        Ok(m) => m,
        Err(e) => return errno_name(e.raw_os_error().unwrap_or(0)),
    };
    let kind = match m.mode() & libc::S_IFMT {
        libc::S_IFREG => "file",
        libc::S_IFDIR => "dir",
        libc::S_IFLNK => "symlink",
        libc::S_IFIFO => "fifo",
        libc::S_IFSOCK => "socket",
        libc::S_IFBLK => "block",
        libc::S_IFCHR => "char",
        _ => "unknown",
    };
    let mut s = format!(
        "{kind} mode={:04o} nlink={} uid={} gid={}",
        m.mode() & 0o7777,
        m.nlink(),
        m.uid(),
        m.gid()
    );
    if !m.is_dir() {
        s += &format!(" size={}", m.size());
    }
    if matches!(kind, "block" | "char") {
        s += &format!(" rdev={}:{}", libc::major(m.rdev()), libc::minor(m.rdev()));
    }
    s
}

/// atime, mtime and ctime of `path` in nanoseconds (not following a symlink).
fn stamps(path: &Path) -> Option<[i128; 3]> {
    let m = std::fs::symlink_metadata(path).ok()?;
    let ns = |s: i64, n: i64| s as i128 * 1_000_000_000 + n as i128;
    Some([
        ns(m.atime(), m.atime_nsec()),
        ns(m.mtime(), m.mtime_nsec()),
        ns(m.ctime(), m.ctime_nsec()),
    ])
}

/// The clock file systems stamp with when they do not ask for a finer one: it moves a tick at a
/// time (a few milliseconds), so two operations in a row can share a value.
fn coarse_now() -> i128 {
    let mut t = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: a valid timespec to fill.
    unsafe { libc::clock_gettime(libc::CLOCK_REALTIME_COARSE, &mut t) };
    t.tv_sec as i128 * 1_000_000_000 + t.tv_nsec as i128
}

/// Waits until even the coarse clock is past every timestamp of `paths`, so whatever clock
/// stamps the next operation gives a later value than any present one.
fn settle(paths: &[PathBuf]) {
    let newest = paths
        .iter()
        .filter_map(|p| stamps(p))
        .flatten()
        .max()
        .unwrap_or(0);
    let deadline = Instant::now() + Duration::from_secs(2);
    while coarse_now() <= newest {
        assert!(
            Instant::now() < deadline,
            "timestamps lie in the future: {newest} ns"
        );
        std::thread::sleep(Duration::from_millis(1));
    }
}

/// Runs `f` on a thread with its own umask (022 unless the scenario sets another), so scenarios
/// running at the same time cannot change each other's.
fn with_own_umask<T: Send>(f: impl FnOnce() -> T + Send) -> std::thread::Result<T> {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: unshare of this thread's fs context (cwd, root, umask); umask cannot fail.
            unsafe {
                assert_eq!(libc::unshare(libc::CLONE_FS), 0, "unshare(CLONE_FS)");
                libc::umask(0o022);
            }
            f()
        })
        .join()
    })
}

/// Runs every scenario of `topic` on ext4 and on Presso and fails listing each scenario, step
/// and both sides' observations where they differ.
pub fn run(topic: &str, scenarios: &[(&str, Scenario)]) {
    let started = Instant::now();
    let env = Env::new(topic);
    let mut report = Vec::new();
    for (name, scenario) in scenarios {
        let seen: Vec<Vec<(String, String)>> = env
            .sides()
            .iter()
            .map(|(side, base)| {
                let root = base.join(name);
                let outside = env.scratch.path().join("outside").join(side).join(name);
                std::fs::create_dir_all(&outside).unwrap();
                std::fs::create_dir(&root).unwrap();
                let mut rec = Rec {
                    root,
                    outside,
                    obs: Vec::new(),
                };
                let result = with_own_umask(|| scenario(&mut rec));
                if let Err(p) = result {
                    let msg = p
                        .downcast_ref::<String>()
                        .cloned()
                        .or_else(|| p.downcast_ref::<&str>().map(|s| s.to_string()))
                        .unwrap_or_default();
                    rec.obs.push(("panicked".into(), msg));
                }
                rec.obs
            })
            .collect();
        report.extend(differences(name, &seen[0], &seen[1]));
    }
    env.presso.assert_log_clean();
    eprintln!(
        "conformance {topic}: {} scenarios in {:.1?}",
        scenarios.len(),
        started.elapsed()
    );
    assert!(
        report.is_empty(),
        "Presso differs from ext4 ({topic}):\n{}",
        report.join("\n")
    );
}

/// Each step where the two lists differ, as `scenario: step: ext4 ... / presso ...`; stops at
/// the first step whose name differs (the scenario took another branch from there).
fn differences(
    scenario: &str,
    ext4: &[(String, String)],
    presso: &[(String, String)],
) -> Vec<String> {
    let mut out = Vec::new();
    for i in 0..ext4.len().max(presso.len()) {
        match (ext4.get(i), presso.get(i)) {
            (Some((s1, v1)), Some((s2, v2))) if s1 == s2 => {
                if v1 != v2 {
                    out.push(format!(
                        "{scenario}: step {i} `{s1}`:\n    ext4:   {v1}\n    presso: {v2}"
                    ));
                }
            }
            (a, b) => {
                out.push(format!(
                    "{scenario}: step {i} differs in kind:\n    ext4:   {a:?}\n    presso: {b:?}"
                ));
                break;
            }
        }
    }
    out
}
