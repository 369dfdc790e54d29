//! The storage the pool lives on, behind two small traits (after redb's `StorageBackend`):
//! [`Storage`] is one file addressed by position, [`StorageDir`] is the pool directory that creates,
//! opens, lists, renames and removes files by name (and segment files by number).
//!
//! [`FsDir`]/[`FsStorage`] use real files (`pread`/`pwrite` through `FileExt`, `fdatasync`);
//! [`crate::sim::SimDir`] simulates crashes, torn writes and I/O faults for tests.
//!
//! [`StorageDir::lock`] takes the pool's exclusive lock: on real files an `flock` on
//! [`LOCK_FILE`], which the kernel releases when the process dies however it dies.
//! [`LockWatch`] looks at that lock from another process without taking it.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::{FileExt, OpenOptionsExt};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::holder::HolderProcess;

/// One file, read and written by position. All methods take `&self`: many readers may call
/// [`Storage::read_at`] while one writer appends.
pub trait Storage: Send + Sync {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// Whether the file is empty.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `offset`; a short file is an `UnexpectedEof` error.
    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Reads `len` bytes from `offset` into a new buffer, as [`Storage::read_at`] does.
    fn read_vec_at(&self, len: usize, offset: u64) -> io::Result<Vec<u8>> {
        let mut buf = vec![0u8; len];
        self.read_at(&mut buf, offset)?;
        Ok(buf)
    }
    /// Writes all of `data` at `offset` (extending the file if needed). On error, any prefix of
    /// `data` may have been written.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Writes `parts` one after another from `offset`, as [`Storage::write_at`] would write
    /// their concatenation (one system call where the storage can), so a caller need not copy
    /// them together first. On error, any prefix of the concatenation may have been written.
    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut at = offset;
        for part in parts {
            self.write_at(part, at)?;
            at += part.len() as u64;
        }
        Ok(())
    }
    /// Makes every completed write and length change durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Allocates the file system's blocks for `len` bytes from `offset` without changing the
    /// file's length or contents, so later writes there skip the file system's allocation of
    /// each page. Only an optimisation: after an error the file reads as before. On ext4 and
    /// tmpfs a truncate, even to the file's own length, gives back what lies past its end;
    /// elsewhere it may stay until the file is removed. The default reserves nothing and says
    /// so (`Unsupported`).
    fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        let _ = (offset, len);
        Err(io::ErrorKind::Unsupported.into())
    }
}

/// Name of the lock file in the pool directory. It holds the process id of the last holder of
/// the lock, for messages; the lock itself is the `flock` on it, not its existence, so the file
/// stays when the pool is closed. The holder also locks the directory (see `FsDir`'s `lock`).
pub const LOCK_FILE: &str = "presso.lock";

/// How long a pool lock held under this process's own pid is waited for: a child process
/// between fork and exec holds it for well under this (see `FsDir`'s `lock`).
const OWN_LOCK_WAIT: std::time::Duration = std::time::Duration::from_secs(1);

/// Why [`StorageDir::lock`] did not take the lock.
#[derive(Debug)]
pub enum LockError {
    /// Someone else holds it.
    Held {
        /// The holder's process id, when known.
        pid: Option<u32>,
    },
    /// The lock file could not be opened or locked.
    Io(io::Error),
}

/// The exclusive lock on a pool directory, held until this value is dropped.
pub struct DirLock {
    _held: Box<dyn Send + Sync>,
}

impl DirLock {
    /// A lock that `held` keeps: dropping `held` must release it.
    pub fn new(held: impl Send + Sync + 'static) -> Self {
        Self {
            _held: Box::new(held),
        }
    }
}

impl std::fmt::Debug for DirLock {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("DirLock")
    }
}

/// The pool directory: a flat namespace of files.
pub trait StorageDir: Send + Sync {
    /// Creates a new empty file; fails with `AlreadyExists` if it exists.
    fn create(&self, name: &str) -> io::Result<Arc<dyn Storage>>;
    /// Opens an existing file for reading and writing; `NotFound` if it does not exist.
    fn open(&self, name: &str) -> io::Result<Arc<dyn Storage>>;
    /// Names of all files in the directory, in no particular order.
    fn list(&self) -> io::Result<Vec<String>>;
    /// Removes a file.
    fn remove(&self, name: &str) -> io::Result<()>;
    /// Atomically renames `from` to `to`, replacing `to`.
    fn rename(&self, from: &str, to: &str) -> io::Result<()>;
    /// Makes creations, renames and removals durable (fsync of the directory).
    fn sync_dir(&self) -> io::Result<()>;
    /// A human-readable name of the directory, for messages.
    fn describe(&self) -> String;
    /// Takes the directory's exclusive lock without waiting. It fails with
    /// [`LockError::Held`] while another holder — another process, or another lock taken in
    /// this one — has it, and is released when the returned [`DirLock`] is dropped or the
    /// process dies.
    fn lock(&self) -> Result<DirLock, LockError>;
    /// Total and available bytes of the space the directory's files live in, if known: the
    /// layer above refuses new writes before this runs out, so the metadata, deletes and
    /// garbage collection always find room.
    fn space(&self) -> Option<(u64, u64)> {
        None
    }

