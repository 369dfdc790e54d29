//! The system calls the exerciser makes on the mount, on raw file descriptors: each returns the
//! errno on failure, so that a run can report it (or expect it) instead of panicking.

use std::os::fd::{AsRawFd, FromRawFd, OwnedFd, RawFd};
use std::path::Path;

use crate::common::{c_path, errno};

/// The result of a system call: the errno on failure.
pub type Sys<T> = Result<T, i32>;

fn check(rc: i64) -> Sys<i64> {
    if rc < 0 {
        Err(errno())
    } else {
        Ok(rc)
    }
}

/// Runs `call` again while it fails with EINTR.
fn retry(mut call: impl FnMut() -> i64) -> Sys<i64> {
    loop {
        match check(call()) {
            Err(libc::EINTR) => continue,
            other => return other,
        }
    }
}

/// open(2) read-write with extra `flags` (`O_CREAT`, `O_TRUNC`). Close-on-exec: the processes
/// other runs start (daemons, `presso unmount`) must not hold this mount busy.
pub fn open(path: &Path, flags: i32) -> Sys<OwnedFd> {
    let path = c_path(path);
    let flags = libc::O_RDWR | libc::O_CLOEXEC | flags;
    // SAFETY: a valid C string; the descriptor returned is owned by nobody else.
    let fd = retry(|| unsafe { libc::open(path.as_ptr(), flags, 0o644) } as i64)?;
    // SAFETY: a descriptor just opened.
    Ok(unsafe { OwnedFd::from_raw_fd(fd as RawFd) })
}

/// close(2), reporting its error (a failed flush).
pub fn close(fd: OwnedFd) -> Sys<()> {
    let raw = fd.as_raw_fd();
    std::mem::forget(fd);
    // SAFETY: the descriptor was owned and is closed exactly once (never retried: after EINTR
    // it is closed anyway).
    check(unsafe { libc::close(raw) } as i64).map(drop)
}

/// The size by fstat(2).
pub fn size(fd: &OwnedFd) -> Sys<u64> {
    // SAFETY: stat is plain data; fstat fills it.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    // SAFETY: a valid descriptor and a stat buffer.
    check(unsafe { libc::fstat(fd.as_raw_fd(), &mut st) } as i64)?;
    Ok(st.st_size as u64)
}

/// pread(2) until `len` bytes or the end of the file.
pub fn read(fd: &OwnedFd, offset: u64, len: u64) -> Sys<Vec<u8>> {
    let mut buf = vec![0u8; len as usize];
    let mut done = 0;
    while done < buf.len() {
        let rest = &mut buf[done..];
        // SAFETY: a valid descriptor and a buffer of `rest.len()` bytes.
        let n = retry(|| unsafe {
            libc::pread(
                fd.as_raw_fd(),
                rest.as_mut_ptr().cast(),
                rest.len(),
                (offset + done as u64) as i64,
            )
        } as i64)?;
        if n == 0 {
            break;
        }
        done += n as usize;
    }
    buf.truncate(done);
    Ok(buf)
}

/// pwrite(2) of all of `data`.
pub fn write(fd: &OwnedFd, offset: u64, data: &[u8]) -> Sys<()> {
    let mut done = 0;
    while done < data.len() {
        let rest = &data[done..];
        // SAFETY: a valid descriptor and a buffer of `rest.len()` bytes.
        let n = retry(|| unsafe {
            libc::pwrite(
                fd.as_raw_fd(),
                rest.as_ptr().cast(),
                rest.len(),
                (offset + done as u64) as i64,
            )
        } as i64)?;
        if n == 0 {
            return Err(libc::EIO);
        }
        done += n as usize;
    }
    Ok(())
}

/// ftruncate(2).
pub fn truncate(fd: &OwnedFd, size: u64) -> Sys<()> {
    // SAFETY: a valid descriptor.
    retry(|| unsafe { libc::ftruncate(fd.as_raw_fd(), size as i64) } as i64).map(drop)
}

/// fallocate(2).
pub fn fallocate(fd: &OwnedFd, mode: i32, offset: u64, len: u64) -> Sys<()> {
    // SAFETY: a valid descriptor.
    retry(|| unsafe { libc::fallocate(fd.as_raw_fd(), mode, offset as i64, len as i64) } as i64)
        .map(drop)
}

