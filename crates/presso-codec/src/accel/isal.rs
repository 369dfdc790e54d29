//! The `isal` accelerator: an execution backend for the gzip (raw deflate) format that runs the
//! ISA-L igzip code of [`crate::format::isal`] on worker threads of its own, fed through a bounded
//! queue, or on the thread that submits each job ([`IsalConfig::on_submitter`]), reading each
//! record's segments in place.
//!
//! The same igzip code also serves as [`DeflateEngine::Isal`](crate::DeflateEngine::Isal), run
//! inline as a software engine; this module adds only the execution (threads, queue, self-test and
//! re-initialisation), not a second deflate.

use std::sync::atomic::{AtomicBool, Ordering};
use std::thread::JoinHandle;

use crossbeam_channel::{bounded, Sender, TrySendError};
use parking_lot::Mutex;

use super::{AccelError, AccelJob, AccelOutcome, Accelerator, SizeWindow};
use crate::codec::{CodecId, CodecSpec};
use crate::format::isal as igzip;
use crate::stats::thread_cpu_time;

/// Default jobs queued per worker beyond those running. Records reach the queue straight from the
/// threads that submit them, so it holds what a submission queue in front of it would have.
pub const QUEUE_PER_WORKER: usize = 12;

/// Settings of the ISA-L backend.
#[derive(Clone, Debug)]
pub struct IsalConfig {
    /// Worker threads running ISA-L (default: [`default_workers`](crate::default_workers)).
    pub workers: usize,
    /// Jobs waiting at once beyond those running (default: [`QUEUE_PER_WORKER`] per worker).
    pub queue_depth: usize,
    /// Record sizes offloaded.
    pub window: SizeWindow,
    /// Run each job on the thread that submits it, before [`Accelerator::submit`] returns,
    /// instead of on the workers (which are then not started). ISA-L computes on the host's
    /// cores, so where the submitting threads already use every core, a worker adds no
    /// parallelism, only a hand-off per record: a wake-up, and the record's bytes read on
    /// another CPU (docs/benchmarks.md: about a fifth of the daemon's CPU in compressing writes
    /// on two cores).
    pub on_submitter: bool,
}

impl IsalConfig {
    /// `workers` threads (at least one), each with [`QUEUE_PER_WORKER`] jobs of queue, offloading
    /// the default size window.
    pub fn with_workers(workers: usize) -> Self {
        let workers = workers.max(1);
        IsalConfig {
            workers,
            queue_depth: workers * QUEUE_PER_WORKER,
            window: SizeWindow::DEFAULT,
            on_submitter: false,
        }
    }
}

impl Default for IsalConfig {
    fn default() -> Self {
        IsalConfig::with_workers(crate::default_workers())
    }
}

/// ISA-L igzip behind the [`Accelerator`] trait.
pub struct IsalAccelerator {
    config: IsalConfig,
    /// The workers' queue while they run.
    queue: Mutex<Option<Sender<AccelJob>>>,
    workers: Mutex<Vec<JoinHandle<()>>>,
    /// Whether jobs run on the submitting thread now: under `on_submitter`, from a start or
    /// re-initialisation until the next stop.
    on_submitter: AtomicBool,
}

impl IsalAccelerator {
    /// Starts the workers after a self-test; fails if ISA-L does not work on this CPU.
    pub fn start(config: IsalConfig) -> Result<IsalAccelerator, AccelError> {
        igzip::self_test().map_err(|e| AccelError::Unavailable(e.to_string()))?;
        let accel = IsalAccelerator {
            config,
            queue: Mutex::new(None),
            workers: Mutex::new(Vec::new()),
            on_submitter: AtomicBool::new(false),
        };
        accel.spawn_workers();
        Ok(accel)
    }

    fn spawn_workers(&self) {
        if self.config.on_submitter {
            self.on_submitter.store(true, Ordering::Release);
            return;
        }
        let (tx, rx) = bounded::<AccelJob>(self.config.queue_depth);
        let mut workers = self.workers.lock();
        for index in 0..self.config.workers.max(1) {
            let rx = rx.clone();
            let handle = std::thread::Builder::new()
                .name(format!("presso-isal-{index}"))
                .spawn(move || {
                    for job in rx {
                        run(job);
                    }
                })
                .expect("spawn ISA-L worker");
            workers.push(handle);
        }
        *self.queue.lock() = Some(tx);
    }

    fn stop_workers(&self) {
        self.on_submitter.store(false, Ordering::Release);
        // Closing the queue lets each worker finish its jobs and exit.
        self.queue.lock().take();
        for handle in self.workers.lock().drain(..) {
            if handle.thread().id() != std::thread::current().id() {
                let _ = handle.join();
            }
        }
    }
}

impl Accelerator for IsalAccelerator {
    fn name(&self) -> &str {
        "isal"
    }

    fn supports(&self, spec: CodecSpec) -> bool {
        spec.codec == CodecId::Gzip
    }

    fn size_window(&self) -> SizeWindow {
        self.config.window
    }

    fn queue_depth(&self) -> usize {
        self.config.queue_depth + self.config.workers
    }

    fn submit(&self, jobs: Vec<AccelJob>) -> Vec<AccelJob> {
        if self.on_submitter.load(Ordering::Acquire) {
            for job in jobs {
                run(job);
            }
            return Vec::new();
        }
        let queue = self.queue.lock();
        let Some(tx) = queue.as_ref() else {
            return jobs;
        };
        let mut rejected = Vec::new();
        for job in jobs {
            match tx.try_send(job) {
                Ok(()) => {}
                Err(TrySendError::Full(job)) | Err(TrySendError::Disconnected(job)) => {
                    rejected.push(job)
                }
            }
        }
        rejected
    }

    fn shares_host_cpu(&self) -> bool {
        true
    }

    fn reinit(&self) -> Result<(), AccelError> {
        self.stop_workers();
        igzip::self_test().map_err(|e| AccelError::Unavailable(e.to_string()))?;
        self.spawn_workers();
        Ok(())
    }
}

/// Compresses one job on this thread and completes it.
fn run(mut job: AccelJob) {
    let started = thread_cpu_time();
    let level = igzip::level_for_gzip(job.spec.level);
    let slices = job.input.slices();
    let result = igzip::compress(level, &slices, job.out.space());
    drop(slices);
    let outcome = match result {
        Ok(Some(payload_len)) => Ok(AccelOutcome::Compressed { payload_len }),
        Ok(None) => Ok(AccelOutcome::OverBudget),
        Err(e) => Err(AccelError::Device(e.to_string())),
    };
    let cpu = thread_cpu_time().saturating_sub(started);
    job.complete(outcome, cpu);
}

impl Drop for IsalAccelerator {
    fn drop(&mut self) {
        self.stop_workers();
    }
}
