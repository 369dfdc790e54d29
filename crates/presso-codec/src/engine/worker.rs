//! The engine's execution: the state its threads share, the CPU worker loop, software
//! compression, accelerator completions, and delivering each finished frame to its caller.
//!
//! Where a record goes is decided in `route.rs`; whether the accelerator is healthy in `health.rs`.

use std::sync::atomic::{AtomicU64, Ordering::SeqCst};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{select, Receiver, Sender};
use parking_lot::{Condvar, Mutex};

use super::health::Health;
use super::{Encoded, EngineConfig, JobOptions};
use crate::accel::{AccelError, AccelJob, AccelOutcome, AccelResult, OutBuf};
use crate::codec::CodecSpec;
use crate::format;
use crate::frame::{self, FrameBuf, FrameHeader, HEADER_LEN};
use crate::record::Record;
use crate::stats::{thread_cpu_time, BackendKind, Fallback, RecordEvent, Stats, Verdict};

/// The caller's completion closure.
pub(super) type Done = Box<dyn FnOnce(Encoded) + Send>;

/// One submitted record on its way through the engine.
pub(super) struct Job {
    pub(super) record: Record,
    pub(super) spec: CodecSpec,
    pub(super) options: JobOptions,
    pub(super) submitted: Instant,
    pub(super) done: Done,
}

/// A frame and its header, as the engine built it.
pub(super) struct Built {
    pub(super) frame: FrameBuf,
    pub(super) header: FrameHeader,
}

impl From<(Vec<u8>, FrameHeader)> for Built {
    fn from((frame, header): (Vec<u8>, FrameHeader)) -> Built {
        Built {
            frame: FrameBuf::whole(frame),
            header,
        }
    }
}

impl From<(FrameBuf, FrameHeader)> for Built {
    fn from((frame, header): (FrameBuf, FrameHeader)) -> Built {
        Built { frame, header }
    }
}

/// What the engine's threads share.
pub(super) struct Shared {
    pub(super) config: EngineConfig,
    pub(super) stats: Stats,
    pub(super) health: Health,
    pub(super) software: Sender<(Job, Option<Fallback>)>,
    pub(super) pending: Mutex<usize>,
    pub(super) idle: Condvar,
    // Bumped on every accelerator completion; submitters waiting for room under BusyPolicy::Wait
    // sleep until it changes.
    pub(super) accel_done: Mutex<u64>,
    pub(super) accel_room: Condvar,
    pub(super) next_job_id: AtomicU64,
}

/// One CPU worker thread: runs the software codec for records routed to the CPU.
pub(super) struct Worker {
    pub(super) shared: Arc<Shared>,
    /// Records the submitters routed to the CPU (bounded: the backpressure on software work).
    pub(super) submit: Receiver<(Job, Option<Fallback>)>,
    /// Records the accelerator handed back (busy or failed).
    pub(super) software: Receiver<(Job, Option<Fallback>)>,
}

impl Worker {
    /// Serves the queues until the submission queue closes.
    pub(super) fn run(self) {
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
                recv(self.submit) -> item => match item {
                    Ok((job, why)) => self.shared.run_software(job, why),
                    Err(_) => return,
                },
            }
        }
    }
}

impl Shared {
    /// Queues a job for any CPU worker.
    pub(super) fn defer(&self, job: Job, why: Option<Fallback>) {
        // The receiver lives as long as any worker, and workers outlive every pending job.
        let _ = self.software.send((job, why));
    }

    /// Turns a routed job into an accelerator job whose completion comes back here.
    pub(super) fn accel_job(self: &Arc<Self>, job: Job, budget: usize) -> AccelJob {
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
                let built = compressed_frame(out, payload_len, spec, &job.record);
                self.deliver(
                    job,
                    built,
                    Verdict::Compressed,
                    BackendKind::Accelerator,
                    cpu,
                );
            }
            Ok(AccelOutcome::OverBudget) => {
                self.health.success();
                let built = frame::raw_record(&job.record).into();
                self.deliver(
                    job,
                    built,
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

    /// Compresses a job on this thread with the configured software engine.
    pub(super) fn run_software(&self, job: Job, why: Option<Fallback>) {
        if let Some(why) = why {
            self.stats.fallback(why);
        }
        let started = thread_cpu_time();
        let len = job.record.len();
        let mut out = OutBuf::new(HEADER_LEN, job.options.threshold.budget(len));
        let input = job.record.contiguous();
        let result = format::compress(job.spec, self.config.deflate, &input, out.space());
        drop(input);
        let (built, verdict) = match result {
            Ok(Some(payload_len)) => (
                compressed_frame(out, payload_len, job.spec, &job.record),
                Verdict::Compressed,
            ),
            // Over budget, or a codec error (or a codec this build lacks): the record is kept,
            // uncompressed. An error is counted apart, so that status shows it instead of a
            // quietly falling ratio.
            over_or_failed => {
                if over_or_failed.is_err() {
                    self.stats.codec_error(job.spec.codec);
                }
                (frame::raw_record(&job.record).into(), Verdict::StoredRaw)
            }
        };
        let cpu = thread_cpu_time().saturating_sub(started);
        self.deliver(job, built, verdict, BackendKind::Software, cpu);
    }

    /// Counts a finished record and hands its frame to the caller.
    pub(super) fn deliver(
        &self,
        job: Job,
        built: Built,
        verdict: Verdict,
        backend: BackendKind,
        cpu: Duration,
    ) {
        let logical_len = job.record.len();
        let Built { frame, header } = built;
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
            header,
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

fn compressed_frame(out: OutBuf, payload_len: usize, spec: CodecSpec, record: &Record) -> Built {
    let mut frame = out.into_vec(payload_len);
    let header = frame::seal_frame(&mut frame, spec, &record.slices());
    (frame, header).into()
}
