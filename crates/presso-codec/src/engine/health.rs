//! The accelerator's health: whether it may be used now, consecutive failure counting, marking it
//! unavailable, and re-initialising it after a backoff that doubles while it keeps failing.

use std::sync::atomic::{AtomicBool, AtomicU32, Ordering::SeqCst};
use std::time::{Duration, Instant};

use parking_lot::Mutex;

use super::EngineConfig;
use crate::accel::Accelerator;
use crate::stats::Stats;

/// Health of the engine's one accelerator.
pub(super) struct Health {
    failure_limit: u32,
    base_backoff: Duration,
    max_backoff: Duration,
    consecutive: AtomicU32,
    available: AtomicBool,
    // (when to retry, current backoff); locked only on the slow path.
    retry: Mutex<(Instant, Duration)>,
}

impl Health {
    /// A healthy accelerator, with the limits of `config`.
    pub(super) fn new(config: &EngineConfig) -> Health {
        Health {
            failure_limit: config.failure_limit.max(1),
            base_backoff: config.reprobe_backoff,
            max_backoff: config.max_reprobe_backoff.max(config.reprobe_backoff),
            consecutive: AtomicU32::new(0),
            available: AtomicBool::new(true),
            retry: Mutex::new((Instant::now(), config.reprobe_backoff)),
        }
    }

    /// Whether the accelerator is marked available (without trying to re-initialise it).
    pub(super) fn available(&self) -> bool {
        self.available.load(SeqCst)
    }

    /// A job completed without a device error.
    pub(super) fn success(&self) {
        self.consecutive.store(0, SeqCst);
    }

    /// A job failed; after `failure_limit` in a row the accelerator is marked unavailable.
    pub(super) fn failure(&self, stats: &Stats) {
        let failures = self.consecutive.fetch_add(1, SeqCst) + 1;
        if failures >= self.failure_limit && self.available.swap(false, SeqCst) {
            stats.accel_marked_unavailable();
            *self.retry.lock() = (Instant::now() + self.base_backoff, self.base_backoff);
        }
    }

    /// Whether the accelerator may be used now; re-initialises it once its backoff has passed.
    pub(super) fn usable(&self, accel: &dyn Accelerator, stats: &Stats) -> bool {
        if self.available.load(SeqCst) {
            return true;
        }
        // One thread re-probes; the others keep running in software meanwhile.
        let Some(mut retry) = self.retry.try_lock() else {
            return false;
        };
        if self.available.load(SeqCst) {
            return true;
        }
        let now = Instant::now();
        if now < retry.0 {
            return false;
        }
        match accel.reinit() {
            Ok(()) => {
                stats.accel_reprobe(true);
                self.consecutive.store(0, SeqCst);
                *retry = (now, self.base_backoff);
                self.available.store(true, SeqCst);
                true
            }
            Err(_) => {
                stats.accel_reprobe(false);
                let backoff = (retry.1 * 2).min(self.max_backoff);
                *retry = (now + backoff, backoff);
                false
            }
        }
    }
}
