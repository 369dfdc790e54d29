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
use std::fs::{File, OpenOptions};
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::path::PathBuf;
use std::sync::{Arc, Mutex, Weak};

use bytes::Bytes;
use presso_store::io::{parse_segment_file_name, segment_file_name};
use presso_store::{DirLock, FsDir, LockError, SegmentRange, Storage, StorageDir};

/// Name of the pool header file, and of the object holding it.
const HEADER: &str = presso_store::header::POOL_FILE;

use crate::{ObjectError, Objects};

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

/// Size of the blocks the read cache keeps, by default.
pub const CACHE_BLOCK: u64 = 1 << 20;

/// Bytes of uploaded segments read recently, in whole aligned blocks, up to a budget, the least
/// recently used dropped first.
struct BlockCache {
    block: u64,
    blocks: HashMap<(u64, u64), (Bytes, u64)>,
    bytes: u64,
    budget: u64,
    clock: u64,
}

impl BlockCache {
    fn get(&mut self, segment: u64, block: u64) -> Option<Bytes> {
        self.clock += 1;
        let clock = self.clock;
        self.blocks.get_mut(&(segment, block)).map(|(b, used)| {
            *used = clock;
            b.clone()
        })
    }

    fn put(&mut self, segment: u64, block: u64, bytes: Bytes) {
        if (bytes.len() as u64) > self.budget {
            return;
        }
        self.clock += 1;
        self.bytes += bytes.len() as u64;
        if let Some((old, _)) = self.blocks.insert((segment, block), (bytes, self.clock)) {
            self.bytes -= old.len() as u64;
        }
        while self.bytes > self.budget {
            let Some(&oldest) = self
                .blocks
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k)
            else {
                break;
            };
            if let Some((b, _)) = self.blocks.remove(&oldest) {
                self.bytes -= b.len() as u64;
            }
        }
    }

    /// Drops the blocks of `segment` that reach past `len`.
    fn forget_from(&mut self, segment: u64, len: u64) {
        let gone: Vec<(u64, u64)> = self
            .blocks
            .keys()
            .filter(|&&(s, b)| s == segment && (b + 1) * self.block > len)
            .copied()
            .collect();
        for key in gone {
            if let Some((b, _)) = self.blocks.remove(&key) {
                self.bytes -= b.len() as u64;
            }
        }
    }
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
            cache: Arc::new(Mutex::new(BlockCache {
                block: CACHE_BLOCK,
                blocks: HashMap::new(),
                bytes: 0,
                budget: cache_bytes,
                clock: 0,
            })),
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
        let mut names = self.local.list()?;
        for (name, _) in self.objects.list().map_err(io_error)? {
            if name == HEADER {
                names.push(name);
                continue;
            }
            let number = name
                .strip_prefix("seg-")
                .and_then(|r| r.split_once('/'))
                .and_then(|(n, _)| n.parse::<u64>().ok());
            if let Some(n) = number {
                let file = segment_file_name(n);
                if !names.contains(&file) {
                    names.push(file);
                }
            }
        }
        Ok(names)
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

struct SegState {
    /// Bytes from `uploaded` on, at their own offsets; `None` for another client's segment.
    staging: Option<File>,
    /// Objects (start, length), tiling `0..uploaded`.
    parts: Vec<(u64, u64)>,
    uploaded: u64,
}

impl SegState {
    /// The length known without asking the object store.
    fn len(&self) -> io::Result<u64> {
        match &self.staging {
            Some(f) => Ok(f.metadata()?.len().max(self.uploaded)),
            None => Ok(self.uploaded),
        }
    }

    /// The staging file, which only this client's segments have.
    fn staging(&self, number: u64) -> io::Result<&File> {
        self.staging.as_ref().ok_or_else(|| {
            io::Error::new(
                io::ErrorKind::PermissionDenied,
                format!("segment {number} is another client's and is only read"),
            )
        })
    }
}

/// The objects of segment `number`: (start, length), ascending.
fn list_parts(objects: &Objects, number: u64) -> io::Result<Vec<(u64, u64)>> {
    let prefix = format!("seg-{number}/");
    let mut parts: Vec<(u64, u64)> = objects
        .list_under(&format!("seg-{number}"))
        .map_err(io_error)?
        .into_iter()
        .filter_map(|(name, size)| Some((name.strip_prefix(&prefix)?.parse().ok()?, size)))
        .collect();
    parts.sort_unstable();
    Ok(parts)
}

/// Where the objects `parts` of segment `number` end, checking that they tile it from 0.
fn tiled_end(number: u64, parts: &[(u64, u64)]) -> io::Result<u64> {
    let mut end = 0;
    for &(start, len) in parts {
        if start != end {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "segment {number}: its objects end at {end} and the next begins at {start}"
                ),
            ));
        }
        end += len;
    }
    Ok(end)
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

/// One segment: objects for its synced bytes, a staging file for the rest.
pub struct ObjectSegment {
    number: u64,
    objects: Arc<Objects>,
    cache: Arc<Mutex<BlockCache>>,
    state: Mutex<SegState>,
}

