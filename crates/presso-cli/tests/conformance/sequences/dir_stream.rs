//! Directories read as programs read them, with the buffer size and the pauses under the test's
//! control.

use std::ffi::CStr;
use std::path::Path;

use crate::common::errno;
use crate::sys::open;

/// A directory read with `getdents64` into a buffer of a chosen size (a small one makes the
/// kernel ask the file system for many short replies, each going on from the last one's cookie),
/// with `telldir`, `seekdir` and `rewinddir` as `lseek` of the directory.
pub struct DirStream {
    fd: std::os::fd::OwnedFd,
    buffer: Vec<u8>,
    /// Entries read from the kernel and not yet handed out: name and position after it.
    pending: std::collections::VecDeque<(String, i64)>,
    /// The position after the last entry handed out.
    position: i64,
}

impl DirStream {
    /// Opens `dir` to read with a `buffer` of that many bytes.
    pub fn open(dir: &Path, buffer: usize) -> Result<DirStream, i32> {
        let fd = open(dir, libc::O_RDONLY | libc::O_DIRECTORY, 0)?;
        // SAFETY: a descriptor `open` just returned, owned from here on.
        let fd =
            unsafe { <std::os::fd::OwnedFd as std::os::fd::FromRawFd>::from_raw_fd(fd as i32) };
        Ok(DirStream {
            fd,
            buffer: vec![0; buffer],
            pending: Default::default(),
            position: 0,
        })
    }

    /// Up to `count` more names (`.` and `..` left out).
    pub fn read(&mut self, count: usize) -> Result<Vec<String>, i32> {
        let mut names = Vec::new();
        while names.len() < count {
            if self.pending.is_empty() && !self.fill()? {
                break;
            }
            let (name, next) = self.pending.pop_front().expect("filled");
            self.position = next;
            if name != "." && name != ".." {
                names.push(name);
            }
        }
        Ok(names)
    }

    /// One `getdents64`; false at the directory's end.
    fn fill(&mut self) -> Result<bool, i32> {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
        // SAFETY: a buffer of the given length, written by the kernel.
        let n = unsafe {
            libc::syscall(
                libc::SYS_getdents64,
                fd,
                self.buffer.as_mut_ptr(),
                self.buffer.len(),
            )
        };
        if n < 0 {
            return Err(errno());
        }
        let bytes = &self.buffer[..n as usize];
        let mut at = 0;
        // `linux_dirent64`: inode (8 bytes), offset of the next entry (8), record length (2),
        // type (1), then the name, NUL-terminated.
        while at + 19 <= bytes.len() {
            let next = i64::from_ne_bytes(bytes[at + 8..at + 16].try_into().unwrap());
            let len = u16::from_ne_bytes(bytes[at + 16..at + 18].try_into().unwrap()) as usize;
            let name = CStr::from_bytes_until_nul(&bytes[at + 19..at + len])
                .expect("a NUL-terminated name")
                .to_string_lossy()
                .into_owned();
            self.pending.push_back((name, next));
            at += len;
        }
        Ok(n > 0)
    }

    /// The position after the last entry handed out (`telldir`).
    pub fn tell(&self) -> i64 {
        self.position
    }

    /// Goes on from `position` (`seekdir`; 0 is `rewinddir`).
    pub fn seek(&mut self, position: i64) {
        let fd = std::os::fd::AsRawFd::as_raw_fd(&self.fd);
        // SAFETY: lseek of a descriptor this stream owns.
        let at = unsafe { libc::lseek(fd, position, libc::SEEK_SET) };
        assert_eq!(
            at,
            position,
            "lseek of a directory to {position}: errno {}",
            errno()
        );
        self.pending.clear();
        self.position = position;
    }
}
