//! Changes not yet durable, and when the oldest of them was made: the clock of the durability
//! sweep (`vfs/sweep.rs`), which makes everything the daemon received durable within the mount's
//! `sync_interval`.
//!
//! Every change the pool or the file layer accepts (bytes copied into a record buffer, a truncate,
//! a metadata change) calls [`Unsynced::note`] once it is made. The sweeper takes the mark with
//! [`Unsynced::take_due`] once it is old enough, makes everything durable, and reports with
//! [`Unsynced::swept`]. A change noted during a sweep sets a new mark, so the next sweep covers it
//! whether or not this one saw it.

use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

#[derive(Default)]
struct State {
    /// When the oldest change no sweep has taken yet was made.
    since: Option<Instant>,
    /// A sweep took the mark and has not finished.
    sweeping: bool,
    stopped: bool,
}

/// The mark of the oldest change not yet durable (see the module documentation).
#[derive(Default)]
pub struct Unsynced {
    state: Mutex<State>,
    changed: Condvar,
}

impl Unsynced {
    /// Records that a change was just made (cheap when one is already pending).
    pub fn note(&self) {
        let mut st = self.state.lock();
        if st.since.is_none() {
            st.since = Some(Instant::now());
            self.changed.notify_all();
        }
    }

    /// Whether some change is not durable yet: noted and not taken, or taken by a sweep that has
    /// not finished.
    pub fn pending(&self) -> bool {
        let st = self.state.lock();
        st.since.is_some() || st.sweeping
    }

    /// Waits until the oldest change is `delay` old, then takes the mark for a sweep and returns
    /// when that change was made; `None` once stopped.
    pub fn take_due(&self, delay: Duration) -> Option<Instant> {
        let mut st = self.state.lock();
        loop {
            if st.stopped {
                return None;
            }
            match st.since {
                None => self.changed.wait(&mut st),
                Some(since) => {
                    let now = Instant::now();
                    if now >= since + delay {
                        st.since = None;
                        st.sweeping = true;
                        return Some(since);
                    }
                    self.changed.wait_for(&mut st, since + delay - now);
                }
            }
        }
    }

    /// The sweep that took the mark is over. A failed one leaves its changes pending, marked
    /// now, so the retry comes one delay later instead of at once.
    pub fn swept(&self, ok: bool) {
        let mut st = self.state.lock();
        st.sweeping = false;
        if !ok && st.since.is_none() {
            st.since = Some(Instant::now());
        }
        self.changed.notify_all();
    }

    /// Ends [`Unsynced::take_due`] for good (the file layer is stopping).
    pub fn stop(&self) {
        self.state.lock().stopped = true;
        self.changed.notify_all();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_change_is_pending_until_the_sweep_that_took_it_ends() {
        let u = Unsynced::default();
        assert!(!u.pending());
        u.note();
        let first = u.state.lock().since;
        u.note();
        assert_eq!(
            u.state.lock().since,
            first,
            "a second change keeps the oldest mark"
        );
        assert!(u.pending());
        let taken = u.take_due(Duration::ZERO);
        assert_eq!(taken, first);
        assert!(u.pending(), "taken but not swept");
        u.swept(true);
        assert!(!u.pending());
    }

    #[test]
    fn a_change_during_a_sweep_waits_for_the_next_one() {
        let u = Unsynced::default();
        u.note();
        u.take_due(Duration::ZERO).unwrap();
        u.note();
        u.swept(true);
        assert!(
            u.pending(),
            "the change made during the sweep is still pending"
        );
    }

    #[test]
    fn a_failed_sweep_leaves_its_changes_pending() {
        let u = Unsynced::default();
        u.note();
        u.take_due(Duration::ZERO).unwrap();
        u.swept(false);
        assert!(u.pending());
    }

    #[test]
    fn stop_ends_the_wait() {
        let u = std::sync::Arc::new(Unsynced::default());
        let waiter = {
            let u = u.clone();
            std::thread::spawn(move || u.take_due(Duration::from_secs(3600)))
        };
        u.note();
        u.stop();
        assert_eq!(waiter.join().unwrap(), None);
    }
}