impl ObjectSegment {
    fn state(&self) -> io::Result<std::sync::MutexGuard<'_, SegState>> {
        self.state
            .lock()
            .map_err(|_| io::Error::other("segment lock poisoned"))
    }

    /// Lists another client's segment's objects again, to learn of the ones it uploaded since.
    fn refresh(&self, st: &mut SegState) -> io::Result<()> {
        let parts = list_parts(&self.objects, self.number)?;
        let uploaded = tiled_end(self.number, &parts)?;
        if uploaded > st.uploaded {
            st.parts = parts;
            st.uploaded = uploaded;
        }
        Ok(())
    }

    /// Reads `buf.len()` bytes at `offset` straight from the objects (all below `uploaded`).
    fn read_objects(&self, parts: &[(u64, u64)], buf: &mut [u8], offset: u64) -> io::Result<()> {
        let end = offset + buf.len() as u64;
        for &(start, len) in parts {
            let (a, b) = (offset.max(start), end.min(start + len));
            if a >= b {
                continue;
            }
            let got = self
                .objects
                .get_range(&part_name(self.number, start), a - start..b - start)
                .map_err(io_error)?;
            buf[(a - offset) as usize..(b - offset) as usize].copy_from_slice(&got);
        }
        Ok(())
    }

    /// [`ObjectSegment::read_objects`] through the cache: whole blocks below `uploaded` come
    /// from it or are fetched whole into it; the block `uploaded` cuts is read directly.
    fn read_cached(
        &self,
        parts: &[(u64, u64)],
        uploaded: u64,
        buf: &mut [u8],
        offset: u64,
    ) -> io::Result<()> {
        let size = self.cache.lock().map(|c| c.block).unwrap_or(CACHE_BLOCK);
        let end = offset + buf.len() as u64;
        let mut at = offset;
        while at < end {
            let block = at / size;
            let (block_start, block_end) = (block * size, (block + 1) * size);
            let upto = end.min(block_end);
            let dst = &mut buf[(at - offset) as usize..(upto - offset) as usize];
            if block_end > uploaded {
                self.read_objects(parts, dst, at)?;
            } else {
                let cached = self
                    .cache
                    .lock()
                    .ok()
                    .and_then(|mut c| c.get(self.number, block));
                let bytes = match cached {
                    Some(b) => b,
                    None => {
                        let mut whole = vec![0u8; size as usize];
                        self.read_objects(parts, &mut whole, block_start)?;
                        let whole = Bytes::from(whole);
                        if let Ok(mut c) = self.cache.lock() {
                            c.put(self.number, block, whole.clone());
                        }
                        whole
                    }
                };
                dst.copy_from_slice(
                    &bytes[(at - block_start) as usize..(upto - block_start) as usize],
                );
            }
            at = upto;
        }
        Ok(())
    }
}

impl Storage for ObjectSegment {
    fn len(&self) -> io::Result<u64> {
        let mut st = self.state()?;
        if st.staging.is_none() {
            self.refresh(&mut st)?;
        }
        st.len()
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        let mut st = self.state()?;
        let end = offset + buf.len() as u64;
        if end > st.len()? && st.staging.is_none() {
            self.refresh(&mut st)?;
        }
        if end > st.len()? {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        let split = st.uploaded.clamp(offset, end);
        let (from_objects, from_staging) = buf.split_at_mut((split - offset) as usize);
        if !from_staging.is_empty() {
            st.staging(self.number)?
                .read_exact_at(from_staging, split)?;
        }
        let (parts, uploaded) = (st.parts.clone(), st.uploaded);
        drop(st);
        if !from_objects.is_empty() {
            self.read_cached(&parts, uploaded, from_objects, offset)?;
        }
        Ok(())
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        let st = self.state()?;
        if offset < st.uploaded {
            return Err(io::Error::new(
                io::ErrorKind::InvalidInput,
                format!(
                    "segment {}: bytes below {} are in the object store and cannot be written again",
                    self.number, st.uploaded
                ),
            ));
        }
        st.staging(self.number)?.write_all_at(data, offset)
    }

    fn sync(&self) -> io::Result<()> {
        let mut st = self.state()?;
        let len = st.len()?;
        if len == st.uploaded {
            return Ok(());
        }
        let start = st.uploaded;
        let mut bytes = vec![0u8; (len - start) as usize];
        st.staging(self.number)?.read_exact_at(&mut bytes, start)?;
        self.objects
            .put(&part_name(self.number, start), Bytes::from(bytes))
            .map_err(io_error)?;
        st.parts.push((start, len - start));
        st.uploaded = len;
        // The staged bytes are in the object store now: give their local space back.
        punch_hole(st.staging(self.number)?, start, len - start);
        Ok(())
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        let mut st = self.state()?;
        st.staging(self.number)?;
        if len < st.uploaded {
            if let Ok(mut cache) = self.cache.lock() {
                cache.forget_from(self.number, len);
            }
            // Objects wholly past the new end go; the one the end cuts is replaced by its kept
            // part (uploaded before the old one's tail is dropped, so no byte below `len` is
            // ever missing).
            let mut kept = Vec::new();
            for &(start, size) in &st.parts.clone() {
                if start >= len {
                    self.objects
                        .delete(&part_name(self.number, start))
                        .map_err(io_error)?;
                } else if start + size > len {
                    let head = self
                        .objects
                        .get_range(&part_name(self.number, start), 0..len - start)
                        .map_err(io_error)?;
                    self.objects
                        .put(&part_name(self.number, start), head)
                        .map_err(io_error)?;
                    kept.push((start, len - start));
                } else {
                    kept.push((start, size));
                }
            }
            st.parts = kept;
            st.uploaded = len;
        }
        st.staging(self.number)?.set_len(len)
    }
}

/// Frees the local space of `len` bytes at `offset` of `file`, keeping its length. A file
/// system that cannot punch holes keeps the bytes, which is only a cost in space.
fn punch_hole(file: &File, offset: u64, len: u64) {
    // SAFETY: fallocate only reads its arguments; the descriptor is valid while `file` is.
    unsafe {
        libc::fallocate(
            file.as_raw_fd(),
            libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            offset as libc::off_t,
            len as libc::off_t,
        );
    }
}
