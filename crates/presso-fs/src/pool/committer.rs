//! The commit thread: commits each transaction group as it closes, folds the metadata log into
//! the database file every minute and refreshes the metadata copy every few minutes if the
//! metadata changed (less often for metadata so large that its copy takes long).

use std::time::{Duration, Instant};

use presso_meta::MetaError;

use super::Pool;
use crate::error::FsError;

/// How often the commit thread folds the metadata log into the database file while mounted,
/// so that the file alone is never far behind.
const CHECKPOINT_INTERVAL: Duration = Duration::from_secs(60);

pub(super) fn commit_loop(pool: std::sync::Weak<Pool>) {
    let mut checkpointed = Instant::now();
    let mut copied = Instant::now();
    loop {
        let Some(pool) = pool.upgrade() else { return };
        let Some(group) = pool.txgs.next_group(pool.options.txg_interval) else {
            return;
        };
        let mut result = pool.commit_group(group.number, &group.ops, group.durable);
        if let Err(e) = &result {
            if cut_off_by_server(&pool, e) {
                // A shared pool's metadata server ended the commit's transaction (a restart, a
                // dropped connection). Beginning the next attempt waits for the server, up to
                // the client's server timeout, so the group gets one more attempt before
                // whoever waits for it hears of a failure: operations wait through a restart.
                crate::log!(
                    "presso: transaction group {} was cut off ({e}); trying it again",
                    group.number
                );
                result = pool.commit_group(group.number, &group.ops, group.durable);
            }
        }
        let failed = result.is_err();
        pool.txgs.finish(group, result);
        if !failed && checkpointed.elapsed() >= CHECKPOINT_INTERVAL {
            checkpointed = Instant::now();
            if let Err(e) = pool.meta.checkpoint() {
                crate::log!("presso: metadata checkpoint failed (retried later): {e}");
            }
        }
        if pool.metadata_copy_due(copied.elapsed()) {
            // Names and attributes change outside the groups: the refresh itself asks the
            // metadata whether anything changed since the copy.
            copied = Instant::now();
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

/// Whether `e` is the metadata server or the way to it failing a shared pool's commit, rather
/// than the commit itself failing (a full disk, damage): worth one more attempt.
fn cut_off_by_server(pool: &Pool, e: &FsError) -> bool {
    pool.client().is_some() && matches!(e, FsError::Meta(MetaError::Io(_)))
}
