//! SQLite engine: one table per row kind, WAL journal; one write connection behind a mutex and a
//! small pool of read connections, so reads run concurrently with each other and with a writer.
//!
//! Unsigned 64-bit numbers are stored bit-cast into SQLite's signed `INTEGER`; record indexes are
//! limited to `0..i64::MAX` by the semantic layer so their order is kept. Byte-string keys are
//! `BLOB`s, which SQLite orders with `memcmp` then length, the same order as `Vec<u8>`.
//!
//! Concurrency: write transactions are serialized on the write connection (`BEGIN IMMEDIATE`);
//! with `synchronous=NORMAL` the ordinary ones are grouped into one open SQLite transaction and
//! committed through the intent log (`group.rs`, `intent.rs`, `intent_file.rs`). A read
//! transaction runs on the write connection when that is idle: its page cache is always current
//! there, where a read connection must reload every page a commit since its last transaction
//! changed. While a group is open it runs there inside the group, waiting for the connection if
//! need be, since a read connection would not see the group. Otherwise, and always for
//! [`MetaEngine::read_scan`] (which commits the open group first), it takes a connection from the
//! pool (at most [`READ_CONNECTIONS`], opened on first need, `query_only`), waiting for one to
//! come back when all are busy. In WAL mode a read transaction's snapshot is fixed by its first
//! statement and kept until it ends, so it is consistent and includes every commit made before
//! the transaction began. A thread must not begin a transaction while it holds another on the
//! same engine.
//!
//! Locking: every connection opens the file through SQLite's `unix-excl` VFS. The first one to
//! read takes an exclusive lock on the file for the whole process, which the connections of the
//! process share; the log's index then lives in the process's memory instead of a `-shm` file,
//! so beginning and ending a transaction takes no file locks (docs/benchmarks.md, "SQLite's
//! share of a namespace request"). Another process cannot open the database while the
//! engine has it open ([`MetaError::InUse`] after the busy timeout); nothing needs to, as
//! `presso` commands reach a mounted pool through its control socket.
//!
//! Durability: commits use the `synchronous` level the engine was opened with, except those of
//! [`MetaEngine::write_durable`] transactions, which commit the open group, then run with
//! `synchronous=FULL` (SQLite refuses
//! to change the level inside a transaction, so it is switched before `BEGIN` and switched back
//! before the next ordinary write). In WAL mode `FULL` syncs the log at commit, and because the
//! log is written in order, that also makes every earlier commit durable.

mod cache;
#[cfg(test)]
mod cache_tests;
mod copies;
mod group;
mod intent;
mod intent_file;
#[cfg(test)]
mod intent_tests;
mod mapped;
mod primitives;
mod readers;
mod rows;
mod schema;
#[cfg(test)]
mod tests;
mod txn;

use std::cell::{Cell, RefCell};
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, MutexGuard, TryLockError};

use rusqlite::config::DbConfig;
use rusqlite::{Connection, OpenFlags};

use crate::engine::{MetaEngine, Txn};
use crate::error::{MetaError, Result};

use cache::RowCache;
use group::Groups;
pub use group::COUNTER_INTENT_GROUP;
use readers::Readers;
pub use schema::SCHEMA_VERSION;
use txn::{Handle, SqliteTxn};

/// Most read connections the engine opens.
pub const READ_CONNECTIONS: usize = 4;

/// Counter bumped by every commit of a [`MetaEngine::write_durable`] transaction, so that the
/// commit always appends to the log and therefore syncs it.
pub const COUNTER_DURABLE_COMMITS: &str = "sqlite_durable_commits";

/// Prepared statements kept per connection: more than the engine has, so none is re-prepared.
const STATEMENT_CACHE: usize = 80;

/// The SQLite VFS every connection opens the file with (see "Locking" above).
const VFS: &str = "unix-excl";

/// Flags every connection of the engine opens with (`NO_MUTEX`: each connection is used by one
/// thread at a time, behind the engine's own locks).
fn open_flags() -> OpenFlags {
    OpenFlags::SQLITE_OPEN_READ_WRITE | OpenFlags::SQLITE_OPEN_URI | OpenFlags::SQLITE_OPEN_NO_MUTEX
}

/// Opens a connection to the file at `path`, creating it when `create`.
fn connect(path: &Path, create: bool) -> Result<Connection> {
    let flags = match create {
        true => open_flags() | OpenFlags::SQLITE_OPEN_CREATE,
        false => open_flags(),
    };
    Connection::open_with_flags_and_vfs(path, flags, VFS).map_err(eng)
}

