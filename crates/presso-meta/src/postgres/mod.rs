//! PostgreSQL engine: the metadata of a pool shared by many clients, in one schema of a
//! PostgreSQL database, one table per row kind as in the SQLite engine.
//!
//! Unsigned 64-bit numbers are stored bit-cast into `BIGINT`, so numbers below `i64::MAX` keep
//! their order; byte-string keys are `BYTEA`, which PostgreSQL orders byte by byte, shorter
//! prefix first (the order of `Vec<u8>`); text keys are `TEXT COLLATE "C"`, ordered the same way
//! whatever the database's locale.
//!
//! Concurrency: every write transaction first takes a transaction-scoped advisory lock of the
//! pool ([`PostgresEngine::lock_key`]), so write transactions of all clients run one at a time,
//! each at `READ COMMITTED` after the lock, which then sees every commit before it: they are
//! serializable with each other, as SQLite's single writer makes them, and never fail with a
//! serialization error that the layers above would have to retry. Read transactions run at
//! `REPEATABLE READ READ ONLY`: a consistent snapshot, taken at their first statement, that
//! includes every commit made before they began, concurrent with writers and with each other.
//!
//! Durability: ordinary write transactions commit with `synchronous_commit = off` (the commit is
//! in the server's log, flushed within a fraction of a second; a server crash may lose the last
//! ones but never leaves them half done, as SQLite's `synchronous=NORMAL`); those of
//! [`MetaEngine::write_durable`] wait for the log flush, which, the log being written in order,
//! also makes every earlier commit of every client durable.
//!
//! Connections come from a pool ([`PostgresOptions::max_connections`]), each with its prepared
//! statements; one that the server dropped is replaced. While the server cannot be reached (a
//! restart), beginning a transaction is tried again for up to
//! [`PostgresOptions::connect_timeout`], so operations wait through a restart; only a
//! transaction the server cut off fails (the file layer tries a cut-off transaction group
//! once more).

mod conn;
mod rows;
mod schema;
#[cfg(feature = "test-server")]
pub mod test_server;
mod txn;

use std::time::Duration;

use crate::engine::{MetaEngine, Txn};
use crate::error::{MetaError, Result};
use crate::CLIENTS_INO;

pub use schema::PG_SCHEMA_VERSION;

use conn::{Manager, Pool};
use txn::PgTxn;

/// Counter bumped by every commit of a [`MetaEngine::write_durable`] transaction, so that the
/// commit always writes to the server's log and therefore waits for its flush.
pub const COUNTER_DURABLE_COMMITS: &str = "postgres_durable_commits";

/// The schema a pool's tables live in when the URL names none.
pub const DEFAULT_SCHEMA: &str = "presso";

/// How to reach and use the server.
#[derive(Debug, Clone)]
pub struct PostgresOptions {
    /// Most connections this client keeps open.
    pub max_connections: u32,
    /// How long an operation waits for the server (connecting again while it cannot be
    /// reached) or for a free pooled connection before it fails with [`MetaError::Io`].
    pub connect_timeout: Duration,
}

impl Default for PostgresOptions {
    fn default() -> Self {
        PostgresOptions {
            max_connections: 8,
            connect_timeout: Duration::from_secs(10),
        }
    }
}

/// Where a pool's metadata lives: a server, a database and a schema.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PostgresTarget {
    /// A connection string as `libpq` and the `postgres` crate take it, without Presso's own
    /// parameters (`postgres://user@host:port/db`, `host=/run/postgresql user=presso ...`).
    pub conninfo: String,
    /// The schema holding the pool's tables: lowercase ASCII letters, digits and `_`, starting
    /// with a letter or `_`, at most 63 bytes.
    pub schema: String,
}

impl PostgresTarget {
    /// Reads a `postgres://` or `postgresql://` URL. A query parameter `schema=NAME` picks the
    /// schema (default [`DEFAULT_SCHEMA`]); every other part goes to the server as written.
    pub fn from_url(url: &str) -> Result<Self> {
        if !(url.starts_with("postgres://") || url.starts_with("postgresql://")) {
            return Err(MetaError::invalid(format!(
                "{url:?} is not a postgres:// URL"
            )));
        }
        let (base, query) = match url.split_once('?') {
            Some((b, q)) => (b, q),
            None => (url, ""),
        };
        let mut schema = DEFAULT_SCHEMA.to_string();
        let mut rest = Vec::new();
        for pair in query.split('&').filter(|p| !p.is_empty()) {
            match pair.strip_prefix("schema=") {
                Some(s) => schema = s.to_string(),
                None => rest.push(pair),
            }
        }
        let conninfo = if rest.is_empty() {
            base.to_string()
        } else {
            format!("{base}?{}", rest.join("&"))
        };
        let target = PostgresTarget { conninfo, schema };
        target.check()?;
        Ok(target)
    }

    fn check(&self) -> Result<()> {
        let s = self.schema.as_bytes();
        let valid = !s.is_empty()
            && s.len() <= 63
            && !s[0].is_ascii_digit()
            && s.iter()
                .all(|&b| b.is_ascii_lowercase() || b.is_ascii_digit() || b == b'_');
        if !valid {
            return Err(MetaError::invalid(format!(
                "schema name {:?}: use lowercase letters, digits and _, not starting with a digit, at most 63 bytes",
                self.schema
            )));
        }
        Ok(())
    }
}

