//! `presso unmount`: unmounts and waits until the daemon has committed everything.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use presso_fs::control::{self, Request};
use presso_fs::vfs::Unstored;
use presso_store::LockWatch;

use super::target;

/// How long `presso unmount` waits for the daemon's process to end once it let go of the pool.
const DAEMON_END_WAIT: std::time::Duration = std::time::Duration::from_secs(30);

/// Unmount a pool and wait until everything written is in the pool.
///
/// If some written data could not be stored (the disk holding the pool is full), the mount is
/// left as it is and the command fails, naming the files: free space there (or delete files in
/// the pool) and run it again, or unmount with --force and lose that data.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso unmount /mnt/data
  presso unmount --force /mnt/data   # even if written data could not be stored (it is lost)")]
pub struct UnmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
    /// Unmount even if written data could not be stored; that data is lost (and named).
    #[arg(long)]
    pub force: bool,
}

/// Asks the daemon to store and commit everything; returns what it could not store (empty if
/// it does not answer: the daemon then reports any loss in its log), or why the commit failed.
fn unstored(pool: &std::path::Path) -> Result<Unstored, String> {
    match control::call(pool, &Request::Sync, &mut |_| {}) {
        Ok(Some(v)) => Ok(serde_json::from_value(v).unwrap_or_default()),
        Ok(None) => Ok(Unstored::default()),
        Err(e) => Err(e),
    }
}

fn describe(lost: &Unstored) -> String {
    let mut lines: Vec<String> = lost
        .files
        .iter()
        .take(20)
        .map(|f| {
            format!(
                "  {} bytes of {}",
                f.bytes,
                f.path
                    .clone()
                    .unwrap_or_else(|| format!("inode {} (no name left)", f.ino))
            )
        })
        .collect();
    if lost.files.len() > 20 {
        lines.push(format!("  ... and {} more files", lost.files.len() - 20));
    }
    format!(
        "{} bytes of {} files could not be stored{}:\n{}",
        lost.bytes,
        lost.files.len(),
        lost.error
            .as_deref()
            .map(|e| format!(" ({e})"))
            .unwrap_or_default(),
        lines.join("\n")
    )
}

/// Unmounts `path` through fusermount3, or umount2 when that is missing or refuses; with `lazy`,
/// detaches it now and lets it go once its last open file is closed. Whether it is gone.
fn detach(path: &std::path::Path, lazy: bool) -> Result<bool> {
    let flag = if lazy { "-uz" } else { "-u" };
    let status = Command::new("fusermount3").arg(flag).arg(path).status();
    if status.is_ok_and(|s| s.success()) {
        return Ok(true);
    }
    let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
    let flags = if lazy { libc::MNT_DETACH } else { 0 };
    // SAFETY: `c` is a valid NUL-terminated path.
    Ok(unsafe { libc::umount2(c.as_ptr(), flags) } == 0)
}

/// Takes away the mount at `path` of the pool directory `pool`, which was deleted while mounted:
/// there is nothing to commit to, and the daemon exits once it is unmounted.
fn remove_orphaned_mount(path: &std::path::Path, pool: &std::path::Path) -> Result<()> {
    if !detach(path, false)? && !detach(path, true)? {
        bail!(
            "cannot unmount {}: {}",
            path.display(),
            std::io::Error::last_os_error()
        );
    }
    println!(
        "unmounted {}: its pool {} no longer exists (deleted while mounted?), so what was \
         written through this mount is gone with it",
        path.display(),
        pool.display()
    );
    Ok(())
}

