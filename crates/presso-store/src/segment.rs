//! Segment files `seg-<number>.dat`: a segment header, then entries appended back to back.
//! Little-endian throughout.
//!
//! Segment header (written and synced when the segment is created, before any entry):
//! ```text
//! offset size field
//!  0      4   magic            b"PSEG"
//!  4      2   version          u16, SEGMENT_VERSION (2; 1 in older pools)
//!  6      2   reserved         0
//!  8      8   segment number   u64, equal to the number in the file name
//! 16     16   pool uuid        the pool header's uuid
//! 32      4   CRC-32           u32, CRC-32 of bytes 0..32
//! 36      4   reserved         0
//! 40          first entry
//! ```
//!
//! Entries follow the header back to back, in the envelope format the header's version names
//! (see [`crate::envelope`]; 1: format 1, 2: format 2).
//!
//! docs/design.md mirrors these maps.

use std::io;

pub use crate::envelope::{
    decode_entry, decode_entry_header, decode_tagged_entry, encode_entry, encode_entry_header,
    encode_entry_header_for, encode_entry_header_v1, encode_entry_v1, encode_tagged_entry,
    EntryFormat, EntryHeader, EntryTag, EnvelopeError, ENTRY_HEADER_LEN, ENTRY_MAGIC,
    ENTRY_V1_HEADER_LEN, MAX_PAYLOAD_LEN, TAGGED_ENTRY_MAGIC,
};
use crate::error::Result;
use crate::header::{u16_at, u32_at, u64_at};
use crate::io::Storage;
pub use crate::io::{parse_segment_file_name, segment_file_name};
use crate::StoreError;

/// Magic of a segment header.
pub const SEGMENT_MAGIC: [u8; 4] = *b"PSEG";
/// Segment format version this build writes (2: its entries are of format 2).
pub const SEGMENT_VERSION: u16 = 2;
/// Length of the segment header; the first entry starts here.
pub const SEGMENT_HEADER_LEN: u64 = 40;
const SEG_OFF_VERSION: usize = 4;
const SEG_OFF_RESERVED: usize = 6;
const SEG_OFF_NUMBER: usize = 8;
const SEG_OFF_UUID: usize = 16;
const SEG_OFF_CRC: usize = 32;
const SEG_OFF_RESERVED2: usize = 36;

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's number.
    pub number: u64,
    /// The pool it belongs to.
    pub pool_uuid: [u8; 16],
    /// Format version (1 or 2); names the format of the segment's entries
    /// ([`EntryFormat::of_segment_version`]).
    pub version: u16,
}

impl SegmentHeader {
    /// The header of a new segment of this build's format.
    pub fn new(number: u64, pool_uuid: [u8; 16]) -> Self {
        Self {
            number,
            pool_uuid,
            version: SEGMENT_VERSION,
        }
    }

    /// The header's bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
        h[..4].copy_from_slice(&SEGMENT_MAGIC);
        h[SEG_OFF_VERSION..SEG_OFF_VERSION + 2].copy_from_slice(&self.version.to_le_bytes());
        h[SEG_OFF_NUMBER..SEG_OFF_NUMBER + 8].copy_from_slice(&self.number.to_le_bytes());
        h[SEG_OFF_UUID..SEG_OFF_UUID + 16].copy_from_slice(&self.pool_uuid);
        let crc = crc32fast::hash(&h[..SEG_OFF_CRC]);
        h[SEG_OFF_CRC..SEG_OFF_CRC + 4].copy_from_slice(&crc.to_le_bytes());
        h
    }

    /// Decodes and verifies a header; `file` names it in errors.
    pub fn decode(h: &[u8], file: &str) -> Result<Self> {
        let corrupt = |offset: usize, reason: &str| StoreError::Corrupt {
            file: file.to_string(),
            offset: offset as u64,
            reason: reason.to_string(),
        };
        if h.len() < SEGMENT_HEADER_LEN as usize {
            return Err(corrupt(h.len(), "segment header truncated"));
        }
        if h[..4] != SEGMENT_MAGIC {
            return Err(corrupt(0, "bad segment magic"));
        }
        if u32_at(h, SEG_OFF_CRC) != crc32fast::hash(&h[..SEG_OFF_CRC]) {
            return Err(corrupt(SEG_OFF_CRC, "segment header CRC-32 mismatch"));
        }
        let version = u16_at(h, SEG_OFF_VERSION);
        if !(1..=SEGMENT_VERSION).contains(&version) {
            return Err(corrupt(SEG_OFF_VERSION, "unsupported segment version"));
        }
        if u16_at(h, SEG_OFF_RESERVED) != 0 || u32_at(h, SEG_OFF_RESERVED2) != 0 {
            return Err(corrupt(SEG_OFF_RESERVED, "reserved field is not zero"));
        }
        let mut pool_uuid = [0u8; 16];
        pool_uuid.copy_from_slice(&h[SEG_OFF_UUID..SEG_OFF_UUID + 16]);
        Ok(Self {
            number: u64_at(h, SEG_OFF_NUMBER),
            pool_uuid,
            version,
        })
    }
}

