//! Entry envelopes: the checksummed wrapper around one payload (normally a codec frame) in a
//! segment file. Little-endian throughout. Two formats exist; a segment holds entries of one
//! format, named by its header's version. This build writes format 2 only; it reads both.
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

use crate::header::{u32_at, u64_at};

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
    encode_entry_header_for(payload.len(), crc32fast::hash(payload), tag)
}

/// [`encode_entry_header`] for a payload of `payload_len` bytes whose CRC-32 is `payload_crc`,
/// for a caller that knows the CRC without reading the payload again.
pub fn encode_entry_header_for(
    payload_len: usize,
    payload_crc: u32,
    tag: Option<&EntryTag>,
) -> [u8; ENTRY_HEADER_LEN] {
    debug_assert!(payload_len <= MAX_PAYLOAD_LEN as usize);
    let mut h = [0u8; ENTRY_HEADER_LEN];
    h[..4].copy_from_slice(&TAGGED_ENTRY_MAGIC);
    h[ENT_OFF_LEN..ENT_OFF_LEN + 4].copy_from_slice(&(payload_len as u32).to_le_bytes());
    h[ENT_OFF_PAYLOAD_CRC..ENT_OFF_PAYLOAD_CRC + 4].copy_from_slice(&payload_crc.to_le_bytes());
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