/// SQLite `synchronous` setting.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Synchronous {
    /// `NORMAL`: with WAL, a power loss may lose the last commits but never corrupts.
    #[default]
    Normal,
    /// `FULL`: every commit is durable when it returns.
    Full,
}

impl Synchronous {
    fn pragma(self) -> &'static str {
        match self {
            Synchronous::Normal => "PRAGMA synchronous=NORMAL",
            Synchronous::Full => "PRAGMA synchronous=FULL",
        }
    }
}

/// Options for opening a SQLite metadata database.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SqliteOptions {
    /// Durability of commits.
    pub synchronous: Synchronous,
}

/// Classifies a SQLite failure by its result code (never by its message): full disk or page
/// limit, damaged file (also a stored value that does not convert to its field), or anything
/// else.
fn eng(e: rusqlite::Error) -> MetaError {
    classify(e, None)
}

/// [`eng`] for a failure on `conn`, which can also tell an I/O error caused by a full disk
/// (`ENOSPC`, e.g. while growing the WAL index) from other I/O errors.
fn eng_on(conn: &Connection) -> impl Fn(rusqlite::Error) -> MetaError + '_ {
    move |e| classify(e, Some(conn))
}

fn classify(e: rusqlite::Error, conn: Option<&Connection>) -> MetaError {
    use rusqlite::ffi::ErrorCode;
    // A stored value that does not fit its field: no build writes one, so the file is damaged.
    if matches!(
        e,
        rusqlite::Error::IntegralValueOutOfRange(..)
            | rusqlite::Error::InvalidColumnType(..)
            | rusqlite::Error::FromSqlConversionFailure(..)
    ) {
        return MetaError::Corrupt(format!("sqlite: {e}"));
    }
    match e.sqlite_error_code() {
        Some(ErrorCode::DiskFull) => MetaError::Full,
        Some(ErrorCode::SystemIoFailure)
            if conn.is_some_and(|c| system_errno(c) == libc::ENOSPC) =>
        {
            MetaError::Full
        }
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => {
            MetaError::Corrupt(format!("sqlite: {e}"))
        }
        Some(ErrorCode::SystemIoFailure) => MetaError::Io(format!("sqlite: {e}")),
        // The engine's own connections never wait for each other past the busy timeout (one
        // writer behind a mutex, readers never block in WAL mode): another process holds the
        // file.
        Some(ErrorCode::DatabaseBusy) => MetaError::InUse(format!("sqlite: {e}")),
        _ => MetaError::engine(format!("sqlite: {e}")),
    }
}

/// The OS error number behind the last failed call on `conn`.
fn system_errno(conn: &Connection) -> i32 {
    // SAFETY: the handle is valid while `conn` is borrowed, and sqlite3_system_errno only reads a
    // field of the connection; it does not use or keep the pointer beyond the call.
    unsafe { rusqlite::ffi::sqlite3_system_errno(conn.handle()) }
}

/// Runs a transaction-control statement (`BEGIN …`, `COMMIT`, `ROLLBACK`) from the connection's
/// statement cache: parsing it anew for every transaction was a measurable part of a short one.
fn control(conn: &Connection, sql: &str) -> rusqlite::Result<()> {
    conn.prepare_cached(sql)?.execute([]).map(|_| ())
}

fn poisoned<T>(_: T) -> MetaError {
    MetaError::engine("sqlite engine lock poisoned")
}

fn configure(conn: &Connection) -> Result<()> {
    conn.busy_timeout(std::time::Duration::from_secs(10))
        .map_err(eng)?;
    conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
    // Without it SQLite lets a bound value (a LIMIT's, for one) steer the plan, and rebinding
    // such a parameter expires the statement: every run of a cached listing was compiled anew.
    conn.set_db_config(DbConfig::SQLITE_DBCONFIG_ENABLE_QPSG, true)
        .map_err(eng)?;
    Ok(())
}

/// The write connection and the `synchronous` level currently set on it.
struct Writer {
    conn: Connection,
    sync_now: Synchronous,
    /// Group commit, when the engine was opened with `synchronous=NORMAL`.
    groups: Option<Groups>,
    /// Why the connection lost its open group, when it did (see [`Writer::check_usable`]).
    broken: Option<String>,
    /// Inode rows, directory entries and counters as this connection sees them now, some not
    /// written to SQLite yet (see [`cache`]). In a cell because the first statement of a grouped
    /// transaction writes the pending rows, and statements are run through a shared borrow
    /// (`SqliteTxn::c`).
    rows: RefCell<RowCache>,
    /// Whether the running grouped transaction has taken its savepoint (see [`group`]).
    savepoint: Cell<bool>,
}

