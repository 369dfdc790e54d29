//! `fcntl` and `flock` locks of a shared pool, kept in the metadata so that every client honours
//! every other's (a pool with one daemon leaves locks to the kernel, which never sends them).
//!
//! Ranges arrive as the kernel gives them: first and last byte, the last `OFFSET_MAX` for "to
//! the end of the file". A blocking request (`F_SETLKW`, `flock` without `LOCK_NB`) asks the
//! metadata again, backing off from 10 ms to 200 ms, until the lock is free, or until the
//! process that asked is gone (`EINTR`): the library gives no word of interrupted requests, and
//! a lock granted to a dead process would stay.

use presso_meta::{ByteLock, LockKind, LockOwner};

use super::*;

/// The kernel's "to the end of the file".
const OFFSET_MAX: u64 = i64::MAX as u64;

/// A lock as the kernel describes one: first byte, last byte, type (`F_RDLCK`...), pid.
pub type KernelLock = (u64, u64, i32, u32);

fn kind(typ: i32) -> Result<Option<LockKind>> {
    match typ {
        libc::F_RDLCK => Ok(Some(LockKind::Read)),
        libc::F_WRLCK => Ok(Some(LockKind::Write)),
        libc::F_UNLCK => Ok(None),
        _ => Err(FsError::BadArgument("unknown lock type")),
    }
}

/// First byte and one past the last, from the kernel's first and last byte.
fn range(start: u64, last: u64) -> (u64, u64) {
    let end = if last >= OFFSET_MAX {
        u64::MAX
    } else {
        last + 1
    };
    (start, end.max(start + 1))
}

fn to_kernel(l: &ByteLock) -> KernelLock {
    let last = if l.end == u64::MAX {
        OFFSET_MAX
    } else {
        l.end - 1
    };
    let typ = match l.kind {
        LockKind::Read => libc::F_RDLCK,
        LockKind::Write => libc::F_WRLCK,
    };
    (l.start, last, typ, l.pid)
}

/// Whether process `pid` of this machine still exists.
fn alive(pid: u32) -> bool {
    let Ok(pid) = libc::pid_t::try_from(pid) else {
        return false;
    };
    // SAFETY: signal 0 only checks that the process exists and may be signalled.
    pid == 0 || unsafe { libc::kill(pid, 0) } == 0 || errno_now() != libc::ESRCH
}

fn errno_now() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

impl Vfs {
    fn lock_owner(&self, owner: u64) -> Result<LockOwner> {
        let client = self.pool.client().ok_or(FsError::Unsupported(
            "locks kept by the daemon (only shared pools have them)",
        ))?;
        Ok(LockOwner {
            client: client.id(),
            owner,
        })
    }

    /// `F_GETLK`: the lock another owner holds that a `typ` lock on `start..=last` would meet,
    /// or an `F_UNLCK` answer for the same range.
    pub fn getlk(
        &self,
        ino: u64,
        owner: u64,
        (start, last): (u64, u64),
        typ: i32,
        pid: u32,
    ) -> Result<KernelLock> {
        let owner = self.lock_owner(owner)?;
        let Some(kind) = kind(typ)? else {
            return Ok((start, last, libc::F_UNLCK, pid));
        };
        let (start, end) = range(start, last);
        Ok(
            match self.pool.meta().test_lock(ino, owner, kind, start, end)? {
                Some(held) => to_kernel(&held),
                None => (start, last, libc::F_UNLCK, 0),
            },
        )
    }

    /// `F_SETLK` / `F_SETLKW` / `flock`: sets or removes the lock; `EAGAIN` when another owner
    /// holds a conflicting one and `wait` is false, else waits for it.
    pub fn setlk(
        &self,
        ino: u64,
        owner: u64,
        (start, last): (u64, u64),
        typ: i32,
        pid: u32,
        wait: bool,
    ) -> Result<()> {
        let owner = self.lock_owner(owner)?;
        let kind = kind(typ)?;
        let range = range(start, last);
        if kind.is_some() {
            // Before the lock exists, so that a close racing with it still drops it.
            self.locked_files.lock().insert(ino);
        }
        let mut pause = Duration::from_millis(10);
        loop {
            if self
                .pool
                .meta()
                .set_lock(ino, owner, kind, range, pid)?
                .is_none()
            {
                return Ok(());
            }
            if !wait {
                return Err(FsError::WouldBlock);
            }
            if !alive(pid) {
                return Err(FsError::Interrupted);
            }
            std::thread::sleep(pause);
            pause = (pause * 2).min(Duration::from_millis(200));
        }
    }

    /// Removes every lock `owner` holds on `ino`: a close by a process (its POSIX locks) or the
    /// last close of an open file (its `flock`). Nothing to do outside shared pools, nor for a
    /// file this client never locked (most closes).
    pub fn unlock_owner(&self, ino: u64, owner: u64) -> Result<()> {
        if self.pool.client().is_none() || !self.locked_files.lock().contains(&ino) {
            return Ok(());
        }
        Ok(self.pool.meta().unlock_all(ino, self.lock_owner(owner)?)?)
    }
}
