//! presso-meta: the metadata layer of Presso — inodes, directories, extended attributes, the
//! per-file record map (which compressed record of which segment holds which part of a file),
//! ZFS-like inheritable properties and space accounting.
//!
//! # Layout
//!
//! The crate follows "one trait, one semantic layer, small engine primitives, one conformance
//! suite":
//!
//! - [`engine`]: the [`MetaEngine`] / [`Txn`] traits — small, transactional row primitives
//!   (get/put/delete inode, dentry, xattr, record, property, counter). Engines know nothing about
//!   POSIX.
//! - [`MetaStore`]: every POSIX rule (name validation, link counts, rename replacement rules,
//!   loop detection, orphans, xattr flags, accounting, property inheritance) is implemented
//!   exactly once, over the primitives, each operation in one write transaction. This file holds
//!   the struct and its constructors; its methods live in one private module per concern:
//!   `namespace` (lookups, node creation, links, removal, readdir, setattr, orphans), `rename`,
//!   `xattr`, `records` (record map and pool-wide record views), `txg` (transaction groups),
//!   `props` (properties), `accounting` (space counters), `clients` (the sessions of a
//!   shared pool's clients) and `locks` (byte-range locks shared by its clients). The plain data types of the API are
//!   in `types`.
//! - Engines: [`sqlite::SqliteEngine`] (durable, WAL; the embedded default),
//!   [`postgres::PostgresEngine`] (a pool shared by many clients) and [`memory::MemoryEngine`]
//!   (reference model and test engine).
//! - `tests/conformance.rs`: one suite run against every engine, plus a property test checking
//!   that engines agree with each other.
//!
//! # Dependencies
//!
//! This crate must not depend on `presso-codec` or `presso-store`: it stores record references
//! as plain numbers and never reads segment data. Its public API does not expose engine types
//! (no rusqlite types); errors are [`MetaError`], mapped to errno by [`MetaError::errno`] at the
//! FUSE boundary.
//!
//! # Adding an engine
//!
//! 1. Implement [`MetaEngine`] and [`Txn`] in a new module, honouring the contract in the
//!    [`engine`] module docs (serializable write transactions, rollback on drop, ordered
//!    listings, bit-exact `u64`s).
//! 2. Add a constructor on [`MetaStore`] (or use [`MetaStore::new`] with a boxed engine).
//! 3. Add one line to the engine list in `tests/conformance.rs`, to the model-equivalence
//!    property test and to the accounting property test. Nothing else changes.
//!
//! # Semantics worth knowing
//!
//! - Inode 1 is the root (created by [`MetaStore::init`]); inode numbers are never reused.
//! - Directory `nlink` is `2 + number of subdirectories`.
//! - When the last name of a non-directory goes away, the inode is removed in the same
//!   transaction unless the caller's `is_open` callback says it is still open; it is then an
//!   orphan (`nlink == 0`) until [`MetaStore::forget`]. Orphans left by a crash are removed by
//!   [`MetaStore::purge_orphans`] at pool open (engines index inodes with `nlink == 0`).
//! - Properties: every inode row carries a `parent` pointer — exact for directories; for other
//!   inodes the directory of the name under which it was created or to which it was last renamed.
//!   Files copy nothing at creation; [`MetaStore::get_prop_effective`] walks
//!   inode → parent → … → root → pool (inode 0) and returns the first value found. If a file's
//!   parent directory no longer exists (a hard link outlived it), the walk continues at the root.
//! - The record map does not follow `setattr(size)`: the file-system layer truncates records
//!   explicitly with [`MetaStore::truncate_records`].
//! - Transaction groups: [`MetaStore::apply_txg`] applies a batch of record-map and size updates
//!   in one write transaction, skipping (not failing) updates of files that were removed
//!   meanwhile, and optionally makes the commit durable.
//!
//! # Space accounting
//!
//! `logical` and `stored` are the sums over live records (inline ones included); `garbage` counts
//! segment bytes no record points at any more and that were not yet given back with
//! [`MetaStore::release_garbage`]. Every non-inline frame the caller hands to the metadata
//! (through [`MetaStore::set_record`] or [`MetaStore::apply_txg`]) is counted exactly once, so at
//! every commit
//!
//! ```text
//! Σ segment_usage().stored_bytes + garbage == bytes of non-inline frames handed over − released
//! ```
//!
//! (handing over the frame a record already points at changes nothing).