impl Writer {
    /// Runs a `ROLLBACK` of the whole transaction, forgetting the cached rows first: whether or
    /// not it succeeds, what they showed may be undone. Rows are pending only in a group, which
    /// is rolled back only to be replayed from the intent log.
    fn rollback(&mut self) -> rusqlite::Result<()> {
        self.rows.get_mut().clear();
        control(&self.conn, "ROLLBACK")
    }
}

/// The SQLite engine.
pub struct SqliteEngine {
    path: PathBuf,
    sync: Synchronous,
    writer: Mutex<Writer>,
    readers: Readers,
    /// Whether the write connection holds an open group (see [`Groups::flag`]).
    group_open: Arc<AtomicBool>,
    /// Whether the directory was synced since the write-ahead log exists, so that its name
    /// survives a power loss (see [`MetaEngine::sync_committed`]); the log stays until close.
    log_named: AtomicBool,
}

impl std::fmt::Debug for SqliteEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("SqliteEngine")
            .field("path", &self.path)
            .finish_non_exhaustive()
    }
}

impl SqliteEngine {
    /// Creates the database at `path` (which must not hold a database yet) with the schema.
    /// `path` must name a file (read transactions use their own connections to it).
    pub fn create(path: &Path, opts: SqliteOptions) -> Result<Self> {
        if std::fs::metadata(path).is_ok_and(|m| m.len() > 0) {
            return Err(MetaError::invalid(format!(
                "{} already exists; a new database needs a fresh file",
                path.display()
            )));
        }
        let log = intent::path_for(path);
        if std::fs::metadata(&log).is_ok_and(|m| m.len() > 0) {
            return Err(MetaError::invalid(format!(
                "{} already exists; it belongs to a database that was there before",
                log.display()
            )));
        }
        let conn = connect(path, true)?;
        Self::start(conn, path, opts)
    }

