//! A pool directory whose segments live in an object store ([`ObjectDir`], a
//! [`StorageDir`]): the store's segment files, appended to and synced as on a disk, become
//! immutable objects, with a local staging area for the bytes not uploaded yet.
//!
//! Segment `N` is the objects `seg-N/<START>` (START: the byte offset of the object's first byte
//! in the segment, 20 decimal digits, so names sort by offset), which tile `0..uploaded` without
//! gaps, plus a local staging file `seg-N.dat` holding the bytes from `uploaded` to the end at
//! their own offsets (the part below `uploaded` is a hole).
//!
//! - A write goes to the staging file; bytes below `uploaded` cannot be written again.
//! - [`Storage::sync`] uploads the staged bytes as one new object and returns when the object
//!   store has it: that is the durability point, what fsync waits for. Then the staged bytes'
//!   space is given back (a hole is punched), so the staging area holds only what is not yet
//!   uploaded.
//! - A read takes bytes below `uploaded` from the objects (ranged GETs of whole 1 MiB blocks,
//!   kept in a bounded in-memory cache shared by the directory's segments), the rest from
//!   staging.
//! - Truncating below `uploaded` (recovery cutting an uncommitted tail that was already synced)
//!   deletes the objects past the new end and uploads the kept part of the one it cuts.
//! - After a `kill -9` of the process the staging file is still there (the page cache keeps it)
//!   and is found again at the next open; after a power loss its unsynced tail may be lost or
//!   torn, which the store's recovery cuts back to the committed end, as on a disk.
//!
//! The pool header is an object too (`presso.pool`, written once when the pool is created), so
//! the object store alone says which pool it holds; the lock and the staging files stay in the
//! local directory, which is each client's own.
//!
//! # Shared pools
//!
//! Several clients may use one pool, each with its own local directory and its own range of
//! segment numbers ([`ObjectDir::owning`]). A segment outside the range is another client's: it
//! is opened read-only, with no staging file, and its objects are listed again when a read
//! reaches past the end seen so far. Each mount of a shared pool is a new client with a fresh
//! range, so nothing ever cuts or rewrites another client's objects, and the bytes of a listed
//! object never change: cached blocks of other clients' segments cannot go stale.

use std::collections::HashMap;
use std::fs::OpenOptions;
use std::io;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use presso_store::io::{parse_segment_file_name, segment_file_name};
use presso_store::{DirLock, FsDir, LockError, SegmentRange, Storage, StorageDir};

/// Name of the pool header file, and of the object holding it.
const HEADER: &str = presso_store::header::POOL_FILE;

use crate::{ObjectError, Objects};

mod cache;
mod segment;

use cache::BlockCache;
pub use cache::CACHE_BLOCK;
pub use segment::ObjectSegment;
use segment::{list_parts, tiled_end, SegState};

/// The name of the object holding segment `number`'s bytes from `start`.
fn part_name(number: u64, start: u64) -> String {
    format!("seg-{number}/{start:020}")
}

fn io_error(e: ObjectError) -> io::Error {
    let kind = match e {
        ObjectError::NotFound(_) => io::ErrorKind::NotFound,
        ObjectError::Truncated { .. } => io::ErrorKind::UnexpectedEof,
        ObjectError::Denied(_) => io::ErrorKind::PermissionDenied,
        ObjectError::Config(_) => io::ErrorKind::InvalidInput,
        ObjectError::Unavailable(_) => io::ErrorKind::Other,
    };
    io::Error::new(kind, e)
}

/// A pool directory with its segments in an object store and everything else, staging
/// included, in a local directory.
pub struct ObjectDir {
    local: FsDir,
    objects: Arc<Objects>,
    cache: Arc<Mutex<BlockCache>>,
    /// Open segments, so that every opener of a segment shares one state.
    open: Mutex<HashMap<u64, Weak<ObjectSegment>>>,
    /// Segments this directory writes; the others are read-only.
    own: SegmentRange,
}

impl ObjectDir {
    /// A pool directory over `local` (which must exist) and `objects`, keeping up to
    /// `cache_bytes` of recently read segment bytes in memory.
    pub fn new(local: FsDir, objects: Arc<Objects>, cache_bytes: u64) -> Self {
        ObjectDir {
            local,
            objects,
            cache: Arc::new(Mutex::new(BlockCache::new(cache_bytes))),
            open: Mutex::new(HashMap::new()),
            own: SegmentRange::ALL,
        }
    }

    /// The same as one client of a shared pool: segments outside `own` are other clients',
    /// opened read-only (see the module docs).
    pub fn owning(mut self, own: SegmentRange) -> Self {
        self.own = own;
        self
    }

    /// The same with cache blocks of `block` bytes instead of [`CACHE_BLOCK`] (tests use small
    /// ones so that small segments use the cache too).
    pub fn with_cache_block(self, block: u64) -> Self {
        if let Ok(mut c) = self.cache.lock() {
            c.block = block.max(1);
        }
        self
    }

    fn staging(&self, number: u64) -> PathBuf {
        self.local.path().join(segment_file_name(number))
    }

    fn parts(&self, number: u64) -> io::Result<Vec<(u64, u64)>> {
        list_parts(&self.objects, number)
    }

