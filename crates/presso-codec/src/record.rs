//! A record's bytes as a scatter/gather list.

use std::borrow::Cow;

use bytes::Bytes;

/// The bytes of one record, possibly spread over several buffers (e.g. the tail of one application
/// write and the head of the next). Backends that stream (ISA-L) read the segments in place; only
/// engines that need one contiguous buffer gather them, and only when there is more than one.
#[derive(Clone, Debug, Default)]
pub struct Record {
    segments: Vec<Bytes>,
    len: usize,
}

impl Record {
    /// A record made of `segments`, in order. Empty segments are dropped.
    pub fn from_segments(segments: impl IntoIterator<Item = Bytes>) -> Record {
        let segments: Vec<Bytes> = segments.into_iter().filter(|s| !s.is_empty()).collect();
        let len = segments.iter().map(Bytes::len).sum();
        Record { segments, len }
    }

    /// Total bytes.
    pub fn len(&self) -> usize {
        self.len
    }

    /// Whether the record has no bytes.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// The segments as slices, in order.
    pub fn slices(&self) -> Vec<&[u8]> {
        self.segments.iter().map(|s| s.as_ref()).collect()
    }

    /// One contiguous view: borrowed when there is a single segment, gathered (copied) otherwise.
    pub fn contiguous(&self) -> Cow<'_, [u8]> {
        match self.segments.as_slice() {
            [] => Cow::Borrowed(&[]),
            [one] => Cow::Borrowed(one.as_ref()),
            many => Cow::Owned(many.concat()),
        }
    }
}

impl From<Vec<u8>> for Record {
    fn from(data: Vec<u8>) -> Record {
        Record::from_segments([Bytes::from(data)])
    }
}

impl From<Bytes> for Record {
    fn from(data: Bytes) -> Record {
        Record::from_segments([data])
    }
}

impl From<&[u8]> for Record {
    fn from(data: &[u8]) -> Record {
        Record::from_segments([Bytes::copy_from_slice(data)])
    }
}
