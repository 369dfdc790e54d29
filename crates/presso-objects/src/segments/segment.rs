//! One segment of an object directory: its uploaded objects, its staging file (for this
//! client's own segments), reads through the cache, uploads at sync, and truncation.

use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::{Arc, Mutex};

use bytes::Bytes;
use presso_store::Storage;

use super::cache::{BlockCache, CACHE_BLOCK};
use super::{io_error, part_name};
use crate::Objects;

pub(super) struct SegState {
    /// Bytes from `uploaded` on, at their own offsets; `None` for another client's segment.
    pub(super) staging: Option<File>,
    /// Objects (start, length), tiling `0..uploaded`.
    pub(super) parts: Vec<(u64, u64)>,
    pub(super) uploaded: u64,
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
pub(super) fn list_parts(objects: &Objects, number: u64) -> io::Result<Vec<(u64, u64)>> {
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
pub(super) fn tiled_end(number: u64, parts: &[(u64, u64)]) -> io::Result<u64> {
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

/// One segment: objects for its synced bytes, a staging file for the rest.
pub struct ObjectSegment {
    pub(super) number: u64,
    pub(super) objects: Arc<Objects>,
    pub(super) cache: Arc<Mutex<BlockCache>>,
    pub(super) state: Mutex<SegState>,
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
