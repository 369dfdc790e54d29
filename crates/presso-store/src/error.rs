//! The store's error type. Every variant says where: the file (or segment) and the byte offset.

use std::io;

/// Everything that can go wrong in the pool store.
#[derive(Debug, thiserror::Error)]
pub enum StoreError {
    /// An I/O call failed (other than for lack of space).
    #[error("{file} at offset {offset}: {op} failed: {source}")]
    Io {
        /// File name inside the pool directory (or the directory itself).
        file: String,
        /// Byte offset the call was for.
        offset: u64,
        /// The operation: "read", "write", "sync", "truncate", ...
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The host file system holding the pool is full (ENOSPC). Nothing partial became visible;
    /// appends work again once space is freed.
    #[error("{file} at offset {offset}: {op} failed: the host file system holding the pool is full (no space left on device); free space there")]
    NoSpace {
        /// File name inside the pool directory.
        file: String,
        /// Byte offset of the write that failed.
        offset: u64,
        /// The operation that failed.
        op: &'static str,
        /// The underlying error.
        #[source]
        source: io::Error,
    },
    /// The directory is not a Presso pool (no header file, or not a pool header).
    #[error("{file}: not a Presso pool: {reason}")]
    NotAPool {
        /// The header file that was looked for.
        file: String,
        /// Why it is not one.
        reason: String,
    },
    /// The pool was written by a newer Presso.
    #[error("{file}: pool format version {found} is newer than this Presso supports ({supported}); upgrade Presso")]
    NewerVersion {
        /// The header file.
        file: String,
        /// Version found on disk.
        found: u16,
        /// Newest version this build reads.
        supported: u16,
    },
    /// A pool or segment header is damaged.
    #[error("{file} at offset {offset}: corrupt: {reason}")]
    Corrupt {
        /// File name inside the pool directory.
        file: String,
        /// Offset of the damaged field.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// An entry failed verification when read back.
    #[error("segment {segment} at offset {offset}: corrupt entry: {reason}")]
    CorruptEntry {
        /// Segment number.
        segment: u64,
        /// Offset of the entry envelope in the segment.
        offset: u64,
        /// What is wrong.
        reason: String,
    },
    /// A location that names no entry of this store.
    #[error("no entry at segment {segment} offset {offset} (payload length {len}): {reason}")]
    BadLocation {
        /// Segment number asked for.
        segment: u64,
        /// Offset asked for.
        offset: u64,
        /// Payload length asked for.
        len: u32,
        /// Why it is refused.
        reason: &'static str,
    },
    /// A payload larger than one entry may hold.
    #[error("payload of {len} bytes is larger than the largest entry payload ({max} bytes)")]
    TooLarge {
        /// Length offered.
        len: usize,
        /// The limit.
        max: u32,
    },
    /// `Store::create` on a directory that already holds a pool or segment files.
    #[error("{file}: {reason}")]
    AlreadyExists {
        /// The file found.
        file: String,
        /// What was found.
        reason: &'static str,
    },
    /// A pool property that cannot be stored.
    #[error("invalid pool property {key:?}: {reason}")]
    BadProperty {
        /// The key.
        key: String,
        /// Why it is refused.
        reason: &'static str,
    },
    /// Another process (or another `Store` in this one) has the pool open.
    #[error("the pool is in use by another presso process{}; unmount it first", .pid.map(|p| format!(" (pid {p})")).unwrap_or_default())]
    InUse {
        /// Process id of the holder, when it could be read from the lock file.
        pid: Option<u32>,
    },
    /// A segment number that names no segment of this store (never created, or removed).
    #[error("segment {segment} does not exist (never created, or removed)")]
    NoSuchSegment {
        /// The segment number asked for.
        segment: u64,
    },
    /// An operation meant for sealed segments was asked of the segment open for appends.
    #[error("segment {segment} is the segment open for appends; roll it first")]
    CurrentSegment {
        /// The segment number asked for.
        segment: u64,
    },
    /// An operation meant for another writer's segments was asked of one of this store's own.
    #[error("segment {segment} is this store's own, not another writer's")]
    OwnSegment {
        /// The segment number asked for.
        segment: u64,
    },
    /// More live bytes claimed for a segment than it holds.
    #[error("segment {segment}: {live} live entry bytes claimed, but it holds only {total}")]
    LiveBytesTooLarge {
        /// Segment number.
        segment: u64,
        /// Live entry bytes claimed.
        live: u64,
        /// Entry bytes the segment holds.
        total: u64,
    },
    /// A writer of a shared pool used up its segment numbers (2^40 - 1 segments).
    #[error(
        "no segment numbers left in {start}..{end}; remount to become a new client with fresh ones"
    )]
    SegmentNumbersUsedUp {
        /// First number of the writer's range.
        start: u64,
        /// One past its last number.
        end: u64,
    },
    /// A sync failed earlier; after a failed fsync the kernel may have dropped the dirty data, so
    /// the store refuses further writes until the pool is reopened (which runs recovery).
    #[error("the store refuses writes after a failed sync ({reason}); reopen the pool to recover")]
    Failed {
        /// The error that poisoned the store.
        reason: String,
    },
}

impl StoreError {
    /// The errno this error should surface as at a system-call boundary (the FUSE layer):
    /// `ENOSPC` for a full host file system, `EBUSY` for a pool in use, `EIO` for damage, failed
    /// I/O and a poisoned store, and the closest errno for the rest.
    pub fn errno(&self) -> i32 {
        match self {
            StoreError::NoSpace { .. } => libc::ENOSPC,
            // A read-only or over-quota host is the user's to fix and says so; anything else the
            // host reported is an I/O error of the pool, whatever the internal call was.
            StoreError::Io { source, .. } => match source.raw_os_error() {
                Some(e @ (libc::EROFS | libc::EDQUOT)) => e,
                _ => libc::EIO,
            },
            StoreError::Corrupt { .. }
            | StoreError::CorruptEntry { .. }
            | StoreError::BadLocation { .. }
            | StoreError::NoSuchSegment { .. }
            | StoreError::Failed { .. } => libc::EIO,
            StoreError::NotAPool { .. }
            | StoreError::BadProperty { .. }
            | StoreError::LiveBytesTooLarge { .. } => libc::EINVAL,
            StoreError::NewerVersion { .. } => libc::EPROTONOSUPPORT,
            StoreError::TooLarge { .. } => libc::EFBIG,
            StoreError::SegmentNumbersUsedUp { .. } => libc::ENOSPC,
            StoreError::AlreadyExists { .. } => libc::EEXIST,
            StoreError::InUse { .. }
            | StoreError::CurrentSegment { .. }
            | StoreError::OwnSegment { .. } => libc::EBUSY,
        }
    }
}

/// Builds the error for a failed I/O call; ENOSPC becomes [`StoreError::NoSpace`].
pub(crate) fn io_error(file: &str, offset: u64, op: &'static str, source: io::Error) -> StoreError {
    let no_space =
        source.raw_os_error() == Some(libc::ENOSPC) || source.kind() == io::ErrorKind::StorageFull;
    if no_space {
        StoreError::NoSpace {
            file: file.to_string(),
            offset,
            op,
            source,
        }
    } else {
        StoreError::Io {
            file: file.to_string(),
            offset,
            op,
            source,
        }
    }
}

/// Result with [`StoreError`].
pub type Result<T, E = StoreError> = std::result::Result<T, E>;
