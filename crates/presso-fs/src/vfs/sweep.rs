//! The durability sweep: everything the file layer received becomes durable within
//! [`VfsConfig::sync_interval`](super::VfsConfig::sync_interval), whether or not anyone calls
//! fsync.
//!
//! Half the interval after the oldest change not yet durable ([`Unsynced`]), the sweeper runs
//! [`Vfs::sync_all`]: every partial record is compressed and stored, the records already in the
//! engine's queues are waited for, every file's size is queued, and one durable commit follows
//! (segment synced, then the metadata committed with `synchronous=FULL`). The other half of the
//! interval is the sweep's own time. Nothing changed, nothing runs: an idle pool costs no sync.
//! A sweep that could not commit, or left records it could not store (an I/O error, a full
//! disk), failed: its changes stay pending and the next sweep retries them.

use std::sync::{Arc, Weak};
use std::time::Duration;

use super::Vfs;
use crate::pool::Unsynced;

/// The sweeper thread's loop: sweeps `delay` after each oldest pending change until the file
/// layer stops or is gone.
pub(super) fn sweeper(vfs: Weak<Vfs>, unsynced: Arc<Unsynced>, delay: Duration) {
    while unsynced.take_due(delay).is_some() {
        let Some(vfs) = vfs.upgrade() else { return };
        // Records that could not be stored are not durable: the sweep failed, and is retried.
        let result = vfs.sync_all().and_then(|()| vfs.all_stored());
        if let Err(e) = &result {
            if !vfs.stopping.load(std::sync::atomic::Ordering::SeqCst) {
                crate::log!("presso: durability sweep failed (retried): {e}");
            }
        }
        unsynced.swept(result.is_ok());
    }
}
