//! Records in and out of the pool: storing a finished record (hole, inline, or a tagged entry
//! appended to the open segment) and reading a record back with every checksum verified.

use std::sync::atomic::Ordering;

use bytes::Bytes;
use parking_lot::RwLockWriteGuard;
use presso_codec::frame::{FrameBuf, FrameHeader};
use presso_codec::Encoded;
use presso_meta::RecordRef;
use presso_store::{EntryTag, Location, Store};

use super::{location, PendingFrame, Pool, INLINE_MAX};
use crate::error::{FsError, Result};

impl Pool {
    /// Stores record `index` of file `ino` (whose record size is `record_size`): `None` for a
    /// hole, an inline reference for a tiny frame, otherwise a reference to the frame appended
    /// to the open segment (durable only after the next commit), its entry tagged with the
    /// record and the number of the open group. Queue the op naming the frame before dropping
    /// the returned [`PendingFrame`], which keeps that group open (so the tag names the group
    /// the op commits in) and garbage collection from removing segments; and do not wait for a
    /// commit meanwhile.
    pub fn store_encoded(
        &self,
        encoded: &Encoded,
        ino: u64,
        index: u64,
        record_size: u32,
    ) -> (Result<Option<RecordRef>>, PendingFrame<'_>) {
        self.store_tagged(&encoded.frame, &encoded.header, ino, index, record_size)
    }

    fn store_tagged(
        &self,
        frame: &FrameBuf,
        header: &FrameHeader,
        ino: u64,
        index: u64,
        record_size: u32,
    ) -> (Result<Option<RecordRef>>, PendingFrame<'_>) {
        let gate = self.pending_frames.read();
        let group = self.txgs.hold();
        let tag = EntryTag {
            ino,
            index,
            txg: group.number(),
            record_size,
        };
        let stored = self.store_frame_parts(frame, header, &tag);
        (
            stored,
            PendingFrame {
                _gate: gate,
                _group: group,
            },
        )
    }

