//! The compression service engine: takes records, decides per record how (and whether) to compress
//! and where the work runs, and hands back self-describing frames.
//!
//! Per record: empty or codec `off` → stored; all zeros → hole; pre-check says incompressible →
//! stored raw (skipped); inside the accelerator's size window, supported, healthy and its queue has
//! room → accelerator; otherwise → CPU workers. A busy device's overflow runs on the CPU; a backend
//! that computes on the host's own cores (ISA-L) is waited for instead ([`BusyPolicy`]), since
//! software overflow would only take cores from it. Any accelerator error → the CPU redoes the record,
//! invisible to the caller; after `failure_limit` consecutive errors the accelerator is marked
//! unavailable and re-initialised after a backoff that doubles while it keeps failing. Every
//! codec gets the output budget `(1 − threshold) × input`; over it, the record is stored raw.
//!
//! Submission is asynchronous: [`Engine::submit`] queues a record and returns; the bounded queue
//! blocks the submitter only when the workers are behind (backpressure). Completions run a
//! caller-supplied closure on a worker thread; [`Batch`] collects them in submission order.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;
use crossbeam_channel::{bounded, select, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::accel::{
    AccelError, AccelJob, AccelOutcome, AccelResult, Accelerator, OutBuf, SizeWindow,
};
use crate::codec::{CodecId, CodecSpec};
use crate::format::{self, DeflateEngine};
use crate::frame::{self, DecodeOptions, FrameError, HEADER_LEN};
use crate::policy::{self, Probe, Threshold};
use crate::record::Record;
use crate::stats::{
    thread_cpu_time, BackendKind, Fallback, RecordEvent, Stats, StatsSnapshot, Verdict,
};

/// Whether to use an accelerator.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum Offload {
    /// Use one if it starts; otherwise run everything on the CPU.
    #[default]
    Auto,
    /// Require one: creating the engine fails without it.
    On,
    /// Never offload.
    Off,
}

impl std::str::FromStr for Offload {
    type Err = String;

    fn from_str(text: &str) -> Result<Offload, String> {
        match text.trim().to_ascii_lowercase().as_str() {
            "auto" => Ok(Offload::Auto),
            "on" => Ok(Offload::On),
            "off" => Ok(Offload::Off),
            other => Err(format!(
                "unknown offload mode '{other}'; valid: auto, on, off"
            )),
        }
    }
}

/// What to do with a record the accelerator refuses because its queue is full.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum BusyPolicy {
    /// `Wait` for backends that compute on the host's cores (ISA-L), `Software` for devices.
    #[default]
    Auto,
    /// Run it on the CPU now (QZFS's rule for QAT: the CPU is idle while the device works).
    Software,
    /// Wait until the accelerator finishes a job, then submit again. Right when the "accelerator"
    /// is faster code on the same cores: software overflow would only slow it down.
    Wait,
}

/// Engine settings. `Default` gives the production defaults.
#[derive(Clone, Debug)]
pub struct EngineConfig {
    /// CPU worker threads (default: all cores). The default ISA-L backend gets as many.
    pub workers: usize,
    /// Records waiting in the submission queue before `submit` blocks.
    pub queue_depth: usize,
    /// Minimum saving to store a record compressed.
    pub threshold: Threshold,
    /// Run the cheap compressibility pre-check before expensive codecs.
    pub precheck: bool,
    /// Deflate engine of the CPU path.
    pub deflate: DeflateEngine,
    /// Deflate engine used to decode.
    pub decode_deflate: DeflateEngine,
    /// Whether to use an accelerator.
    pub offload: Offload,
    /// Consecutive accelerator failures before it is marked unavailable.
    pub failure_limit: u32,
    /// First wait before re-initialising an unavailable accelerator.
    pub reprobe_backoff: Duration,
    /// Longest wait between re-initialisation attempts.
    pub max_reprobe_backoff: Duration,
    /// Most records handed to the accelerator in one submission.
    pub max_batch: usize,
    /// What a busy accelerator means.
    pub busy: BusyPolicy,
}

impl Default for EngineConfig {
    fn default() -> Self {
        let workers = std::thread::available_parallelism().map_or(2, |n| n.get());
        EngineConfig {
            workers,
            queue_depth: workers * 8,
            threshold: Threshold::DEFAULT,
            precheck: true,
            deflate: DeflateEngine::Libdeflate,
            decode_deflate: DeflateEngine::Libdeflate,
            offload: Offload::Auto,
            failure_limit: 3,
            reprobe_backoff: Duration::from_secs(1),
            max_reprobe_backoff: Duration::from_secs(60),
            max_batch: 16,
            busy: BusyPolicy::Auto,
        }
    }
}

