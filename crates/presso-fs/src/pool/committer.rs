//! The commit thread: commits each transaction group as it closes, folds the metadata log into
//! the database file every minute and refreshes the metadata copy every few minutes of
//! activity.

use std::time::{Duration, Instant};

use super::Pool;

/// How often the commit thread folds the metadata log into the database file while mounted,
/// so that the file alone is never far behind.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

pub(super) fn commit_loop(pool: std::sync::Weak<Pool>) {
    let mut checkpointed = Instant::now();
    let (mut copied, mut changed) = (Instant::now(), false);
    loop {
        let Some(pool) = pool.upgrade() else { return };
        let Some(group) = pool.txgs.next_group(pool.options.txg_interval) else {
            return;
        };
        let result = pool.commit_group(group.number, &group.ops, group.durable);
        let failed = result.is_err();
        changed |= !failed && !group.ops.is_empty();
        pool.txgs.finish(group, result);
        if !failed && checkpointed.elapsed() >= CHECKPOINT_INTERVAL {
            checkpointed = Instant::now();
            if let Err(e) = pool.meta.checkpoint() {
                crate::log!("presso: metadata checkpoint failed (retried later): {e}");
            }
        }
        if changed && copied.elapsed() >= pool.options.metadata_copy_every {
            (copied, changed) = (Instant::now(), false);
            pool.refresh_metadata_copy_later();
        }
        if failed {
            if pool.store.is_failed() {
                // Nothing commits until the pool is reopened: whoever waits must hear it.
                pool.txgs.stop_failed();
                return;
            }
            // Avoid a hot loop while the cause (a full disk) persists.
            std::thread::sleep(Duration::from_millis(200));
        }
        drop(pool);
    }
}
