//! The record frame: a self-describing header followed by the stored payload.
//!
//! ```text
//! offset size field
//!  0      4   magic            b"PRSF"
//!  4      1   version          FRAME_VERSION (1); other versions are refused
//!  5      1   codec id         CodecId, see codec.rs (never renumbered)
//!  6      1   level            the level the payload was produced at (0 for codecs without levels)
//!  7      1   flags            bit 0 = HOLE (all-zero record, no payload); other bits must be 0
//!  8      4   logical length   u32 LE, bytes the record decodes to, <= MAX_RECORD_SIZE
//! 12      4   stored length    u32 LE, payload bytes after the header
//! 16      4   logical CRC-32   u32 LE, CRC-32 (gzip/zlib polynomial) of the logical bytes
//! 20      8   stored hash      u64 LE, XXH3-64 of the payload
//! 28      4   header CRC-32    u32 LE, CRC-32 of bytes 0..28
//! 32      n   payload          stored length bytes
//! ```
//!
//! The logical CRC-32 is the gzip trailer's CRC, so a deflate frame becomes a standard gzip member by
//! writing a 10-byte gzip header, the payload, then this CRC and the logical length (ISIZE).
//! Decoding needs nothing but the frame: the codec comes from the header, never from configuration.
//! docs/design.md mirrors this map.

use crate::codec::CodecId;
use crate::format::{self, DeflateEngine};
use bytes::Bytes;

mod build;

pub(crate) use build::build_hole;
pub use build::{
    build_raw, encode_frame, hole_frame, logical_crc, raw_frame, raw_record, seal_frame, FrameBuf,
};

/// The four bytes every frame starts with.
pub const FRAME_MAGIC: [u8; 4] = *b"PRSF";
/// The frame format version this build writes and reads.
pub const FRAME_VERSION: u8 = 1;
/// Size of the frame header in bytes.
pub const HEADER_LEN: usize = 32;
/// Largest logical record a frame may describe (16 MiB, the ZFS recordsize maximum).
pub const MAX_RECORD_SIZE: usize = 16 << 20;
/// Flag bit: the record is all zeros and has no payload.
pub const FLAG_HOLE: u8 = 1;

const OFF_MAGIC: usize = 0;
const OFF_VERSION: usize = 4;
const OFF_CODEC: usize = 5;
const OFF_LEVEL: usize = 6;
const OFF_FLAGS: usize = 7;
const OFF_LOGICAL_LEN: usize = 8;
const OFF_STORED_LEN: usize = 12;
const OFF_LOGICAL_CRC: usize = 16;
const OFF_STORED_HASH: usize = 20;
const OFF_HEADER_CRC: usize = 28;

/// The decoded fields of a frame header.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FrameHeader {
    /// Format of the payload.
    pub codec: CodecId,
    /// Level the payload was produced at.
    pub level: u8,
    /// The record is all zeros and has no payload.
    pub hole: bool,
    /// Bytes the record decodes to.
    pub logical_len: u32,
    /// Payload bytes following the header.
    pub stored_len: u32,
    /// CRC-32 (gzip polynomial) of the logical bytes.
    pub logical_crc: u32,
    /// XXH3-64 of the payload.
    pub stored_hash: u64,
}

