//! What the clients of a shared pool do about clients that are gone: one of them at a time,
//! the one holding the pool's maintenance lease, takes clients silent for longer than the
//! client timeout for stopped (removes the files they kept open after unlinking them, their
//! locks, their sessions) and collects the segments of clients without a session; every
//! client removes the local directories of such clients on its own machine.
//!
//! A client without a session can never commit again (the metadata refuses every write of a
//! client whose session is gone), so what it left is the others' to remove once no committed
//! metadata refers to it.

use std::collections::{BTreeMap, BTreeSet};
use std::path::Path;
use std::time::Duration;

use presso_meta::{MetaStore, SegmentUsage};
use presso_store::{SegmentRange, SegmentStats};

use super::shared::unix_now;
use super::Pool;
use crate::error::Result;

/// The lease the work on the whole pool runs under.
pub(super) const MAINTENANCE_LEASE: &str = "maintenance";

/// How often a client with `timeout` as its client timeout looks at the segments (see
/// [`tidy`]), besides its first beat and the beats that end clients: every five timeouts, at
/// most every 5 minutes. Each look counts the live bytes of every segment in the metadata, and
/// the lease holder's lists the pool's objects.
pub(super) fn tidy_interval(timeout: Duration) -> Duration {
    (timeout * 5).min(Duration::from_secs(300))
}

/// A client's look at the segments, off its heartbeat's thread
/// ([`crate::maintenance::collect_segments_of_gone_clients`] by the automatic reclaim's rule),
/// logging what it did.
pub(super) fn tidy(pool: &Pool) {
    let policy = crate::reclaim::ReclaimPolicy::default();
    match crate::maintenance::collect_segments_of_gone_clients(pool, &policy) {
        Ok(r) if r.gone_clients_segments > 0 => crate::log!(
            "presso: removed {} segments of clients that are gone ({} records moved)",
            r.gone_clients_segments,
            r.records_moved
        ),
        Ok(_) => {}
        Err(e) => crate::log!("presso: looking at the segments failed: {e}"),
    }
}

/// Cleaning up after clients that stopped: the work on the whole pool (their orphans, locks
/// and sessions) if client `me` holds the maintenance lease or can take it, renewing it for
/// `timeout`; then, on this machine, the local directories of clients without a session.
/// Returns the clients ended, `None` if another client holds the lease.
pub(super) fn maintain(
    meta: &MetaStore,
    me: u64,
    pool_dir: &Path,
    timeout: Duration,
) -> Result<Option<Vec<u64>>> {
    let ended = match take_maintenance_lease(meta, me, timeout)? {
        true => Some(end_stopped_clients(meta, me, timeout)?),
        false => None,
    };
    remove_directories_of_gone_clients(meta, pool_dir)?;
    Ok(ended)
}

/// Takes or renews the maintenance lease for client `me` for `timeout`: `Ok(false)` if another
/// client holds it.
fn take_maintenance_lease(meta: &MetaStore, me: u64, timeout: Duration) -> Result<bool> {
    let ttl = timeout.as_secs().max(1) as i64;
    Ok(meta.take_lease(MAINTENANCE_LEASE, me, unix_now(), ttl)?)
}

/// Takes every other client silent for longer than `timeout` for stopped: removes the files it
/// kept open after their names were gone and its locks, then its session. Returns the clients
/// ended.
fn end_stopped_clients(meta: &MetaStore, me: u64, timeout: Duration) -> Result<Vec<u64>> {
    let now = unix_now();
    let mut ended = Vec::new();
    for s in meta.clients()? {
        let silent = now.saturating_sub(s.heartbeat);
        if s.id == me || silent <= timeout.as_secs() as i64 {
            continue;
        }
        // Orphans and locks first: a client that stops here finds the session still there
        // next time.
        let freed = meta.purge_orphans_of(s.id)?;
        meta.release_client_locks(s.id)?;
        meta.end_client(s.id)?;
        crate::log!(
            "presso: client {} ({} pid {}) was silent for {silent} s: taken for stopped, {} \
             records of files it kept open removed",
            s.id,
            s.host,
            s.pid,
            freed.len()
        );
        ended.push(s.id);
    }
    Ok(ended)
}

/// Removes the directories under `pool_dir` (this machine's) of clients that have no session
/// any more: their staging held nothing committed.
fn remove_directories_of_gone_clients(meta: &MetaStore, pool_dir: &Path) -> Result<()> {
    let Ok(entries) = std::fs::read_dir(pool_dir) else {
        return Ok(());
    };
    // The directories first, then the sessions: a client registers before it makes its
    // directory, so every directory read here belongs to a client the list below has, unless
    // that client is gone. Listed the other way round, a client mounting in between would lose
    // its directory.
    let dirs: Vec<(u64, std::path::PathBuf)> = entries
        .flatten()
        .filter_map(|entry| {
            let name = entry.file_name();
            let id = name.to_str()?.strip_prefix("client-")?.parse().ok()?;
            Some((id, entry.path()))
        })
        .collect();
    let live: BTreeSet<u64> = meta.clients()?.iter().map(|s| s.id).collect();
    for (id, path) in dirs {
        if !live.contains(&id) {
            let _ = std::fs::remove_dir_all(path);
        }
    }
    Ok(())
}

impl Pool {
    /// Takes or renews the maintenance lease for this client for one client timeout:
    /// `Ok(false)` if another client holds it, or the pool is not shared.
    pub(crate) fn renew_maintenance_lease(&self) -> Result<bool> {
        let Some(client) = self.client() else {
            return Ok(false);
        };
        take_maintenance_lease(&self.meta, client.id(), self.options().client_timeout)
    }

    /// The segments in the object store of clients without a session, with their space from
    /// `usage` (the metadata's live records per segment), if this client holds (or can take)
    /// the maintenance lease: only
    /// its holder collects them. Empty for a pool that is not shared. A segment with live
    /// records that cannot be opened is left out (scrub reports what is wrong with it); one
    /// without live records comes with the size it could be measured at, or 0.
    pub(crate) fn segments_of_gone_clients(
        &self,
        usage: &BTreeMap<u64, SegmentUsage>,
    ) -> Result<Vec<SegmentStats>> {
        if !self.renew_maintenance_lease()? {
            return Ok(Vec::new());
        }
        // The segments first, then the sessions: a client registers before it makes its
        // first segment, so a segment listed here whose client has no session below belongs
        // to a client that is gone for good. The other way round, a client registering in
        // between would have its first segment taken for a gone client's.
        let listed = self.store.other_segments()?;
        let live: BTreeSet<u64> = self.meta.clients()?.iter().map(|s| s.id).collect();
        let mut gone = Vec::new();
        for segment in listed {
            if live.contains(&SegmentRange::client_of(segment)) {
                continue;
            }
            let (records, bytes) = usage
                .get(&segment)
                .map_or((0, 0), |u| (u.records, u.stored_bytes));
            match self.store.other_segment_stats(segment, records, bytes) {
                Ok(stats) => gone.push(stats),
                Err(_) if records == 0 => gone.push(SegmentStats {
                    segment,
                    total_bytes: 0,
                    dead_bytes: 0,
                }),
                Err(e) => crate::log!(
                    "presso: segment {segment} of gone client {} left as it is: {e}",
                    SegmentRange::client_of(segment)
                ),
            }
        }
        Ok(gone)
    }
}
