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
                // What had been done at the last trim: a daemon idle since needs no other.
                let (mut trimmed, mut trimmed_at) = (seen, Instant::now());
                while let Err(RecvTimeoutError::Timeout) = stopped.recv_timeout(QUIET_INTERVAL) {
                    let now = activity();
                    let quiet = now == seen;
                    if now != trimmed && (quiet || trimmed_at.elapsed() >= BUSY_INTERVAL) {
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
