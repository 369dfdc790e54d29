//! Errors of the file-system layer, and their single mapping to errno (used by the FUSE adapter
//! and nowhere else).

use presso_codec::FrameError;
use presso_meta::MetaError;
use presso_store::StoreError;

/// Why a pool or file-system operation failed.
#[derive(Debug, thiserror::Error)]
pub enum FsError {
    /// From the metadata layer (POSIX errors such as ENOENT live here).
    #[error(transparent)]
    Meta(#[from] MetaError),
    /// From the segment store (I/O, corruption, full disk, pool in use).
    #[error(transparent)]
    Store(#[from] StoreError),
    /// From the object store of a shared pool.
    #[error(transparent)]
    Objects(#[from] presso_objects::ObjectError),
    /// A frame read back from the pool does not decode.
    #[error("corrupt record of inode {ino} (record {index}) in segment {segment} at offset {offset}: {source}")]
    CorruptFrame {
        /// File.
        ino: u64,
        /// Record index in the file.
        index: u64,
        /// Segment number (0 = stored inline in the metadata).
        segment: u64,
        /// Offset in the segment.
        offset: u64,
        /// What the decoder said.
        source: FrameError,
    },
    /// The metadata points at a frame whose checksum differs from the one recorded with it.
    #[error("record {index} of inode {ino} points at a different frame in segment {segment} at offset {offset} (checksum mismatch)")]
    Misdirected {
        /// File.
        ino: u64,
        /// Record index.
        index: u64,
        /// Segment number.
        segment: u64,
        /// Offset in the segment.
        offset: u64,
    },
    /// The host file system under the pool is (nearly) full.
    #[error("the file system holding the pool is full; free space there and retry")]
    NoSpace,
    /// The pool at this path cannot open: the disk holding it has no room for the metadata's
    /// first write. Not damage; nothing was changed.
    #[error(
        "{}: the disk holding the pool is full. Free space on it (`df {}` shows how much is \
         left), then try again; nothing in the pool was changed",
        .0.display(),
        .0.display()
    )]
    PoolDiskFull(std::path::PathBuf),
    /// A property name or value that is not valid, or set where it cannot be.
    #[error("{0}")]
    Property(String),
    /// A request argument this file system refuses (`EINVAL`).
    #[error("invalid argument: {0}")]
    BadArgument(&'static str),
    /// An offset or size past the largest file size (`EFBIG`).
    #[error("file too large")]
    FileTooLarge,
    /// No data at or after the offset (`SEEK_DATA`/`SEEK_HOLE` past the end: `ENXIO`).
    #[error("no data at or after that offset")]
    NoData,
    /// A lock another owner holds (`EAGAIN`).
    #[error("the range is locked by another owner")]
    WouldBlock,
    /// A wait given up because the process that asked is gone (`EINTR`).
    #[error("interrupted: the waiting process is gone")]
    Interrupted,
    /// Not supported by this file system.
    #[error("operation not supported: {0}")]
    Unsupported(&'static str),
    /// A previous asynchronous write of this file failed; reported once, like Linux.
    #[error("an earlier write of this file failed: {0}")]
    Deferred(std::sync::Arc<FsError>),
    /// One failure seen by several requests (a record whose load they all waited for).
    #[error("{0}")]
    Shared(std::sync::Arc<FsError>),
    /// The compression engine could not start with the pool's settings.
    #[error("cannot start the compression engine: {0}")]
    EngineStart(String),
    /// The pool directory lacks a part every pool has.
    #[error("not a complete pool: {0}")]
    IncompletePool(String),
    /// The pool's metadata is missing, empty, damaged or another pool's; nothing was changed.
    #[error(
        "{0}. Nothing in the pool was changed (a backup of meta.db taken after a clean \
         unmount, which is complete on its own, also restores the pool)"
    )]
    MetadataUnusable(String),
    /// The pool header of a directory that holds a pool's other files does not decode; nothing
    /// was changed.
    #[error(
        "{0}. Nothing in the pool was changed. The pool header is written once, by `presso \
         create`, and never changes: restore it from any backup of this pool, then mount again"
    )]
    PoolHeaderDamaged(String),
    /// Refused because it would hide or mix data (a pool inside its own mount point, a new pool
    /// over an existing one).
    #[error("{0}")]
    Refused(String),
    /// A directory that should be empty is not (a new pool's, a mount point).
    #[error("{0}")]
    NotEmpty(String),
    /// The mount itself cannot be made as asked.
    #[error("{0}")]
    Mount(String),
    /// A control-socket request or reply that does not parse.
    #[error("{0}")]
    Control(String),
    /// Data written to the file layer could not be stored in the pool (a full disk, an I/O
    /// error): kept in memory while mounted, lost by an unmount, which reports this.
    #[error("{bytes} bytes of {files} file(s) could not be stored in the pool: {reason}")]
    Unstored {
        /// Bytes of records not stored.
        bytes: u64,
        /// Files holding them.
        files: usize,
        /// Why the last attempt failed.
        reason: String,
    },
    /// The pool is closing: no more commits.
    #[error("the pool is closing")]
    Closing,
    /// A transaction group failed to commit; its ops stay queued for the next one.
    #[error("transaction group {group} failed to commit: {source}")]
    Commit {
        /// The group.
        group: u64,
        /// Why.
        source: std::sync::Arc<FsError>,
    },
    /// An I/O error outside the store (pool directory, lock, control socket).
    #[error("{context}: {source}")]
    Io {
        /// What was being done.
        context: String,
        /// The error.
        source: std::io::Error,
    },
}

/// Result alias of this crate.
pub type Result<T, E = FsError> = std::result::Result<T, E>;

impl FsError {
    /// The errno the kernel should see.
    pub fn errno(&self) -> i32 {
        match self {
            FsError::Meta(e) => e.errno(),
            FsError::Store(e) => e.errno(),
            FsError::Objects(e) => match e {
                presso_objects::ObjectError::NotFound(_) => libc::ENOENT,
                presso_objects::ObjectError::Denied(_) => libc::EACCES,
                presso_objects::ObjectError::Config(_) => libc::EINVAL,
                presso_objects::ObjectError::Truncated { .. }
                | presso_objects::ObjectError::Unavailable(_) => libc::EIO,
            },
            FsError::CorruptFrame { .. } | FsError::Misdirected { .. } => libc::EIO,
            FsError::NoSpace | FsError::PoolDiskFull(_) => libc::ENOSPC,
            FsError::Property(_)
            | FsError::BadArgument(_)
            | FsError::Mount(_)
            | FsError::Control(_) => libc::EINVAL,
            FsError::FileTooLarge => libc::EFBIG,
            FsError::NoData => libc::ENXIO,
            FsError::Unsupported(_) => libc::EOPNOTSUPP,
            FsError::WouldBlock => libc::EAGAIN,
            FsError::Interrupted => libc::EINTR,
            FsError::Deferred(e) | FsError::Shared(e) => e.errno(),
            FsError::EngineStart(_)
            | FsError::IncompletePool(_)
            | FsError::MetadataUnusable(_)
            | FsError::PoolHeaderDamaged(_) => libc::EIO,
            FsError::Refused(_) => libc::EEXIST,
            FsError::NotEmpty(_) => libc::ENOTEMPTY,
            FsError::Closing | FsError::Unstored { .. } => libc::EIO,
            FsError::Commit { source, .. } => source.errno(),
            FsError::Io { source, .. } => source.raw_os_error().unwrap_or(libc::EIO),
        }
    }

    /// Wraps an I/O error with what was being done.
    pub fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        FsError::Io {
            context: context.into(),
            source,
        }
    }
}
