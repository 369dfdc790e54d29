//! One pool and its mount by a `presso mount -f` child, so that a test knows the daemon's pid:
//! mount, clean unmount, `kill -9` (detaching the dead mount), and a scrub. Product failures
//! come back as `Err` (a random test reports and shrinks them); failures of the test's own
//! machinery panic.

use std::fs::File;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::time::Duration;

use super::mount::{is_mounted, unmount_when_not_busy, Fixture};
use super::process::{exec_within, presso, presso_bin, wait_until, KillOnDrop};
use super::syscalls::errno;

/// How long mounting, unmounting and a dying daemon may take.
const LIMIT: Duration = Duration::from_secs(60);

/// A pool created for one run, mounted by a foreground daemon while the run has it mounted.
pub struct Daemon {
    // Declared first so that it is dropped first: a daemon that hangs cannot block the
    // fixture's unmount in a drop guard.
    child: Option<KillOnDrop>,
    fixture: Fixture,
    log: PathBuf,
}

impl Daemon {
    /// A new pool created with the properties `props` (`name=value`), mounted; `name` names
    /// its temp dir.
    pub fn start(name: &str, props: &[&str]) -> Result<Daemon, String> {
        let fixture = Fixture::unmounted(name, props);
        let log = fixture.scratch("daemon.log");
        let mut daemon = Daemon {
            child: None,
            fixture,
            log,
        };
        daemon.mount()?;
        Ok(daemon)
    }

    /// The mount point.
    pub fn mnt(&self) -> &Path {
        &self.fixture.mnt
    }

    /// The pool and mount point, for the fixture's helpers (`status`, `presso_on_mount`).
    pub fn fixture(&self) -> &Fixture {
        &self.fixture
    }

    /// The daemon's process id while it runs.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(|c| c.0.id())
    }

    /// `presso mount -f POOL MNT` as a child; returns once the mount is there.
    pub fn mount(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "already mounted");
        let log = File::options()
            .create(true)
            .append(true)
            .open(&self.log)
            .expect("open the daemon's log");
        let child = Command::new(presso_bin())
            .arg("mount")
            .arg("-f")
            .arg(&self.fixture.pool)
            .arg(&self.fixture.mnt)
            .stdin(Stdio::null())
            .stdout(log.try_clone().expect("clone the log's handle"))
            .stderr(log)
            .spawn()
            .expect("start `presso mount -f`");
        self.child = Some(KillOnDrop(child));
        self.fixture.set_mounted(true);
        let mnt = self.fixture.mnt.clone();
        let mut exited = None;
        let up = wait_until(LIMIT, || {
            exited = self.child_exit();
            exited.is_some() || is_mounted(&mnt)
        });
        match exited {
            Some(status) => Err(format!(
                "`presso mount -f` exited with {status} before mounting:\n{}",
                self.log_text()
            )),
            None if up => Ok(()),
            None => Err(format!("`presso mount -f` did not mount within {LIMIT:?}")),
        }
    }

    /// `presso unmount MNT`, which returns once the daemon has flushed everything and exited;
    /// the daemon must then have exited cleanly and logged no panic.
    pub fn unmount(&mut self) -> Result<(), String> {
        let out = unmount_when_not_busy(&self.fixture.mnt, LIMIT);
        if !out.status.success() {
            return Err(format!(
                "`presso unmount` failed with {}: {}{}",
                out.status, out.stdout, out.stderr
            ));
        }
        let mut status = None;
        if !wait_until(LIMIT, || {
            status = self.child_exit();
            status.is_some()
        }) {
            return Err("the daemon did not exit after `presso unmount`".into());
        }
        self.child = None;
        self.fixture.set_mounted(false);
        if is_mounted(&self.fixture.mnt) {
            return Err("still mounted after `presso unmount`".into());
        }
        let status = status.expect("waited for it");
        if !status.success() {
            return Err(format!(
                "the daemon exited with {status}:\n{}",
                self.log_text()
            ));
        }
        self.check_log()
    }

    /// `kill -9` of the daemon; returns once it is reaped. Its mount stays behind, dead, until
    /// [`Daemon::detach`].
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("mounted");
        // SAFETY: signalling our own child, not reaped yet.
        let rc = unsafe { libc::kill(child.0.id() as i32, libc::SIGKILL) };
        assert_eq!(rc, 0, "kill -9 of the daemon: errno {}", errno());
        let status = child.0.wait().expect("reap the killed daemon");
        assert_eq!(
            std::os::unix::process::ExitStatusExt::signal(&status),
            Some(libc::SIGKILL),
            "the daemon ended otherwise than by the kill: {status}"
        );
    }

    /// `presso unmount` of the mount a killed daemon left (no descriptor on it may be open):
    /// it must say that it removed a dead mount.
    pub fn detach(&mut self) -> Result<(), String> {
        assert!(self.child.is_none(), "the daemon still runs");
        let out = exec_within(presso().arg("unmount").arg(&self.fixture.mnt), LIMIT);
        if !out.status.success() || !out.stdout.contains("dead mount") {
            return Err(format!(
                "`presso unmount` of the dead mount: {}: {}{}",
                out.status, out.stdout, out.stderr
            ));
        }
        self.fixture.set_mounted(false);
        if is_mounted(&self.fixture.mnt) {
            return Err("the dead mount is still there after `presso unmount`".into());
        }
        Ok(())
    }

    /// [`Daemon::kill`], then [`Daemon::detach`].
    pub fn kill_and_detach(&mut self) -> Result<(), String> {
        self.kill();
        self.detach()
    }

    /// `presso scrub --json MNT`: `Err` unless every record checks out.
    pub fn scrub(&self) -> Result<(), String> {
        let out = exec_within(
            presso().args(["scrub", "--json"]).arg(&self.fixture.mnt),
            LIMIT,
        );
        if !out.status.success() {
            return Err(format!("scrub failed: {}{}", out.stdout, out.stderr));
        }
        let report: serde_json::Value = serde_json::from_str(&out.stdout)
            .unwrap_or_else(|e| panic!("scrub printed bad JSON {:?}: {e}", out.stdout));
        let clean = |key: &str| report[key].as_array().is_some_and(|a| a.is_empty());
        if clean("damaged") && clean("damaged_entries") {
            Ok(())
        } else {
            Err(format!("scrub found damage: {report}"))
        }
    }

    /// `Err` if the daemon logged a panic.
    pub fn check_log(&self) -> Result<(), String> {
        let text = self.log_text();
        if text.contains("panicked") {
            return Err(format!("the daemon panicked:\n{text}"));
        }
        Ok(())
    }

    /// What the daemon logged: the pool's `presso.log`, then its own standard error.
    pub fn log_text(&self) -> String {
        let pool_log = std::fs::read_to_string(self.fixture.pool.join("presso.log"));
        let own = std::fs::read_to_string(&self.log);
        format!(
            "{}{}",
            pool_log.unwrap_or_default(),
            own.unwrap_or_default()
        )
    }

    fn child_exit(&mut self) -> Option<std::process::ExitStatus> {
        let child = self.child.as_mut()?;
        child.0.try_wait().expect("poll the daemon")
    }
}
