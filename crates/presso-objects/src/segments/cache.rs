//! The read cache of an object directory: blocks of uploaded segment bytes, kept in memory up to
//! a byte budget, the least recently used dropped first.

use std::collections::HashMap;

use bytes::Bytes;

/// Size of the blocks the read cache keeps, by default.
pub const CACHE_BLOCK: u64 = 1 << 20;

/// Bytes of uploaded segments read recently, in whole aligned blocks, up to a budget, the least
/// recently used dropped first.
pub(super) struct BlockCache {
    /// Size of the blocks, in bytes.
    pub(super) block: u64,
    blocks: HashMap<(u64, u64), (Bytes, u64)>,
    bytes: u64,
    budget: u64,
    clock: u64,
}

impl BlockCache {
    /// An empty cache of blocks of [`CACHE_BLOCK`] bytes, holding up to `budget` bytes.
    pub(super) fn new(budget: u64) -> Self {
        BlockCache {
            block: CACHE_BLOCK,
            blocks: HashMap::new(),
            bytes: 0,
            budget,
            clock: 0,
        }
    }

    pub(super) fn get(&mut self, segment: u64, block: u64) -> Option<Bytes> {
        self.clock += 1;
        let clock = self.clock;
        self.blocks.get_mut(&(segment, block)).map(|(b, used)| {
            *used = clock;
            b.clone()
        })
    }

    pub(super) fn put(&mut self, segment: u64, block: u64, bytes: Bytes) {
        if (bytes.len() as u64) > self.budget {
            return;
        }
        self.clock += 1;
        self.bytes += bytes.len() as u64;
        if let Some((old, _)) = self.blocks.insert((segment, block), (bytes, self.clock)) {
            self.bytes -= old.len() as u64;
        }
        while self.bytes > self.budget {
            let Some(&oldest) = self
                .blocks
                .iter()
                .min_by_key(|(_, (_, used))| *used)
                .map(|(k, _)| k)
            else {
                break;
            };
            if let Some((b, _)) = self.blocks.remove(&oldest) {
                self.bytes -= b.len() as u64;
            }
        }
    }

    /// Drops the blocks of `segment` that reach past `len`.
    pub(super) fn forget_from(&mut self, segment: u64, len: u64) {
        let gone: Vec<(u64, u64)> = self
            .blocks
            .keys()
            .filter(|&&(s, b)| s == segment && (b + 1) * self.block > len)
            .copied()
            .collect();
        for key in gone {
            if let Some((b, _)) = self.blocks.remove(&key) {
                self.bytes -= b.len() as u64;
            }
        }
    }
}