/// fsync(2), or fdatasync(2) when `data_only`.
pub fn sync(fd: &OwnedFd, data_only: bool) -> Sys<()> {
    // SAFETY: a valid descriptor.
    retry(|| unsafe {
        if data_only {
            libc::fdatasync(fd.as_raw_fd())
        } else {
            libc::fsync(fd.as_raw_fd())
        }
    } as i64)
    .map(drop)
}

/// copy_file_range(2) of `len` bytes, then again for the rest while fewer than `expect` are
/// copied and the last call copied some; returns how many. (Not simply until `len`: a copy
/// within one file past its end extends it, so the source would grow under the loop.)
pub fn copy_range(
    from: &OwnedFd,
    src: u64,
    to: &OwnedFd,
    dst: u64,
    len: u64,
    expect: u64,
) -> Sys<u64> {
    let mut done = 0;
    while done == 0 || done < expect {
        let ask = if done == 0 { len } else { expect - done };
        let mut off_in = (src + done) as i64;
        let mut off_out = (dst + done) as i64;
        // SAFETY: valid descriptors and offsets owned by this frame.
        let n = retry(|| unsafe {
            libc::copy_file_range(
                from.as_raw_fd(),
                &mut off_in,
                to.as_raw_fd(),
                &mut off_out,
                ask as usize,
                0,
            )
        } as i64)?;
        if n == 0 {
            break;
        }
        done += n as u64;
    }
    Ok(done)
}

/// A `MAP_SHARED` read-write mapping of `offset..offset + len` of a file (page-aligned
/// underneath), unmapped on drop.
pub struct Mapping {
    base: *mut libc::c_void,
    map_len: usize,
    skip: usize,
    len: usize,
}

impl Mapping {
    /// Maps `offset..offset + len` of `fd` (which must lie within the file).
    pub fn new(fd: &OwnedFd, offset: u64, len: u64) -> Sys<Mapping> {
        // SAFETY: sysconf has no memory effects.
        let page = unsafe { libc::sysconf(libc::_SC_PAGESIZE) } as u64;
        let start = offset / page * page;
        let skip = (offset - start) as usize;
        let map_len = skip + len as usize;
        // SAFETY: a fresh mapping of a valid descriptor; nothing else aliases it.
        let base = unsafe {
            libc::mmap(
                std::ptr::null_mut(),
                map_len,
                libc::PROT_READ | libc::PROT_WRITE,
                libc::MAP_SHARED,
                fd.as_raw_fd(),
                start as i64,
            )
        };
        if base == libc::MAP_FAILED {
            return Err(errno());
        }
        Ok(Mapping {
            base,
            map_len,
            skip,
            len: len as usize,
        })
    }

    /// The mapped bytes (a page fault per page: reads through the page cache). A page the
    /// daemon cannot read kills the test with SIGBUS: there is no error to return.
    pub fn read(&self) -> Vec<u8> {
        // SAFETY: `skip + len` bytes lie within the mapping, which lies within the file.
        unsafe { std::slice::from_raw_parts(self.base.cast::<u8>().add(self.skip), self.len) }
            .to_vec()
    }

    /// Stores `data` (exactly the mapped length) and `msync(MS_SYNC)`s the mapping.
    pub fn write_and_sync(&mut self, data: &[u8]) -> Sys<()> {
        assert_eq!(data.len(), self.len, "a mapped write covers the mapping");
        // SAFETY: as in `read`; the mapping is writable and only this value uses it.
        unsafe {
            std::ptr::copy_nonoverlapping(
                data.as_ptr(),
                self.base.cast::<u8>().add(self.skip),
                self.len,
            )
        };
        // SAFETY: the whole mapping, page-aligned.
        check(unsafe { libc::msync(self.base, self.map_len, libc::MS_SYNC) } as i64).map(drop)
    }
}

impl Drop for Mapping {
    fn drop(&mut self) {
        // SAFETY: the mapping made in `new`, unmapped once.
        unsafe { libc::munmap(self.base, self.map_len) };
    }
}

/// `echo 3 > /proc/sys/vm/drop_caches`: the kernel drops every clean page and cached inode.
pub fn drop_caches() -> Result<(), String> {
    std::fs::write("/proc/sys/vm/drop_caches", "3")
        .map_err(|e| format!("writing /proc/sys/vm/drop_caches (needs root): {e}"))
}