mod accounting;
mod clients;
mod copies;
pub mod engine;
mod error;
mod locks;
pub mod memory;
mod namespace;
pub mod postgres;
mod props;
mod records;
mod rename;
pub mod sqlite;
mod txg;
mod types;
mod xattr;

use std::path::Path;

pub use clients::{ClientSession, CLIENTS_INO};
pub use engine::{
    CodecSpace, Dentry, FileKind, InodeRow, MetaEngine, RecordLocation, RecordRef, SegmentUsage,
    Timespec, Txn, POOL_INO, ROOT_INO, STATISTICS_PREFIX,
};
pub use error::{MetaError, Result};
pub use locks::{ByteLock, LockKind, LockOwner};
pub use namespace::INO_LIMIT;
pub use sqlite::{SqliteOptions, Synchronous, SCHEMA_VERSION};
pub use types::{
    Attr, DirEntry, EffectiveProp, LinkFate, ListAfter, NewNode, SetAttr, SpaceUsage, TxgOp,
    TxgOutcome, Unlinked, XattrFlags, LINK_MAX, NAME_MAX, RECORD_INDEX_LIMIT, SYMLINK_MAX,
    XATTR_VALUE_MAX,
};

/// The metadata store: POSIX semantics over any [`MetaEngine`].
pub struct MetaStore {
    engine: Box<dyn MetaEngine>,
    /// The shared pool's client this store acts for (0: none); see [`MetaStore::act_as_client`].
    client: std::sync::atomic::AtomicU64,
}

impl std::fmt::Debug for MetaStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("MetaStore").finish_non_exhaustive()
    }
}

