//! Routing: the decision where each record goes, and handing records to the accelerator.
//!
//! In order: empty or codec `off` → stored (framed on the submitting thread, before any queue,
//! so routing never sees them: see [`Engine::submit`](super::Engine::submit)); all zeros → hole;
//! the pre-check says incompressible → stored raw (skipped); inside the accelerator's size
//! window, a spec it supports, healthy → accelerator; otherwise → CPU. A record the accelerator
//! refuses for lack of queue room either waits for room or falls back to the CPU
//! ([`BusyPolicy`]); an unhealthy accelerator's records fall back to the CPU.
//!
//! Records shorter than `inline_below` are routed, and compressed when they stay on the CPU, on
//! the submitting thread ([`Shared::run_here`]); the rest are routed by a worker.

use std::sync::Arc;
use std::time::Duration;

use super::worker::{Job, Shared, Worker};
use super::BusyPolicy;
use crate::accel::{AccelError, AccelJob, Accelerator};
use crate::codec::CodecId;
use crate::frame;
use crate::policy::{self, Probe};
use crate::stats::{thread_cpu_time, BackendKind, Fallback, Verdict};

/// Where a record goes after the policy checks.
pub(super) enum Route {
    /// Finished without a codec (stored, hole or skipped) and already delivered.
    Done,
    /// To the CPU, with the reason when it is a fallback from the accelerator.
    Software(Job, Option<Fallback>),
    /// To the accelerator, with the payload budget.
    Offload(Job, usize),
}

impl Shared {
    /// Decides where `job` goes; delivers it on the spot when no codec needs to run. Jobs that
    /// need no codec at all never get here: [`Engine::submit`](super::Engine::submit) delivers
    /// them before any queue.
    pub(super) fn route(self: &Arc<Self>, job: Job, accel: Option<&dyn Accelerator>) -> Route {
        debug_assert!(!job.needs_no_codec(), "delivered at submission");
        let len = job.record.len();
        let started = thread_cpu_time();
        let slices = job.record.slices();
        if policy::is_all_zero(&slices) {
            drop(slices);
            let built = frame::build_hole(len).into();
            let cpu = thread_cpu_time().saturating_sub(started);
            self.deliver(job, built, Verdict::Hole, BackendKind::None, cpu);
            return Route::Done;
        }
        let budget = job.options.threshold.budget(len);
        if self.config.precheck && policy::probe(job.spec, &slices, budget, len) == Probe::Skip {
            drop(slices);
            let built = frame::build_raw(&job.record.slices()).into();
            let cpu = thread_cpu_time().saturating_sub(started);
            self.deliver(job, built, Verdict::Skipped, BackendKind::None, cpu);
            return Route::Done;
        }
        drop(slices);
        match accel {
            Some(accel)
                if job.options.offload
                    && accel.supports(job.spec)
                    && accel.size_window().contains(len) =>
            {
                if self.health.usable(accel, &self.stats) {
                    Route::Offload(job, budget)
                } else {
                    Route::Software(job, Some(Fallback::Unavailable))
                }
            }
            _ => Route::Software(job, None),
        }
    }

    /// Frames a record that needs no codec ([`Job::needs_no_codec`]) and delivers it, on the
    /// calling thread.
    pub(super) fn deliver_uncompressed(&self, job: Job) {
        let built = frame::build_raw(&job.record.slices()).into();
        self.deliver(
            job,
            built,
            Verdict::Uncompressed,
            BackendKind::None,
            Duration::ZERO,
        );
    }
}

impl Shared {
    /// Routes `job` on the calling thread and finishes it here, unless it goes to the
    /// accelerator (or, refused by it, to a worker).
    pub(super) fn run_here(self: &Arc<Self>, job: Job, accel: Option<&dyn Accelerator>) {
        match self.route(job, accel) {
            Route::Done => {}
            Route::Software(job, why) => self.run_software(job, why),
            Route::Offload(job, budget) => {
                let accel = accel.expect("routed to an accelerator the engine has");
                let jobs = vec![self.accel_job(job, budget)];
                self.offload(accel, jobs);
            }
        }
    }

    /// Submits to the accelerator; what it refuses for lack of room waits or goes to the CPU.
    fn offload(&self, accel: &dyn Accelerator, mut jobs: Vec<AccelJob>) {
        let wait = match self.config.busy {
            BusyPolicy::Auto => accel.shares_host_cpu(),
            BusyPolicy::Software => false,
            BusyPolicy::Wait => true,
        };
        loop {
            let seen = *self.accel_done.lock();
            let refused = accel.submit(jobs);
            if refused.is_empty() {
                return;
            }
            if !wait || !self.health.available() {
                for busy in refused {
                    // Completing a refused job with Busy hands it back to the CPU path.
                    busy.complete(Err(AccelError::Busy), Duration::ZERO);
                }
                return;
            }
            // Every accepted job completes, so room appears; a completion since `seen` means
            // there may be room already.
            let mut done = self.accel_done.lock();
            while *done == seen {
                self.accel_room.wait(&mut done);
            }
            drop(done);
            jobs = refused;
        }
    }
}

impl Job {
    /// Empty, or its codec is `off`: stored as it is, whatever the policy says.
    pub(super) fn needs_no_codec(&self) -> bool {
        self.record.is_empty() || self.spec.codec == CodecId::Off
    }
}

impl Worker {
    /// Routes a job taken from the submission queue, gathering more for the accelerator.
    pub(super) fn dispatch(&self, first: Job) {
        let mut offload = Vec::new();
        let mut local = None;
        match self.shared.route(first, self.accel.as_deref()) {
            Route::Done => {}
            Route::Software(job, why) => local = Some((job, why)),
            Route::Offload(job, budget) => {
                offload.push((job, budget));
                // Gather more queued records into one asynchronous submission; any that must run
                // on the CPU go to the shared software queue, where idle workers pick them up.
                while offload.len() < self.shared.config.max_batch {
                    let Ok(job) = self.submit.try_recv() else {
                        break;
                    };
                    match self.shared.route(job, self.accel.as_deref()) {
                        Route::Done => {}
                        Route::Software(job, why) => self.shared.defer(job, why),
                        Route::Offload(job, budget) => offload.push((job, budget)),
                    }
                }
            }
        }
        if let Some(accel) = &self.accel {
            if !offload.is_empty() {
                let jobs = offload
                    .into_iter()
                    .map(|(job, budget)| self.shared.accel_job(job, budget))
                    .collect();
                self.shared.offload(accel.as_ref(), jobs);
            }
        }
        if let Some((job, why)) = local {
            self.shared.run_software(job, why);
        }
    }
}
