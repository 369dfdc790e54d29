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
//! Entries follow the header back to back. Two envelope formats exist; a segment holds entries of
//! one format, named by its header's version (1: format 1, 2: format 2). This build writes
//! format 2 only; it reads both.
//!
//! Entry format 1 (segments of version 1, written before entries named their record):
//! ```text
//! offset size field
//!  0      4   magic            b"PENT"
//!  4      4   payload length   u32 n, at most MAX_PAYLOAD_LEN
//!  8      4   payload CRC-32   u32, CRC-32 of the payload
//! 12      4   header CRC-32    u32, CRC-32 of bytes 0..12
//! 16      n   payload
//! ```
//!
//! Entry format 2 (self-describing: a record's entry names the record it holds):
//! ```text
//! offset size field
//!  0      4   magic            b"PEN2"
//!  4      4   payload length   u32 n, at most MAX_PAYLOAD_LEN
//!  8      4   payload CRC-32   u32, CRC-32 of the payload
//! 12      1   kind             0 = untagged (bytes 16..44 are 0), 1 = record (tagged)
//! 13      3   reserved         0
//! 16      8   inode            u64, the file the record belongs to
//! 24      8   record index     u64, the record's index in that file
//! 32      8   txg              u64, the transaction group whose op first named the frame
//! 40      4   record size      u32, the file's record size (the record starts at index × size)
//! 44      4   header CRC-32    u32, CRC-32 of bytes 0..44
//! 48      n   payload
//! ```
//!
//! docs/design.md mirrors these maps.

use std::io;

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
/// Magic of an entry envelope of format 1.
pub const ENTRY_MAGIC: [u8; 4] = *b"PENT";
/// Magic of an entry envelope of format 2.
pub const TAGGED_ENTRY_MAGIC: [u8; 4] = *b"PEN2";
/// Length of an entry envelope header of format 1.
pub const ENTRY_V1_HEADER_LEN: usize = 16;
/// Length of the entry envelope header this build writes (format 2).
pub const ENTRY_HEADER_LEN: usize = 48;
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
const ENT1_OFF_HEADER_CRC: usize = 12;
const ENT2_OFF_KIND: usize = 12;
const ENT2_OFF_INO: usize = 16;
const ENT2_OFF_INDEX: usize = 24;
const ENT2_OFF_TXG: usize = 32;
const ENT2_OFF_RECORD_SIZE: usize = 40;
const ENT2_OFF_HEADER_CRC: usize = 44;

const KIND_UNTAGGED: u8 = 0;
const KIND_RECORD: u8 = 1;

/// The format of an entry envelope.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum EntryFormat {
    /// `PENT`, 16-byte header, no tag (segments of version 1).
    V1,
    /// `PEN2`, 48-byte header with an optional tag (segments of version 2).
    V2,
}

impl EntryFormat {
    /// Length of the envelope header.
    pub fn header_len(self) -> usize {
        match self {
            EntryFormat::V1 => ENTRY_V1_HEADER_LEN,
            EntryFormat::V2 => ENTRY_HEADER_LEN,
        }
    }

    /// The format of the entries of a segment of header version `version`.
    pub fn of_segment_version(version: u16) -> Self {
        if version == 1 {
            EntryFormat::V1
        } else {
            EntryFormat::V2
        }
    }
}

/// What a record's entry says about itself: enough to put the frame back into its file without
/// the metadata.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct EntryTag {
    /// The file (inode number).
    pub ino: u64,
    /// The record's index in the file.
    pub index: u64,
    /// The transaction group whose op first named this frame (kept when garbage collection
    /// moves the frame): of two entries of one record, the higher txg is the newer.
    pub txg: u64,
    /// The file's record size: the record holds the file's bytes from `index × record_size`.
    pub record_size: u32,
}

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
    /// The magic is neither `PENT` nor `PEN2`.
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
    /// A header whose CRC-32 verifies holds an unknown kind or non-zero reserved bytes (written
    /// by a newer Presso).
    #[error("entry header field {0} holds a value this version does not know")]
    UnknownField(&'static str),
}

/// A verified envelope header.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EntryHeader {
    /// The envelope's format.
    pub format: EntryFormat,
    /// Payload length.
    pub payload_len: u32,
    /// CRC-32 of the payload.
    pub payload_crc: u32,
    /// The record the entry holds (format 2 record entries only).
    pub tag: Option<EntryTag>,
}