/// Why an engine could not start.
#[derive(Debug, thiserror::Error)]
pub enum EngineError {
    /// `offload=on` but no accelerator could be started.
    #[error(
        "offload=on but no accelerator is available: {0}; use offload=auto to fall back to the CPU"
    )]
    NoAccelerator(String),
}

/// One finished record.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Encoded {
    /// The complete frame (header and payload).
    pub frame: Vec<u8>,
    /// What the engine decided.
    pub verdict: Verdict,
    /// Where the compression ran.
    pub backend: BackendKind,
    /// Bytes of the record.
    pub logical_len: usize,
}

type Done = Box<dyn FnOnce(Encoded) + Send>;

/// Per-record settings that may differ from the engine's defaults (a directory's `threshold` and
/// `offload` properties).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobOptions {
    /// Minimum saving for this record.
    pub threshold: Threshold,
    /// Whether this record may go to the accelerator.
    pub offload: bool,
}

struct Job {
    record: Record,
    spec: CodecSpec,
    options: JobOptions,
    submitted: Instant,
    done: Done,
}

struct Health {
    failure_limit: u32,
    base_backoff: Duration,
    max_backoff: Duration,
    consecutive: AtomicU32,
    available: AtomicBool,
    // (when to retry, current backoff); locked only on the slow path.
    retry: Mutex<(Instant, Duration)>,
}

impl Health {
    fn success(&self) {
        self.consecutive.store(0, SeqCst);
    }

    fn failure(&self, stats: &Stats) {
        let failures = self.consecutive.fetch_add(1, SeqCst) + 1;
        if failures >= self.failure_limit && self.available.swap(false, SeqCst) {
            stats.accel_marked_unavailable();
            *self.retry.lock() = (Instant::now() + self.base_backoff, self.base_backoff);
        }
    }

    /// Whether the accelerator may be used now; re-initialises it once its backoff has passed.
    fn usable(&self, accel: &dyn Accelerator, stats: &Stats) -> bool {
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

struct Shared {
    config: EngineConfig,
    stats: Stats,
    health: Health,
    software: Sender<(Job, Option<Fallback>)>,
    pending: Mutex<usize>,
    idle: Condvar,
    // Bumped on every accelerator completion; workers waiting for room under BusyPolicy::Wait
    // sleep until it changes.
    accel_done: Mutex<u64>,
    accel_room: Condvar,
    next_job_id: AtomicU64,
}

/// The compression service engine. Cheap to share behind an `Arc`; dropping it waits for every
/// submitted record to finish.
pub struct Engine {
    shared: Arc<Shared>,
    accel: Option<Arc<dyn Accelerator>>,
    accel_name: Option<String>,
    submit: Option<Sender<Job>>,
    workers: Vec<JoinHandle<()>>,
}

impl Engine {
    /// An engine with the default accelerator for this build (ISA-L), as `config.offload` asks.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        let accel = match config.offload {
            Offload::Off => None,
            Offload::Auto | Offload::On => {
                match default_accelerator(config.workers, SizeWindow::DEFAULT) {
                    Ok(accel) => Some(accel),
                    Err(why) if config.offload == Offload::On => {
                        return Err(EngineError::NoAccelerator(why))
                    }
                    Err(_) => None,
                }
            }
        };
        Ok(Engine::with_accelerator(config, accel))
    }

    /// An engine with the given accelerator (or none).
    pub fn with_accelerator(config: EngineConfig, accel: Option<Arc<dyn Accelerator>>) -> Engine {
        let accel = if config.offload == Offload::Off {
            None
        } else {
            accel
        };
        let (submit_tx, submit_rx) = bounded::<Job>(config.queue_depth.max(1));
        let (software_tx, software_rx) = unbounded();
        let shared = Arc::new(Shared {
            health: Health {
                failure_limit: config.failure_limit.max(1),
                base_backoff: config.reprobe_backoff,
                max_backoff: config.max_reprobe_backoff.max(config.reprobe_backoff),
                consecutive: AtomicU32::new(0),
                available: AtomicBool::new(true),
                retry: Mutex::new((Instant::now(), config.reprobe_backoff)),
            },
            config,
            stats: Stats::default(),
            software: software_tx,
            pending: Mutex::new(0),
            idle: Condvar::new(),
            accel_done: Mutex::new(0),
            accel_room: Condvar::new(),
            next_job_id: AtomicU64::new(0),
        });
        let workers = (0..shared.config.workers.max(1))
            .map(|index| {
                let worker = Worker {
                    shared: shared.clone(),
                    accel: accel.clone(),
                    submit: submit_rx.clone(),
                    software: software_rx.clone(),
                };
                std::thread::Builder::new()
                    .name(format!("presso-cpu-{index}"))
                    .spawn(move || worker.run())
                    .expect("spawn engine worker")
            })
            .collect();
        Engine {
            shared,
            accel_name: accel.as_ref().map(|a| a.name().to_string()),
            accel,
            submit: Some(submit_tx),
            workers,
        }
    }

