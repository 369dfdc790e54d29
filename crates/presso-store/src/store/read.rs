//! Reading entries back: the location checked against the segment's appended entries, then the
//! envelope (and, unless the caller verifies it itself, the payload's CRC-32); damage is counted.

use super::*;

impl Store {
    /// Reads and verifies the entry at `loc`, returning its payload. A damaged entry is a
    /// [`StoreError::CorruptEntry`] naming segment and offset, and is counted.
    pub fn read(&self, loc: Location) -> Result<Vec<u8>> {
        self.read_entry(loc).map(|(payload, _)| payload)
    }

    /// [`Store::read`], also returning the entry's tag (the record it holds, if it says).
    pub fn read_entry(&self, loc: Location) -> Result<(Vec<u8>, Option<EntryTag>)> {
        self.read_entry_checking(loc, true)
    }

    /// [`Store::read_entry`] for a caller that verifies the payload itself, with a check at
    /// least as strong as a CRC-32 of the payload: the envelope header is checked as always (its
    /// magic, CRC-32 and format, the length against the location), the payload's CRC-32 is not,
    /// which saves a pass over every byte read. A damaged payload then fails the caller's check
    /// instead of this one, and is not counted here.
    ///
    /// The file layer reads records this way: a record frame carries a CRC-32 of its header and
    /// an XXH3-64 of its payload, which the metadata names too, so the envelope's CRC-32 covers
    /// nothing those two do not.
    pub fn read_entry_verified_by_caller(
        &self,
        loc: Location,
    ) -> Result<(Vec<u8>, Option<EntryTag>)> {
        self.read_entry_checking(loc, false)
    }

    fn read_entry_checking(
        &self,
        loc: Location,
        check_payload: bool,
    ) -> Result<(Vec<u8>, Option<EntryTag>)> {
        let bad = |reason| StoreError::BadLocation {
            segment: loc.segment,
            offset: loc.offset,
            len: loc.len,
            reason,
        };
        if loc.len > MAX_PAYLOAD_LEN {
            return Err(bad("payload length over the maximum"));
        }
        let seg = self.readable_segment(loc)?;
        let end = seg.end.load(Ordering::Acquire);
        if loc.offset < SEGMENT_HEADER_LEN || loc.offset.saturating_add(seg.entry_len(loc)) > end {
            return Err(bad("outside the segment's entries"));
        }
        let mut h = [0u8; ENTRY_HEADER_LEN];
        let h = &mut h[..seg.format.header_len()];
        seg.storage
            .read_at(h, loc.offset)
            .map_err(|e| io_error(&seg.name, loc.offset, "read", e))?;
        let header = decode_entry_header(h).map_err(|e| self.corrupt(loc, e.to_string()))?;
        if header.format != seg.format {
            return Err(self.corrupt(loc, "entry of another format than its segment's".into()));
        }
        if header.payload_len != loc.len {
            return Err(self.corrupt(
                loc,
                format!(
                    "entry holds {} payload bytes, the location says {}",
                    header.payload_len, loc.len
                ),
            ));
        }
        let at = loc.offset + seg.format.header_len() as u64;
        let payload = seg
            .storage
            .read_vec_at(loc.len as usize, at)
            .map_err(|e| io_error(&seg.name, at, "read", e))?;
        if check_payload && crc32fast::hash(&payload) != header.payload_crc {
            return Err(self.corrupt(loc, "payload CRC-32 mismatch".to_string()));
        }
        Ok((payload, header.tag))
    }

    fn corrupt(&self, loc: Location, reason: String) -> StoreError {
        self.corruptions.fetch_add(1, Ordering::Relaxed);
        StoreError::CorruptEntry {
            segment: loc.segment,
            offset: loc.offset,
            reason,
        }
    }
}