/// Why a frame could not be decoded. Offsets are relative to the start of the frame.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum FrameError {
    /// Fewer bytes than the header or the declared payload need.
    #[error("frame truncated: need {need} bytes, have {have}")]
    Truncated {
        /// Bytes the frame declares.
        need: usize,
        /// Bytes available.
        have: usize,
    },
    /// More bytes than the header declares.
    #[error("frame has {extra} bytes after its declared end")]
    TrailingBytes {
        /// Bytes past the end.
        extra: usize,
    },
    /// The first four bytes are not a Presso frame magic.
    #[error("not a Presso frame (bad magic {found:02x?} at offset 0)")]
    BadMagic {
        /// The bytes found.
        found: [u8; 4],
    },
    /// A frame version this build does not know.
    #[error("frame version {found} is not supported (this build reads version {FRAME_VERSION}); upgrade Presso")]
    UnsupportedVersion {
        /// The version found.
        found: u8,
    },
    /// The header's own checksum does not match.
    #[error("frame header checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    HeaderChecksum {
        /// Checksum in the header.
        stored: u32,
        /// Checksum computed.
        computed: u32,
    },
    /// The codec id is not in the codec table.
    #[error("unknown codec id {id} at offset {OFF_CODEC}; this build knows ids 0..={max}")]
    UnknownCodec {
        /// The id found.
        id: u8,
        /// The highest id this build knows.
        max: u8,
    },
    /// The codec is in the table but was compiled out of this build.
    #[error("codec '{codec}' is not built into this Presso; rebuild with its cargo feature")]
    NotBuiltIn {
        /// The codec's name.
        codec: &'static str,
    },
    /// A header field that contradicts the rest of the header.
    #[error("inconsistent frame header: {0}")]
    BadHeader(&'static str),
    /// The payload does not match its stored hash.
    #[error("payload checksum mismatch at offset {HEADER_LEN} (stored {stored:#018x}, computed {computed:#018x})")]
    StoredChecksum {
        /// Hash in the header.
        stored: u64,
        /// Hash computed.
        computed: u64,
    },
    /// The codec rejected the payload.
    #[error("{codec} payload does not decode: {reason}")]
    Corrupt {
        /// The codec's name.
        codec: &'static str,
        /// What the decoder reported.
        reason: String,
    },
    /// The decoded bytes do not match the logical CRC-32.
    #[error("decoded record checksum mismatch (stored {stored:#010x}, computed {computed:#010x})")]
    LogicalChecksum {
        /// CRC in the header.
        stored: u32,
        /// CRC computed.
        computed: u32,
    },
    /// The caller's output buffer is not the record's logical length.
    #[error("output buffer holds {have} bytes, the record has {need}")]
    OutputSize {
        /// The record's logical length.
        need: usize,
        /// The buffer's length.
        have: usize,
    },
}

fn le_u32(bytes: &[u8], at: usize) -> u32 {
    u32::from_le_bytes(bytes[at..at + 4].try_into().expect("4 bytes"))
}

fn le_u64(bytes: &[u8], at: usize) -> u64 {
    u64::from_le_bytes(bytes[at..at + 8].try_into().expect("8 bytes"))
}

/// XXH3-64 of a payload, as stored in the header. (The implementation picks AVX2 at run time
/// where the CPU has it: twice the speed of the SSE2 baseline a portable build compiles to.)
pub fn stored_hash(payload: &[u8]) -> u64 {
    twox_hash::XxHash3_64::oneshot(payload)
}

impl FrameHeader {
    /// Header plus payload length.
    pub fn frame_len(&self) -> usize {
        HEADER_LEN + self.stored_len as usize
    }

    /// Serialises the header.
    pub fn to_bytes(&self) -> [u8; HEADER_LEN] {
        let mut out = [0u8; HEADER_LEN];
        out[OFF_MAGIC..OFF_MAGIC + 4].copy_from_slice(&FRAME_MAGIC);
        out[OFF_VERSION] = FRAME_VERSION;
        out[OFF_CODEC] = self.codec as u8;
        out[OFF_LEVEL] = self.level;
        out[OFF_FLAGS] = if self.hole { FLAG_HOLE } else { 0 };
        out[OFF_LOGICAL_LEN..OFF_LOGICAL_LEN + 4].copy_from_slice(&self.logical_len.to_le_bytes());
        out[OFF_STORED_LEN..OFF_STORED_LEN + 4].copy_from_slice(&self.stored_len.to_le_bytes());
        out[OFF_LOGICAL_CRC..OFF_LOGICAL_CRC + 4].copy_from_slice(&self.logical_crc.to_le_bytes());
        out[OFF_STORED_HASH..OFF_STORED_HASH + 8].copy_from_slice(&self.stored_hash.to_le_bytes());
        let crc = crc32fast::hash(&out[..OFF_HEADER_CRC]);
        out[OFF_HEADER_CRC..].copy_from_slice(&crc.to_le_bytes());
        out
    }