    /// Queues a record; `done` runs on a worker thread when its frame is ready. Blocks only while
    /// the submission queue is full.
    pub fn submit(
        &self,
        record: Record,
        spec: CodecSpec,
        done: impl FnOnce(Encoded) + Send + 'static,
    ) {
        self.submit_with(record, spec, self.default_options(), done)
    }

    /// The options [`Engine::submit`] uses: the configured threshold, offload allowed.
    pub fn default_options(&self) -> JobOptions {
        JobOptions {
            threshold: self.shared.config.threshold,
            offload: true,
        }
    }

    /// Like [`Engine::submit`], with this record's own threshold and offload permission.
    pub fn submit_with(
        &self,
        record: Record,
        spec: CodecSpec,
        options: JobOptions,
        done: impl FnOnce(Encoded) + Send + 'static,
    ) {
        *self.shared.pending.lock() += 1;
        let job = Job {
            record,
            spec,
            options,
            submitted: Instant::now(),
            done: Box::new(done),
        };
        self.submit
            .as_ref()
            .expect("engine is running")
            .send(job)
            .expect("engine workers are running");
    }

    /// A batch whose results come back in submission order.
    pub fn batch(&self) -> Batch<'_> {
        let (tx, rx) = unbounded();
        Batch {
            engine: self,
            tx,
            rx,
            count: 0,
        }
    }

    /// Compresses one record and waits for it.
    pub fn compress(&self, record: Record, spec: CodecSpec) -> Encoded {
        let mut batch = self.batch();
        batch.submit(record, spec);
        batch.wait().pop().expect("one result")
    }

    /// Decodes a frame with this engine's decode settings.
    pub fn decode(&self, frame: &[u8]) -> Result<Vec<u8>, FrameError> {
        frame::decode_frame_with(
            frame,
            DecodeOptions {
                deflate: self.shared.config.decode_deflate,
            },
        )
    }

    /// [`Engine::decode`] on a shared buffer: a record stored as-is comes back as a view into
    /// `frame`, without a copy.
    pub fn decode_shared(&self, frame: Bytes) -> Result<Bytes, FrameError> {
        frame::decode_frame_shared(
            frame,
            DecodeOptions {
                deflate: self.shared.config.decode_deflate,
            },
        )
    }

    /// Waits until every submitted record has completed.
    pub fn wait_idle(&self) {
        let mut pending = self.shared.pending.lock();
        while *pending > 0 {
            self.shared.idle.wait(&mut pending);
        }
    }

    /// The counters so far.
    pub fn stats(&self) -> StatsSnapshot {
        self.shared.stats.snapshot(self.accel_name.as_deref())
    }

    /// The accelerator's name, if the engine has one.
    pub fn accelerator(&self) -> Option<&str> {
        self.accel_name.as_deref()
    }

    /// Whether the accelerator is currently marked available.
    pub fn accelerator_available(&self) -> bool {
        self.accel.is_some() && self.shared.health.available.load(SeqCst)
    }

    /// The settings in force.
    pub fn config(&self) -> &EngineConfig {
        &self.shared.config
    }
}

impl Drop for Engine {
    fn drop(&mut self) {
        self.wait_idle();
        // With nothing pending the software queue is empty: closing the submission queue ends
        // every worker.
        self.submit.take();
        for worker in self.workers.drain(..) {
            let _ = worker.join();
        }
        // The accelerator is dropped here, on the caller's thread, after the workers that used it.
        self.accel.take();
    }
}

/// The default accelerator of this build with `workers` threads and the given size window, or why
/// there is none.
pub fn default_accelerator(
    workers: usize,
    window: SizeWindow,
) -> Result<Arc<dyn Accelerator>, String> {
    #[cfg(feature = "isal")]
    {
        let config = crate::accel::isal::IsalConfig {
            workers: workers.max(1),
            queue_depth: workers.max(1) * 4,
            window,
        };
        crate::accel::isal::IsalAccelerator::start(config)
            .map(|a| Arc::new(a) as Arc<dyn Accelerator>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "isal"))]
    {
        let _ = (workers, window);
        Err("this build has no accelerator backend (ISA-L feature off)".into())
    }
}

