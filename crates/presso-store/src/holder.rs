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
        let holder = HolderProcess::open(pid)?;
        // Checked after the open: a process found with the file open is the one the pidfd
        // names (a pid is not reused while a pidfd refers to its process).
        let lock_file = std::fs::canonicalize(lock_file).ok()?;
        let holds = std::fs::read_dir(format!("/proc/{pid}/fd"))
            .ok()?
            .filter_map(|entry| std::fs::read_link(entry.ok()?.path()).ok())
            .any(|target| target == lock_file);
        holds.then_some(holder)
    }

    /// The process that holds the `flock` on `directory` (the pool directory's lock, which
    /// stays when the lock file is deleted by hand), as `/proc/locks` names it.
    pub(crate) fn find_by_directory_lock(directory: &std::fs::File) -> Option<HolderProcess> {
        let pid = directory_lock_holder(directory)?;
        let holder = HolderProcess::open(pid)?;
        // Asked again after the open: the pid still holding the lock is the process the pidfd
        // names, not a later one that got its number.
        (directory_lock_holder(directory)? == pid).then_some(holder)
    }

    fn open(pid: u32) -> Option<HolderProcess> {
        let pid = libc::pid_t::try_from(pid).ok()?;
        // SAFETY: pidfd_open takes a pid and flags, and returns a new descriptor or -1.
        let fd = unsafe { libc::syscall(libc::SYS_pidfd_open, pid, 0) };
        let fd = i32::try_from(fd).ok().filter(|&fd| fd >= 0)?;
        // SAFETY: a descriptor pidfd_open just returned, owned by nothing else.
        Some(HolderProcess {
            pidfd: unsafe { OwnedFd::from_raw_fd(fd) },
        })
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

/// The pid holding the `flock` on `directory` (a pool directory's lock), as `/proc/locks`
/// names it now.
pub(crate) fn directory_lock_holder(directory: &std::fs::File) -> Option<u32> {
    use std::os::unix::fs::MetadataExt;
    let meta = directory.metadata().ok()?;
    let file = LockedFile {
        major: libc::major(meta.dev()),
        minor: libc::minor(meta.dev()),
        ino: meta.ino(),
    };
    flock_holder(&std::fs::read_to_string(PROC_LOCKS).ok()?, &file)
}

/// The kernel's table of file locks.
const PROC_LOCKS: &str = "/proc/locks";

/// A file as `/proc/locks` names it: its device's major and minor numbers and its inode.
#[derive(Debug, PartialEq)]
struct LockedFile {
    major: u32,
    minor: u32,
    ino: u64,
}

/// The pid holding an `flock` on `file` according to `table`, the text of `/proc/locks`: lines
/// such as `3: FLOCK  ADVISORY  WRITE 4242 00:2e:1835 0 EOF`, the device numbers in hex. Lines
/// of waiters (`3: -> FLOCK ...`) and pids outside this pid namespace (shown as 0) are skipped.
fn flock_holder(table: &str, file: &LockedFile) -> Option<u32> {
    table.lines().find_map(|line| {
        let mut fields = line.split_whitespace().skip(1);
        if fields.next()? != "FLOCK" {
            return None;
        }
        let pid: u32 = fields.nth(2)?.parse().ok()?;
        let mut id = fields.next()?.split(':');
        let named = LockedFile {
            major: u32::from_str_radix(id.next()?, 16).ok()?,
            minor: u32::from_str_radix(id.next()?, 16).ok()?,
            ino: id.next()?.parse().ok()?,
        };
        (pid != 0 && named == *file).then_some(pid)
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    const FILE: LockedFile = LockedFile {
        major: 0x103,
        minor: 0x2e,
        ino: 1835,
    };

    #[test]
    fn the_holder_is_read_from_its_line_and_waiters_are_skipped() {
        let table = "1: POSIX  ADVISORY  WRITE 17 103:2e:1835 0 EOF\n\
                     2: FLOCK  ADVISORY  WRITE 4242 103:2e:1835 0 EOF\n\
                     2: -> FLOCK  ADVISORY  WRITE 99 103:2e:1835 0 EOF\n";
        assert_eq!(flock_holder(table, &FILE), Some(4242));
        let waiter_first = "2: -> FLOCK  ADVISORY  WRITE 99 103:2e:1835 0 EOF\n\
                            2: FLOCK  ADVISORY  WRITE 4242 103:2e:1835 0 EOF\n";
        assert_eq!(flock_holder(waiter_first, &FILE), Some(4242));
    }

    #[test]
    fn other_files_pids_out_of_sight_and_garbage_name_no_holder() {
        for table in [
            "",
            "2: FLOCK  ADVISORY  WRITE 4242 103:2e:1836 0 EOF",
            "2: FLOCK  ADVISORY  WRITE 4242 103:2f:1835 0 EOF",
            "2: FLOCK  ADVISORY  WRITE 4242 fd:2e:1835 0 EOF",
            "2: FLOCK  ADVISORY  WRITE 0 103:2e:1835 0 EOF",
            "2: FLOCK  ADVISORY  WRITE x 103:2e:1835 0 EOF",
            "2: FLOCK  ADVISORY  WRITE 4242 103:2e 0 EOF",
            "2: FLOCK",
        ] {
            assert_eq!(flock_holder(table, &FILE), None, "{table}");
        }
    }
}