/// Runs `presso unmount`.
pub fn run(args: UnmountArgs) -> Result<()> {
    let path = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("cannot find {}", args.mountpoint.display()))?;
    let Some(mount) = target::mounts().into_iter().find(|m| m.mountpoint == path) else {
        if let Some(orphan) = target::orphaned_mounts()
            .into_iter()
            .find(|m| m.mountpoint == path)
        {
            return remove_orphaned_mount(&path, &orphan.pool);
        }
        bail!("{} is not a mounted Presso pool", args.mountpoint.display());
    };
    // Watch the pool's lock first: the daemon holds it until it has flushed and exited. A lock
    // that cannot be probed counts as held, so we wait rather than call the daemon dead.
    let lock = LockWatch::open(&mount.pool).ok();
    let daemon_alive = lock.as_ref().is_some_and(|l| l.is_held().unwrap_or(true));
    // Found while it holds the lock, to wait for its end below.
    let daemon = lock
        .as_ref()
        .filter(|_| daemon_alive)
        .and_then(LockWatch::holder);
    let mut commit_failed = None;
    let lost = if daemon_alive {
        match unstored(&mount.pool) {
            Ok(lost) => lost,
            Err(e) if !args.force => bail!(
                "cannot commit what was written to {}: {e}\nstill mounted; fix the cause and run \
                 `presso unmount {}` again, or `presso unmount --force {}` to unmount anyway \
                 (what was not committed is lost)",
                path.display(),
                path.display(),
                path.display()
            ),
            Err(e) => {
                commit_failed = Some(e);
                Unstored::default()
            }
        }
    } else {
        Unstored::default()
    };
    if !lost.is_empty() && !args.force {
        bail!(
            "{}\nstill mounted: the data is kept in memory and retried. Free space on the disk \
             holding {} (or delete files in {}: their space is collected at once), then run \
             `presso unmount {}` again; or `presso unmount --force {}` to unmount and lose it",
            describe(&lost),
            mount.pool.display(),
            path.display(),
            path.display(),
            path.display()
        );
    }
    // A shared pool's client directory names the pool; it goes with the client at unmount.
    let pool_name = std::fs::read_to_string(mount.pool.join(presso_fs::pool::CLIENT_FILE))
        .ok()
        .and_then(|text| {
            let at = text.split_once(" shared pool at ")?.1.trim();
            Some(format!("the shared pool at {at}"))
        })
        .unwrap_or_else(|| mount.pool.display().to_string());
    let mut unmounted = detach(&path, false)?;
    // A dead daemon serves nothing and holds nothing to flush: a file still open on its mount
    // (which can only fail now) must not keep the mount point from being used again.
    let detached_lazily = !unmounted && !daemon_alive && {
        unmounted = detach(&path, true)?;
        unmounted
    };
    if !unmounted {
        bail!(
            "cannot unmount {}: {} (is a process still using it? see `fuser -m {}`)",
            path.display(),
            std::io::Error::last_os_error(),
            path.display()
        );
    }
    if let Some(lock) = lock {
        // Blocks until the daemon exits (its lock goes away with it). Failing to wait changes
        // nothing: the file system is unmounted already.
        let _ = lock.wait_released();
    }
    // The daemon lets go of the pool a moment before its process ends and closes its last
    // files (its log, its segments): waiting for the end lets the disk holding the pool be
    // unmounted as soon as this returns.
    if let Some(daemon) = daemon {
        if !daemon.wait_ended(DAEMON_END_WAIT).unwrap_or(true) {
            eprintln!(
                "presso: the daemon of {} let go of the pool but its process has not ended \
                 within {} s; the disk holding the pool stays busy until it does",
                path.display(),
                DAEMON_END_WAIT.as_secs()
            );
        }
    }
    if !lost.is_empty() {
        println!(
            "unmounted {} with --force; lost: {}",
            path.display(),
            describe(&lost)
        );
    } else if let Some(e) = commit_failed {
        println!(
            "unmounted {} with --force although the last commit failed ({e}); lost: whatever \
             was written since the pool's last commit. The pool mounts again at that commit",
            path.display()
        );
    } else if daemon_alive {
        println!(
            "unmounted {}; everything written is in {pool_name}",
            path.display()
        );
    } else {
        println!(
            "removed the dead mount {}{}: its daemon had stopped, so writes not fsynced before it died may be lost; the pool mounts again at its last commit",
            path.display(),
            if detached_lazily {
                " (detached: a file was still open on it, and reading it fails)"
            } else {
                ""
            }
        );
    }
    Ok(())
}
