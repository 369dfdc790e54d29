//! Segment files `seg-<number>.dat`: a segment header, then entries appended back to back.
//! Little-endian throughout.
//!
//! Segment header (written and synced when the segment is created, before any entry):
//! ```text
//! offset size field
//!  0      4   magic            b"PSEG"
//!  4      2   version          u16, SEGMENT_VERSION (1)
//!  6      2   reserved         0
//!  8      8   segment number   u64, equal to the number in the file name
//! 16     16   pool uuid        the pool header's uuid
//! 32      4   CRC-32           u32, CRC-32 of bytes 0..32
//! 36      4   reserved         0
//! 40          first entry
//! ```
//!
//! Entry (the envelope around one opaque payload, normally a codec frame):
//! ```text
//! offset size field
//!  0      4   magic            b"PENT"
//!  4      4   payload length   u32 n, at most MAX_PAYLOAD_LEN
//!  8      4   payload CRC-32   u32, CRC-32 of the payload
//! 12      4   header CRC-32    u32, CRC-32 of bytes 0..12
//! 16      n   payload
//! ```
//!
//! docs/design.md mirrors both maps.

use std::io;

use crate::error::Result;
use crate::header::{u16_at, u32_at, u64_at};
use crate::io::Storage;
pub use crate::io::{parse_segment_file_name, segment_file_name};
use crate::StoreError;

/// Magic of a segment header.
pub const SEGMENT_MAGIC: [u8; 4] = *b"PSEG";
/// Segment format version.
pub const SEGMENT_VERSION: u16 = 1;
/// Length of the segment header; the first entry starts here.
pub const SEGMENT_HEADER_LEN: u64 = 40;
/// Magic of an entry envelope.
pub const ENTRY_MAGIC: [u8; 4] = *b"PENT";
/// Length of an entry envelope header.
pub const ENTRY_HEADER_LEN: usize = 16;
/// Largest payload of one entry (64 MiB; a frame is at most 16 MiB plus its header).
pub const MAX_PAYLOAD_LEN: u32 = 64 << 20;

const SEG_OFF_VERSION: usize = 4;
const SEG_OFF_RESERVED: usize = 6;
const SEG_OFF_NUMBER: usize = 8;
const SEG_OFF_UUID: usize = 16;
const SEG_OFF_CRC: usize = 32;
const SEG_OFF_RESERVED2: usize = 36;

const ENT_OFF_LEN: usize = 4;
const ENT_OFF_PAYLOAD_CRC: usize = 8;
const ENT_OFF_HEADER_CRC: usize = 12;

/// Why an entry envelope does not verify. Offsets are relative to the entry's start.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum EnvelopeError {
    /// Fewer bytes than the envelope needs.
    #[error("entry truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes needed.
        need: u64,
        /// Bytes available.
        have: u64,
    },
    /// The magic is not `PENT`.
    #[error("bad entry magic")]
    BadMagic,
    /// The envelope header's CRC-32 does not match.
    #[error("entry header CRC-32 mismatch")]
    BadHeaderCrc,
    /// The declared payload length exceeds [`MAX_PAYLOAD_LEN`].
    #[error("entry payload length {0} exceeds the maximum")]
    TooLarge(u32),
    /// The payload's CRC-32 does not match.
    #[error("entry payload CRC-32 mismatch")]
    BadPayloadCrc,
    /// More bytes than the envelope declares.
    #[error("{0} bytes after the entry's end")]
    TrailingBytes(usize),
}

/// A verified envelope header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// Payload length.
    pub payload_len: u32,
    /// CRC-32 of the payload.
    pub payload_crc: u32,
}