    /// Creates segment file `number` (`seg-<number>.dat`).
    fn create_segment(&self, number: u64) -> io::Result<Arc<dyn Storage>> {
        self.create(&segment_file_name(number))
    }
    /// Opens segment file `number`.
    fn open_segment(&self, number: u64) -> io::Result<Arc<dyn Storage>> {
        self.open(&segment_file_name(number))
    }
    /// Removes segment file `number`.
    fn remove_segment(&self, number: u64) -> io::Result<()> {
        self.remove(&segment_file_name(number))
    }
    /// Numbers of all segment files, ascending.
    fn list_segments(&self) -> io::Result<Vec<u64>> {
        let mut numbers: Vec<u64> = self
            .list()?
            .iter()
            .filter_map(|n| parse_segment_file_name(n))
            .collect();
        numbers.sort_unstable();
        Ok(numbers)
    }
}

/// The most slices one `pwritev` takes (Linux's `UIO_MAXIOV`).
const IOV_MAX: usize = 1024;

/// A real file.
#[derive(Debug)]
pub struct FsStorage {
    file: File,
}

impl FsStorage {
    /// Wraps an open file (it must be readable and writable).
    pub fn new(file: File) -> Self {
        Self { file }
    }
}

impl Storage for FsStorage {
    fn len(&self) -> io::Result<u64> {
        Ok(self.file.metadata()?.len())
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    // Every record read lands in a fresh buffer. Zeroing it first, as a safe `read_at` into a
    // `vec![0; len]` must, costs a pass as long as the read itself.
    fn read_vec_at(&self, len: usize, offset: u64) -> io::Result<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        let mut done = 0;
        while done < len {
            let at = offset
                .checked_add(done as u64)
                .and_then(|at| libc::off_t::try_from(at).ok())
                .ok_or_else(|| io::Error::from(io::ErrorKind::InvalidInput))?;
            // SAFETY: the pointer and length describe allocated, unfilled capacity of `buf`
            // past its first `done` bytes; pread writes at most that many bytes there.
            let n = unsafe {
                libc::pread(
                    self.file.as_raw_fd(),
                    buf.as_mut_ptr().add(done).cast(),
                    len - done,
                    at,
                )
            };
            match n {
                0 => return Err(io::ErrorKind::UnexpectedEof.into()),
                n if n > 0 => done += n as usize,
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        // SAFETY: pread filled all `len` bytes above.
        unsafe { buf.set_len(len) };
        Ok(buf)
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn write_parts_at(&self, parts: &[&[u8]], offset: u64) -> io::Result<()> {
        let mut slices: Vec<io::IoSlice<'_>> = parts
            .iter()
            .filter(|p| !p.is_empty())
            .map(|p| io::IoSlice::new(p))
            .collect();
        let mut slices = &mut slices[..];
        let mut at = offset;
        while !slices.is_empty() {
            let pos = libc::off_t::try_from(at)
                .map_err(|_| io::Error::from(io::ErrorKind::InvalidInput))?;
            let count = slices.len().min(IOV_MAX);
            // SAFETY: `IoSlice` has the layout of `iovec`, and the first `count` of `slices`
            // describe borrowed, initialised bytes that pwritev only reads.
            let n = unsafe {
                libc::pwritev(
                    self.file.as_raw_fd(),
                    slices.as_ptr().cast(),
                    count as libc::c_int,
                    pos,
                )
            };
            match n {
                0 => return Err(io::ErrorKind::WriteZero.into()),
                n if n > 0 => {
                    at += n as u64;
                    io::IoSlice::advance_slices(&mut slices, n as usize);
                }
                _ => {
                    let e = io::Error::last_os_error();
                    if e.kind() != io::ErrorKind::Interrupted {
                        return Err(e);
                    }
                }
            }
        }
        Ok(())
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn reserve(&self, offset: u64, len: u64) -> io::Result<()> {
        let (Ok(offset), Ok(len)) = (libc::off_t::try_from(offset), libc::off_t::try_from(len))
        else {
            return Err(io::ErrorKind::InvalidInput.into());
        };
        // SAFETY: plain system call on a descriptor this value owns.
        let r = unsafe {
            libc::fallocate(
                self.file.as_raw_fd(),
                libc::FALLOC_FL_KEEP_SIZE,
                offset,
                len,
            )
        };
        if r == 0 {
            Ok(())
        } else {
            Err(io::Error::last_os_error())
        }
    }
}

/// A real directory.
#[derive(Debug, Clone)]
pub struct FsDir {
    path: PathBuf,
}

impl FsDir {
    /// Uses an existing directory.
    pub fn open(path: impl AsRef<Path>) -> io::Result<Self> {
        let path = path.as_ref().to_path_buf();
        if !fs::metadata(&path)?.is_dir() {
            return Err(io::Error::new(
                io::ErrorKind::NotADirectory,
                "not a directory",
            ));
        }
        Ok(Self { path })
    }

    /// Creates the directory (and its parents) if needed.
    pub fn create_all(path: impl AsRef<Path>) -> io::Result<Self> {
        fs::create_dir_all(path.as_ref())?;
        Self::open(path)
    }

    /// The directory's path.
    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl StorageDir for FsDir {
    fn create(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create_new(true)
            .open(self.path.join(name))?;
        Ok(Arc::new(FsStorage::new(file)))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .open(self.path.join(name))?;
        Ok(Arc::new(FsStorage::new(file)))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        let mut names = Vec::new();
        for entry in fs::read_dir(&self.path)? {
            if let Ok(name) = entry?.file_name().into_string() {
                names.push(name);
            }
        }
        Ok(names)
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        fs::remove_file(self.path.join(name))
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        fs::rename(self.path.join(from), self.path.join(to))
    }

    fn sync_dir(&self) -> io::Result<()> {
        File::open(&self.path)?.sync_all()
    }

    fn describe(&self) -> String {
        self.path.display().to_string()
    }

    fn space(&self) -> Option<(u64, u64)> {
        use std::os::unix::ffi::OsStrExt;
        let c = std::ffi::CString::new(self.path.as_os_str().as_bytes()).ok()?;
        // SAFETY: statvfs is a plain C struct for which all-zero bytes are a valid value.
        let mut s: libc::statvfs = unsafe { std::mem::zeroed() };
        // SAFETY: `c` is a valid NUL-terminated path and `s` a properly sized out-parameter.
        if unsafe { libc::statvfs(c.as_ptr(), &mut s) } != 0 {
            return None;
        }
        let frsize = s.f_frsize as u64;
        Some((s.f_blocks as u64 * frsize, s.f_bavail as u64 * frsize))
    }

    fn lock(&self) -> Result<DirLock, LockError> {
        // Rust opens with O_CLOEXEC, so a child process (a mount helper, say) does not keep the
        // lock alive after we are gone; only between its fork and its exec does it share it.
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(false)
            .mode(0o644)
            .open(self.path.join(LOCK_FILE))
            .map_err(LockError::Io)?;
        // A lock held under this process's own pid, after its holder here let go, is a child
        // process between its fork and its exec (another thread spawning a program), which
        // shares the lock for that instant: it is waited for, briefly.
        let waiting_since = std::time::Instant::now();
        while let Err(err) = flock(&file, libc::LOCK_EX | libc::LOCK_NB) {
            if err.raw_os_error() != Some(libc::EWOULDBLOCK) {
                return Err(LockError::Io(err));
            }
            let pid = read_pid(&file);
            if pid != Some(std::process::id()) || waiting_since.elapsed() >= OWN_LOCK_WAIT {
                return Err(LockError::Held { pid });
            }
            std::thread::sleep(std::time::Duration::from_millis(1));
        }
        let directory = lock_directory(&self.path)?;
        // The pid is only for the message of whoever is refused next. Failing to write it (a
        // full disk, which is exactly when the pool must still open) leaves the lock valid.
        let pid = format!("{}\n", std::process::id());
        if file.set_len(0).is_ok() {
            let _ = file.write_all_at(pid.as_bytes(), 0);
        }
        Ok(DirLock::new((file, directory)))
    }
}

/// Takes the `flock` of the pool directory itself, which, unlike the lock file's, nobody can
/// delete while the pool is there: a lock file removed by hand (as stale, say) must not let a
/// second process open the pool. `None` where the host file system has no locks on
/// directories (the lock file's then stands alone).
fn lock_directory(path: &Path) -> Result<Option<File>, LockError> {
    let directory = File::open(path).map_err(LockError::Io)?;
    // We hold the lock file's lock already: whoever holds the directory's is a process whose
    // lock file was deleted, or a child of ours between fork and exec, which lets go at once.
    let waiting_since = std::time::Instant::now();
    let mut holder = None;
    loop {
        match flock(&directory, libc::LOCK_EX | libc::LOCK_NB) {
            Ok(()) => return Ok(Some(directory)),
            Err(err) if err.raw_os_error() == Some(libc::EWOULDBLOCK) => {
                // Only a child of ours is waited for (as for the lock file's lock above). The
                // kernel's lock table is read once: a forked child holds the lock as ours.
                let pid =
                    *holder.get_or_insert_with(|| crate::holder::directory_lock_holder(&directory));
                let other = pid.is_some_and(|pid| pid != std::process::id());
                if other || waiting_since.elapsed() >= OWN_LOCK_WAIT {
                    return Err(LockError::Held { pid });
                }
                std::thread::sleep(std::time::Duration::from_millis(1));
            }
            Err(_) => return Ok(None),
        }
    }
}

/// The pool lock of a directory seen from outside, by a process that does not want it but asks
/// whether a holder is alive and waits for it to let go (as `presso unmount` waits for the
/// daemon). It watches both locks a holder takes: the [`LOCK_FILE`]'s (where there is one) and
/// the directory's. Opening creates and writes nothing; [`LockWatch::is_held`] takes each lock
/// for an instant when it is free.
#[derive(Debug)]
pub struct LockWatch {
    file: Option<File>,
    lock_file: PathBuf,
    directory: File,
}

impl LockWatch {
    /// Watches the pool directory `dir`; `NotFound` if there is no such directory.
    pub fn open(dir: &Path) -> io::Result<LockWatch> {
        let directory = File::open(dir)?;
        let lock_file = dir.join(LOCK_FILE);
        let file = match File::open(&lock_file) {
            Ok(file) => Some(file),
            Err(err) if err.kind() == io::ErrorKind::NotFound => None,
            Err(err) => return Err(err),
        };
        Ok(LockWatch {
            file,
            lock_file,
            directory,
        })
    }

    /// Whether someone holds the lock now: another process, or an open store of this one.
    pub fn is_held(&self) -> io::Result<bool> {
        for lock in self.locks() {
            match flock(lock, libc::LOCK_EX | libc::LOCK_NB) {
                Ok(()) => flock(lock, libc::LOCK_UN)?,
                Err(err) if err.raw_os_error() == Some(libc::EWOULDBLOCK) => return Ok(true),
                // No locks on directories here: the lock file's alone tells.
                Err(_) if std::ptr::eq(lock, &self.directory) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(false)
    }

    /// Blocks until no one holds the lock (a holding process lets go when it exits, however it
    /// exits).
    pub fn wait_released(&self) -> io::Result<()> {
        for lock in self.locks() {
            match flock(lock, libc::LOCK_EX) {
                Ok(()) => flock(lock, libc::LOCK_UN)?,
                Err(_) if std::ptr::eq(lock, &self.directory) => {}
                Err(err) => return Err(err),
            }
        }
        Ok(())
    }

    /// The process holding the lock, if it can be told: the one whose pid the lock file holds
    /// (written by each holder, best effort), if it is alive and has the lock file open; else
    /// (the lock file deleted, say) the one the kernel names as holding the directory's lock.
    pub fn holder(&self) -> Option<HolderProcess> {
        self.file
            .as_ref()
            .and_then(read_pid)
            .and_then(|pid| HolderProcess::find(pid, &self.lock_file))
            .or_else(|| HolderProcess::find_by_directory_lock(&self.directory))
    }

    fn locks(&self) -> impl Iterator<Item = &File> {
        self.file.iter().chain([&self.directory])
    }
}

/// `flock(2)` on `file`, retried when a signal interrupts it.
fn flock(file: &File, operation: libc::c_int) -> io::Result<()> {
    loop {
        // SAFETY: `file` owns an open descriptor for the whole call; flock takes no pointers.
        if unsafe { libc::flock(file.as_raw_fd(), operation) } == 0 {
            return Ok(());
        }
        let err = io::Error::last_os_error();
        if err.raw_os_error() != Some(libc::EINTR) {
            return Err(err);
        }
    }
}

/// The process id written in a lock file, if it holds one.
fn read_pid(file: &File) -> Option<u32> {
    let mut buf = [0u8; 16];
    let mut n = 0;
    while n < buf.len() {
        match file.read_at(&mut buf[n..], n as u64) {
            Ok(0) => break,
            Ok(k) => n += k,
            Err(e) if e.kind() == io::ErrorKind::Interrupted => continue,
            Err(_) => return None,
        }
    }
    std::str::from_utf8(&buf[..n]).ok()?.trim().parse().ok()
}

/// File name of segment `number`.
pub fn segment_file_name(number: u64) -> String {
    format!("seg-{number}.dat")
}

/// The number in a segment file name, or `None` if `name` is not one (canonical decimal only).
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("seg-")?.strip_suffix(".dat")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    let n: u64 = digits.parse().ok()?;
    (n.to_string() == digits).then_some(n)
}
