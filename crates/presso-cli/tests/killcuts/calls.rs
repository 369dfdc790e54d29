//! The name system calls of the workload (the data ones are the exerciser's), each returning the
//! errno on failure, so that a worker can tell the call in flight at a kill from a defect.

use std::os::fd::{FromRawFd, OwnedFd};
use std::path::Path;

use crate::common::{c_path, errno};
use crate::sys::Sys;

fn check(rc: i32) -> Sys<i32> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

/// mkdir(2), mode 0755.
pub fn mkdir(path: &Path) -> Sys<()> {
    let p = c_path(path);
    // SAFETY: a valid C string.
    check(unsafe { libc::mkdir(p.as_ptr(), 0o755) }).map(drop)
}

/// rmdir(2).
pub fn rmdir(path: &Path) -> Sys<()> {
    let p = c_path(path);
    // SAFETY: a valid C string.
    check(unsafe { libc::rmdir(p.as_ptr()) }).map(drop)
}

/// unlink(2).
pub fn unlink(path: &Path) -> Sys<()> {
    let p = c_path(path);
    // SAFETY: a valid C string.
    check(unsafe { libc::unlink(p.as_ptr()) }).map(drop)
}

/// link(2).
pub fn link(from: &Path, to: &Path) -> Sys<()> {
    let (from, to) = (c_path(from), c_path(to));
    // SAFETY: two valid C strings.
    check(unsafe { libc::link(from.as_ptr(), to.as_ptr()) }).map(drop)
}

/// renameat2(2) of two absolute paths with `flags` (0 for rename(2)).
pub fn rename(from: &Path, to: &Path, flags: u32) -> Sys<()> {
    let (from, to) = (c_path(from), c_path(to));
    // SAFETY: two valid C strings; absolute, so the directory descriptors are not used.
    check(unsafe {
        libc::renameat2(
            libc::AT_FDCWD,
            from.as_ptr(),
            libc::AT_FDCWD,
            to.as_ptr(),
            flags,
        )
    })
    .map(drop)
}

/// A directory opened `O_RDONLY | O_DIRECTORY`, for fsync.
pub fn open_dir(path: &Path) -> Sys<OwnedFd> {
    let p = c_path(path);
    let flags = libc::O_RDONLY | libc::O_DIRECTORY | libc::O_CLOEXEC;
    // SAFETY: a valid C string.
    let fd = check(unsafe { libc::open(p.as_ptr(), flags) })?;
    // SAFETY: a descriptor just opened, owned by nobody else.
    Ok(unsafe { OwnedFd::from_raw_fd(fd) })
}