/// The envelope header for `payload`. The payload must be at most [`MAX_PAYLOAD_LEN`] bytes.
pub fn encode_entry_header(payload: &[u8]) -> [u8; ENTRY_HEADER_LEN] {
    debug_assert!(payload.len() <= MAX_PAYLOAD_LEN as usize);
    let mut h = [0u8; ENTRY_HEADER_LEN];
    h[..4].copy_from_slice(&ENTRY_MAGIC);
    h[ENT_OFF_LEN..ENT_OFF_LEN + 4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[ENT_OFF_PAYLOAD_CRC..ENT_OFF_PAYLOAD_CRC + 4]
        .copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let crc = crc32fast::hash(&h[..ENT_OFF_HEADER_CRC]);
    h[ENT_OFF_HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Verifies an envelope header (magic, header CRC, length limit).
pub fn decode_entry_header(h: &[u8; ENTRY_HEADER_LEN]) -> Result<EntryHeader, EnvelopeError> {
    if h[..4] != ENTRY_MAGIC {
        return Err(EnvelopeError::BadMagic);
    }
    if u32_at(h, ENT_OFF_HEADER_CRC) != crc32fast::hash(&h[..ENT_OFF_HEADER_CRC]) {
        return Err(EnvelopeError::BadHeaderCrc);
    }
    let payload_len = u32_at(h, ENT_OFF_LEN);
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(EnvelopeError::TooLarge(payload_len));
    }
    Ok(EntryHeader {
        payload_len,
        payload_crc: u32_at(h, ENT_OFF_PAYLOAD_CRC),
    })
}

/// A whole entry (envelope header and payload).
pub fn encode_entry(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_entry_header(payload));
    out.extend_from_slice(payload);
    out
}

/// Verifies a whole entry, exactly (no trailing bytes), and returns its payload.
pub fn decode_entry(bytes: &[u8]) -> Result<&[u8], EnvelopeError> {
    let have = bytes.len() as u64;
    let h: &[u8; ENTRY_HEADER_LEN] = bytes
        .get(..ENTRY_HEADER_LEN)
        .and_then(|h| h.try_into().ok())
        .ok_or(EnvelopeError::Truncated {
            need: ENTRY_HEADER_LEN as u64,
            have,
        })?;
    let header = decode_entry_header(h)?;
    let need = ENTRY_HEADER_LEN as u64 + u64::from(header.payload_len);
    if have < need {
        return Err(EnvelopeError::Truncated { need, have });
    }
    if have > need {
        return Err(EnvelopeError::TrailingBytes((have - need) as usize));
    }
    let payload = &bytes[ENTRY_HEADER_LEN..];
    if crc32fast::hash(payload) != header.payload_crc {
        return Err(EnvelopeError::BadPayloadCrc);
    }
    Ok(payload)
}

/// A decoded segment header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentHeader {
    /// The segment's number.
    pub number: u64,
    /// The pool it belongs to.
    pub pool_uuid: [u8; 16],
}

