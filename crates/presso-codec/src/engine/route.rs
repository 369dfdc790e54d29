//! Routing: the decision where each record goes, taken on the submitting thread, and handing
//! records to the accelerator.
//!
//! In order: empty or codec `off` → stored as it is; all zeros → hole; the pre-check says
//! incompressible → stored raw (skipped); inside the accelerator's size window, a spec it
//! supports, healthy → accelerator; otherwise → CPU, on the submitting thread for a record shorter
//! than `inline_below` and on a worker for the rest. A record the accelerator refuses for lack of
//! queue room either waits for room or falls back to the CPU ([`BusyPolicy`]); an unhealthy
//! accelerator's records fall back to the CPU.
//!
//! Routing where the record was submitted reads its bytes on the CPU that just wrote them, and
//! costs no hand-off: a worker that routed each record cost a wake-up and a cross-CPU read per
//! record before the codec even ran.

use std::sync::Arc;
use std::time::Duration;

use crossbeam_channel::Sender;

use super::worker::{Job, Shared};
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
    /// Decides where `job` goes; delivers it on the spot when no codec needs to run.
    pub(super) fn route(self: &Arc<Self>, job: Job, accel: Option<&dyn Accelerator>) -> Route {
        if job.needs_no_codec() {
            self.deliver_uncompressed(job);
            return Route::Done;
        }
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
            let built = frame::raw_record(&job.record).into();
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

    /// Frames a record that needs no codec ([`Job::needs_no_codec`]) and delivers it.
    fn deliver_uncompressed(&self, job: Job) {
        let built = frame::raw_record(&job.record).into();
        self.deliver(
            job,
            built,
            Verdict::Uncompressed,
            BackendKind::None,
            Duration::ZERO,
        );
    }

    /// Routes `job` on the submitting thread and sends it on: to the accelerator, to `cpu_queue`
    /// (the workers), or, for a record shorter than `inline_below`, through the codec right here.
    /// Blocks while the accelerator (under [`BusyPolicy::Wait`]) or the workers' queue is full.
    pub(super) fn dispatch(
        self: &Arc<Self>,
        job: Job,
        accel: Option<&dyn Accelerator>,
        cpu_queue: &Sender<(Job, Option<Fallback>)>,
    ) {
        match self.route(job, accel) {
            Route::Done => {}
            Route::Offload(job, budget) => {
                let accel = accel.expect("routed to an accelerator the engine has");
                let jobs = vec![self.accel_job(job, budget)];
                self.offload(accel, jobs);
            }
            Route::Software(job, why) if job.record.len() < self.config.inline_below => {
                self.run_software(job, why)
            }
            Route::Software(job, why) => {
                // The workers outlive the engine's queue sender.
                let _ = cpu_queue.send((job, why));
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
    fn needs_no_codec(&self) -> bool {
        self.record.is_empty() || self.spec.codec == CodecId::Off
    }
}