impl EntryHeader {
    /// Bytes of the whole entry, envelope included.
    pub fn entry_len(&self) -> u64 {
        self.format.header_len() as u64 + u64::from(self.payload_len)
    }
}

/// The envelope header (format 2) for `payload`, tagged with `tag` if given. The payload must
/// be at most [`MAX_PAYLOAD_LEN`] bytes.
pub fn encode_entry_header(payload: &[u8], tag: Option<&EntryTag>) -> [u8; ENTRY_HEADER_LEN] {
    debug_assert!(payload.len() <= MAX_PAYLOAD_LEN as usize);
    let mut h = [0u8; ENTRY_HEADER_LEN];
    h[..4].copy_from_slice(&TAGGED_ENTRY_MAGIC);
    h[ENT_OFF_LEN..ENT_OFF_LEN + 4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[ENT_OFF_PAYLOAD_CRC..ENT_OFF_PAYLOAD_CRC + 4]
        .copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    if let Some(tag) = tag {
        h[ENT2_OFF_KIND] = KIND_RECORD;
        h[ENT2_OFF_INO..ENT2_OFF_INO + 8].copy_from_slice(&tag.ino.to_le_bytes());
        h[ENT2_OFF_INDEX..ENT2_OFF_INDEX + 8].copy_from_slice(&tag.index.to_le_bytes());
        h[ENT2_OFF_TXG..ENT2_OFF_TXG + 8].copy_from_slice(&tag.txg.to_le_bytes());
        h[ENT2_OFF_RECORD_SIZE..ENT2_OFF_RECORD_SIZE + 4]
            .copy_from_slice(&tag.record_size.to_le_bytes());
    }
    let crc = crc32fast::hash(&h[..ENT2_OFF_HEADER_CRC]);
    h[ENT2_OFF_HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// The envelope header of format 1 for `payload` (what older Presso wrote; for tests and
/// fixtures).
pub fn encode_entry_header_v1(payload: &[u8]) -> [u8; ENTRY_V1_HEADER_LEN] {
    debug_assert!(payload.len() <= MAX_PAYLOAD_LEN as usize);
    let mut h = [0u8; ENTRY_V1_HEADER_LEN];
    h[..4].copy_from_slice(&ENTRY_MAGIC);
    h[ENT_OFF_LEN..ENT_OFF_LEN + 4].copy_from_slice(&(payload.len() as u32).to_le_bytes());
    h[ENT_OFF_PAYLOAD_CRC..ENT_OFF_PAYLOAD_CRC + 4]
        .copy_from_slice(&crc32fast::hash(payload).to_le_bytes());
    let crc = crc32fast::hash(&h[..ENT1_OFF_HEADER_CRC]);
    h[ENT1_OFF_HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
    h
}

/// Verifies an envelope header of either format at the start of `h` (magic, header CRC, fields,
/// length limit). `h` may be longer than the header; a format-2 magic over fewer than 48 bytes
/// is [`EnvelopeError::Truncated`].
pub fn decode_entry_header(h: &[u8]) -> Result<EntryHeader, EnvelopeError> {
    let truncated = |need: usize| EnvelopeError::Truncated {
        need: need as u64,
        have: h.len() as u64,
    };
    if h.len() < ENTRY_V1_HEADER_LEN {
        return Err(truncated(ENTRY_V1_HEADER_LEN));
    }
    let (format, crc_at) = if h[..4] == ENTRY_MAGIC {
        (EntryFormat::V1, ENT1_OFF_HEADER_CRC)
    } else if h[..4] == TAGGED_ENTRY_MAGIC {
        if h.len() < ENTRY_HEADER_LEN {
            return Err(truncated(ENTRY_HEADER_LEN));
        }
        (EntryFormat::V2, ENT2_OFF_HEADER_CRC)
    } else {
        return Err(EnvelopeError::BadMagic);
    };
    if u32_at(h, crc_at) != crc32fast::hash(&h[..crc_at]) {
        return Err(EnvelopeError::BadHeaderCrc);
    }
    let payload_len = u32_at(h, ENT_OFF_LEN);
    if payload_len > MAX_PAYLOAD_LEN {
        return Err(EnvelopeError::TooLarge(payload_len));
    }
    let tag = match format {
        EntryFormat::V1 => None,
        EntryFormat::V2 => decode_tag(h)?,
    };
    Ok(EntryHeader {
        format,
        payload_len,
        payload_crc: u32_at(h, ENT_OFF_PAYLOAD_CRC),
        tag,
    })
}

fn decode_tag(h: &[u8]) -> Result<Option<EntryTag>, EnvelopeError> {
    if h[ENT2_OFF_KIND + 1..ENT2_OFF_INO].iter().any(|&b| b != 0) {
        return Err(EnvelopeError::UnknownField("reserved"));
    }
    match h[ENT2_OFF_KIND] {
        KIND_UNTAGGED => {
            if h[ENT2_OFF_INO..ENT2_OFF_HEADER_CRC].iter().any(|&b| b != 0) {
                return Err(EnvelopeError::UnknownField("tag of an untagged entry"));
            }
            Ok(None)
        }
        KIND_RECORD => Ok(Some(EntryTag {
            ino: u64_at(h, ENT2_OFF_INO),
            index: u64_at(h, ENT2_OFF_INDEX),
            txg: u64_at(h, ENT2_OFF_TXG),
            record_size: u32_at(h, ENT2_OFF_RECORD_SIZE),
        })),
        _ => Err(EnvelopeError::UnknownField("kind")),
    }
}

/// A whole untagged entry of format 2 (envelope header and payload).
pub fn encode_entry(payload: &[u8]) -> Vec<u8> {
    encode_tagged_entry(payload, None)
}

/// A whole entry of format 2, tagged with `tag` if given.
pub fn encode_tagged_entry(payload: &[u8], tag: Option<&EntryTag>) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_entry_header(payload, tag));
    out.extend_from_slice(payload);
    out
}

/// A whole entry of format 1 (what older Presso wrote; for tests and fixtures).
pub fn encode_entry_v1(payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(ENTRY_V1_HEADER_LEN + payload.len());
    out.extend_from_slice(&encode_entry_header_v1(payload));
    out.extend_from_slice(payload);
    out
}

/// Verifies a whole entry of either format, exactly (no trailing bytes), and returns its payload.
pub fn decode_entry(bytes: &[u8]) -> Result<&[u8], EnvelopeError> {
    decode_tagged_entry(bytes).map(|(_, payload)| payload)
}

/// [`decode_entry`], also returning the verified envelope header (with the tag, if any).
pub fn decode_tagged_entry(bytes: &[u8]) -> Result<(EntryHeader, &[u8]), EnvelopeError> {
    let have = bytes.len() as u64;
    let header = decode_entry_header(bytes)?;
    let need = header.entry_len();
    if have < need {
        return Err(EnvelopeError::Truncated { need, have });
    }
    if have > need {
        return Err(EnvelopeError::TrailingBytes((have - need) as usize));
    }
    let payload = &bytes[header.format.header_len()..];
    if crc32fast::hash(payload) != header.payload_crc {
        return Err(EnvelopeError::BadPayloadCrc);
    }
    Ok((header, payload))
}

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
pub fn scan_segment(storage: &dyn Storage, start: u64) -> io::Result<ScanResult> {
    let file_len = storage.len()?;
    let mut win = Window::new(storage, file_len);
    let mut pos = start;
    let mut entries = 0;
    let mut damaged = Vec::new();
    let stop = loop {
        match probe(&mut win, pos)? {
            Probe::End => break None,
            Probe::Valid(header) => {
                pos += header.entry_len();
                entries += 1;
            }
            Probe::BadPayload(header) => {
                let need = header.entry_len();
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
pub fn scan_entries(storage: &dyn Storage, start: u64, end: u64) -> io::Result<EntryScan> {
    let end = end.min(storage.len()?);
    let mut win = Window::new(storage, end);
    let mut pos = start;
    let mut scan = EntryScan::default();
    loop {
        match probe(&mut win, pos)? {
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
    /// A valid entry.
    Valid(EntryHeader),
    /// An entry whose envelope header verifies but whose payload does not.
    BadPayload(EntryHeader),
    /// No verifiable envelope header (or one whose entry runs past the end).
    Invalid(EnvelopeError),
}

fn probe(win: &mut Window<'_>, pos: u64) -> io::Result<Probe> {
    let left = win.limit.saturating_sub(pos);
    if left == 0 {
        return Ok(Probe::End);
    }
    let avail = left.min(ENTRY_HEADER_LEN as u64) as usize;
    let header = match decode_entry_header(win.get(pos, avail)?) {
        Ok(header) => header,
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

/// The first position from `from` holding an envelope header (of either format) that verifies
/// and whose entry fits below the limit, or the limit if there is none.
fn find_envelope(win: &mut Window<'_>, from: u64) -> io::Result<u64> {
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
            if let Ok(header) = decode_entry_header(h) {
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
