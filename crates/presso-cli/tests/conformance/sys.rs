//! The system calls the scenarios make, each returning its result or its errno (never
//! panicking, so a scenario can observe failures), and the threads that act as another user.

use std::ffi::CString;
use std::path::Path;

use crate::common::{c_path, errno};

/// A system call's result: its non-negative return value, or the errno.
pub type Res = Result<i64, i32>;

/// A raw return value as a [`Res`]: the errno when negative.
pub fn check(rc: i64) -> Res {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

fn cs(s: &str) -> CString {
    CString::new(s).expect("no NUL")
}

/// `open(path, flags, mode)`; a file descriptor the caller closes with [`close`].
pub fn open(path: &Path, flags: i32, mode: u32) -> Res {
    // SAFETY: a valid C path; open has no other memory arguments.
    check(unsafe { libc::open(c_path(path).as_ptr(), flags | libc::O_CLOEXEC, mode) }.into())
}

/// `close(fd)`.
pub fn close(fd: i64) -> Res {
    // SAFETY: closes a descriptor this scenario opened.
    check(unsafe { libc::close(fd as i32) }.into())
}

/// Opens `path` with `flags`, closing it again: the result of the open alone.
pub fn open_close(path: &Path, flags: i32, mode: u32) -> Res {
    let fd = open(path, flags, mode)?;
    close(fd)?;
    Ok(0)
}

/// `write(fd, data)`.
pub fn write(fd: i64, data: &[u8]) -> Res {
    // SAFETY: a valid buffer of the given length.
    check(unsafe { libc::write(fd as i32, data.as_ptr().cast(), data.len()) } as i64)
}

/// `pread(fd, len, offset)`: the bytes read, or the errno.
pub fn pread(fd: i64, len: usize, offset: i64) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; len];
    // SAFETY: a valid buffer of the given length.
    let n = unsafe { libc::pread(fd as i32, buf.as_mut_ptr().cast(), len, offset) };
    if n < 0 {
        return Err(errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// Opens `path` for writing (`extra` flags added; a new file gets mode 0644 less the umask),
/// writes `data` and closes it.
pub fn write_file(path: &Path, extra: i32, data: &[u8]) -> Res {
    let fd = open(path, libc::O_WRONLY | extra, 0o644)?;
    let n = write(fd, data);
    close(fd)?;
    n
}

/// `mknod(path, mode, dev)` (also FIFOs and regular files).
pub fn mknod(path: &Path, mode: u32, dev: u64) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::mknod(c_path(path).as_ptr(), mode, dev) }.into())
}

/// `mkdir(path, mode)`.
pub fn mkdir(path: &Path, mode: u32) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::mkdir(c_path(path).as_ptr(), mode) }.into())
}

/// `rmdir(path)`.
pub fn rmdir(path: &Path) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::rmdir(c_path(path).as_ptr()) }.into())
}

/// `unlink(path)`.
pub fn unlink(path: &Path) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::unlink(c_path(path).as_ptr()) }.into())
}

/// `symlink(target, path)`.
pub fn symlink(target: &str, path: &Path) -> Res {
    // SAFETY: valid C strings.
    check(unsafe { libc::symlink(cs(target).as_ptr(), c_path(path).as_ptr()) }.into())
}

/// `link(from, to)`.
pub fn link(from: &Path, to: &Path) -> Res {
    // SAFETY: valid C paths.
    check(unsafe { libc::link(c_path(from).as_ptr(), c_path(to).as_ptr()) }.into())
}

/// `linkat(AT_FDCWD, from, AT_FDCWD, to, flags)`.
pub fn linkat(from: &Path, to: &Path, flags: i32) -> Res {
    // SAFETY: valid C paths.
    check(
        unsafe {
            libc::linkat(
                libc::AT_FDCWD,
                c_path(from).as_ptr(),
                libc::AT_FDCWD,
                c_path(to).as_ptr(),
                flags,
            )
        }
        .into(),
    )
}

/// `renameat2(from, to, flags)`.
pub fn rename(from: &Path, to: &Path, flags: u32) -> Res {
    // SAFETY: valid C paths.
    check(
        unsafe {
            libc::renameat2(
                libc::AT_FDCWD,
                c_path(from).as_ptr(),
                libc::AT_FDCWD,
                c_path(to).as_ptr(),
                flags,
            )
        }
        .into(),
    )
}

/// `chmod(path, mode)`.
pub fn chmod(path: &Path, mode: u32) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::chmod(c_path(path).as_ptr(), mode) }.into())
}

/// `lchown(path, uid, gid)`; `u32::MAX` leaves one unchanged.
pub fn lchown(path: &Path, uid: u32, gid: u32) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::lchown(c_path(path).as_ptr(), uid, gid) }.into())
}

/// `truncate(path, len)`.
pub fn truncate(path: &Path, len: i64) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::truncate(c_path(path).as_ptr(), len) }.into())
}