/// What a scan of a segment's entries found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScanResult {
    /// Valid entries found.
    pub entries: u64,
    /// End of the last valid entry: everything before it verifies.
    pub good_end: u64,
    /// File length at the scan.
    pub file_len: u64,
    /// Why the scan stopped before the end of the file (`None`: it reached the end cleanly).
    pub stop: Option<(u64, EnvelopeError)>,
    /// Offsets of entries kept although their payload CRC fails: their envelope header is valid
    /// and a valid entry follows them, so they are damage in the middle, not a torn tail.
    pub damaged: Vec<u64>,
}

/// Verifies entries from `start` until the first invalid or truncated one (or the end of the
/// file). An entry whose envelope header verifies but whose payload does not is a torn tail
/// unless a valid entry follows it; then it is recorded in `damaged` and the scan goes on.
/// Never allocates more than the file holds.
///
/// Only envelopes of `format` (the segment's own, from its header) count: an envelope of the
/// other format inside it is damage, since no build writes one there.
pub fn scan_segment(
    storage: &dyn Storage,
    start: u64,
    format: EntryFormat,
) -> io::Result<ScanResult> {
    let file_len = storage.len()?;
    let mut win = Window::new(storage, file_len);
    let mut pos = start;
    let mut entries = 0;
    let mut damaged = Vec::new();
    let stop = loop {
        match probe(&mut win, pos, format)? {
            Probe::End => break None,
            Probe::Valid(header) => {
                pos += header.entry_len();
                entries += 1;
            }
            Probe::BadPayload(header) => {
                let need = header.entry_len();
                if !matches!(probe(&mut win, pos + need, format)?, Probe::Valid(_)) {
                    break Some((pos, EnvelopeError::BadPayloadCrc));
                }
                damaged.push(pos);
                pos += need;
                entries += 1;
            }
            Probe::Invalid(e) => break Some((pos, e)),
        }
    };
    Ok(ScanResult {
        entries,
        good_end: pos,
        file_len,
        stop,
        damaged,
    })
}

/// One damaged stretch of a segment, found by [`scan_entries`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DamagedEntry {
    /// Where the stretch starts.
    pub offset: u64,
    /// Its length: the whole entry when its envelope header verifies and only the payload does
    /// not; otherwise the bytes up to the next valid envelope header, or to the end.
    pub len: u64,
    /// What is wrong at `offset`.
    pub error: EnvelopeError,
}

/// One valid entry found by [`scan_entries`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScannedEntry {
    /// Offset of its envelope.
    pub offset: u64,
    /// Its payload length.
    pub len: u32,
    /// Its envelope format.
    pub format: EntryFormat,
    /// The record it holds, if it says (format 2 record entries).
    pub tag: Option<EntryTag>,
}

impl ScannedEntry {
    /// Bytes of the whole entry, envelope included.
    pub fn entry_len(&self) -> u64 {
        self.format.header_len() as u64 + u64::from(self.len)
    }
}

/// What [`scan_entries`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryScan {
    /// Every valid entry, in file order.
    pub entries: Vec<ScannedEntry>,
    /// Damaged stretches, in file order. Together with the entries they cover the scanned range
    /// exactly, without overlap.
    pub damaged: Vec<DamagedEntry>,
}

/// Verifies every entry from `start` to `end` (or to the end of the file, if shorter), listing
/// the valid ones (with their tags) and the damage, for scrub, garbage collection and recovery
/// of lost metadata. Unlike [`scan_segment`], it does not stop at damage: an entry whose
/// envelope header verifies but whose payload does not is skipped by its length; after an
/// envelope header that does not verify, the scan searches for the next position holding one
/// that does (magic, header CRC-32, and a length that fits) and goes on there. A payload may
/// itself hold a valid entry (a segment file stored in the file system, uncompressed), so an
/// entry found by that search can lie inside a damaged entry's payload; such an entry is
/// unreferenced and harmless. Never allocates more than the file holds.
/// Only envelopes of `format` (the segment's own) count, as in [`scan_segment`].
pub fn scan_entries(
    storage: &dyn Storage,
    start: u64,
    end: u64,
    format: EntryFormat,
) -> io::Result<EntryScan> {
    let end = end.min(storage.len()?);
    let mut win = Window::new(storage, end);
    let mut pos = start;
    let mut scan = EntryScan::default();
    loop {
        match probe(&mut win, pos, format)? {
            Probe::End => break,
            Probe::Valid(header) => {
                scan.entries.push(ScannedEntry {
                    offset: pos,
                    len: header.payload_len,
                    format: header.format,
                    tag: header.tag,
                });
                pos += header.entry_len();
            }
            Probe::BadPayload(header) => {
                scan.damaged.push(DamagedEntry {
                    offset: pos,
                    len: header.entry_len(),
                    error: EnvelopeError::BadPayloadCrc,
                });
                pos += header.entry_len();
            }
            Probe::Invalid(error) => {
                let next = find_envelope(&mut win, pos + 1, format)?;
                scan.damaged.push(DamagedEntry {
                    offset: pos,
                    len: next - pos,
                    error,
                });
                pos = next;
            }
        }
    }
    Ok(scan)
}