    /// Held by garbage collection while it decides which segments are empty and removes them:
    /// no frame is then between its append and the op that will name it.
    pub fn frames_settled(&self) -> RwLockWriteGuard<'_, ()> {
        self.pending_frames.write()
    }

    /// How many groups with frames moved by garbage collection have committed since the pool
    /// opened: a location looked up before this number changed may name a place a frame has
    /// left.
    pub fn moves_committed(&self) -> u64 {
        self.counters.moves_committed.load(Ordering::SeqCst)
    }

    /// Stores `data` at once, on the caller's thread, as an uncompressed frame: for the rare
    /// record whose op must be queued before an op the caller queues next (see the file layer's
    /// trim of bytes a crash left past a file's size). Returns the record like
    /// [`Pool::store_encoded`].
    pub fn store_raw(
        &self,
        data: &[u8],
        ino: u64,
        index: u64,
        record_size: u32,
    ) -> (Result<Option<RecordRef>>, PendingFrame<'_>) {
        let (frame, header) = presso_codec::frame::build_raw(&[data]);
        self.store_tagged(&FrameBuf::whole(frame), &header, ino, index, record_size)
    }

    fn store_frame_parts(
        &self,
        frame: &FrameBuf,
        header: &FrameHeader,
        tag: &EntryTag,
    ) -> Result<Option<RecordRef>> {
        if header.hole {
            self.counters.holes.fetch_add(1, Ordering::Relaxed);
            self.journal(frame, tag);
            return Ok(None);
        }
        let stored_len = frame.len() as u32;
        if frame.len() <= INLINE_MAX {
            self.counters.frames_inline.fetch_add(1, Ordering::Relaxed);
            self.journal(frame, tag);
            return Ok(Some(RecordRef {
                segment: 0,
                offset: 0,
                stored_len,
                logical_len: header.logical_len,
                codec: header.codec as u8,
                checksum: header.stored_hash,
                inline: Some(frame.contiguous().into_owned()),
            }));
        }
        let loc = self.append_frame(frame, tag)?;
        self.counters
            .frames_appended
            .fetch_add(1, Ordering::Relaxed);
        Ok(Some(RecordRef {
            segment: loc.segment,
            offset: loc.offset,
            stored_len,
            logical_len: header.logical_len,
            codec: header.codec as u8,
            checksum: header.stored_hash,
            inline: None,
        }))
    }

    /// Appends `frame` to the open segment in an entry tagged `tag`, written from the buffers
    /// that hold it.
    fn append_frame(&self, frame: &FrameBuf, tag: &EntryTag) -> presso_store::Result<Location> {
        self.store
            .append_parts(&frame.parts(), frame.crc32(), Some(tag))
    }

    /// Appends a tagged copy of a frame no record will name in a segment: a hole's (32 bytes)
    /// or an inline record's. Only `presso recover` reads it, so it is dead from the start
    /// (garbage collection reclaims it), and writing it is best effort.
    fn journal(&self, frame: &FrameBuf, tag: &EntryTag) {
        if let Ok(loc) = self.append_frame(frame, tag) {
            let _ = self.store.mark_dead(loc);
        }
    }

    /// Reads the frame `rec` refers to and checks it is the one the metadata recorded.
    pub fn read_frame(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Vec<u8>> {
        let read = self.read_checked_frame(ino, index, rec, EntryCheck::Store);
        self.counting_damage(read).map(|(frame, _, _)| frame)
    }

    /// [`Pool::read_frame`] with the tag its entry carries (`None` for inline frames and entries
    /// written before entries were tagged).
    pub fn read_frame_tagged(
        &self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
    ) -> Result<(Vec<u8>, Option<EntryTag>)> {
        let read = self.read_checked_frame(ino, index, rec, EntryCheck::Store);
        self.counting_damage(read)
            .map(|(frame, _, tag)| (frame, tag))
    }

    /// `result`, having counted its error in the pool's corruptions if it is damage: anything
    /// the store refuses but a host I/O error (a damaged entry, a missing segment, a location
    /// outside it), a frame that is not the one the metadata names, one that does not decode.
    pub(crate) fn counting_damage<T>(&self, result: Result<T>) -> Result<T> {
        fn is_damage(e: &FsError) -> bool {
            match e {
                FsError::Store(presso_store::StoreError::Io { .. }) => false,
                FsError::Store(_) | FsError::Misdirected { .. } | FsError::CorruptFrame { .. } => {
                    true
                }
                // A load the record cache shared between its callers.
                FsError::Shared(e) => is_damage(e),
                _ => false,
            }
        }
        if result.as_ref().is_err_and(is_damage) {
            self.counters.corruptions.fetch_add(1, Ordering::Relaxed);
        }
        result
    }

    /// [`Pool::read_frame`] with the frame's parsed header, so decoding does not parse it again;
    /// damage is left to the caller to count.
    fn read_checked_frame(
        &self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
        check: EntryCheck,
    ) -> Result<(Vec<u8>, FrameHeader, Option<EntryTag>)> {
        let read = match check {
            EntryCheck::Store => Store::read_entry,
            EntryCheck::Decoder => Store::read_entry_verified_by_caller,
        };
        let (frame, tag) = match &rec.inline {
            Some(frame) => (frame.clone(), None),
            None => read(&self.store, location(rec))?,
        };
        match FrameHeader::parse(&frame) {
            Ok(h) if h.stored_hash == rec.checksum && h.logical_len == rec.logical_len => {
                Ok((frame, h, tag))
            }
            Ok(_) => Err(FsError::Misdirected {
                ino,
                index,
                segment: rec.segment,
                offset: rec.offset,
            }),
            Err(source) => Err(FsError::CorruptFrame {
                ino,
                index,
                segment: rec.segment,
                offset: rec.offset,
                source,
            }),
        }
    }

    /// Reads and decodes record `index` of `ino` from `rec`, verifying it: the frame's header
    /// CRC-32, its stored hash against the metadata's, the XXH3-64 of its payload, and the
    /// CRC-32 of what it decodes to. The store's CRC-32 of the entry's payload is left out: it
    /// covers the same bytes as the first two, more weakly (one pass fewer over every record
    /// read). A record stored as-is is a view into the frame read from the store, not a copy.
    pub fn read_record(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Bytes> {
        self.counting_damage(self.read_record_uncounted(ino, index, rec))
    }

    /// [`Pool::read_record`] without counting a failure as damage, for reads at a place that
    /// may be out of date: readahead (best effort; the reader's own read counts real damage),
    /// and a first attempt at a place garbage collection may have moved the frame from, which
    /// the caller counts with [`Pool::counting_damage`] once the frame turns out not to have
    /// moved.
    pub(crate) fn read_record_uncounted(
        &self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
    ) -> Result<Bytes> {
        self.read_record_checking(ino, index, rec, EntryCheck::Decoder)
    }

    /// [`Pool::read_record`] with the store's CRC-32 of the entry checked too: for the scrub,
    /// which checks every checksum the pool holds.
    pub fn read_record_checking_all(&self, ino: u64, index: u64, rec: &RecordRef) -> Result<Bytes> {
        let read = self.read_record_checking(ino, index, rec, EntryCheck::Store);
        self.counting_damage(read)
    }

    fn read_record_checking(
        &self,
        ino: u64,
        index: u64,
        rec: &RecordRef,
        check: EntryCheck,
    ) -> Result<Bytes> {
        let cpu = presso_codec::stats::thread_cpu_time();
        let (frame, header, _) = self.read_checked_frame(ino, index, rec, check)?;
        let data = self
            .engine
            .decode_parsed_shared(&header, Bytes::from(frame))
            .map_err(|source| FsError::CorruptFrame {
                ino,
                index,
                segment: rec.segment,
                offset: rec.offset,
                source,
            })?;
        self.counters.records_read.fetch_add(1, Ordering::Relaxed);
        self.counters
            .decoded_bytes
            .fetch_add(data.len() as u64, Ordering::Relaxed);
        let spent = presso_codec::stats::thread_cpu_time().saturating_sub(cpu);
        self.counters
            .decode_cpu_ns
            .fetch_add(spent.as_nanos() as u64, Ordering::Relaxed);
        Ok(data)
    }

    /// The compression and decoding work done since the pool opened.
    pub fn work(&self) -> crate::lifetime::Work {
        let load = |a: &std::sync::atomic::AtomicU64| a.load(Ordering::Relaxed);
        crate::lifetime::Work {
            records_decoded: load(&self.counters.records_read),
            decoded_bytes: load(&self.counters.decoded_bytes),
            decode_cpu_ns: load(&self.counters.decode_cpu_ns),
            ..crate::lifetime::Work::of_engine(&self.engine.stats())
        }
    }
}

/// Which check covers the payload of a record's entry: the store's CRC-32, or the frame's own
/// checksums, verified as the frame is decoded.
#[derive(Debug, Clone, Copy)]
enum EntryCheck {
    Store,
    Decoder,
}