    /// Opens the existing database at `path`, checking its schema before anything is written:
    /// a missing or empty file, or a database without Presso's schema, is
    /// [`MetaError::NotInitialized`]; one that is not a database at all is
    /// [`MetaError::Corrupt`]; one written by a newer schema is [`MetaError::SchemaTooNew`].
    pub fn open(path: &Path, opts: SqliteOptions) -> Result<Self> {
        match std::fs::metadata(path) {
            Err(e) if e.kind() == std::io::ErrorKind::NotFound => {
                return Err(MetaError::NotInitialized(format!(
                    "{} is missing",
                    path.display()
                )))
            }
            Err(e) => return Err(MetaError::engine(format!("{}: {e}", path.display()))),
            Ok(m) if m.len() == 0 => {
                return Err(MetaError::NotInitialized(format!(
                    "{} is empty (0 bytes)",
                    path.display()
                )))
            }
            Ok(_) => {}
        }
        let conn = connect(path, false)?;
        // Closing the last connection of a database in WAL mode checkpoints the log into the
        // file and removes it; a refused open must leave both as they are.
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, true)
            .map_err(eng)?;
        schema::check_version(&conn, path)?;
        conn.set_db_config(DbConfig::SQLITE_DBCONFIG_NO_CKPT_ON_CLOSE, false)
            .map_err(eng)?;
        Self::start(conn, path, opts)
    }

    /// Configures the write connection and creates or checks the schema.
    fn start(mut conn: Connection, path: &Path, opts: SqliteOptions) -> Result<Self> {
        configure(&conn)?;
        let _mode: String = conn
            .query_row("PRAGMA journal_mode=WAL", [], |r| r.get(0))
            .map_err(eng)?;
        conn.execute_batch(opts.synchronous.pragma())
            .map_err(eng_on(&conn))?;

        schema::create_or_check(&mut conn)?;
        let (log, committed) = group::replay_at_open(&conn, path, opts.synchronous)?;
        let group_open = Arc::new(AtomicBool::new(false));
        let groups = match opts.synchronous {
            // Every commit is durable: there is nothing for a group to save.
            Synchronous::Full => {
                drop(log);
                remove_log(path)?;
                None
            }
            Synchronous::Normal => Some(Groups {
                log,
                committed,
                open: None,
                flag: group_open.clone(),
            }),
        };
        // Read connections are opened later, possibly after the working directory changed.
        let path = std::fs::canonicalize(path).unwrap_or_else(|_| path.to_path_buf());
        Ok(SqliteEngine {
            sync: opts.synchronous,
            group_open,
            log_named: AtomicBool::new(false),
            writer: Mutex::new(Writer {
                conn,
                sync_now: opts.synchronous,
                groups,
                broken: None,
                rows: RefCell::default(),
                savepoint: Cell::new(false),
            }),
            readers: Readers::new(path.clone()),
            path,
        })
    }

    /// A read transaction on the write connection if that is idle, else on a pooled one.
    /// While a group is open, a read connection would not see it, so the read waits for the
    /// write connection instead.
    fn begin_short_read(&self) -> Result<SqliteTxn<'_>> {
        let w = match self.writer.try_lock() {
            Ok(w) => w,
            Err(TryLockError::WouldBlock) if !self.group_open.load(Ordering::SeqCst) => {
                return self.begin_read()
            }
            Err(TryLockError::WouldBlock) => self.writer.lock().map_err(poisoned)?,
            Err(TryLockError::Poisoned(e)) => return Err(poisoned(e)),
        };
        w.check_usable()?;
        if !w.in_group() && !w.conn.is_autocommit() {
            // Left open by a failed rollback: the next write transaction rolls it back.
            drop(w);
            return self.begin_read();
        }
        Ok(SqliteTxn::reading_on_writer(w))
    }

    /// A read transaction on a pooled connection that sees everything committed so far: the
    /// open group is committed first. If that commit fails (a full disk), the read runs inside
    /// the group on the write connection instead, so that it still sees everything.
    fn begin_scan(&self) -> Result<SqliteTxn<'_>> {
        if self.group_open.load(Ordering::SeqCst) {
            let mut w = self.writer.lock().map_err(poisoned)?;
            w.check_usable()?;
            if w.commit_group().is_err() {
                w.check_usable()?;
                return Ok(SqliteTxn::reading_on_writer(w));
            }
        }
        self.begin_read()
    }

    /// Commits the open group, if any, so that SQLite's file alone holds everything committed.
    fn commit_open_group(&self) -> Result<MutexGuard<'_, Writer>> {
        let mut w = self.writer.lock().map_err(poisoned)?;
        w.check_usable()?;
        w.commit_group()?;
        Ok(w)
    }

    fn begin_read(&self) -> Result<SqliteTxn<'_>> {
        let conn = self.readers.take()?;
        if let Err(e) = control(&conn, "BEGIN DEFERRED") {
            self.readers.give_back(conn);
            return Err(eng(e));
        }
        Ok(SqliteTxn {
            handle: Handle::Read(self, Some(conn)),
            open: true,
            durable: false,
            redo: None,
        })
    }

    fn begin_write(&self, durable: bool) -> Result<SqliteTxn<'_>> {
        let mut w = self.writer.lock().map_err(poisoned)?;
        w.check_usable()?;
        let grouped = !durable && w.groups.is_some();
        if !grouped {
            // A durable commit covers every earlier one, the open group's included.
            w.commit_group()?;
        }
        // A group already open has its level set and nothing left over to roll back.
        if !(grouped && w.in_group()) {
            if !w.conn.is_autocommit() {
                // Left open by a failed rollback; nothing of it may survive.
                w.rollback().map_err(eng_on(&w.conn))?;
            }
            let want = if durable {
                Synchronous::Full
            } else {
                self.sync
            };
            if w.sync_now != want {
                w.conn
                    .execute_batch(want.pragma())
                    .map_err(eng_on(&w.conn))?;
                w.sync_now = want;
            }
        }
        if grouped {
            w.begin_grouped()?;
            return Ok(SqliteTxn {
                handle: Handle::Write(w),
                open: true,
                durable: false,
                redo: Some(intent::Redo::new()),
            });
        }
        control(&w.conn, "BEGIN IMMEDIATE").map_err(eng_on(&w.conn))?;
        Ok(SqliteTxn {
            handle: Handle::Write(w),
            open: true,
            durable,
            redo: None,
        })
    }
}

impl MetaEngine for SqliteEngine {
    fn checkpoint(&self) -> Result<()> {
        let writer = self.commit_open_group()?;
        writer
            .conn
            .query_row("PRAGMA wal_checkpoint(TRUNCATE)", [], |_| Ok(()))
            .map_err(eng_on(&writer.conn))
    }

