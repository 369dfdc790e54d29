//! Automatic space reclaim for a mounted pool. Segments are append-only, so overwritten and
//! deleted records stay on disk as garbage until garbage collection rewrites or removes their
//! segments. Without this a workload that overwrites its files (a database, fio, a build) fills
//! the host file system while the pool holds little live data.
//!
//! A background thread collects when garbage is both large and a large share of the segments,
//! and the write path asks for a pass at once, and waits for it, before it answers ENOSPC.
//! While the pool is being written the background thread waits for a larger share: a burst of
//! overwrites makes its own garbage, and a pass in the middle of it copies records the burst is
//! about to overwrite, with CPU the writers need. After the burst the same segments are dead
//! through and through, and collecting them costs no copy.

use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use parking_lot::{Condvar, Mutex};

use crate::maintenance;
use crate::pool::Pool;
use presso_store::Position;

/// When the background thread collects.
#[derive(Debug, Clone, Copy)]
pub struct ReclaimPolicy {
    /// Collect only once garbage reaches this many bytes...
    pub min_garbage: u64,
    /// ...and this share of all segment bytes...
    pub garbage_share: f64,
    /// ...or, while appends go on (the store appended since the last look), this larger share.
    /// It bounds the space a busy pool's garbage takes: at 0.5, the segments hold at most as
    /// much garbage as live data before a pass runs anyway. Short of room, the write path asks
    /// for a pass whatever the share.
    pub busy_garbage_share: f64,
    /// Segments with a smaller live share are rewritten (as `presso gc --min-live`).
    pub min_live: f64,
    /// How often the background thread looks.
    pub interval: Duration,
}

impl Default for ReclaimPolicy {
    fn default() -> Self {
        ReclaimPolicy {
            min_garbage: 256 << 20,
            garbage_share: 0.25,
            busy_garbage_share: 0.5,
            min_live: 0.5,
            interval: Duration::from_secs(5),
        }
    }
}

impl ReclaimPolicy {
    /// Whether the garbage of `segments` is large enough, in bytes and as a share of their
    /// bytes, to collect; `busy` if they are being appended to.
    pub fn worth_collecting(&self, segments: &[presso_store::SegmentStats], busy: bool) -> bool {
        let total: u64 = segments.iter().map(|s| s.total_bytes).sum();
        let garbage: u64 = segments.iter().map(|s| s.dead_bytes).sum();
        let share = match busy {
            true => self.busy_garbage_share.max(self.garbage_share),
            false => self.garbage_share,
        };
        garbage >= self.min_garbage && garbage as f64 >= share * total as f64
    }
}

/// Tells, look by look, whether the store appended since the previous look.
struct AppendWatch {
    seen: Position,
}

impl AppendWatch {
    fn new(now: Position) -> AppendWatch {
        AppendWatch { seen: now }
    }

    /// Whether the append position moved since the last look (or [`AppendWatch::skip_to`]).
    fn appended_since(&mut self, now: Position) -> bool {
        std::mem::replace(&mut self.seen, now) != now
    }

    /// Takes `now` as seen: what a pass appended itself is no sign of writers.
    fn skip_to(&mut self, now: Position) {
        self.seen = now;
    }
}

#[derive(Default)]
struct State {
    /// A pass was asked for and has not started yet.
    requested: bool,
    /// The pass asked for is for room: it collects every segment holding garbage.
    for_room: bool,
    /// A pass is running.
    running: bool,
    /// Passes finished so far.
    finished: u64,
    stopping: bool,
}

/// The background collector of one mounted pool.
pub struct Reclaimer {
    state: Mutex<State>,
    wake: Condvar,
    done: Condvar,
    thread: Mutex<Option<JoinHandle<()>>>,
}

impl Reclaimer {
    /// Starts the collector thread for `pool`.
    pub fn start(pool: Arc<Pool>, policy: ReclaimPolicy) -> Arc<Reclaimer> {
        let r = Arc::new(Reclaimer {
            state: Mutex::new(State::default()),
            wake: Condvar::new(),
            done: Condvar::new(),
            thread: Mutex::new(None),
        });
        let me = r.clone();
        match std::thread::Builder::new()
            .name("presso-reclaim".into())
            .spawn(move || me.run(&pool, policy))
        {
            Ok(handle) => *r.thread.lock() = Some(handle),
            Err(e) => {
                // No collector: callers must not wait for passes that never come.
                crate::log!("presso: cannot start automatic garbage collection: {e}");
                r.state.lock().stopping = true;
            }
        }
        r
    }

    /// Runs a collection pass now and returns when a pass that started after this call has
    /// finished (at once if the collector is stopping). The pass is for room: it collects every
    /// segment holding garbage, not only mostly dead ones, since short of space any garbage
    /// freed is worth its copy (deleting half of every file of a full pool leaves every segment
    /// half live).
    pub fn reclaim_now(&self) {
        let mut st = self.state.lock();
        if st.stopping {
            return;
        }
        st.for_room = true;
        // A pass already running may have looked at the segments before the caller's garbage
        // existed: then wait for the next one, which starts after this point.
        let target = st.finished + 1 + u64::from(st.running);
        st.requested = true;
        self.wake.notify_all();
        while st.finished < target && !st.stopping {
            self.done.wait(&mut st);
        }
    }

    /// Stops the collector and waits for a running pass to end.
    pub fn stop(&self) {
        {
            let mut st = self.state.lock();
            st.stopping = true;
            self.wake.notify_all();
            self.done.notify_all();
        }
        if let Some(handle) = self.thread.lock().take() {
            let _ = handle.join();
        }
    }