/// Records submitted together; [`Batch::wait`] returns their frames in submission order.
pub struct Batch<'a> {
    engine: &'a Engine,
    tx: Sender<(usize, Encoded)>,
    rx: Receiver<(usize, Encoded)>,
    count: usize,
}

impl Batch<'_> {
    /// Queues one record (blocks only while the engine's queue is full).
    pub fn submit(&mut self, record: Record, spec: CodecSpec) {
        let index = self.count;
        self.count += 1;
        let tx = self.tx.clone();
        self.engine.submit(record, spec, move |encoded| {
            // The receiver lives until wait() has collected every result.
            let _ = tx.send((index, encoded));
        });
    }

    /// Records submitted so far.
    pub fn len(&self) -> usize {
        self.count
    }

    /// Whether nothing was submitted.
    pub fn is_empty(&self) -> bool {
        self.count == 0
    }

    /// Waits for every record and returns the frames in submission order.
    pub fn wait(self) -> Vec<Encoded> {
        let mut slots: Vec<Option<Encoded>> = (0..self.count).map(|_| None).collect();
        for _ in 0..self.count {
            let (index, encoded) = self.rx.recv().expect("every submitted record completes");
            slots[index] = Some(encoded);
        }
        slots.into_iter().map(|s| s.expect("filled")).collect()
    }
}

struct Worker {
    shared: Arc<Shared>,
    accel: Option<Arc<dyn Accelerator>>,
    submit: Receiver<Job>,
    software: Receiver<(Job, Option<Fallback>)>,
}

/// Where a record goes after the policy checks.
enum Route {
    Done,
    Software(Job, Option<Fallback>),
    Offload(Job, usize),
}

impl Worker {
    fn run(self) {
        loop {
            // Redone and overflow work first: it is already late.
            if let Ok((job, why)) = self.software.try_recv() {
                self.shared.run_software(job, why);
                continue;
            }
            select! {
                recv(self.software) -> item => {
                    if let Ok((job, why)) = item {
                        self.shared.run_software(job, why);
                    }
                }
                recv(self.submit) -> job => match job {
                    Ok(job) => self.route(job),
                    Err(_) => return,
                },
            }
        }
    }

    fn route(&self, first: Job) {
        let mut offload = Vec::new();
        let mut local = None;
        match self.shared.policy(first, self.accel.as_deref()) {
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
                    match self.shared.policy(job, self.accel.as_deref()) {
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
                self.offload(accel.as_ref(), jobs);
            }
        }
        if let Some((job, why)) = local {
            self.shared.run_software(job, why);
        }
    }

    fn offload(&self, accel: &dyn Accelerator, mut jobs: Vec<AccelJob>) {
        let wait = match self.shared.config.busy {
            BusyPolicy::Auto => accel.shares_host_cpu(),
            BusyPolicy::Software => false,
            BusyPolicy::Wait => true,
        };
        loop {
            let seen = *self.shared.accel_done.lock();
            let refused = accel.submit(jobs);
            if refused.is_empty() {
                return;
            }
            if !wait || !self.shared.health.available.load(SeqCst) {
                for busy in refused {
                    // Completing a refused job with Busy hands it back to the CPU path.
                    busy.complete(Err(AccelError::Busy), Duration::ZERO);
                }
                return;
            }
            // Every accepted job completes, so room appears; a completion since `seen` means
            // there may be room already.
            let mut done = self.shared.accel_done.lock();
            while *done == seen {
                self.shared.accel_room.wait(&mut done);
            }
            drop(done);
            jobs = refused;
        }
    }
}

