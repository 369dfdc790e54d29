//! The pool's own copy of its metadata, `meta.db.copy` beside `meta.db`: metadata is what makes
//! the segments mean anything, so, as ZFS keeps more copies of metadata than of data, the pool
//! keeps a second, consistent one. It is refreshed at every clean close and, while the pool
//! changes, every few minutes (in the background: writers go on), but never so often that the
//! refreshes take more than a twentieth of the time; never while it is current (its change tag
//! is the metadata's: nothing but statistics changed since it was taken, by any process), so a
//! mount that only reads closes without rewriting it. Each refresh writes a new file
//! and renames it over the old one, so the copy is always whole. When `meta.db` is lost or
//! damaged the refusal names the copy, which restores the pool as of its time.

use std::path::{Path, PathBuf};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::Pool;
use crate::error::{FsError, Result};

/// The copy's file name in the pool directory.
pub const COPY_FILE: &str = "meta.db.copy";
const COPY_TMP_FILE: &str = "meta.db.copy.tmp";

impl Pool {
    /// Writes a fresh copy of the metadata into the pool directory (a pool opened from a
    /// directory with SQLite metadata; others keep no copy), unless the copy there is current.
    /// Waits for a refresh under way.
    pub fn refresh_metadata_copy(&self) -> Result<()> {
        let Some(dir) = self.copy_dir.get() else {
            return Ok(());
        };
        let _one_at_a_time = self.copying.lock();
        refresh(self, dir)
    }

    /// Checks the copy and, if it is missing or not sound (it does not open, its pages or
    /// B-trees are damaged), writes a fresh one: what was wrong with it and how the rewrite
    /// went. `None`: the copy is sound, or the pool keeps none. Waits for a refresh under way.
    pub fn repair_metadata_copy(&self) -> Result<Option<(String, Result<()>)>> {
        let Some(dir) = self.copy_dir.get() else {
            return Ok(None);
        };
        let _one_at_a_time = self.copying.lock();
        let path = dir.join(COPY_FILE);
        let problem = match path.try_exists() {
            Ok(false) => "there is none".to_owned(),
            Ok(true) => match self.meta.check_copy(&path)? {
                None => return Ok(None),
                Some(problem) => problem,
            },
            Err(e) => format!("cannot look for it: {e}"),
        };
        Ok(Some((problem, timed_copy(self, dir))))
    }

    /// Whether a refresh may be due, the last one `since` ago: after
    /// [`PoolOptions::metadata_copy_every`](super::PoolOptions), and never so often that copies
    /// take more than [`COPY_SHARE`] of the time (metadata of many gigabytes takes a minute or
    /// more to copy). Not while one is under way.
    pub(super) fn metadata_copy_due(&self, since: Duration) -> bool {
        let took = Duration::from_nanos(self.copy_took.load(Ordering::Relaxed));
        !self.copying.is_locked() && since >= copy_interval(self.options.metadata_copy_every, took)
    }

    /// Starts a refresh in the background unless one is under way (or the copy is current).
    pub(super) fn refresh_metadata_copy_later(self: &Arc<Self>) {
        if self.copy_dir.get().is_none() {
            return;
        }
        let pool = self.clone();
        let _ = std::thread::Builder::new()
            .name("presso-metacopy".into())
            .spawn(move || {
                let Some(_one_at_a_time) = pool.copying.try_lock() else {
                    return;
                };
                if let Some(dir) = pool.copy_dir.get() {
                    if let Err(e) = refresh(&pool, dir) {
                        crate::log!(
                            "presso: cannot refresh the metadata copy (retried later): {e}"
                        );
                    }
                }
            });
    }
}

/// The most of the time refreshes of the copy may take while the pool changes: one in twenty.
pub const COPY_SHARE: u32 = 20;

/// The time between refreshes: `every`, or longer if the last one took more than
/// 1/[`COPY_SHARE`] of that.
fn copy_interval(every: Duration, last_took: Duration) -> Duration {
    every.max(last_took.saturating_mul(COPY_SHARE))
}

/// [`timed_copy`] unless the copy in `dir` is current.
fn refresh(pool: &Pool, dir: &Path) -> Result<()> {
    match pool.meta.copy_is_current(&dir.join(COPY_FILE))? {
        true => Ok(()),
        false => timed_copy(pool, dir),
    }
}

/// [`write_copy`], noting how long it took when it worked.
fn timed_copy(pool: &Pool, dir: &Path) -> Result<()> {
    let started = Instant::now();
    write_copy(pool, dir)?;
    let took = u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX);
    pool.copy_took.store(took, Ordering::Relaxed);
    Ok(())
}

fn write_copy(pool: &Pool, dir: &Path) -> Result<()> {
    let tmp = dir.join(COPY_TMP_FILE);
    let io = |what: &str, path: &PathBuf, e| FsError::io(format!("{what} {}", path.display()), e);
    match std::fs::remove_file(&tmp) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            return Err(io("cannot remove", &tmp, e))
        }
        _ => {}
    }
    if !pool.meta.copy_to(&tmp)? {
        return Ok(());
    }
    std::fs::File::open(&tmp)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot sync", &tmp, e))?;
    let copy = dir.join(COPY_FILE);
    std::fs::rename(&tmp, &copy).map_err(|e| io("cannot rename to", &copy, e))?;
    let dir = dir.to_path_buf();
    std::fs::File::open(&dir)
        .and_then(|f| f.sync_all())
        .map_err(|e| io("cannot sync", &dir, e))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_slow_copy_is_refreshed_less_often() {
        let every = Duration::from_secs(300);
        assert_eq!(copy_interval(every, Duration::ZERO), every);
        assert_eq!(copy_interval(every, Duration::from_secs(15)), every);
        // a copy of 40 s every 800 s: a twentieth of the time
        assert_eq!(
            copy_interval(every, Duration::from_secs(40)),
            Duration::from_secs(800)
        );
        assert_eq!(copy_interval(every, Duration::MAX), Duration::MAX);
    }
}
