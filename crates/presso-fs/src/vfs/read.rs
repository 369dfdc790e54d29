//! The read path: overlay pieces, record map lookups, the decompressed-record cache,
//! readahead and SEEK_DATA/SEEK_HOLE.

use super::*;

impl Vfs {
    // ---- read path

    /// Reads up to `size` bytes at `offset`.
    pub fn read(&self, ino: u64, offset: u64, size: u32) -> Result<Bytes> {
        let node = self.node(ino)?;
        enum Piece {
            Bytes(Bytes),
            Ref(Option<RecordRef>),
            Lookup,
        }
        // A shared pool's records change under other clients: it keeps no locations.
        let remember = self.pool.client().is_none();
        let (end, rs, pieces, ahead, epoch) = {
            let mut st = node.state.lock();
            st.recent.follow_moves(self.pool.moves_committed());
            let end = offset.saturating_add(u64::from(size)).min(st.size);
            if offset >= end {
                return Ok(Bytes::new());
            }
            let rs = st.recordsize;
            let first = offset / rs;
            let last = (end - 1) / rs;
            let mut pieces = Vec::with_capacity((last - first + 1) as usize);
            for index in first..=last {
                self.read_base(ino, &mut st, index)?;
                pieces.push(match st.overlay.get(&index) {
                    Some(Slot::Dirty { buf, .. }) => Piece::Bytes(Bytes::copy_from_slice(buf)),
                    Some(Slot::Compressing { data, .. }) => Piece::Bytes(data.clone()),
                    Some(Slot::Stored { rec, .. }) => Piece::Ref(rec.clone()),
                    None if st.is_cleared(index) => Piece::Ref(None),
                    None => match st.recent.get(index) {
                        Some(rec) if remember => Piece::Ref(Some(rec.clone())),
                        _ => Piece::Lookup,
                    },
                });
            }
            let sequential = st.last_read_end == offset || offset == 0;
            st.last_read_end = end;
            let window = self.config.readahead as u64;
            // Extended once half the window is read, so that the metadata is asked once per half
            // window rather than once per request.
            let ahead = if sequential && window > 0 && st.readahead_until <= last + 1 + window / 2 {
                let from = (last + 1).max(st.readahead_until);
                let to = (last + 1 + window)
                    .min(st.size.div_ceil(rs))
                    .min(st.cleared_from());
                if from < to {
                    st.readahead_until = to;
                    Some(from..to)
                } else {
                    None
                }
            } else {
                None
            };
            (end, rs, pieces, ahead, st.recent.epoch())
        };
        let first = offset / rs;
        let mut looked_up: HashMap<u64, RecordRef> = HashMap::new();
        if pieces.iter().any(|p| matches!(p, Piece::Lookup)) {
            let last = first + pieces.len() as u64;
            looked_up = self.pool.records(ino, first..last)?.into_iter().collect();
        }
        let ahead = ahead.map(|range| self.read_ahead(ino, range));
        if remember && (!looked_up.is_empty() || ahead.is_some()) {
            let found = looked_up.iter().map(|(i, r)| (*i, r.clone()));
            let mut st = node.state.lock();
            let moves = self.pool.moves_committed();
            st.recent
                .keep(epoch, moves, found.chain(ahead.into_iter().flatten()));
        }
        let mut chunks: Vec<(ReadSource, usize, usize)> = Vec::with_capacity(pieces.len());
        for (i, piece) in pieces.into_iter().enumerate() {
            let index = first + i as u64;
            let start = index * rs;
            let from = offset.max(start) - start;
            let to = end.min(start + rs) - start;
            let source = match piece {
                Piece::Bytes(b) => ReadSource::Bytes(b),
                Piece::Ref(None) => ReadSource::Zeros,
                Piece::Ref(Some(rec)) => ReadSource::Bytes(self.load(ino, index, &rec)?),
                Piece::Lookup => match looked_up.get(&index) {
                    Some(rec) => ReadSource::Bytes(self.load(ino, index, rec)?),
                    None => ReadSource::Zeros,
                },
            };
            chunks.push((source, from as usize, to as usize));
        }
        self.traffic.read.fetch_add(end - offset, Ordering::Relaxed);
        if let [(ReadSource::Bytes(data), from, to)] = chunks.as_slice() {
            if *to <= data.len() {
                return Ok(data.slice(*from..*to));
            }
        }
        let mut out = Vec::with_capacity((end - offset) as usize);
        for (source, from, to) in chunks {
            let bytes: &[u8] = match &source {
                ReadSource::Bytes(b) => b,
                ReadSource::Zeros => &[],
            };
            // Past a record's stored length (a file extended by truncate, a hole) the bytes are
            // zeros; the read may start beyond that length.
            let have = bytes.len().clamp(from, to);
            out.extend_from_slice(bytes.get(from..have).unwrap_or_default());
            out.resize(out.len() + (to - have), 0);
        }
        Ok(Bytes::from(out))
    }

