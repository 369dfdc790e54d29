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
//! Submission routes the record on the caller's thread and hands it on: [`Engine::submit`]
//! returns once the accelerator's queue or the workers' bounded queue took it, and blocks only
//! while they are full (backpressure). A record shorter than [`EngineConfig::inline_below`] that
//! stays on the CPU is compressed before `submit` returns. Completions run a caller-supplied
//! closure on the thread that finished the record; [`Batch`] collects them in submission order.
//!
//! This module holds the public face (the [`Engine`], its results and [`Batch`]); the settings
//! live in `config.rs`, the routing decision in `route.rs`, the accelerator's health in
//! `health.rs` and the threads' work in `worker.rs`.

mod config;
mod health;
mod route;
mod worker;

pub use config::{default_workers, BusyPolicy, EngineConfig, JobOptions, Offload};

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Instant;

use bytes::Bytes;
use crossbeam_channel::{bounded, unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use crate::accel::{Accelerator, SizeWindow};
use crate::codec::CodecSpec;
use crate::frame::{self, DecodeOptions, FrameBuf, FrameError, FrameHeader};
use crate::record::Record;
use crate::stats::{BackendKind, Fallback, Stats, StatsSnapshot, Verdict};
use health::Health;
use worker::{Job, Shared, Worker};

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
    pub frame: FrameBuf,
    /// The header at the start of `frame`, as the engine wrote it: callers never parse it back.
    pub header: FrameHeader,
    /// What the engine decided.
    pub verdict: Verdict,
    /// Where the compression ran.
    pub backend: BackendKind,
    /// Bytes of the record.
    pub logical_len: usize,
}

/// The compression service engine. Cheap to share behind an `Arc`; dropping it waits for every
/// submitted record to finish.
pub struct Engine {
    shared: Arc<Shared>,
    accel: Option<Arc<dyn Accelerator>>,
    accel_name: Option<String>,
    submit: Option<Sender<(Job, Option<Fallback>)>>,
    workers: Vec<JoinHandle<()>>,
}

impl Engine {
    /// An engine with the default accelerator for this build (ISA-L), as `config.offload` asks.
    pub fn new(config: EngineConfig) -> Result<Engine, EngineError> {
        let accel = match config.offload {
            Offload::Off => None,
            Offload::Auto | Offload::On => {
                let placement = AccelPlacement {
                    workers: config.workers,
                    on_submitter: config.offload_on_submitter,
                };
                match default_accelerator(placement, config.offload_window) {
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
        let (submit_tx, submit_rx) = bounded(config.queue_depth.max(1));
        let (software_tx, software_rx) = unbounded();
        let shared = Arc::new(Shared {
            health: Health::new(&config),
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

    /// Routes a record and hands it on; `done` runs when its frame is ready, on the thread that
    /// finished it. Blocks only while the accelerator's queue (for a backend that computes on
    /// the host's cores) or the workers' queue is full. A record that needs no codec (codec
    /// `off`, empty, all zeros, or judged incompressible) and a record shorter than
    /// [`EngineConfig::inline_below`] that stays on the CPU are finished on the calling thread,
    /// and `done` runs there before this returns: the caller must not hold anything `done` takes.
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
        self.shared.dispatch(
            job,
            self.accel.as_deref(),
            self.submit.as_ref().expect("engine is running"),
        );
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
        frame::decode_frame_with(frame, self.decode_options())
    }

    /// [`Engine::decode`] on a shared buffer: a record stored as-is comes back as a view into
    /// `frame`, without a copy.
    pub fn decode_shared(&self, frame: Bytes) -> Result<Bytes, FrameError> {
        frame::decode_frame_shared(frame, self.decode_options())
    }

    /// [`Engine::decode_shared`] for a caller that has already parsed `frame`'s header (to check
    /// it against its own records, say): the header is not parsed again. The payload's hash and
    /// length, the codec and the decoded record's CRC are verified as in every decode.
    pub fn decode_parsed_shared(
        &self,
        header: &FrameHeader,
        frame: Bytes,
    ) -> Result<Bytes, FrameError> {
        frame::decode_parsed_shared(header, frame, self.decode_options())
    }

    fn decode_options(&self) -> DecodeOptions {
        DecodeOptions {
            deflate: self.shared.config.decode_deflate,
        }
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
        self.accel.is_some() && self.shared.health.available()
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

/// Where the default accelerator runs its jobs.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct AccelPlacement {
    /// Threads of its own (at least one), unless `on_submitter`.
    pub workers: usize,
    /// On the thread that submits each job instead.
    pub on_submitter: bool,
}

/// The default accelerator of this build, placed as `placement` says, with the given size
/// window, or why there is none.
pub fn default_accelerator(
    placement: AccelPlacement,
    window: SizeWindow,
) -> Result<Arc<dyn Accelerator>, String> {
    #[cfg(feature = "isal")]
    {
        let config = crate::accel::isal::IsalConfig {
            window,
            on_submitter: placement.on_submitter,
            ..crate::accel::isal::IsalConfig::with_workers(placement.workers)
        };
        crate::accel::isal::IsalAccelerator::start(config)
            .map(|a| Arc::new(a) as Arc<dyn Accelerator>)
            .map_err(|e| e.to_string())
    }
    #[cfg(not(feature = "isal"))]
    {
        let _ = (placement, window);
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