impl Shared {
    fn policy(self: &Arc<Self>, job: Job, accel: Option<&dyn Accelerator>) -> Route {
        let len = job.record.len();
        if len == 0 || job.spec.codec == CodecId::Off {
            let frame = frame::raw_frame(&job.record.slices());
            self.deliver(
                job,
                frame,
                Verdict::Uncompressed,
                BackendKind::None,
                Duration::ZERO,
            );
            return Route::Done;
        }
        let started = thread_cpu_time();
        let slices = job.record.slices();
        if policy::is_all_zero(&slices) {
            drop(slices);
            let frame = frame::hole_frame(len);
            let cpu = thread_cpu_time().saturating_sub(started);
            self.deliver(job, frame, Verdict::Hole, BackendKind::None, cpu);
            return Route::Done;
        }
        let budget = job.options.threshold.budget(len);
        if self.config.precheck && policy::probe(job.spec, &slices, budget, len) == Probe::Skip {
            drop(slices);
            let frame = frame::raw_frame(&job.record.slices());
            let cpu = thread_cpu_time().saturating_sub(started);
            self.deliver(job, frame, Verdict::Skipped, BackendKind::None, cpu);
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

    fn defer(&self, job: Job, why: Option<Fallback>) {
        // The receiver lives as long as any worker, and workers outlive every pending job.
        let _ = self.software.send((job, why));
    }

    fn accel_job(self: &Arc<Self>, job: Job, budget: usize) -> AccelJob {
        let Job {
            record,
            spec,
            options,
            submitted,
            done,
        } = job;
        let shared = self.clone();
        AccelJob {
            id: self.next_job_id.fetch_add(1, SeqCst),
            spec,
            input: record,
            out: OutBuf::new(HEADER_LEN, budget),
            completion: Box::new(move |result: AccelResult| {
                shared.accel_completed(spec, options, submitted, done, result)
            }),
        }
    }

    fn accel_completed(
        &self,
        spec: CodecSpec,
        options: JobOptions,
        submitted: Instant,
        done: Done,
        result: AccelResult,
    ) {
        if !matches!(result.outcome, Err(AccelError::Busy)) {
            *self.accel_done.lock() += 1;
            self.accel_room.notify_all();
        }
        let AccelResult {
            input,
            out,
            outcome,
            cpu,
        } = result;
        let job = Job {
            record: input,
            spec,
            options,
            submitted,
            done,
        };
        match outcome {
            Ok(AccelOutcome::Compressed { payload_len }) if payload_len <= out.budget() => {
                self.health.success();
                let frame = compressed_frame(out, payload_len, spec, &job.record);
                self.deliver(
                    job,
                    frame,
                    Verdict::Compressed,
                    BackendKind::Accelerator,
                    cpu,
                );
            }
            Ok(AccelOutcome::OverBudget) => {
                self.health.success();
                let frame = frame::raw_frame(&job.record.slices());
                self.deliver(
                    job,
                    frame,
                    Verdict::StoredRaw,
                    BackendKind::Accelerator,
                    cpu,
                );
            }
            Err(AccelError::Busy) => self.defer(job, Some(Fallback::Busy)),
            Ok(AccelOutcome::Compressed { .. }) | Err(_) => {
                self.stats.accel_failure();
                self.health.failure(&self.stats);
                self.defer(job, Some(Fallback::Failure));
            }
        }
    }

    fn run_software(&self, job: Job, why: Option<Fallback>) {
        if let Some(why) = why {
            self.stats.fallback(why);
        }
        let started = thread_cpu_time();
        let len = job.record.len();
        let mut out = OutBuf::new(HEADER_LEN, job.options.threshold.budget(len));
        let input = job.record.contiguous();
        let result = format::compress(job.spec, self.config.deflate, &input, out.space());
        drop(input);
        let (frame, verdict) = match result {
            Ok(Some(payload_len)) => (
                compressed_frame(out, payload_len, job.spec, &job.record),
                Verdict::Compressed,
            ),
            // Over budget, or a codec this build lacks: the record is kept, uncompressed.
            Ok(None) | Err(_) => (frame::raw_frame(&job.record.slices()), Verdict::StoredRaw),
        };
        let cpu = thread_cpu_time().saturating_sub(started);
        self.deliver(job, frame, verdict, BackendKind::Software, cpu);
    }

    fn deliver(
        &self,
        job: Job,
        frame: Vec<u8>,
        verdict: Verdict,
        backend: BackendKind,
        cpu: Duration,
    ) {
        let logical_len = job.record.len();
        self.stats.record(&RecordEvent {
            codec: job.spec.codec,
            verdict,
            backend,
            bytes_in: logical_len,
            bytes_out: frame.len(),
            cpu,
            latency: job.submitted.elapsed(),
        });
        (job.done)(Encoded {
            frame,
            verdict,
            backend,
            logical_len,
        });
        let mut pending = self.pending.lock();
        *pending -= 1;
        if *pending == 0 {
            self.idle.notify_all();
        }
    }
}

fn compressed_frame(out: OutBuf, payload_len: usize, spec: CodecSpec, record: &Record) -> Vec<u8> {
    let mut frame = out.into_vec(payload_len);
    frame::seal_frame(&mut frame, spec, &record.slices());
    frame
}