    fn sync_committed(&self) -> Result<bool> {
        // Held throughout, so that no checkpoint moves commits between the files while they
        // are synced.
        let writer = self.commit_open_group()?;
        if self.sync != Synchronous::Full {
            // Every commit is now in the write-ahead log, or in the database file through a
            // checkpoint, which SQLite syncs at its end (synchronous=NORMAL does). Syncing the
            // log, and once the directory naming it, is what a commit with synchronous=FULL adds,
            // and writes nothing. Never the database file: closing a descriptor of it would drop
            // the POSIX lock SQLite holds on it for this process.
            let wal = wal_path(&self.path);
            let failed = |path: &Path| {
                let path = path.display().to_string();
                move |e: std::io::Error| MetaError::Io(format!("syncing {path}: {e}"))
            };
            match std::fs::File::open(&wal) {
                // No log: every commit is in the database file, synced by its checkpoint.
                Err(e) if e.kind() == std::io::ErrorKind::NotFound => {}
                file => {
                    file.and_then(|f| f.sync_data()).map_err(failed(&wal))?;
                    if !self.log_named.load(Ordering::Relaxed) {
                        let dir = match self.path.parent() {
                            Some(p) if !p.as_os_str().is_empty() => p,
                            _ => Path::new("."),
                        };
                        let synced = std::fs::File::open(dir).and_then(|d| d.sync_all());
                        synced.map_err(failed(dir))?;
                        self.log_named.store(true, Ordering::Relaxed);
                    }
                }
            }
        }
        drop(writer);
        Ok(true)
    }

    fn copy_to(&self, path: &Path) -> Result<bool> {
        let target = path
            .to_str()
            .ok_or_else(|| MetaError::invalid("the copy's path is not UTF-8"))?;
        drop(self.commit_open_group()?);
        let conn = self.readers.take()?;
        // A read connection: the copy is one read transaction's snapshot, and writers go on.
        // `query_only` refuses VACUUM INTO (it writes, if only to another file), so it is lifted
        // for this one statement; a connection that cannot be put back is closed.
        let copied = conn
            .execute_batch("PRAGMA query_only=OFF")
            .and_then(|()| conn.execute("VACUUM INTO ?1", [target]))
            .map_err(eng_on(&conn));
        match conn.execute_batch("PRAGMA query_only=ON") {
            Ok(()) => self.readers.give_back(conn),
            Err(_) => {
                drop(conn);
                self.readers.forget();
            }
        }
        copied.map(|_| true)
    }

    fn counter_in_copy(&self, path: &Path, name: &str) -> Result<Option<u64>> {
        copies::counter(path, name)
    }

    fn check_copy(&self, path: &Path) -> Result<Option<String>> {
        copies::check(path)
    }

    fn close(&self) -> Result<()> {
        self.readers.close_idle()?;
        self.checkpoint()?;
        let mut writer = self.writer.lock().map_err(poisoned)?;
        // A connection to nothing takes the writer's place, so a late use fails instead of
        // reopening the file.
        let closed = Connection::open_in_memory().map_err(eng)?;
        let conn = std::mem::replace(&mut writer.conn, closed);
        writer.rows.get_mut().clear();
        conn.close().map_err(|(_, e)| eng(e))?;
        // Everything the log held is committed and checkpointed.
        writer.groups = None;
        remove_log(&self.path)
    }

    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_short_read()?))
    }

    fn read_scan(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_scan()?))
    }

    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_write(false)?))
    }

    fn write_durable(&self) -> Result<Box<dyn Txn + '_>> {
        Ok(Box::new(self.begin_write(true)?))
    }
}

impl Drop for SqliteEngine {
    /// Commits the open group, so that the database file alone is complete after an engine was
    /// dropped without [`MetaEngine::close`]; if that fails, the intent log keeps the group.
    fn drop(&mut self) {
        if let Ok(mut w) = self.writer.lock() {
            if w.broken.is_none() && w.groups.is_some() && w.commit_group().is_ok() {
                w.groups = None;
                let _ = remove_log(&self.path);
            }
        }
    }
}

/// SQLite's write-ahead log of the database at `db`.
fn wal_path(db: &Path) -> PathBuf {
    let mut p = db.as_os_str().to_owned();
    p.push("-wal");
    PathBuf::from(p)
}

/// Removes the intent log of the database at `db` (only once everything in it is committed).
fn remove_log(db: &Path) -> Result<()> {
    match std::fs::remove_file(intent::path_for(db)) {
        Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
            Err(MetaError::Io(format!("intent log: {e}")))
        }
        _ => Ok(()),
    }
}