impl MetaStore {
    /// Wraps an engine.
    pub fn new(engine: Box<dyn MetaEngine>) -> Self {
        MetaStore {
            engine,
            client: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Opens an existing SQLite database with default options; see [`MetaStore::open_sqlite_with`].
    pub fn open_sqlite(path: impl AsRef<Path>) -> Result<Self> {
        Self::open_sqlite_with(path, SqliteOptions::default())
    }

    /// Opens an existing SQLite database. A missing or empty file, or a database without the
    /// schema, is refused with [`MetaError::NotInitialized`] before anything is written.
    pub fn open_sqlite_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        Ok(Self::new(Box::new(sqlite::SqliteEngine::open(
            path.as_ref(),
            opts,
        )?)))
    }

    /// Creates a new SQLite database with default options (not initialized; call
    /// [`MetaStore::init`]).
    pub fn create_sqlite(path: impl AsRef<Path>) -> Result<Self> {
        Self::create_sqlite_with(path, SqliteOptions::default())
    }

    /// Creates a new SQLite database at a path that holds none yet.
    pub fn create_sqlite_with(path: impl AsRef<Path>, opts: SqliteOptions) -> Result<Self> {
        Ok(Self::new(Box::new(sqlite::SqliteEngine::create(
            path.as_ref(),
            opts,
        )?)))
    }

    /// Creates a pool's metadata in a new schema of a PostgreSQL database (not initialized; call
    /// [`MetaStore::init`]); [`MetaError::Exists`] if the schema exists.
    pub fn create_postgres(
        target: &postgres::PostgresTarget,
        opts: &postgres::PostgresOptions,
    ) -> Result<Self> {
        Ok(Self::new(Box::new(postgres::PostgresEngine::create(
            target, opts,
        )?)))
    }

    /// Opens a pool's metadata in a PostgreSQL database, checking (and if older, migrating) its
    /// schema; a schema without a pool is [`MetaError::NotInitialized`].
    pub fn open_postgres(
        target: &postgres::PostgresTarget,
        opts: &postgres::PostgresOptions,
    ) -> Result<Self> {
        Ok(Self::new(Box::new(postgres::PostgresEngine::open(
            target, opts,
        )?)))
    }

    /// Makes the engine's main file complete on its own (see [`MetaEngine::checkpoint`]): done
    /// at unmount so that a copy of the database file without its log loses nothing.
    pub fn checkpoint(&self) -> Result<()> {
        self.engine.checkpoint()
    }

    /// Writes a consistent copy of the metadata to a new file at `path` (see
    /// [`MetaEngine::copy_to`]); `Ok(false)` when the engine keeps no files.
    pub fn copy_to(&self, path: impl AsRef<Path>) -> Result<bool> {
        self.engine.copy_to(path.as_ref())
    }

    /// Checkpoints and closes the engine (see [`MetaEngine::close`]): the last call on a store,
    /// at unmount.
    pub fn close(&self) -> Result<()> {
        self.engine.close()
    }

    /// Whether [`MetaStore::init`] has run: the root directory exists.
    pub fn is_initialized(&self) -> Result<bool> {
        self.read(|tx| Ok(tx.get_inode(ROOT_INO)?.is_some()))
    }

    /// A fresh in-memory store (not initialized; call [`MetaStore::init`]).
    pub fn in_memory() -> Self {
        Self::new(Box::new(memory::MemoryEngine::new()))
    }

    pub(crate) fn read<R>(&self, f: impl FnOnce(&mut dyn Txn) -> Result<R>) -> Result<R> {
        let mut tx = self.engine.read()?;
        let r = f(&mut *tx)?;
        tx.commit()?;
        Ok(r)
    }

    /// [`MetaStore::read`] for reads that may visit many rows: see [`MetaEngine::read_scan`].
    pub(crate) fn read_scan<R>(&self, f: impl FnOnce(&mut dyn Txn) -> Result<R>) -> Result<R> {
        let mut tx = self.engine.read_scan()?;
        let r = f(&mut *tx)?;
        tx.commit()?;
        Ok(r)
    }

    /// A transaction that changes the metadata: it sets the change tag (see [`copies`]).
    /// Open one only to change something: a mount that changes nothing keeps the pool's copy
    /// of its metadata current.
    pub(crate) fn write<R>(&self, f: impl FnOnce(&mut dyn Txn) -> Result<R>) -> Result<R> {
        self.write_tagged(true, f)
    }

    /// [`MetaStore::write`], setting the change tag only when `tagged`: a transaction that
    /// changes nothing but statistics leaves it.
    pub(crate) fn write_tagged<R>(
        &self,
        tagged: bool,
        f: impl FnOnce(&mut dyn Txn) -> Result<R>,
    ) -> Result<R> {
        // A client whose session is gone writes nothing: see `MetaStore::act_as_client`.
        let mut tx = self.engine.write_as(false, self.client())?;
        let r = f(&mut *tx)?;
        if tagged {
            copies::note_change(&mut *tx)?;
        }
        tx.commit()?;
        Ok(r)
    }

    /// Creates the root directory (inode 1, mode 0755, owned by 0:0) if it does not exist yet.
    /// Idempotent.
    pub fn init(&self) -> Result<()> {
        self.write(|tx| {
            if tx.get_inode(ROOT_INO)?.is_some() {
                return Ok(());
            }
            tx.put_inode(&root_row(Timespec::now()))?;
            // `alloc_ino` never hands out numbers at or below the root, so no counter setup.
            accounting::start_codec_counters(tx)
        })
    }
}

/// The row of a new root directory: inode 1, mode 0755, owned by 0:0, made at `now`.
pub(crate) fn root_row(now: Timespec) -> InodeRow {
    InodeRow {
        attr: Attr {
            ino: ROOT_INO,
            kind: FileKind::Dir,
            mode: 0o755,
            uid: 0,
            gid: 0,
            size: 0,
            nlink: 2,
            atime: now,
            mtime: now,
            ctime: now,
            rdev: 0,
        },
        parent: 0,
        target: None,
    }
}