impl SegmentHeader {
    /// The header's bytes.
    pub fn encode(&self) -> [u8; SEGMENT_HEADER_LEN as usize] {
        let mut h = [0u8; SEGMENT_HEADER_LEN as usize];
        h[..4].copy_from_slice(&SEGMENT_MAGIC);
        h[SEG_OFF_VERSION..SEG_OFF_VERSION + 2].copy_from_slice(&SEGMENT_VERSION.to_le_bytes());
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
        if version != SEGMENT_VERSION {
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
pub fn scan_segment(storage: &dyn Storage, start: u64) -> io::Result<ScanResult> {
    let file_len = storage.len()?;
    let mut win = Window::new(storage, file_len);
    let mut pos = start;
    let mut entries = 0;
    let mut damaged = Vec::new();
    let stop = loop {
        match probe(&mut win, pos)? {
            Probe::End => break None,
            Probe::Valid(need) => {
                pos += need;
                entries += 1;
            }
            Probe::BadPayload(need) => {
                if !matches!(probe(&mut win, pos + need)?, Probe::Valid(_)) {
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

/// What [`scan_entries`] found.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct EntryScan {
    /// Offset and payload length of every valid entry, in file order.
    pub entries: Vec<(u64, u32)>,
    /// Damaged stretches, in file order. Together with the entries they cover the scanned range
    /// exactly, without overlap.
    pub damaged: Vec<DamagedEntry>,
}

/// Verifies every entry from `start` to `end` (or to the end of the file, if shorter), listing
/// the valid ones and the damage, for scrub and garbage collection. Unlike [`scan_segment`], it
/// does not stop at damage: an entry whose envelope header verifies but whose payload does not
/// is skipped by its length; after an envelope header that does not verify, the scan searches
/// for the next position holding one that does (magic, header CRC-32, and a length that fits)
/// and goes on there. A payload may itself hold a valid entry (a segment file stored in the
/// file system, uncompressed), so an entry found by that search can lie inside a damaged
/// entry's payload; such an entry is unreferenced and harmless. Never allocates more than the
/// file holds.
pub fn scan_entries(storage: &dyn Storage, start: u64, end: u64) -> io::Result<EntryScan> {
    let end = end.min(storage.len()?);
    let mut win = Window::new(storage, end);
    let mut pos = start;
    let mut scan = EntryScan::default();
    loop {
        match probe(&mut win, pos)? {
            Probe::End => break,
            Probe::Valid(need) => {
                scan.entries
                    .push((pos, (need - ENTRY_HEADER_LEN as u64) as u32));
                pos += need;
            }
            Probe::BadPayload(need) => {
                scan.damaged.push(DamagedEntry {
                    offset: pos,
                    len: need,
                    error: EnvelopeError::BadPayloadCrc,
                });
                pos += need;
            }
            Probe::Invalid(error) => {
                let next = find_envelope(&mut win, pos + 1)?;
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
    /// A valid entry of this many bytes.
    Valid(u64),
    /// An entry of this many bytes whose envelope header verifies but whose payload does not.
    BadPayload(u64),
    /// No verifiable envelope header (or one whose entry runs past the end).
    Invalid(EnvelopeError),
}

fn probe(win: &mut Window<'_>, pos: u64) -> io::Result<Probe> {
    let left = win.limit.saturating_sub(pos);
    if left == 0 {
        return Ok(Probe::End);
    }
    if left < ENTRY_HEADER_LEN as u64 {
        return Ok(Probe::Invalid(EnvelopeError::Truncated {
            need: ENTRY_HEADER_LEN as u64,
            have: left,
        }));
    }
    let mut h = [0u8; ENTRY_HEADER_LEN];
    h.copy_from_slice(win.get(pos, ENTRY_HEADER_LEN)?);
    let header = match decode_entry_header(&h) {
        Ok(header) => header,
        Err(e) => return Ok(Probe::Invalid(e)),
    };
    let need = ENTRY_HEADER_LEN as u64 + u64::from(header.payload_len);
    if need > left {
        return Ok(Probe::Invalid(EnvelopeError::Truncated {
            need,
            have: left,
        }));
    }
    let payload = win.get(pos + ENTRY_HEADER_LEN as u64, header.payload_len as usize)?;
    Ok(if crc32fast::hash(payload) == header.payload_crc {
        Probe::Valid(need)
    } else {
        Probe::BadPayload(need)
    })
}

/// The first position from `from` holding an envelope header that verifies and whose entry
/// fits below the limit, or the limit if there is none.
fn find_envelope(win: &mut Window<'_>, from: u64) -> io::Result<u64> {
    let limit = win.limit;
    let mut at = from;
    while limit.saturating_sub(at) >= ENTRY_HEADER_LEN as u64 {
        let n = (limit - at).min(SCAN_CHUNK as u64) as usize;
        let chunk = win.get(at, n)?;
        for i in 0..=n - ENTRY_HEADER_LEN {
            if chunk[i..i + ENTRY_MAGIC.len()] != ENTRY_MAGIC {
                continue;
            }
            let mut h = [0u8; ENTRY_HEADER_LEN];
            h.copy_from_slice(&chunk[i..i + ENTRY_HEADER_LEN]);
            if let Ok(header) = decode_entry_header(&h) {
                let candidate = at + i as u64;
                let need = ENTRY_HEADER_LEN as u64 + u64::from(header.payload_len);
                if need <= limit - candidate {
                    return Ok(candidate);
                }
            }
        }
        // The last ENTRY_HEADER_LEN - 1 positions of this chunk are checked with the next one.
        at += (n - (ENTRY_HEADER_LEN - 1)) as u64;
    }
    Ok(limit)
}
