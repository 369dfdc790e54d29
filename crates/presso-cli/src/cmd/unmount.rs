//! `presso unmount`: unmounts and waits until the daemon has committed everything.

use std::path::PathBuf;
use std::process::Command;

use anyhow::{bail, Context, Result};
use clap::Args;
use presso_store::LockWatch;

use super::target;

/// Unmount a pool and wait until everything written is in the pool.
#[derive(Debug, Args)]
#[command(after_help = "Example:
  presso unmount /mnt/data")]
pub struct UnmountArgs {
    /// The mount point.
    pub mountpoint: PathBuf,
}

/// Runs `presso unmount`.
pub fn run(args: UnmountArgs) -> Result<()> {
    let path = std::fs::canonicalize(&args.mountpoint)
        .with_context(|| format!("cannot find {}", args.mountpoint.display()))?;
    let Some(mount) = target::mounts().into_iter().find(|m| m.mountpoint == path) else {
        bail!("{} is not a mounted Presso pool", args.mountpoint.display());
    };
    // Watch the pool's lock first: the daemon holds it until it has flushed and exited. A lock
    // that cannot be probed counts as held, so we wait rather than call the daemon dead.
    let lock = LockWatch::open(&mount.pool).ok();
    let daemon_alive = lock.as_ref().is_some_and(|l| l.is_held().unwrap_or(true));
    let status = Command::new("fusermount3").arg("-u").arg(&path).status();
    let unmounted = match status {
        Ok(s) if s.success() => true,
        _ => {
            let c = std::ffi::CString::new(path.as_os_str().as_encoded_bytes())?;
            // SAFETY: `c` is a valid NUL-terminated path.
            unsafe { libc::umount2(c.as_ptr(), 0) == 0 }
        }
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
    if daemon_alive {
        println!(
            "unmounted {}; everything written is in {}",
            path.display(),
            mount.pool.display()
        );
    } else {
        println!(
            "removed the dead mount {}: its daemon had stopped, so writes not fsynced before it died may be lost; the pool mounts again at its last commit",
            path.display()
        );
    }
    Ok(())
}
