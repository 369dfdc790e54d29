//! presso-fs: POSIX file-system semantics over the engine, the store and the metadata, and a thin
//! FUSE adapter.
//!
//! - [`pool`]: one pool directory = segment store + metadata + compression engine, joined by
//!   transaction groups (the commit protocol is documented there and in docs/design.md); the
//!   file layer's only door to the store and the metadata. It runs over any `StorageDir` and
//!   `MetaStore`, so the tests drive it in-process on simulated parts.
//! - [`vfs`]: open files, record assembly, asynchronous compression, caches, readahead, the
//!   privilege rules and directory cookies (the FUSE adapter only converts and replies).
//! - [`fuse`]: the `fuser` adapter; errno mapping happens only there ([`FsError::errno`]).
//! - [`daemon`]: serving a mount until unmount or a signal; [`control`]: its socket.
//! - [`maintenance`]: garbage collection and scrub; [`reclaim`]: collecting automatically while
//!   mounted; [`status`]: what `presso status` shows; [`recover`]: rebuilding lost or damaged
//!   metadata from the metadata copy and the self-describing segment entries.
//! - [`props`]: the property table; [`units`]: sizes.
//!
//! The store and metadata crates do not know each other; this crate is where they meet, which is
//! why transaction groups, GC and scrub live here rather than in presso-store.

/// Writes one line to the daemon's log: standard error, which `presso mount` points at
/// `presso.log` in the pool directory. On a full or failing disk that log cannot be written, and
/// that must never stop the daemon (`eprintln!` panics when the write fails), so a line that
/// cannot be written is dropped.
#[macro_export]
macro_rules! log {
    ($($arg:tt)*) => {{
        use std::io::Write as _;
        let _ = writeln!(std::io::stderr(), $($arg)*);
    }};
}

pub mod cache;
pub mod control;
pub mod daemon;
mod error;
pub mod fuse;
pub mod lifetime;
pub mod maintenance;
pub mod memory;
pub mod pool;
pub mod props;
pub mod reclaim;
pub mod recover;
pub mod retries;
pub mod status;
pub mod units;
pub mod vfs;

pub use error::{FsError, Result};
