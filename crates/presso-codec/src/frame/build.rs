//! Building frames: a payload sealed behind its header, a record stored as it is, a hole; and
//! [`FrameBuf`], a finished frame as the engine hands it over.

use std::borrow::Cow;
use std::hash::Hasher;

use twox_hash::XxHash3_64;

use super::{le_u32, stored_hash, FrameHeader, HEADER_LEN, OFF_LOGICAL_CRC};
use crate::codec::{CodecId, CodecSpec};
use crate::record::Record;

/// A complete frame (header and payload) ready to be stored. A record stored as it is keeps
/// the record's own buffers as its payload instead of being copied behind its header, so it is
/// written from them ([`FrameBuf::parts`]) and its checksum is had without reading them again
/// ([`FrameBuf::crc32`]).
#[derive(Clone, Debug)]
pub struct FrameBuf(Repr);

#[derive(Clone, Debug)]
enum Repr {
    Whole(Vec<u8>),
    Raw {
        header: [u8; HEADER_LEN],
        record: Record,
    },
}

impl FrameBuf {
    /// A frame in one buffer, header first.
    pub fn whole(frame: Vec<u8>) -> FrameBuf {
        FrameBuf(Repr::Whole(frame))
    }

    /// Bytes in the frame, header included.
    pub fn len(&self) -> usize {
        match &self.0 {
            Repr::Whole(frame) => frame.len(),
            Repr::Raw { record, .. } => HEADER_LEN + record.len(),
        }
    }

    /// Whether the frame has no bytes (never true of a frame the engine made).
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// The frame's bytes in order, header first, as views of the buffers that hold them.
    pub fn parts(&self) -> Vec<&[u8]> {
        match &self.0 {
            Repr::Whole(frame) => vec![frame.as_slice()],
            Repr::Raw { header, record, .. } => std::iter::once(header.as_slice())
                .chain(record.slices())
                .collect(),
        }
    }

    /// One contiguous view: borrowed when the frame is one buffer, copied together otherwise.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        match &self.0 {
            Repr::Whole(frame) => Cow::Borrowed(frame),
            Repr::Raw { .. } => Cow::Owned(self.parts().concat()),
        }
    }

    /// The frame in one buffer of its own.
    pub fn into_vec(self) -> Vec<u8> {
        match self.0 {
            Repr::Whole(frame) => frame,
            Repr::Raw { .. } => self.contiguous().into_owned(),
        }
    }

    /// CRC-32 (gzip polynomial) of all the frame's bytes. For a record stored as it is, the
    /// header's CRC combined with the record's, which the header holds (its logical CRC): the
    /// record is not read again.
    pub fn crc32(&self) -> u32 {
        match &self.0 {
            Repr::Whole(frame) => crc32fast::hash(frame),
            Repr::Raw { header, record } => {
                let mut crc = crc32fast::Hasher::new();
                crc.update(header);
                crc.combine(&crc32fast::Hasher::new_with_initial_len(
                    le_u32(header, OFF_LOGICAL_CRC),
                    record.len() as u64,
                ));
                crc.finalize()
            }
        }
    }
}

impl From<Vec<u8>> for FrameBuf {
    fn from(frame: Vec<u8>) -> FrameBuf {
        FrameBuf::whole(frame)
    }
}

impl PartialEq for FrameBuf {
    fn eq(&self, other: &FrameBuf) -> bool {
        self.len() == other.len() && self.contiguous() == other.contiguous()
    }
}

impl Eq for FrameBuf {}

/// An uncompressed (`off`) frame of `record` that keeps the record's buffers as its payload,
/// and the header it starts with. Same bytes as [`build_raw`] of the record's segments.
pub fn raw_record(record: &Record) -> (FrameBuf, FrameHeader) {
    let header = raw_header(&record.slices());
    let frame = FrameBuf(Repr::Raw {
        header: header.to_bytes(),
        record: record.clone(),
    });
    (frame, header)
}

/// The header of an uncompressed (`off`) frame of the record `segments`; each checksum reads
/// the segments where they are.
fn raw_header(segments: &[&[u8]]) -> FrameHeader {
    let len = segments.iter().map(|s| s.len()).sum::<usize>() as u32;
    let stored_hash = match segments {
        [one] => stored_hash(one),
        many => {
            let mut hasher = XxHash3_64::new();
            for segment in many {
                hasher.write(segment);
            }
            hasher.finish()
        }
    };
    FrameHeader {
        codec: CodecId::Off,
        level: 0,
        hole: false,
        logical_len: len,
        stored_len: len,
        logical_crc: logical_crc(segments),
        stored_hash,
    }
}

/// Builds a complete frame: header followed by `payload`.
pub fn encode_frame(header_fields: FrameHeader, payload: &[u8]) -> Vec<u8> {
    let mut frame = Vec::with_capacity(HEADER_LEN + payload.len());
    frame.extend_from_slice(&header_fields.to_bytes());
    frame.extend_from_slice(payload);
    frame
}

/// CRC-32 (gzip polynomial) of a record given as segments.
pub fn logical_crc(segments: &[&[u8]]) -> u32 {
    let mut hasher = crc32fast::Hasher::new();
    for segment in segments {
        hasher.update(segment);
    }
    hasher.finalize()
}

