//! presso-codec: Presso's compression service engine.
//!
//! It decides, per record, how and whether to compress and where the work runs, and produces
//! self-describing [frames](frame) that decode with no configuration. It knows nothing of files,
//! disks or metadata, and must not depend on any other Presso crate.
//!
//! - [`codec`]: the one codec table (stable on-disk ids) and the spec parser (`gzip-6`, `zstd`).
//! - [`frame`]: the record frame, byte by byte, and its verified decoder.
//! - [`format`](mod@format): software implementations of each codec format, called through the codec table.
//! - [`policy`]: zero check, compressibility pre-check, output budget ("not worth it" lives here).
//! - [`accel`]: the accelerator trait (an execution backend for a codec format), the ISA-L backend
//!   and a fault-injecting wrapper. ISA-L's deflate lives once, in `format/isal.rs`: the `isal`
//!   accelerator runs it on threads of its own, [`DeflateEngine::Isal`] runs it inline.
//! - [`engine`]: routing, the CPU worker pool, asynchronous submission, fallbacks and health.
//! - [`stats`]: counters of every verdict and backend.
//!
//! To add a codec: one table row in `codec.rs` and one file in `format/`. To add an accelerator:
//! see [`accel`].

pub mod accel;
pub mod codec;
pub mod engine;
pub mod format;
pub mod frame;
pub mod policy;
pub mod record;
pub mod stats;

pub use codec::{valid_specs, CodecId, CodecSpec, SpecError, CODECS};
pub use engine::{
    default_workers, Batch, BusyPolicy, Encoded, Engine, EngineConfig, EngineError, JobOptions,
    Offload,
};
pub use format::DeflateEngine;
pub use frame::{
    decode_frame, decode_frame_with, decode_parsed_shared, DecodeOptions, FrameBuf, FrameError,
    FrameHeader,
};
pub use policy::{Threshold, ThresholdError};
pub use record::Record;
pub use stats::{BackendKind, StatsSnapshot, Verdict};
