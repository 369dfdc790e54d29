//! What the metadata knows of a copy of itself ([`MetaEngine::copy_to`](crate::MetaEngine::copy_to),
//! the pool's `meta.db.copy`): whether it is still current, and whether it is sound.
//!
//! Current: every committed change of the metadata, other than its statistics, sets a counter,
//! the change tag, to a value no change had before. A copy holds the tag of the state it was
//! taken of, so a copy whose tag is the metadata's own is still current, whichever process made
//! the changes and whether or not it closed cleanly; a count would not tell a copy from a
//! metadata file restored from a backup and changed as often since. The statistics (bytes read,
//! records decoded) change on every mount, also one that only reads; they do not set the tag,
//! so such a mount leaves its copy current.

use std::collections::hash_map::RandomState;
use std::hash::{BuildHasher, Hasher};
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use crate::engine::{Txn, COUNTER_CHANGE_TAG};
use crate::{MetaStore, Result};

impl MetaStore {
    /// The change tag of the committed metadata: 0 if nothing has set it yet (metadata last
    /// changed by a build before the tag, or by an engine that keeps none).
    pub fn change_tag(&self) -> Result<u64> {
        self.read(|tx| tx.get_counter(COUNTER_CHANGE_TAG))
    }

    /// Whether the copy at `path` ([`MetaStore::copy_to`]) holds everything the metadata holds
    /// now but statistics: its change tag is the metadata's own. `false` when either has no tag
    /// or the copy cannot be read (missing, damaged, another engine's).
    pub fn copy_is_current(&self, path: &Path) -> Result<bool> {
        let tag = self.change_tag()?;
        if tag == 0 {
            return Ok(false);
        }
        Ok(self
            .engine
            .counter_in_copy(path, COUNTER_CHANGE_TAG)
            .is_ok_and(|copied| copied == Some(tag)))
    }

    /// What is wrong with the copy at `path` ([`MetaStore::copy_to`]), if anything: it does
    /// not open, or its pages or B-trees are damaged. Reads only.
    pub fn check_copy(&self, path: &Path) -> Result<Option<String>> {
        self.engine.check_copy(path)
    }
}

/// Sets the change tag in `tx`, a transaction that changes the metadata (not only its
/// statistics), before its commit.
pub(crate) fn note_change(tx: &mut dyn Txn) -> Result<()> {
    match tx.keeps_change_tag() {
        true => tx.set_counter(COUNTER_CHANGE_TAG, fresh_tag()),
        false => Ok(()),
    }
}

/// A tag no earlier change had: a random start for each process, then one more for each change.
/// Never 0.
fn fresh_tag() -> u64 {
    static START: OnceLock<u64> = OnceLock::new();
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = *START.get_or_init(|| {
        // The standard library seeds each process's hash keys from the system's randomness.
        let mut h = RandomState::new().build_hasher();
        h.write_u32(std::process::id());
        h.write_u128(
            SystemTime::now()
                .duration_since(UNIX_EPOCH)
                .map_or(0, |d| d.as_nanos()),
        );
        h.finish()
    });
    match start.wrapping_add(NEXT.fetch_add(1, Ordering::Relaxed)) {
        0 => 1,
        tag => tag,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tags_are_never_zero_and_never_repeat_in_a_process() {
        let tags: std::collections::HashSet<u64> = (0..10_000).map(|_| fresh_tag()).collect();
        assert_eq!(tags.len(), 10_000);
        assert!(!tags.contains(&0));
    }
}