    /// Parses and validates a header from the start of `bytes` (the payload is not read).
    pub fn parse(bytes: &[u8]) -> Result<FrameHeader, FrameError> {
        if bytes.len() < HEADER_LEN {
            return Err(FrameError::Truncated {
                need: HEADER_LEN,
                have: bytes.len(),
            });
        }
        let magic: [u8; 4] = bytes[..4].try_into().expect("4 bytes");
        if magic != FRAME_MAGIC {
            return Err(FrameError::BadMagic { found: magic });
        }
        if bytes[OFF_VERSION] != FRAME_VERSION {
            return Err(FrameError::UnsupportedVersion {
                found: bytes[OFF_VERSION],
            });
        }
        let stored_crc = le_u32(bytes, OFF_HEADER_CRC);
        let computed = crc32fast::hash(&bytes[..OFF_HEADER_CRC]);
        if stored_crc != computed {
            return Err(FrameError::HeaderChecksum {
                stored: stored_crc,
                computed,
            });
        }
        let raw_codec = bytes[OFF_CODEC];
        let codec = CodecId::from_u8(raw_codec).ok_or(FrameError::UnknownCodec {
            id: raw_codec,
            max: crate::codec::CODECS.len() as u8 - 1,
        })?;
        let flags = bytes[OFF_FLAGS];
        if flags & !FLAG_HOLE != 0 {
            return Err(FrameError::BadHeader("unknown flag bits set"));
        }
        let header = FrameHeader {
            codec,
            level: bytes[OFF_LEVEL],
            hole: flags & FLAG_HOLE != 0,
            logical_len: le_u32(bytes, OFF_LOGICAL_LEN),
            stored_len: le_u32(bytes, OFF_STORED_LEN),
            logical_crc: le_u32(bytes, OFF_LOGICAL_CRC),
            stored_hash: le_u64(bytes, OFF_STORED_HASH),
        };
        header.check_consistent()?;
        Ok(header)
    }

    // A header that passed its CRC can still lie if it was written by a buggy or hostile producer:
    // these rules bound every allocation and copy the decoder makes.
    fn check_consistent(&self) -> Result<(), FrameError> {
        let logical = self.logical_len as usize;
        let stored = self.stored_len as usize;
        if logical > MAX_RECORD_SIZE {
            return Err(FrameError::BadHeader(
                "logical length exceeds the 16 MiB record limit",
            ));
        }
        let info = self.codec.info();
        if self.level < info.min_level && info.has_levels() || self.level > info.max_level {
            return Err(FrameError::BadHeader("level out of range for the codec"));
        }
        if self.hole {
            if self.codec != CodecId::Off || stored != 0 {
                return Err(FrameError::BadHeader("a hole has no payload and codec off"));
            }
        } else if self.codec == CodecId::Off {
            if stored != logical {
                return Err(FrameError::BadHeader(
                    "an uncompressed payload must equal the logical length",
                ));
            }
        } else if stored >= logical {
            // The engine stores anything that does not shrink as codec off.
            return Err(FrameError::BadHeader(
                "a compressed payload must be shorter than the record",
            ));
        }
        Ok(())
    }
}

/// How to decode: which deflate engine inflates gzip payloads. Any engine reads any writer's output.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct DecodeOptions {
    /// The engine used for gzip payloads.
    pub deflate: DeflateEngine,
}

/// Decodes a whole frame (exactly one frame, no trailing bytes) into a new buffer.
pub fn decode_frame(frame: &[u8]) -> Result<Vec<u8>, FrameError> {
    decode_frame_with(frame, DecodeOptions::default())
}

/// [`decode_frame`] with explicit options.
pub fn decode_frame_with(frame: &[u8], options: DecodeOptions) -> Result<Vec<u8>, FrameError> {
    let header = FrameHeader::parse(frame)?;
    let mut out = vec![0u8; header.logical_len as usize];
    decode_verified(&header, frame, &mut out, options)?;
    Ok(out)
}