/// The PostgreSQL engine.
pub struct PostgresEngine {
    pool: Pool,
    target: PostgresTarget,
    /// What begins an ordinary and a durable write transaction: the isolation level, the
    /// commit's durability and the pool's advisory lock (the key is fixed for the engine).
    begin_write: [String; 2],
}

impl std::fmt::Debug for PostgresEngine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("PostgresEngine")
            .field("schema", &self.target.schema)
            .finish_non_exhaustive()
    }
}

impl PostgresEngine {
    /// Creates the pool's schema and tables at `target`; the schema must not hold a pool yet
    /// ([`MetaError::Exists`] if it does).
    pub fn create(target: &PostgresTarget, opts: &PostgresOptions) -> Result<Self> {
        let engine = Self::connect(target, opts)?;
        schema::create(&mut *engine.pool.get()?, &target.schema)?;
        Ok(engine)
    }

    /// Opens the pool at `target`, checking its schema version before anything is written: a
    /// schema without Presso's tables is [`MetaError::NotInitialized`], one written by a newer
    /// build [`MetaError::SchemaTooNew`]; an older version is migrated in one transaction.
    pub fn open(target: &PostgresTarget, opts: &PostgresOptions) -> Result<Self> {
        let engine = Self::connect(target, opts)?;
        schema::check_and_migrate(&mut *engine.pool.get()?, &target.schema)?;
        Ok(engine)
    }

    fn connect(target: &PostgresTarget, opts: &PostgresOptions) -> Result<Self> {
        target.check()?;
        let manager = Manager::new(target, opts)?;
        let pool = Pool::new(manager, opts);
        Ok(PostgresEngine {
            pool,
            begin_write: [false, true].map(|durable| {
                format!(
                    "BEGIN ISOLATION LEVEL READ COMMITTED; SET LOCAL synchronous_commit TO {}; \
                     SELECT pg_advisory_xact_lock({})",
                    if durable { "on" } else { "off" },
                    Self::lock_key(&target.schema)
                )
            }),
            target: target.clone(),
        })
    }

    /// The advisory lock every write transaction of the pool in `schema` takes: a number derived
    /// from the schema name, so pools in other schemas of the same database do not wait on it.
    pub fn lock_key(schema: &str) -> i64 {
        // FNV-1a: stable across builds and platforms, unlike the standard library's hasher.
        let mut h: u64 = 0xcbf2_9ce4_8422_2325;
        for b in b"presso:".iter().chain(schema.as_bytes()) {
            h ^= u64::from(*b);
            h = h.wrapping_mul(0x0100_0000_01b3);
        }
        h as i64
    }

    /// Where this engine's metadata lives.
    pub fn target(&self) -> &PostgresTarget {
        &self.target
    }

    fn begin(&self, write: bool, durable: bool) -> Result<Box<dyn Txn + '_>> {
        let begin = if write {
            &self.begin_write[usize::from(durable)]
        } else {
            "BEGIN ISOLATION LEVEL REPEATABLE READ READ ONLY"
        };
        let conn = self.pool.begin(begin)?;
        Ok(Box::new(PgTxn::new(conn, write, durable)))
    }
}

impl MetaEngine for PostgresEngine {
    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin(false, false)
    }

    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin(true, false)
    }

    fn write_durable(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin(true, true)
    }

    fn write_as(&self, durable: bool, client: u64) -> Result<Box<dyn Txn + '_>> {
        if client == 0 {
            return self.begin(true, durable);
        }
        // The session check rides in the round trip that begins the transaction, after the
        // pool's lock: it sees every session change committed before.
        let begin = format!(
            "{}; SELECT 1 FROM props WHERE ino = {} AND name = '{client}'",
            self.begin_write[usize::from(durable)],
            CLIENTS_INO as i64
        );
        let (conn, found) = self.pool.begin_counting(&begin)?;
        // Dropped unless returned: rolls the transaction back.
        let tx = PgTxn::new(conn, true, durable);
        match found {
            0 => Err(MetaError::SessionEnded(client)),
            _ => Ok(Box::new(tx)),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn urls_give_conninfo_and_schema() {
        let t = PostgresTarget::from_url("postgres://u@h:5433/db?schema=pool_1&sslmode=disable")
            .unwrap();
        assert_eq!(t.conninfo, "postgres://u@h:5433/db?sslmode=disable");
        assert_eq!(t.schema, "pool_1");
        let t = PostgresTarget::from_url("postgresql://h/db").unwrap();
        assert_eq!(t.conninfo, "postgresql://h/db");
        assert_eq!(t.schema, DEFAULT_SCHEMA);
    }

    #[test]
    fn bad_urls_and_schema_names_are_refused() {
        for url in [
            "mysql://h/db",
            "postgres://h/db?schema=",
            "postgres://h/db?schema=Pool",
            "postgres://h/db?schema=1pool",
            "postgres://h/db?schema=a;drop",
            "postgres://h/db?schema=a\"b",
        ] {
            assert!(
                matches!(
                    PostgresTarget::from_url(url),
                    Err(MetaError::InvalidArgument(_))
                ),
                "{url}"
            );
        }
        let long = format!("postgres://h/db?schema={}", "a".repeat(64));
        assert!(PostgresTarget::from_url(&long).is_err());
    }

    #[test]
    fn lock_keys_differ_between_schemas_and_stay_fixed() {
        assert_ne!(
            PostgresEngine::lock_key("presso"),
            PostgresEngine::lock_key("presso2")
        );
        assert_eq!(
            PostgresEngine::lock_key("presso"),
            PostgresEngine::lock_key("presso")
        );
    }
}
