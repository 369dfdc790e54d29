//! The process holding a pool's lock, seen from another process: the lock goes with the pool's
//! close, a moment before the holder's process ends and closes the rest of its files (its log,
//! its segments); a disk can be unmounted only after that. [`HolderProcess`] waits for the end.

use std::io;
use std::os::fd::{AsRawFd, FromRawFd, OwnedFd};
use std::path::Path;
use std::time::Duration;

/// A process that holds a pool's lock, opened (`pidfd_open`) so that its end can be waited for.
#[derive(Debug)]
pub struct HolderProcess {
    pidfd: OwnedFd,
}

impl HolderProcess {
    /// Process `pid`, if it is alive and has `lock_file` open: the pid a lock file holds is
    /// written by its holder for messages, best effort, and may be an earlier holder's, its
    /// number since reused by another program.
    pub(crate) fn find(pid: u32, lock_file: &Path) -> Option<HolderProcess> {
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
        let pidfd = unsafe { OwnedFd::from_raw_fd(fd) };
        // Checked after the open: a process found with the file open is the one the pidfd
        // names (a pid is not reused while a pidfd refers to its process).
        let lock_file = std::fs::canonicalize(lock_file).ok()?;
        let holds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()?
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .any(|target| target == lock_file);
        holds.then_some(HolderProcess { pidfd })
    }

    /// Waits at most `limit` for the process to end (every file it had open is closed then);
    /// whether it did.
    pub fn wait_ended(&self, limit: Duration) -> io::Result<bool> {
        let mut poll = libc::pollfd {
            fd: self.pidfd.as_raw_fd(),
            events: libc::POLLIN,
            revents: 0,
        };
        let deadline = std::time::Instant::now() + limit;
        loop {
            let left = deadline.saturating_duration_since(std::time::Instant::now());
            let ms = libc::c_int::try_from(left.as_millis()).unwrap_or(libc::c_int::MAX);
            // SAFETY: one valid pollfd for the duration of the call.
            match unsafe { libc::poll(&mut poll, 1, ms) } {
                1 => return Ok(true),
                0 => return Ok(false),
                _ => {
                    let err = io::Error::last_os_error();
                    if err.raw_os_error() != Some(libc::EINTR) {
                        return Err(err);
                    }
                }
            }
        }
    }
}