/// Decodes a frame into `out`, which must be exactly the record's logical length. Nothing is
/// written past `out`, whatever the frame says.
pub fn decode_frame_into(
    frame: &[u8],
    out: &mut [u8],
    options: DecodeOptions,
) -> Result<FrameHeader, FrameError> {
    let header = FrameHeader::parse(frame)?;
    if out.len() != header.logical_len as usize {
        return Err(FrameError::OutputSize {
            need: header.logical_len as usize,
            have: out.len(),
        });
    }
    decode_verified(&header, frame, out, options)?;
    Ok(header)
}

/// [`decode_frame_with`] on a shared buffer. A record stored as-is is returned as a view into
/// `frame` after its checksums are verified, without copying it; other codecs decode into a new
/// buffer.
pub fn decode_frame_shared(frame: Bytes, options: DecodeOptions) -> Result<Bytes, FrameError> {
    let header = FrameHeader::parse(&frame)?;
    decode_parsed_shared(&header, frame, options)
}

/// [`decode_frame_shared`] for a caller that already holds `frame`'s header, parsed with
/// [`FrameHeader::parse`] (or the [`Encoded::header`](crate::Encoded::header) the engine returned):
/// the header is not parsed a second time. Everything else is verified as in every decode: the
/// frame's length, the payload's hash, that the codec is built in, and the decoded record's CRC.
/// `header` must be the one at the start of `frame`.
pub fn decode_parsed_shared(
    header: &FrameHeader,
    frame: Bytes,
    options: DecodeOptions,
) -> Result<Bytes, FrameError> {
    debug_assert_eq!(
        FrameHeader::parse(&frame).as_ref(),
        Ok(header),
        "the header given is not frame's own"
    );
    if header.codec != CodecId::Off || header.hole {
        let mut out = vec![0u8; header.logical_len as usize];
        decode_verified(header, &frame, &mut out, options)?;
        return Ok(Bytes::from(out));
    }
    // The header's rules make an uncompressed payload exactly the logical length.
    let payload = verified_payload(header, &frame)?;
    check_logical(header, payload)?;
    Ok(frame.slice(HEADER_LEN..))
}

/// Checks the frame's length, the stored checksum and that its codec is built in; returns the
/// payload.
fn verified_payload<'a>(header: &FrameHeader, frame: &'a [u8]) -> Result<&'a [u8], FrameError> {
    let need = header.frame_len();
    if frame.len() < need {
        return Err(FrameError::Truncated {
            need,
            have: frame.len(),
        });
    }
    if frame.len() > need {
        return Err(FrameError::TrailingBytes {
            extra: frame.len() - need,
        });
    }
    let payload = &frame[HEADER_LEN..];
    let computed = stored_hash(payload);
    if computed != header.stored_hash {
        return Err(FrameError::StoredChecksum {
            stored: header.stored_hash,
            computed,
        });
    }
    let info = header.codec.info();
    if !info.built_in {
        return Err(FrameError::NotBuiltIn { codec: info.name });
    }
    Ok(payload)
}

fn check_logical(header: &FrameHeader, data: &[u8]) -> Result<(), FrameError> {
    let computed = crc32fast::hash(data);
    if computed != header.logical_crc {
        return Err(FrameError::LogicalChecksum {
            stored: header.logical_crc,
            computed,
        });
    }
    Ok(())
}