    /// Decoded record `index` of `ino` via the cache; a frame moved by garbage collection is
    /// looked up again once. Only the same frame moved: a record rewritten since `rec` (or
    /// `rec` itself newer than what is committed, from the overlay) is another version, and
    /// answering with it would hand out, or write back, bytes that are not the record's. A
    /// failed read at the place the frame has left is not damage, and is not counted as such.
    pub(super) fn load(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Bytes> {
        if rec.inline.is_some() {
            return self.pool.read_record(ino, index, rec);
        }
        let first = self.cache.get_or_load((rec.segment, rec.offset), || {
            self.pool.read_record_uncounted(ino, index, rec)
        });
        match first {
            Ok(data) => Ok(data),
            Err(first) => match self.pool.record(ino, index)? {
                Some(now) if now != *rec && moved(rec, &now) => {
                    self.cache.get_or_load((now.segment, now.offset), || {
                        self.pool.read_record(ino, index, &now)
                    })
                }
                _ => self.pool.counting_damage(Err(first)),
            },
        }
    }

    /// Queues the records of `range` for the readahead threads; returns their locations (none
    /// when the lookup failed: readahead is best effort).
    pub(super) fn read_ahead(
        &self,
        ino: u64,
        range: std::ops::Range<u64>,
    ) -> Vec<(u64, RecordRef)> {
        let Ok(records) = self.pool.records(ino, range) else {
            return Vec::new();
        };
        for (index, rec) in &records {
            if rec.inline.is_none()
                && !self.cache.contains((rec.segment, rec.offset))
                && self.readahead.try_send((ino, *index, rec.clone())).is_err()
            {
                break;
            }
        }
        records
    }

    /// `lseek` with `SEEK_DATA` or `SEEK_HOLE`: holes are whole records that are absent or all
    /// zeros.
    pub fn seek(&self, ino: u64, offset: u64, whence: i32) -> Result<u64> {
        let node = self.node(ino)?;
        let (size, rs, overlay, cleared): (u64, u64, BTreeMap<u64, bool>, u64) = {
            let st = node.state.lock();
            let overlay = st
                .overlay
                .iter()
                .map(|(i, s)| (*i, !matches!(s, Slot::Stored { rec: None, .. })))
                .collect();
            let cleared = st.cleared_from();
            (st.size, st.recordsize, overlay, cleared)
        };
        if offset >= size {
            return Err(FsError::NoData);
        }
        let first = offset / rs;
        let mut data: BTreeMap<u64, bool> = self
            .pool
            .records(ino, first..cleared.max(first))?
            .into_iter()
            .map(|(i, _)| (i, true))
            .collect();
        data.extend(overlay.range(first..));
        let has_data = |i: u64| data.get(&i).copied().unwrap_or(false);
        let records = size.div_ceil(rs);
        match whence {
            libc::SEEK_DATA => {
                let found = data.iter().find(|(i, d)| **i >= first && **d);
                match found {
                    Some((i, _)) if *i < records => Ok(offset.max(i * rs)),
                    _ => Err(FsError::NoData),
                }
            }
            libc::SEEK_HOLE => {
                let mut i = first;
                while i < records && has_data(i) {
                    i += 1;
                }
                Ok(offset.max(i * rs).min(size))
            }
            _ => Err(FsError::BadArgument(
                "whence must be SEEK_DATA or SEEK_HOLE",
            )),
        }
    }
}

enum ReadSource {
    Bytes(Bytes),
    Zeros,
}

/// Whether `now` is the frame of `was` at another place (what a garbage collection move
/// changes), rather than another version of the record.
fn moved(was: &RecordRef, now: &RecordRef) -> bool {
    now.inline.is_none()
        && (now.checksum, now.stored_len, now.logical_len, now.codec)
            == (was.checksum, was.stored_len, was.logical_len, was.codec)
}