    fn segment(&self, number: u64, create: bool) -> io::Result<Arc<dyn Storage>> {
        let mut open = self
            .open
            .lock()
            .map_err(|_| io::Error::other("lock poisoned"))?;
        if let Some(seg) = open.get(&number).and_then(Weak::upgrade) {
            if create {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            return Ok(seg);
        }
        let parts = self.parts(number)?;
        let foreign = !self.own.contains(number);
        let path = self.staging(number);
        let staging = if foreign {
            if create {
                return Err(io::Error::new(
                    io::ErrorKind::PermissionDenied,
                    format!("segment {number} is another client's"),
                ));
            }
            if parts.is_empty() {
                return Err(io::ErrorKind::NotFound.into());
            }
            None
        } else if create {
            if !parts.is_empty() {
                return Err(io::ErrorKind::AlreadyExists.into());
            }
            Some(
                OpenOptions::new()
                    .read(true)
                    .write(true)
                    .create_new(true)
                    .open(&path)?,
            )
        } else {
            Some(
                match OpenOptions::new().read(true).write(true).open(&path) {
                    Ok(f) => f,
                    Err(e) if e.kind() == io::ErrorKind::NotFound && !parts.is_empty() => {
                        OpenOptions::new()
                            .read(true)
                            .write(true)
                            .create(true)
                            .truncate(false)
                            .open(&path)?
                    }
                    Err(e) => return Err(e),
                },
            )
        };
        let uploaded = tiled_end(number, &parts)?;
        let seg = Arc::new(ObjectSegment {
            number,
            objects: self.objects.clone(),
            cache: self.cache.clone(),
            state: Mutex::new(SegState {
                staging,
                parts,
                uploaded,
            }),
        });
        open.insert(number, Arc::downgrade(&seg));
        Ok(seg)
    }
}

impl StorageDir for ObjectDir {
    fn create(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        match parse_segment_file_name(name) {
            Some(n) => self.segment(n, true),
            None => self.local.create(name),
        }
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        if name == HEADER {
            let bytes = self.objects.get(HEADER).map_err(io_error)?;
            return Ok(Arc::new(Fixed(bytes)));
        }
        match parse_segment_file_name(name) {
            Some(n) => self.segment(n, false),
            None => self.local.open(name),
        }
    }

    fn list(&self) -> io::Result<Vec<String>> {
        // A set: a segment has many objects, and a staging file too while it is open.
        let mut names: std::collections::BTreeSet<String> =
            self.local.list()?.into_iter().collect();
        for (name, _) in self.objects.list().map_err(io_error)? {
            if name == HEADER {
                names.insert(name);
                continue;
            }
            let number = name
                .strip_prefix("seg-")
                .and_then(|r| r.split_once('/'))
                .and_then(|(n, _)| n.parse::<u64>().ok());
            if let Some(n) = number {
                names.insert(segment_file_name(n));
            }
        }
        Ok(names.into_iter().collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        if name == HEADER {
            return self.objects.delete(HEADER).map_err(io_error);
        }
        let Some(number) = parse_segment_file_name(name) else {
            return self.local.remove(name);
        };
        if let Ok(mut cache) = self.cache.lock() {
            cache.forget_from(number, 0);
        }
        for (start, _) in self.parts(number)? {
            self.objects
                .delete(&part_name(number, start))
                .map_err(io_error)?;
        }
        match std::fs::remove_file(self.staging(number)) {
            Err(e) if e.kind() != io::ErrorKind::NotFound => Err(e),
            _ => Ok(()),
        }
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        if to == HEADER {
            // The store writes the header to a temporary file and renames it into place: here
            // the place is an object, written once.
            match self.objects.size(HEADER) {
                Ok(_) => return Err(io::ErrorKind::AlreadyExists.into()),
                Err(ObjectError::NotFound(_)) => {}
                Err(e) => return Err(io_error(e)),
            }
            let bytes = std::fs::read(self.local.path().join(from))?;
            self.objects
                .put(HEADER, Bytes::from(bytes))
                .map_err(io_error)?;
            return self.local.remove(from);
        }
        if parse_segment_file_name(from).is_some() || parse_segment_file_name(to).is_some() {
            return Err(io::Error::new(
                io::ErrorKind::Unsupported,
                "segments in an object store are not renamed",
            ));
        }
        self.local.rename(from, to)
    }

    fn sync_dir(&self) -> io::Result<()> {
        self.local.sync_dir()
    }

    fn describe(&self) -> String {
        format!(
            "{} (segments in {})",
            self.local.describe(),
            self.objects.url()
        )
    }

    fn lock(&self) -> Result<DirLock, LockError> {
        self.local.lock()
    }

    fn space(&self) -> Option<(u64, u64)> {
        // An object store has no fixed size; the local staging area is what can run out.
        self.local.space()
    }
}

/// A small read-only file held in memory: the pool header read from its object.
struct Fixed(Bytes);

impl Storage for Fixed {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.len() as u64)
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let start = usize::try_from(offset).map_err(|_| io::ErrorKind::UnexpectedEof)?;
        let bytes = start
            .checked_add(buf.len())
            .and_then(|end| self.0.get(start..end))
            .ok_or(io::ErrorKind::UnexpectedEof)?;
        buf.copy_from_slice(bytes);
        Ok(())
    }

    fn write_at(&self, _: &[u8], _: u64) -> io::Result<()> {
        Err(read_only())
    }

    fn sync(&self) -> io::Result<()> {
        Ok(())
    }

    fn set_len(&self, _: u64) -> io::Result<()> {
        Err(read_only())
    }
}

fn read_only() -> io::Error {
    io::Error::new(
        io::ErrorKind::PermissionDenied,
        "the pool header in the object store is written once and never changed",
    )
}
