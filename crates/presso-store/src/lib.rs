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
//! An open [`Store`] holds the pool's exclusive lock (an `flock` on `presso.lock` and one on the
//! pool directory, which holds even when the lock file is deleted by hand): a second
//! open, from any process, fails with [`StoreError::InUse`]. [`LockWatch`] lets another process
//! ask whether the lock is held and wait until it is released.
//!
//! For the layer above (presso-fs), which joins the store and the metadata into transaction
//! groups, garbage collection and scrub: [`Store::segments`], [`Store::roll`] and
//! [`Store::remove_segment`] to collect whole segments, [`Store::entries`] to list and verify a
//! segment's entries, [`Store::mark_dead`] / [`Store::set_live_bytes`] /
//! [`Store::live_fraction`] for the live-space accounting, [`Store::disk_usage`], and
//! [`StoreError::errno`] for the system-call boundary. The commit protocol (store sync, then
//! metadata commit) lives there too. This crate must not depend on presso-codec or presso-meta.

#![deny(missing_docs)]

pub mod envelope;
pub mod error;
pub mod header;
mod holder;
pub mod io;
pub mod segment;
pub mod sim;
pub mod store;

pub use error::{Result, StoreError};
pub use header::PoolHeader;
pub use holder::HolderProcess;
pub use io::{DirLock, FsDir, FsStorage, LockError, LockWatch, Storage, StorageDir, LOCK_FILE};
pub use segment::{
    DamagedEntry, EntryFormat, EntryTag, EnvelopeError, ScannedEntry, ENTRY_HEADER_LEN,
};
pub use sim::{IoStats, SimDir, SimStorage};
pub use store::{
    Committed, Location, Position, RecoveryReport, SegmentEntries, SegmentRange, SegmentStats,
    Store, StoreConfig, CLIENT_SHIFT, DEFAULT_SEGMENT_SIZE, FIRST_SEGMENT,
};