/// Writes the header in front of a payload already at `frame[HEADER_LEN..]`, produced with `spec`
/// from the record `segments`; returns the header written.
pub fn seal_frame(frame: &mut [u8], spec: CodecSpec, segments: &[&[u8]]) -> FrameHeader {
    let header = FrameHeader {
        codec: spec.codec,
        level: spec.level,
        hole: false,
        logical_len: segments.iter().map(|s| s.len()).sum::<usize>() as u32,
        stored_len: (frame.len() - HEADER_LEN) as u32,
        logical_crc: logical_crc(segments),
        stored_hash: stored_hash(&frame[HEADER_LEN..]),
    };
    frame[..HEADER_LEN].copy_from_slice(&header.to_bytes());
    header
}

/// An uncompressed (`off`) frame holding the record's segments.
pub fn raw_frame(segments: &[&[u8]]) -> Vec<u8> {
    build_raw(segments).0
}

/// [`raw_frame`] and the header it starts with.
pub fn build_raw(segments: &[&[u8]]) -> (Vec<u8>, FrameHeader) {
    let header = raw_header(segments);
    let mut frame = Vec::with_capacity(HEADER_LEN + header.stored_len as usize);
    frame.extend_from_slice(&header.to_bytes());
    for segment in segments {
        frame.extend_from_slice(segment);
    }
    (frame, header)
}

/// A hole frame: `len` zero bytes, no payload.
pub fn hole_frame(len: usize) -> Vec<u8> {
    build_hole(len).0
}

/// [`hole_frame`] and its header.
pub(crate) fn build_hole(len: usize) -> (Vec<u8>, FrameHeader) {
    static ZEROS: [u8; 64 << 10] = [0; 64 << 10];
    let mut hasher = crc32fast::Hasher::new();
    let mut left = len;
    while left > 0 {
        let n = left.min(ZEROS.len());
        hasher.update(&ZEROS[..n]);
        left -= n;
    }
    let header = FrameHeader {
        codec: CodecId::Off,
        level: 0,
        hole: true,
        logical_len: len as u32,
        stored_len: 0,
        logical_crc: hasher.finalize(),
        stored_hash: stored_hash(&[]),
    };
    (header.to_bytes().to_vec(), header)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use proptest::prelude::*;

    /// A record of `data` cut at `cuts` (positions taken modulo its length).
    fn record_cut(data: &[u8], cuts: &[usize]) -> Record {
        let mut at: Vec<usize> = cuts.iter().map(|c| c % (data.len() + 1)).collect();
        at.sort_unstable();
        let mut from = 0;
        let mut segments = Vec::new();
        for cut in at.into_iter().chain([data.len()]) {
            segments.push(Bytes::copy_from_slice(&data[from..cut]));
            from = cut;
        }
        Record::from_segments(segments)
    }

    proptest! {
        #[test]
        fn a_record_kept_in_its_buffers_is_the_frame_built_by_copying(
            data in proptest::collection::vec(any::<u8>(), 1..70_000),
            cuts in proptest::collection::vec(any::<usize>(), 0..5),
        ) {
            let record = record_cut(&data, &cuts);
            let (copied, copied_header) = build_raw(&record.slices());
            let (kept, header) = raw_record(&record);
            prop_assert_eq!(header, copied_header);
            prop_assert_eq!(header.stored_hash, stored_hash(&copied[HEADER_LEN..]));
            prop_assert_eq!(header.logical_crc, crc32fast::hash(&data));
            prop_assert_eq!(FrameHeader::parse(&copied), Ok(header));
            prop_assert_eq!(kept.len(), copied.len());
            prop_assert_eq!(kept.parts().concat(), copied.clone());
            prop_assert_eq!(kept.contiguous().into_owned(), copied.clone());
            prop_assert_eq!(kept.crc32(), crc32fast::hash(&copied));
            prop_assert_eq!(kept.clone().into_vec(), copied.clone());
            prop_assert_eq!(&kept, &FrameBuf::whole(copied.clone()));
        }

        #[test]
        fn a_frame_in_one_buffer_is_that_buffer(
            data in proptest::collection::vec(any::<u8>(), 0..5_000),
        ) {
            let frame = FrameBuf::whole(data.clone());
            prop_assert_eq!(frame.parts(), vec![data.as_slice()]);
            prop_assert_eq!(frame.crc32(), crc32fast::hash(&data));
            prop_assert_eq!(frame.len(), data.len());
            prop_assert_eq!(frame.into_vec(), data);
        }
    }

    #[test]
    fn a_record_kept_in_its_buffers_decodes_and_differs_when_its_bytes_do() {
        let record = record_cut(b"the same bytes, in two buffers", &[9]);
        let (frame, _) = raw_record(&record);
        assert_eq!(
            super::super::decode_frame(&frame.contiguous()).unwrap(),
            b"the same bytes, in two buffers"
        );
        let changed = record_cut(b"the same bytes, in two buffers!", &[9]);
        let (other, _) = raw_record(&changed);
        assert_ne!(frame, other);
        assert_ne!(frame.crc32(), other.crc32());
    }
}
