//! The offload framework: an accelerator is an *execution backend for a codec format*, never a
//! codec. Whatever runs the job, the frame records only the format (e.g. raw deflate), so the CPU
//! decodes anything an accelerator wrote.
//!
//! # Plugging in a backend
//! Implement [`Accelerator`] in a module of its own behind a cargo feature (e.g. `qat` wrapping
//! QATzip's asynchronous API, `nvcomp` for GPUs): say which specs it can run in
//! [`Accelerator::supports`], its size window and queue depth, accept jobs in
//! [`Accelerator::submit`] without blocking (return what does not fit: the engine runs those on the
//! CPU and counts them as busy fallbacks), call each job's completion from the device's completion
//! context, and re-initialise the device in [`Accelerator::reinit`]. The engine does the rest:
//! routing, budgets, frames, failure counting, marking the backend unavailable and re-probing it.
//! Only ISA-L ships today because it is the only engine this project's machines have.

pub mod faulty;
#[cfg(feature = "isal")]
pub mod isal;

use std::time::Duration;

use crate::codec::CodecSpec;
use crate::record::Record;

/// Record sizes an accelerator takes; outside it, offload costs more than it saves (QZFS routes
/// 4 KiB–1 MiB to QAT).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct SizeWindow {
    /// Smallest record offloaded, in bytes.
    pub min: usize,
    /// Largest record offloaded, in bytes.
    pub max: usize,
}

impl SizeWindow {
    /// 4 KiB to 1 MiB.
    pub const DEFAULT: SizeWindow = SizeWindow {
        min: 4 << 10,
        max: 1 << 20,
    };

    /// Whether a record of `len` bytes falls inside.
    pub fn contains(&self, len: usize) -> bool {
        (self.min..=self.max).contains(&len)
    }
}

impl Default for SizeWindow {
    fn default() -> Self {
        SizeWindow::DEFAULT
    }
}

/// Where an accelerator writes a job's payload: `buf[start..]`, whose length is the budget.
pub struct OutBuf {
    buf: Vec<u8>,
    start: usize,
}

impl OutBuf {
    /// A zeroed buffer with `start` bytes reserved in front (for a frame header) and `budget`
    /// bytes of room for the payload.
    pub fn new(start: usize, budget: usize) -> OutBuf {
        OutBuf {
            buf: vec![0u8; start + budget],
            start,
        }
    }

    /// The room for the payload; its length is the budget.
    pub fn space(&mut self) -> &mut [u8] {
        &mut self.buf[self.start..]
    }

    /// The budget in bytes.
    pub fn budget(&self) -> usize {
        self.buf.len() - self.start
    }

    /// Takes the buffer back, cut to the reserved prefix plus `payload_len` bytes.
    pub fn into_vec(mut self, payload_len: usize) -> Vec<u8> {
        self.buf.truncate(self.start + payload_len);
        self.buf
    }
}

/// A finished job's result, as the accelerator reports it.
pub enum AccelOutcome {
    /// The payload is `payload_len` bytes at the start of the job's [`OutBuf::space`].
    Compressed {
        /// Payload length.
        payload_len: usize,
    },
    /// The output did not fit in the budget.
    OverBudget,
}

/// Why an accelerator failed a job. Any failure makes the engine redo the job in software.
#[derive(Debug, thiserror::Error, Clone, PartialEq, Eq)]
pub enum AccelError {
    /// The device reported an error.
    #[error("device error: {0}")]
    Device(String),
    /// The device is gone or not initialised.
    #[error("device unavailable: {0}")]
    Unavailable(String),
    /// The backend refused the job because its queue was full. Backends do not report this: they
    /// return refused jobs from [`Accelerator::submit`], and the engine completes them with it.
    #[error("queue full")]
    Busy,
    /// A failure injected by the fault-injecting wrapper.
    #[error("injected fault")]
    Injected,
}

/// What a completion receives: the job's input back (so a failed job can be redone without a
/// copy), its output buffer and the outcome.
pub struct AccelResult {
    /// The record that was submitted.
    pub input: Record,
    /// The output buffer that was submitted.
    pub out: OutBuf,
    /// What happened.
    pub outcome: Result<AccelOutcome, AccelError>,
    /// CPU time the backend spent on the job (zero for real hardware).
    pub cpu: Duration,
}

/// Called exactly once per accepted job, from the accelerator's completion context (which may be
/// the submitting thread: see [`Accelerator::submit`]).
pub type Completion = Box<dyn FnOnce(AccelResult) + Send>;

/// One unit of work for an accelerator.
pub struct AccelJob {
    /// Unique per engine; a job refused as busy keeps its id when submitted again.
    pub id: u64,
    /// Codec and level; the accelerator said it supports it.
    pub spec: CodecSpec,
    /// The input, read in place as a scatter/gather list.
    pub input: Record,
    /// Where the payload goes; its space is the budget.
    pub out: OutBuf,
    /// Receives the result.
    pub completion: Completion,
}

impl AccelJob {
    /// Completes the job with `outcome`, handing input and buffer back.
    pub fn complete(self, outcome: Result<AccelOutcome, AccelError>, cpu: Duration) {
        (self.completion)(AccelResult {
            input: self.input,
            out: self.out,
            outcome,
            cpu,
        });
    }
}

/// An execution backend for codec formats. See the module docs for how to add one.
pub trait Accelerator: Send + Sync {
    /// Short name for stats and output (`isal`).
    fn name(&self) -> &str;
    /// Whether it can run this codec at this level.
    fn supports(&self, spec: CodecSpec) -> bool;
    /// Record sizes it takes.
    fn size_window(&self) -> SizeWindow;
    /// Jobs it holds at once (queued and running).
    fn queue_depth(&self) -> usize;
    /// Accepts jobs without blocking on the device and returns, in order, those that did not
    /// fit (busy). Each accepted job's completion is called exactly once: later, from the
    /// device's completion context, or, for a backend that computes on the submitting thread
    /// (ISA-L's `IsalConfig::on_submitter`), before `submit` returns.
    fn submit(&self, jobs: Vec<AccelJob>) -> Vec<AccelJob>;
    /// Re-initialises the device and proves it works; called after it was marked unavailable.
    fn reinit(&self) -> Result<(), AccelError>;
    /// Whether the backend computes on the host's own cores (a SIMD engine such as ISA-L) rather
    /// than on a device. When it does, overflowing a busy backend to software would only take
    /// cores from it, so by default the engine waits for room instead (see `BusyPolicy`).
    fn shares_host_cpu(&self) -> bool {
        false
    }
}