    fn run(&self, pool: &Pool, policy: ReclaimPolicy) {
        let mut appends = AppendWatch::new(pool.store().append_position());
        loop {
            let asked = {
                let mut st = self.state.lock();
                if !st.requested && !st.stopping {
                    // A periodic look, not synchronisation: a request wakes the thread at once.
                    self.wake.wait_for(&mut st, policy.interval);
                }
                if st.stopping {
                    return;
                }
                st.running = true;
                let for_room = std::mem::take(&mut st.for_room);
                (std::mem::take(&mut st.requested), for_room)
            };
            let (asked, for_room) = asked;
            let min_live = if for_room { 1.0 } else { policy.min_live };
            let busy = appends.appended_since(pool.store().append_position());
            if asked || worth_collecting(pool, &policy, busy) {
                match maintenance::gc(pool, min_live, &mut |_| {}) {
                    Ok(r) if r.segments_collected > 0 => crate::log!(
                        "presso: reclaimed {} bytes from {} segments ({} records moved)",
                        r.bytes_removed,
                        r.segments_collected,
                        r.records_moved
                    ),
                    Ok(_) => {}
                    Err(e) => crate::log!("presso: automatic garbage collection failed: {e}"),
                }
                appends.skip_to(pool.store().append_position());
            }
            let mut st = self.state.lock();
            st.running = false;
            st.finished += 1;
            self.done.notify_all();
        }
    }
}

/// Whether garbage is large enough, in bytes and as a share of the segments, to collect; `busy`
/// if the pool is being written.
pub fn worth_collecting(pool: &Pool, policy: &ReclaimPolicy, busy: bool) -> bool {
    let segments = pool.store().all_segment_stats();
    policy.worth_collecting(&segments, busy)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::pool::PoolOptions;
    use std::sync::mpsc;

    fn empty_pool(name: &str) -> (std::path::PathBuf, Arc<Pool>) {
        let dir =
            std::env::temp_dir().join(format!("presso-reclaim-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        Pool::create(&dir, &[]).unwrap();
        let (pool, _) = Pool::open(&dir, PoolOptions::default()).unwrap();
        (dir, pool)
    }

    /// Runs `f` on another thread and fails if it has not returned within a minute.
    fn returns(f: impl FnOnce() + Send + 'static) {
        let (tx, rx) = mpsc::channel();
        std::thread::spawn(move || {
            f();
            let _ = tx.send(());
        });
        rx.recv_timeout(Duration::from_secs(60))
            .expect("the call did not return");
    }

    #[test]
    fn reclaim_now_waits_for_a_pass_and_stop_releases_waiters() {
        let (dir, pool) = empty_pool("now");
        let policy = ReclaimPolicy {
            interval: Duration::from_secs(3600),
            ..ReclaimPolicy::default()
        };
        let r = Reclaimer::start(pool.clone(), policy);
        for _ in 0..3 {
            let r = r.clone();
            returns(move || r.reclaim_now());
        }
        assert!(
            r.state.lock().finished >= 3,
            "each call waited for a pass of its own"
        );
        r.stop();
        let r2 = r.clone();
        returns(move || r2.reclaim_now());
        pool.close().unwrap();
        drop(pool);
        std::fs::remove_dir_all(dir).unwrap();
    }

    fn segments(garbage_share: f64) -> Vec<presso_store::SegmentStats> {
        (1..=4)
            .map(|segment| presso_store::SegmentStats {
                segment,
                total_bytes: 1 << 30,
                dead_bytes: ((1u64 << 30) as f64 * garbage_share) as u64,
            })
            .collect()
    }

    #[test]
    fn a_pool_being_written_is_collected_only_at_the_busy_share() {
        let policy = ReclaimPolicy::default();
        for (share, idle, busy) in [
            (0.2, false, false),
            (0.3, true, false),
            (0.49, true, false),
            (0.5, true, true),
            (0.8, true, true),
        ] {
            let segments = segments(share);
            assert_eq!(
                policy.worth_collecting(&segments, false),
                idle,
                "{share} idle"
            );
            assert_eq!(
                policy.worth_collecting(&segments, true),
                busy,
                "{share} busy"
            );
        }
        // A busy share below the idle one never makes a busy pool collect earlier.
        let odd = ReclaimPolicy {
            busy_garbage_share: 0.1,
            ..ReclaimPolicy::default()
        };
        assert!(!odd.worth_collecting(&segments(0.2), true));
    }

    #[test]
    fn appends_are_seen_once_and_a_pass_of_its_own_is_not_a_writer() {
        let at = |segment, offset| Position { segment, offset };
        let mut watch = AppendWatch::new(at(3, 100));
        assert!(!watch.appended_since(at(3, 100)), "nothing appended");
        assert!(watch.appended_since(at(3, 900)), "a writer appended");
        assert!(!watch.appended_since(at(3, 900)), "and then stopped");
        assert!(watch.appended_since(at(4, 64)), "a roll and an append");
        watch.skip_to(at(5, 4096));
        assert!(!watch.appended_since(at(5, 4096)), "the pass's own copies");
    }

    #[test]
    fn collection_needs_both_enough_bytes_and_a_large_share() {
        let (dir, pool) = empty_pool("policy");
        let eager = ReclaimPolicy {
            min_garbage: 0,
            garbage_share: 0.0,
            ..ReclaimPolicy::default()
        };
        assert!(worth_collecting(&pool, &eager, false));
        assert!(!worth_collecting(&pool, &ReclaimPolicy::default(), false));
        let share_only = ReclaimPolicy {
            min_garbage: 1,
            garbage_share: 0.0,
            ..ReclaimPolicy::default()
        };
        assert!(
            !worth_collecting(&pool, &share_only, false),
            "no garbage, nothing to do"
        );
        pool.close().unwrap();
        drop(pool);
        std::fs::remove_dir_all(dir).unwrap();
    }
}