/// `access(path, mode)`.
pub fn access(path: &Path, mode: i32) -> Res {
    // SAFETY: a valid C path.
    check(unsafe { libc::access(c_path(path).as_ptr(), mode) }.into())
}

/// A time for [`utimensat`]: `UTIME_NOW`, `UTIME_OMIT` or seconds and nanoseconds.
pub fn ts(sec: i64, nsec: i64) -> libc::timespec {
    libc::timespec {
        tv_sec: sec,
        tv_nsec: nsec,
    }
}

/// `utimensat(AT_FDCWD, path, [atime, mtime], flags)`; `None` passes a null array (both now).
pub fn utimensat(path: &Path, times: Option<[libc::timespec; 2]>, flags: i32) -> Res {
    let ptr = times.as_ref().map_or(std::ptr::null(), |t| t.as_ptr());
    // SAFETY: a valid C path and a null or two-element array.
    check(unsafe { libc::utimensat(libc::AT_FDCWD, c_path(path).as_ptr(), ptr, flags) }.into())
}

/// `lsetxattr(path, name, value, flags)`.
pub fn setxattr(path: &Path, name: &str, value: &[u8], flags: i32) -> Res {
    // SAFETY: valid C strings and a buffer of the given length.
    check(
        unsafe {
            libc::lsetxattr(
                c_path(path).as_ptr(),
                cs(name).as_ptr(),
                value.as_ptr().cast(),
                value.len(),
                flags,
            )
        }
        .into(),
    )
}

/// `lgetxattr(path, name, buf[size])`: the value (or, with `size == 0`, its length as bytes of
/// a decimal number), or the errno.
pub fn getxattr(path: &Path, name: &str, size: usize) -> Result<Vec<u8>, i32> {
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr()
    };
    // SAFETY: valid C strings and a null or sized buffer.
    let n = unsafe { libc::lgetxattr(c_path(path).as_ptr(), cs(name).as_ptr(), ptr.cast(), size) };
    if n < 0 {
        return Err(errno());
    }
    if size == 0 {
        return Ok(n.to_string().into_bytes());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// `llistxattr(path, buf[size])`: the names sorted (or, with `size == 0`, the length needed),
/// or the errno.
pub fn listxattr(path: &Path, size: usize) -> Result<Vec<String>, i32> {
    let mut buf = vec![0u8; size];
    let ptr = if size == 0 {
        std::ptr::null_mut()
    } else {
        buf.as_mut_ptr()
    };
    // SAFETY: a valid C path and a null or sized buffer.
    let n = unsafe { libc::llistxattr(c_path(path).as_ptr(), ptr.cast(), size) };
    if n < 0 {
        return Err(errno());
    }
    if size == 0 {
        return Ok(vec![format!("{n} bytes")]);
    }
    buf.truncate(n as usize);
    let mut names: Vec<String> = buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8_lossy(n).into_owned())
        .collect();
    names.sort();
    Ok(names)
}

/// `lremovexattr(path, name)`.
pub fn removexattr(path: &Path, name: &str) -> Res {
    // SAFETY: valid C strings.
    check(unsafe { libc::lremovexattr(c_path(path).as_ptr(), cs(name).as_ptr()) }.into())
}

/// Binds a Unix socket at `path` (the socket file stays after the listener is dropped).
pub fn bind_socket(path: &Path) -> Res {
    std::os::unix::net::UnixListener::bind(path)
        .map(|_| 0)
        .map_err(|e| e.raw_os_error().unwrap_or(0))
}

/// Runs `f` on a thread of its own whose credentials alone are `uid`/`gid` with no
/// supplementary groups. The raw system calls change only the calling thread's credentials
/// (glibc's wrappers would change every thread of the test process); the thread ends with `f`.
pub fn as_user<T: Send>(uid: u32, gid: u32, f: impl FnOnce() -> T + Send) -> T {
    std::thread::scope(|s| {
        s.spawn(|| {
            // SAFETY: raw credential calls of this thread only; no memory arguments but null.
            unsafe {
                assert_eq!(
                    libc::syscall(libc::SYS_setgroups, 0, std::ptr::null::<u32>()),
                    0
                );
                assert_eq!(libc::syscall(libc::SYS_setresgid, gid, gid, gid), 0);
                assert_eq!(libc::syscall(libc::SYS_setresuid, uid, uid, uid), 0);
            }
            f()
        })
        .join()
        .unwrap_or_else(|p| std::panic::resume_unwind(p))
    })
}

/// A path name of `len` bytes of `x`.
pub fn long_name(len: usize) -> String {
    "x".repeat(len)
}

/// Whether `path` names something (without following a symlink).
pub fn exists(path: &Path) -> bool {
    std::fs::symlink_metadata(path).is_ok()
}
