//! The daemon's hold on memory. Record buffers are allocated on the request threads and freed on
//! the compression workers, so glibc's per-thread arenas each come to keep what they once held
//! at the busiest moment, free or not: a long run's resident set grew in steps, most of it
//! free memory no arena gave back (docs/benchmarks.md, "The daemon's memory over a long run").
//! The daemon holds glibc to a few arenas and hands free memory back to the kernel when it is
//! quiet, and every minute while busy, so that its resident set follows what it uses, under the
//! bounds its options set (`dirty_limit`, `cache_size`).

use std::sync::mpsc::{self, RecvTimeoutError, Sender};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// The arenas glibc may keep, unless `MALLOC_ARENA_MAX` says otherwise: two per CPU.
pub const ARENAS_PER_CPU: usize = 2;

/// How often the trimmer looks whether the daemon was quiet.
pub const QUIET_INTERVAL: Duration = Duration::from_secs(5);

/// How often free memory goes back to the kernel while the daemon is busy. Pages handed back
/// come back as page faults when buffers are allocated again: trimming every 5 s under load cost
/// sequential reads about a tenth of their throughput (docs/benchmarks.md).
pub const BUSY_INTERVAL: Duration = Duration::from_secs(60);

/// Holds glibc to [`ARENAS_PER_CPU`] arenas per CPU unless the environment sets
/// `MALLOC_ARENA_MAX` (glibc's own default is eight per CPU). Call before starting threads.
pub fn limit_arenas() {
    if std::env::var_os("MALLOC_ARENA_MAX").is_some() {
        return;
    }
    let cpus = std::thread::available_parallelism().map_or(1, |n| n.get());
    let arenas = i32::try_from(cpus * ARENAS_PER_CPU).unwrap_or(i32::MAX);
    #[cfg(target_env = "gnu")]
    // SAFETY: mallopt only changes a malloc tunable; M_ARENA_MAX takes any positive count.
    unsafe {
        libc::mallopt(libc::M_ARENA_MAX, arenas);
    }
    #[cfg(not(target_env = "gnu"))]
    let _ = arenas;
}

/// A thread handing free memory back to the kernel until dropped, if the daemon did anything
/// since the last time: after a [`QUIET_INTERVAL`] in which it was quiet, and at least every
/// [`BUSY_INTERVAL`].
pub struct Trimmer {
    stop: Option<Sender<()>>,
    thread: Option<JoinHandle<()>>,
}

impl Trimmer {
    /// Starts the thread; `activity` counts the daemon's work (bytes moved), and an interval in
    /// which it did not move was quiet. Without glibc there is nothing to do and no thread.
    pub fn start(activity: impl Fn() -> u64 + Send + 'static) -> Trimmer {
        if !cfg!(target_env = "gnu") {
            return Trimmer {
                stop: None,
                thread: None,
            };
        }
        let (stop, stopped) = mpsc::channel::<()>();
        let thread = std::thread::Builder::new()
            .name("presso-memory".into())
            .spawn(move || {
                let mut seen = activity();
                let (mut trimmed, mut trimmed_at) = (seen, Instant::now());
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(QUIET_INTERVAL) {
                    let now = activity();
                    if trim_due(now, seen, trimmed, trimmed_at.elapsed()) {
                        trim();
                        (trimmed, trimmed_at) = (now, Instant::now());
                    }
                    seen = now;
                }
            })
            .ok();
        Trimmer {
            stop: Some(stop),
            thread,
        }
    }
}

/// Whether to trim, the daemon's activity counter being `now`, `seen` one [`QUIET_INTERVAL`]
/// ago and `trimmed` at the last trim, `since_trim` ago: if it did anything since that trim
/// (else there is nothing new to give back), and either was quiet over the last interval or has
/// been busy for [`BUSY_INTERVAL`].
fn trim_due(now: u64, seen: u64, trimmed: u64, since_trim: Duration) -> bool {
    now != trimmed && (now == seen || since_trim >= BUSY_INTERVAL)
}

impl Drop for Trimmer {
    fn drop(&mut self) {
        drop(self.stop.take());
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// Hands the free memory of every arena back to the kernel (`malloc_trim`), whole pages of it.
pub fn trim() {
    #[cfg(target_env = "gnu")]
    // SAFETY: malloc_trim takes the arenas' own locks and frees nothing in use.
    unsafe {
        libc::malloc_trim(0);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn trims_once_quiet_or_once_a_minute_while_busy_and_never_when_idle() {
        let soon = Duration::from_secs(10);
        // Quiet over the last interval after work since the last trim.
        assert!(trim_due(500, 500, 100, soon));
        // Busy: not within the minute, then once it has passed.
        assert!(!trim_due(600, 500, 100, soon));
        assert!(trim_due(600, 500, 100, BUSY_INTERVAL));
        // Idle since the last trim, however long: nothing new to give back.
        assert!(!trim_due(100, 100, 100, soon));
        assert!(!trim_due(100, 100, 100, BUSY_INTERVAL * 10));
    }
}
