//! The engine's settings: what [`EngineConfig`] holds, its production defaults, and the per-record
//! overrides ([`JobOptions`]).

use std::time::Duration;

use crate::accel::SizeWindow;
use crate::format::DeflateEngine;
use crate::policy::Threshold;

/// The default number of worker threads, for the engine's CPU workers, the ISA-L backend and the
/// file system's pool: one per core the process may use, or 2 when that is unknown.
pub fn default_workers() -> usize {
    std::thread::available_parallelism().map_or(2, |n| n.get())
}

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
    /// CPU worker threads (default: [`default_workers`]). The default ISA-L backend gets as many.
    pub workers: usize,
    /// Records routed to the CPU workers that may wait for one before `submit` blocks.
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
    /// Record sizes the accelerator started by [`Engine::new`](super::Engine::new) takes
    /// (default [`SizeWindow::DEFAULT`], 4 KiB to 1 MiB). An accelerator handed to
    /// [`Engine::with_accelerator`](super::Engine::with_accelerator) brings its own window.
    pub offload_window: SizeWindow,
    /// Whether the accelerator started by [`Engine::new`](super::Engine::new) runs each record
    /// on the thread that submits it (ISA-L's `on_submitter`; default false: on threads of its
    /// own). Right when the submitting threads already keep every core busy.
    pub offload_on_submitter: bool,
    /// Consecutive accelerator failures before it is marked unavailable.
    pub failure_limit: u32,
    /// First wait before re-initialising an unavailable accelerator.
    pub reprobe_backoff: Duration,
    /// Longest wait between re-initialisation attempts.
    pub max_reprobe_backoff: Duration,
    /// What a busy accelerator means.
    pub busy: BusyPolicy,
    /// Records shorter than this that stay on the CPU are compressed on the submitting thread
    /// (default 4 KiB, the accelerator window's lower end): for them a hand-off to a worker (a
    /// wake-up, and the bytes carried to another CPU's cache) costs about what the codec does.
    /// 0 hands every CPU record to the workers.
    pub inline_below: usize,
}

impl Default for EngineConfig {
    fn default() -> Self {
        let workers = default_workers();
        EngineConfig {
            workers,
            queue_depth: workers * 8,
            threshold: Threshold::DEFAULT,
            precheck: true,
            deflate: DeflateEngine::Libdeflate,
            decode_deflate: DeflateEngine::Libdeflate,
            offload: Offload::Auto,
            offload_window: SizeWindow::DEFAULT,
            offload_on_submitter: false,
            failure_limit: 3,
            reprobe_backoff: Duration::from_secs(1),
            max_reprobe_backoff: Duration::from_secs(60),
            busy: BusyPolicy::Auto,
            inline_below: SizeWindow::DEFAULT.min,
        }
    }
}

/// Per-record settings that may differ from the engine's defaults (a directory's `threshold` and
/// `offload` properties).
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct JobOptions {
    /// Minimum saving for this record.
    pub threshold: Threshold,
    /// Whether this record may go to the accelerator.
    pub offload: bool,
}
