//! A fault-injecting wrapper around any accelerator, for tests and drills: fail every Nth job, fail
//! with a probability, break the device outright, or stall it so its queue fills.

use std::collections::HashSet;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;

use parking_lot::Mutex;
use rand::{Rng, SeedableRng};

use super::{AccelError, AccelJob, Accelerator, SizeWindow};
use crate::codec::CodecSpec;

/// The faults to inject; change them at any time through the shared handle.
#[derive(Default)]
pub struct FaultPlan {
    fail_every: AtomicU64,
    fail_per_million: AtomicU64,
    broken: AtomicBool,
    stalled: AtomicBool,
    rng: Mutex<Option<rand::rngs::StdRng>>,
}

impl FaultPlan {
    /// Fails every `n`th job the device runs (0 turns it off).
    pub fn fail_every(&self, n: u64) {
        self.fail_every.store(n, SeqCst);
    }

    /// Fails each job with probability `p`, from a seeded generator (repeatable).
    pub fn fail_with_probability(&self, p: f64, seed: u64) {
        *self.rng.lock() = Some(rand::rngs::StdRng::seed_from_u64(seed));
        self.fail_per_million
            .store((p.clamp(0.0, 1.0) * 1e6) as u64, SeqCst);
    }

    /// Breaks the device: every job fails and re-initialisation fails, until repaired.
    pub fn set_broken(&self, broken: bool) {
        self.broken.store(broken, SeqCst);
    }

    /// While stalled, accepted jobs are held (they occupy the queue) until [`FaultyAccelerator::release`].
    pub fn set_stalled(&self, stalled: bool) {
        self.stalled.store(stalled, SeqCst);
    }

    fn should_fail(&self, sequence: u64) -> bool {
        if self.broken.load(SeqCst) {
            return true;
        }
        let every = self.fail_every.load(SeqCst);
        if every > 0 && sequence.is_multiple_of(every) {
            return true;
        }
        let per_million = self.fail_per_million.load(SeqCst);
        per_million > 0
            && self
                .rng
                .lock()
                .as_mut()
                .is_some_and(|rng| rng.gen_range(0..1_000_000) < per_million)
    }
}

/// Wraps an accelerator and injects the faults of a [`FaultPlan`].
pub struct FaultyAccelerator {
    inner: Arc<dyn Accelerator>,
    plan: Arc<FaultPlan>,
    ran: Arc<AtomicU64>,
    wrapped: Arc<Mutex<HashSet<u64>>>,
    held: Mutex<Vec<AccelJob>>,
}

impl FaultyAccelerator {
    /// Wraps `inner`; the returned plan controls the faults.
    pub fn wrap(inner: Arc<dyn Accelerator>) -> (FaultyAccelerator, Arc<FaultPlan>) {
        let plan = Arc::new(FaultPlan::default());
        let accel = FaultyAccelerator {
            inner,
            plan: plan.clone(),
            ran: Arc::new(AtomicU64::new(0)),
            wrapped: Arc::default(),
            held: Mutex::new(Vec::new()),
        };
        (accel, plan)
    }

    /// Jobs held by a stall right now.
    pub fn held(&self) -> usize {
        self.held.lock().len()
    }

    /// Ends a stall and hands every held job to the device.
    pub fn release(&self) {
        self.plan.set_stalled(false);
        let held = std::mem::take(&mut *self.held.lock());
        self.forward(held);
    }

    fn forward(&self, jobs: Vec<AccelJob>) {
        let mut rejected = self.inner.submit(jobs);
        // The engine already counted these as accepted; the wrapper must not lose them.
        for job in rejected.drain(..) {
            job.complete(
                Err(AccelError::Device("inner queue full after a stall".into())),
                Default::default(),
            );
        }
    }
}

impl Accelerator for FaultyAccelerator {
    fn name(&self) -> &str {
        self.inner.name()
    }

    fn supports(&self, spec: CodecSpec) -> bool {
        self.inner.supports(spec)
    }

    fn size_window(&self) -> SizeWindow {
        self.inner.size_window()
    }

    fn queue_depth(&self) -> usize {
        self.inner.queue_depth()
    }

    fn submit(&self, jobs: Vec<AccelJob>) -> Vec<AccelJob> {
        let mut to_device = Vec::new();
        let mut rejected = Vec::new();
        {
            let mut held = self.held.lock();
            for mut job in jobs {
                if self.plan.stalled.load(SeqCst) {
                    if held.len() < self.inner.queue_depth() {
                        held.push(job);
                    } else {
                        rejected.push(job);
                    }
                    continue;
                }
                if !self.wrapped.lock().insert(job.id) {
                    // Refused as busy earlier and submitted again: already wrapped.
                    to_device.push(job);
                    continue;
                }
                // Decide at completion, among the jobs the device really ran, as a real device
                // error would arrive: from its completion context, after the work.
                let plan = self.plan.clone();
                let ran = self.ran.clone();
                let wrapped = self.wrapped.clone();
                let id = job.id;
                let completion = job.completion;
                job.completion = Box::new(move |mut result| {
                    wrapped.lock().remove(&id);
                    if !matches!(result.outcome, Err(AccelError::Busy)) {
                        let sequence = ran.fetch_add(1, SeqCst) + 1;
                        if plan.should_fail(sequence) {
                            result.outcome = Err(AccelError::Injected);
                        }
                    }
                    completion(result)
                });
                to_device.push(job);
            }
        }
        if !to_device.is_empty() {
            rejected.extend(self.inner.submit(to_device));
        }
        rejected
    }

    fn shares_host_cpu(&self) -> bool {
        self.inner.shares_host_cpu()
    }

    fn reinit(&self) -> Result<(), AccelError> {
        if self.plan.broken.load(SeqCst) {
            return Err(AccelError::Unavailable("injected: device broken".into()));
        }
        self.inner.reinit()
    }
}
