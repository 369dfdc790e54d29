//! One test's pool and mount point ([`Fixture`]), always unmounted (also when a test panics),
//! and what /proc/self/mountinfo says is mounted.

use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};

use serde_json::Value;

use super::process::{
    exec, exec_within, presso, presso_bin, require_fuse, wait_until, Output, COMMAND_TIMEOUT,
};

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
        let mut c = presso();
        c.arg("create").arg(&pool);
        for p in props {
            c.arg("-o").arg(p);
        }
        exec(&mut c).ok();
        let mut f = Fixture::create_in_existing(pool, mnt);
        f.dir = dir;
        f
    }

    /// A fixture for the existing pool `pool`, to be mounted at `mnt` (created if missing).
    pub fn create_in_existing(pool: PathBuf, mnt: PathBuf) -> Fixture {
        std::fs::create_dir_all(&mnt).expect("create the mount point");
        let root = mnt
            .parent()
            .expect("mount point has a parent")
            .to_path_buf();
        Fixture {
            pool,
            mnt,
            mounted: false,
            dir: None,
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
        let out = unmount_when_not_busy(&self.mnt, COMMAND_TIMEOUT);
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

/// `presso unmount MNT` within `limit`, run again while it fails because the mount is busy: a
/// program another test starts holds a copy of this process's descriptors, files of this mount
/// among them, until its exec, and the mount is busy then, and only then.
pub fn unmount_when_not_busy(mnt: &Path, limit: std::time::Duration) -> Output {
    let mut out = None;
    wait_until(limit, || {
        let o = exec_within(presso().arg("unmount").arg(mnt), limit);
        let busy = !o.status.success() && o.stderr.contains("busy");
        out = Some(o);
        !busy
    });
    out.expect("ran at least once")
}
