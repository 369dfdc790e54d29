//! The one error type of the metadata layer and its mapping to `errno` values.

/// Errors returned by [`crate::MetaStore`] and by the engine primitives.
///
/// The FUSE layer maps these to errno values at exactly one boundary, with [`MetaError::errno`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MetaError {
    /// The inode, directory entry or record does not exist (`ENOENT`).
    #[error("no such file or directory")]
    NotFound,
    /// The name (or the extended attribute, with the create flag) already exists (`EEXIST`).
    #[error("already exists")]
    Exists,
    /// A directory was required but the inode is something else (`ENOTDIR`).
    #[error("not a directory")]
    NotDir,
    /// The operation is not valid on a directory (`EISDIR`).
    #[error("is a directory")]
    IsDir,
    /// The directory is not empty (`ENOTEMPTY`).
    #[error("directory not empty")]
    NotEmpty,
    /// The operation is not permitted, e.g. a hard link to a directory (`EPERM`).
    #[error("operation not permitted")]
    NotPermitted,
    /// An argument was invalid (`EINVAL`).
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// A name is longer than 255 bytes (`ENAMETOOLONG`).
    #[error("name too long")]
    NameTooLong,
    /// A rename would move a directory into its own subtree (`EINVAL`).
    #[error("cannot move a directory into its own subtree")]
    CrossDirectoryLoop,
    /// The extended attribute does not exist (`ENODATA`).
    #[error("no such extended attribute")]
    NoAttribute,
    /// An extended attribute name outside the namespaces Presso supports (user., trusted.,
    /// security.), as ext4 answers (`EOPNOTSUPP`).
    #[error("extended attribute namespace not supported")]
    UnsupportedNamespace,
    /// An extended attribute value is larger than 64 KiB (`E2BIG`).
    #[error("value too large")]
    ValueTooLarge,
    /// The link count would pass [`crate::LINK_MAX`] (`EMLINK`).
    #[error("too many links")]
    TooManyLinks,
    /// The disk or the database is full (`ENOSPC`): SQLite's `SQLITE_FULL`, which its Unix VFS
    /// also reports for writes that failed with `ENOSPC`, or the page limit of the database.
    #[error("the metadata database or the disk holding it is full")]
    Full,
    /// The database file is damaged or is not a database at all (`EIO`): SQLite's
    /// `SQLITE_CORRUPT` or `SQLITE_NOTADB`, a stored value that does not fit its field, or rows
    /// that break an invariant every build keeps (a next-inode counter naming an inode in use,
    /// parent pointers that loop). The text is for logs only.
    #[error("metadata database is corrupt: {0}")]
    Corrupt(String),
    /// The storage under the metadata failed a read, write or sync (`EIO`): SQLite's
    /// `SQLITE_IOERR` when the OS did not say `ENOSPC`, or a fault injected into the memory
    /// engine. The transaction was rolled back; a retry may succeed once the cause is gone.
    /// The text is for logs only.
    #[error("metadata I/O error: {0}")]
    Io(String),
    /// Any other failure of the storage engine (`EIO`), such as an engine invariant that does
    /// not hold. The text is for logs only.
    #[error("metadata engine failure: {0}")]
    EngineFailure(String),
    /// The database holds no Presso metadata: the file is empty, or a database without the
    /// schema (`EIO`). Never taken as an empty file system.
    #[error("the metadata database {0}")]
    NotInitialized(String),
    /// This store acts for a client of a shared pool whose session is gone: another client took
    /// it for stopped (it was silent longer than the client timeout) and may be collecting its
    /// segments, so nothing it writes may commit any more (`EIO`). Mount the pool again.
    #[error(
        "client {0}'s session was ended by another client (it was silent longer than the \
         client timeout): nothing more of it commits; unmount and mount the pool again"
    )]
    SessionEnded(u64),
    /// Another process has the database open (`EBUSY`): the engine holds its file for one
    /// process at a time (a mounted pool's daemon). The text is for logs only.
    #[error("the metadata database is in use by another process: {0}")]
    InUse(String),
    /// The database was written by a newer version of this crate (`EIO`).
    #[error("metadata schema version {found} is newer than the supported version {supported}")]
    SchemaTooNew {
        /// The version found in the database.
        found: u32,
        /// The newest version this build understands.
        supported: u32,
    },
}

impl MetaError {
    /// The libc errno value the FUSE layer should answer with.
    pub fn errno(&self) -> i32 {
        match self {
            MetaError::NotFound => libc::ENOENT,
            MetaError::Exists => libc::EEXIST,
            MetaError::NotDir => libc::ENOTDIR,
            MetaError::IsDir => libc::EISDIR,
            MetaError::NotEmpty => libc::ENOTEMPTY,
            MetaError::NotPermitted => libc::EPERM,
            MetaError::InvalidArgument(_) | MetaError::CrossDirectoryLoop => libc::EINVAL,
            MetaError::NameTooLong => libc::ENAMETOOLONG,
            MetaError::NoAttribute => libc::ENODATA,
            MetaError::ValueTooLarge => libc::E2BIG,
            MetaError::UnsupportedNamespace => libc::EOPNOTSUPP,
            MetaError::TooManyLinks => libc::EMLINK,
            MetaError::Full => libc::ENOSPC,
            MetaError::InUse(_) => libc::EBUSY,
            MetaError::Corrupt(_)
            | MetaError::Io(_)
            | MetaError::EngineFailure(_)
            | MetaError::NotInitialized(_)
            | MetaError::SessionEnded(_)
            | MetaError::SchemaTooNew { .. } => libc::EIO,
        }
    }

    /// Shorthand for [`MetaError::EngineFailure`].
    pub fn engine(msg: impl Into<String>) -> Self {
        MetaError::EngineFailure(msg.into())
    }

    /// Shorthand for [`MetaError::InvalidArgument`].
    pub fn invalid(msg: impl Into<String>) -> Self {
        MetaError::InvalidArgument(msg.into())
    }
}

/// Result alias used throughout the crate.
pub type Result<T, E = MetaError> = std::result::Result<T, E>;
