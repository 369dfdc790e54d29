//! presso-store: the pool directory and its append-only segment files of record frames.
//!
//! A pool is a directory holding a versioned header file (`presso.pool`, see [`header`]) and
//! segment files `seg-<n>.dat` (see [`segment`]). [`Store::append`] wraps an opaque payload — a
//! codec frame, though this crate never looks inside — in a checksummed envelope and appends it to
//! the open segment, moving to a new segment past a configurable size. [`Store::sync`] makes
//! everything appended durable and returns the durable [`Position`]: a transaction group commits
//! metadata that references frames only after that. [`Store::read`] verifies envelope and
//! checksum and names segment and offset on corruption. On open, recovery cuts the torn tail of
//! the last segment.
//!
//! All I/O goes through the [`io::Storage`] / [`io::StorageDir`] traits: real files
//! ([`io::FsDir`]) or a simulation with crashes, torn writes and injected faults ([`sim::SimDir`]).
//!
//! An open [`Store`] holds the pool's exclusive lock (an `flock` on `presso.lock`): a second
//! open, from any process, fails with [`StoreError::InUse`].
//!
//! Not built yet: transaction-group commit with the metadata, garbage collection (only the
//! accounting exists: [`Store::mark_dead`], [`Store::live_fraction`]) and scrub. This crate must
//! not depend on presso-codec or presso-meta; presso-fs wires them together.

#![deny(missing_docs)]

pub mod error;
pub mod header;
pub mod io;
pub mod pool;
pub mod segment;
pub mod sim;

pub use error::{Result, StoreError};
pub use header::PoolHeader;
pub use io::{DirLock, FsDir, FsStorage, LockError, Storage, StorageDir, LOCK_FILE};
pub use pool::{
    Location, Position, RecoveryReport, SegmentStats, Store, StoreConfig, DEFAULT_SEGMENT_SIZE,
};
pub use segment::EnvelopeError;
pub use sim::{SimDir, SimStorage};