/// How much a scan reads per call: one read serves many small entries.
const SCAN_CHUNK: usize = 1 << 20;

/// A read-ahead window over bytes `0..limit` of a file for front-to-back scans: one read call
/// per chunk instead of two per entry.
struct Window<'a> {
    storage: &'a dyn Storage,
    limit: u64,
    start: u64,
    buf: Vec<u8>,
}

impl<'a> Window<'a> {
    fn new(storage: &'a dyn Storage, limit: u64) -> Self {
        Self {
            storage,
            limit,
            start: 0,
            buf: Vec::new(),
        }
    }

    /// Bytes `pos..pos + len`; the caller keeps them below the limit.
    fn get(&mut self, pos: u64, len: usize) -> io::Result<&[u8]> {
        let end = pos + len as u64;
        if pos < self.start || end > self.start + self.buf.len() as u64 {
            let want = (len.max(SCAN_CHUNK) as u64).min(self.limit.saturating_sub(pos)) as usize;
            self.buf.clear();
            self.buf.resize(want.max(len), 0);
            if let Err(e) = self.storage.read_at(&mut self.buf, pos) {
                self.buf.clear();
                return Err(e);
            }
            self.start = pos;
        }
        let at = (pos - self.start) as usize;
        Ok(&self.buf[at..at + len])
    }
}

/// What starts at a position of a scan.
enum Probe {
    /// The end of the scanned range.
    End,
    /// A valid entry.
    Valid(EntryHeader),
    /// An entry whose envelope header verifies but whose payload does not.
    BadPayload(EntryHeader),
    /// No verifiable envelope header (or one whose entry runs past the end).
    Invalid(EnvelopeError),
}

fn probe(win: &mut Window<'_>, pos: u64, format: EntryFormat) -> io::Result<Probe> {
    let left = win.limit.saturating_sub(pos);
    if left == 0 {
        return Ok(Probe::End);
    }
    let avail = left.min(ENTRY_HEADER_LEN as u64) as usize;
    let header = match decode_entry_header(win.get(pos, avail)?) {
        Ok(header) if header.format == format => header,
        Ok(_) => return Ok(Probe::Invalid(EnvelopeError::BadMagic)),
        Err(e) => return Ok(Probe::Invalid(e)),
    };
    let need = header.entry_len();
    if need > left {
        return Ok(Probe::Invalid(EnvelopeError::Truncated {
            need,
            have: left,
        }));
    }
    let at = pos + header.format.header_len() as u64;
    let payload = win.get(at, header.payload_len as usize)?;
    Ok(if crc32fast::hash(payload) == header.payload_crc {
        Probe::Valid(header)
    } else {
        Probe::BadPayload(header)
    })
}

/// The first position from `from` holding an envelope header of `format` that verifies and whose
/// entry fits below the limit, or the limit if there is none.
fn find_envelope(win: &mut Window<'_>, from: u64, format: EntryFormat) -> io::Result<u64> {
    let limit = win.limit;
    let mut at = from;
    while limit.saturating_sub(at) >= ENTRY_V1_HEADER_LEN as u64 {
        let n = (limit - at).min(SCAN_CHUNK as u64) as usize;
        let last = at + n as u64 == limit;
        let chunk = win.get(at, n)?;
        // Positions whose longest header could run past this chunk are checked with the next.
        let check = if last {
            n - ENTRY_V1_HEADER_LEN + 1
        } else {
            n - (ENTRY_HEADER_LEN - 1)
        };
        for i in 0..check {
            let magic = &chunk[i..i + 4];
            if magic != ENTRY_MAGIC && magic != TAGGED_ENTRY_MAGIC {
                continue;
            }
            let h = &chunk[i..(i + ENTRY_HEADER_LEN).min(n)];
            if let Some(header) = decode_entry_header(h).ok().filter(|h| h.format == format) {
                let candidate = at + i as u64;
                if header.entry_len() <= limit - candidate {
                    return Ok(candidate);
                }
            }
        }
        if last {
            break;
        }
        at += check as u64;
    }
    Ok(limit)
}
