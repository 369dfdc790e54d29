//! Settings for opening a store, and the ranges of segment numbers the writers of a shared pool
//! own.

use super::{DEFAULT_SEGMENT_SIZE, FIRST_SEGMENT};

/// Settings for opening a store (not stored in the pool).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct StoreConfig {
    /// An append that would take the open segment past this size goes to a new segment (an
    /// entry larger than this gets a segment of its own).
    pub segment_size: u64,
    /// The segment numbers this store appends to, recovers and collects: all of them for a pool
    /// with one writer. In a pool shared by several writers each has a range of its own
    /// ([`SegmentRange::of_client`]); segments outside it are only read.
    pub own_segments: SegmentRange,
}

impl Default for StoreConfig {
    fn default() -> Self {
        Self {
            segment_size: DEFAULT_SEGMENT_SIZE,
            own_segments: SegmentRange::ALL,
        }
    }
}

/// Bits of a segment number below a shared pool's client number: each client numbers its
/// segments from `client << CLIENT_SHIFT`, so it can make 2^40 - 1 of them.
pub const CLIENT_SHIFT: u32 = 40;

/// Segment numbers `start..end`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct SegmentRange {
    /// The first number.
    pub start: u64,
    /// One past the last number.
    pub end: u64,
}

impl SegmentRange {
    /// Every segment number.
    pub const ALL: SegmentRange = SegmentRange {
        start: FIRST_SEGMENT,
        end: u64::MAX,
    };

    /// The numbers of client `client` (1 to 2^23 - 1) of a shared pool; `None` for other
    /// numbers. Client 0 would overlap the numbers of a pool with one writer.
    pub fn of_client(client: u64) -> Option<SegmentRange> {
        if client == 0 || client >= 1 << (63 - CLIENT_SHIFT) {
            return None;
        }
        let start = client << CLIENT_SHIFT;
        Some(SegmentRange {
            start: start + FIRST_SEGMENT,
            end: start + (1 << CLIENT_SHIFT),
        })
    }

    /// The client of a shared pool whose range holds `segment` (0 for the numbers below client
    /// 1's, which no client of a shared pool writes).
    pub fn client_of(segment: u64) -> u64 {
        segment >> CLIENT_SHIFT
    }

    /// Whether `segment` is in the range.
    pub fn contains(&self, segment: u64) -> bool {
        (self.start..self.end).contains(&segment)
    }
}