fn decode_verified(
    header: &FrameHeader,
    frame: &[u8],
    out: &mut [u8],
    options: DecodeOptions,
) -> Result<(), FrameError> {
    let payload = verified_payload(header, frame)?;
    if header.hole {
        out.fill(0);
    } else {
        format::decompress(header.codec, options.deflate, payload, out).map_err(|e| {
            FrameError::Corrupt {
                codec: header.codec.info().name,
                reason: e.to_string(),
            }
        })?;
    }
    check_logical(header, out)
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn raw(data: &[u8]) -> Vec<u8> {
        raw_frame(&[data])
    }

    #[test]
    fn header_is_32_bytes_little_endian() {
        let frame = raw(b"abc");
        assert_eq!(&frame[..4], b"PRSF");
        assert_eq!(frame[4], 1);
        assert_eq!(&frame[8..12], &3u32.to_le_bytes());
        assert_eq!(&frame[12..16], &3u32.to_le_bytes());
        assert_eq!(&frame[32..], b"abc");
    }

    #[test]
    fn rejects_lying_lengths() {
        let mut frame = raw(b"hello world");
        frame.pop();
        assert!(matches!(
            decode_frame(&frame),
            Err(FrameError::Truncated { .. })
        ));
        let mut frame = raw(b"hello world");
        frame.push(0);
        assert_eq!(
            decode_frame(&frame),
            Err(FrameError::TrailingBytes { extra: 1 })
        );
    }

    #[test]
    #[cfg(not(feature = "zstd"))]
    fn compiled_out_codecs_decode_to_not_built_in() {
        let payload = [1u8, 2, 3, 4, 5];
        let header = FrameHeader {
            codec: CodecId::Zstd,
            level: 3,
            hole: false,
            logical_len: 10,
            stored_len: 5,
            logical_crc: 0,
            stored_hash: stored_hash(&payload),
        };
        let frame = encode_frame(header, &payload);
        assert_eq!(
            decode_frame(&frame),
            Err(FrameError::NotBuiltIn { codec: "zstd" })
        );
        assert!(decode_frame(&frame)
            .unwrap_err()
            .to_string()
            .contains("not built into"));
    }

    proptest! {
        #[test]
        fn header_round_trips(codec in 0u8..5, level in 0u8..20, hole: bool, logical in 0u32..(16 << 20),
                              stored: u32, crc: u32, hash: u64) {
            let header = FrameHeader {
                codec: CodecId::from_u8(codec).unwrap(), level, hole,
                logical_len: logical, stored_len: stored, logical_crc: crc, stored_hash: hash,
            };
            let bytes = header.to_bytes();
            match FrameHeader::parse(&bytes) {
                Ok(parsed) => prop_assert_eq!(parsed, header),
                Err(FrameError::BadHeader(_)) => prop_assert!(header.check_consistent().is_err()),
                Err(other) => prop_assert!(false, "unexpected {other}"),
            }
        }

        #[test]
        fn hole_frames_decode_to_zeros(len in 0usize..300_000) {
            prop_assert_eq!(decode_frame(&hole_frame(len)).unwrap(), vec![0u8; len]);
        }

        #[test]
        fn raw_frames_round_trip(data in proptest::collection::vec(any::<u8>(), 0..4096)) {
            prop_assert_eq!(decode_frame(&raw(&data)).unwrap(), data);
        }

        #[test]
        fn any_single_bit_flip_is_detected(data in proptest::collection::vec(any::<u8>(), 1..512),
                                           bit in any::<prop::sample::Index>()) {
            let mut frame = raw(&data);
            let bit = bit.index(frame.len() * 8);
            frame[bit / 8] ^= 1 << (bit % 8);
            prop_assert!(decode_frame(&frame).is_err());
        }

        #[test]
        fn arbitrary_bytes_never_panic(bytes in proptest::collection::vec(any::<u8>(), 0..256)) {
            let _ = decode_frame(&bytes);
            let _ = decode_frame_shared(Bytes::from(bytes), DecodeOptions::default());
        }

        #[test]
        fn shared_decode_agrees_with_copying_decode(
            data in proptest::collection::vec(any::<u8>(), 0..2048),
            hole: bool,
            flip in proptest::option::of(any::<prop::sample::Index>()),
        ) {
            let mut frame = if hole { hole_frame(data.len()) } else { raw(&data) };
            if let Some(bit) = flip {
                let bit = bit.index(frame.len() * 8);
                frame[bit / 8] ^= 1 << (bit % 8);
            }
            let copied = decode_frame(&frame);
            let shared = decode_frame_shared(Bytes::from(frame), DecodeOptions::default());
            match (copied, shared) {
                (Ok(a), Ok(b)) => prop_assert_eq!(&a[..], &b[..]),
                (Err(a), Err(b)) => prop_assert_eq!(a.to_string(), b.to_string()),
                (a, b) => prop_assert!(false, "copying {a:?}, shared {b:?}"),
            }
        }
    }
}
