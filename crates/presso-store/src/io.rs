//! The storage the pool lives on, behind two small traits (after redb's `StorageBackend`):
//! [`Storage`] is one file addressed by position, [`StorageDir`] is the pool directory that creates,
//! opens, lists, renames and removes files by name (and segment files by number).
//!
//! [`FsDir`]/[`FsStorage`] use real files (`pread`/`pwrite` through `FileExt`, `fdatasync`);
//! [`crate::sim::SimDir`] simulates crashes, torn writes and I/O faults for tests.

use std::fs::{self, File, OpenOptions};
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::Arc;

use crate::segment::{parse_segment_file_name, segment_file_name};

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
    /// Writes all of `data` at `offset` (extending the file if needed). On error, any prefix of
    /// `data` may have been written.
    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()>;
    /// Makes every completed write and length change durable (`fdatasync`).
    fn sync(&self) -> io::Result<()>;
    /// Truncates or extends the file.
    fn set_len(&self, len: u64) -> io::Result<()>;
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

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.file.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        self.file.sync_data()
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
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
}
