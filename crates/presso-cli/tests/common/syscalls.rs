//! Thin wrappers of the system calls the tests make directly: paths as C strings, errno, and
//! extended attributes (returning the errno rather than panicking, so tests can assert it).

use std::ffi::CString;
use std::os::fd::AsRawFd;
use std::os::unix::ffi::OsStrExt;
use std::path::Path;

/// `path` as a C string for a system call.
pub fn c_path(path: &Path) -> CString {
    CString::new(path.as_os_str().as_bytes()).expect("path without NUL")
}

/// The errno of the last failed system call of this thread.
pub fn errno() -> i32 {
    std::io::Error::last_os_error().raw_os_error().unwrap_or(0)
}

/// `setxattr(path, name, value, flags)`: 0, or the errno.
pub fn set_xattr(path: &Path, name: &str, value: &[u8], flags: i32) -> i32 {
    let name = CString::new(name).unwrap();
    // SAFETY: valid path, name and value buffer.
    let rc = unsafe {
        libc::setxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            value.as_ptr().cast(),
            value.len(),
            flags,
        )
    };
    if rc == 0 {
        0
    } else {
        errno()
    }
}

/// The value of attribute `name` of `path`, or the errno. Also checks that a buffer one byte
/// too small gets ERANGE.
pub fn get_xattr(path: &Path, name: &str) -> Result<Vec<u8>, i32> {
    let name = CString::new(name).unwrap();
    // SAFETY: valid path and name; a null buffer of length 0 asks for the value's size.
    let size = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            std::ptr::null_mut(),
            0,
        )
    };
    if size < 0 {
        return Err(errno());
    }
    if size > 1 {
        let mut small = vec![0u8; size as usize - 1];
        // SAFETY: as below, with a buffer one byte too small (not empty: that asks the size).
        let n = unsafe {
            libc::getxattr(
                c_path(path).as_ptr(),
                name.as_ptr(),
                small.as_mut_ptr().cast(),
                small.len(),
            )
        };
        assert_eq!((n, errno()), (-1, libc::ERANGE), "a too small buffer");
    }
    let mut buf = vec![0u8; size as usize];
    // SAFETY: valid path and name, and a buffer of the given length.
    let n = unsafe {
        libc::getxattr(
            c_path(path).as_ptr(),
            name.as_ptr(),
            buf.as_mut_ptr().cast(),
            buf.len(),
        )
    };
    if n < 0 {
        return Err(errno());
    }
    buf.truncate(n as usize);
    Ok(buf)
}

/// The attribute names of `path`, sorted.
pub fn list_xattrs(path: &Path) -> Vec<String> {
    let mut buf = vec![0u8; 4096];
    // SAFETY: valid path and a buffer of the given length.
    let n = unsafe { libc::listxattr(c_path(path).as_ptr(), buf.as_mut_ptr().cast(), buf.len()) };
    assert!(n >= 0, "listxattr: errno {}", errno());
    buf.truncate(n as usize);
    let mut names: Vec<String> = buf
        .split(|&b| b == 0)
        .filter(|n| !n.is_empty())
        .map(|n| String::from_utf8(n.to_vec()).unwrap())
        .collect();
    names.sort();
    names
}

/// `syncfs(2)` on the file system holding `dir`, as `sync -f` calls it; the error it returns,
/// if any.
pub fn syncfs(dir: &Path) -> std::io::Result<()> {
    let root = std::fs::File::open(dir)?;
    // SAFETY: syncfs takes any open descriptor and reads nothing from memory.
    if unsafe { libc::syncfs(root.as_raw_fd()) } == 0 {
        Ok(())
    } else {
        Err(std::io::Error::last_os_error())
    }
}
