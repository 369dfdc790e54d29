//! The PostgreSQL schema of a pool: its tables and indexes, the version row, and migrations.

use super::conn::{pg, Conn};
use crate::error::{MetaError, Result};

/// The schema version this build writes and understands.
pub const PG_SCHEMA_VERSION: u32 = 1 + MIGRATIONS.len() as u32;

/// Steps from each older version to the next: `MIGRATIONS[i]` takes version `i + 1` to `i + 2`.
/// They run in one transaction with the version update, so a pool is never half migrated. A new
/// pool is made at version 1 and migrated like an old one, so every step runs at every create.
const MIGRATIONS: &[&str] = &[
    // 2: "does any file have this extended attribute?" (asked at every mount for
    // `security.capability`) reads one index entry instead of every attribute.
    "CREATE INDEX xattrs_by_name ON xattrs (name)",
    // 3: each directory's entries in listing order (inode number, then name), so a listing
    // resumes from an inode number alone.
    "CREATE INDEX dentries_by_ino ON dentries (parent, ino, name)",
];

const TABLES: &str = "
CREATE TABLE inodes (
    ino BIGINT PRIMARY KEY,
    kind SMALLINT NOT NULL,
    mode BIGINT NOT NULL,
    uid BIGINT NOT NULL,
    gid BIGINT NOT NULL,
    size BIGINT NOT NULL,
    nlink BIGINT NOT NULL,
    atime_s BIGINT NOT NULL,
    atime_ns BIGINT NOT NULL,
    mtime_s BIGINT NOT NULL,
    mtime_ns BIGINT NOT NULL,
    ctime_s BIGINT NOT NULL,
    ctime_ns BIGINT NOT NULL,
    rdev BIGINT NOT NULL,
    parent BIGINT NOT NULL,
    target BYTEA
);
CREATE TABLE dentries (
    parent BIGINT NOT NULL,
    name BYTEA NOT NULL,
    ino BIGINT NOT NULL,
    kind SMALLINT NOT NULL,
    PRIMARY KEY (parent, name)
);
CREATE TABLE xattrs (
    ino BIGINT NOT NULL,
    name BYTEA NOT NULL,
    value BYTEA NOT NULL,
    PRIMARY KEY (ino, name)
);
CREATE TABLE records (
    ino BIGINT NOT NULL,
    idx BIGINT NOT NULL,
    segment BIGINT NOT NULL,
    seg_offset BIGINT NOT NULL,
    stored_len BIGINT NOT NULL,
    logical_len BIGINT NOT NULL,
    codec SMALLINT NOT NULL,
    checksum BIGINT NOT NULL,
    inline_data BYTEA,
    PRIMARY KEY (ino, idx)
);
CREATE TABLE props (
    ino BIGINT NOT NULL,
    name TEXT COLLATE \"C\" NOT NULL,
    value TEXT NOT NULL,
    PRIMARY KEY (ino, name)
);
CREATE TABLE counters (
    name TEXT COLLATE \"C\" PRIMARY KEY,
    value BIGINT NOT NULL
);
CREATE INDEX records_by_segment ON records (segment, seg_offset) INCLUDE (stored_len)
    WHERE inline_data IS NULL;
CREATE INDEX inodes_orphans ON inodes (ino) WHERE nlink = 0;
";

/// Creates schema `schema` with the tables, in one transaction; [`MetaError::Exists`] if the
/// schema exists already (it may hold another pool).
pub(super) fn create(conn: &mut Conn, schema: &str) -> Result<()> {
    let mut tx = conn.client.transaction().map_err(pg)?;
    let exists: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_namespace WHERE nspname = $1)",
            &[&schema],
        )
        .map_err(pg)?
        .get(0);
    if exists {
        return Err(MetaError::Exists);
    }
    // The schema name was checked to need no quoting (`PostgresTarget::check`).
    tx.batch_execute(&format!(
        "CREATE SCHEMA {schema};
         SET LOCAL search_path TO {schema};
         CREATE TABLE meta_version (
             id SMALLINT PRIMARY KEY CHECK (id = 0),
             version BIGINT NOT NULL
         );
         {TABLES}
         INSERT INTO meta_version (id, version) VALUES (0, 1);"
    ))
    .map_err(pg)?;
    migrate(&mut tx, 1)?;
    tx.commit().map_err(pg)
}

/// Runs the migrations from version `found` to [`PG_SCHEMA_VERSION`] in `tx`, whose search path
/// is the pool's schema.
fn migrate(tx: &mut postgres::Transaction<'_>, found: i64) -> Result<()> {
    let from = usize::try_from(found - 1).unwrap_or(0);
    for step in MIGRATIONS.iter().skip(from) {
        tx.batch_execute(step).map_err(pg)?;
    }
    tx.execute(
        "UPDATE meta_version SET version = $1 WHERE id = 0",
        &[&i64::from(PG_SCHEMA_VERSION)],
    )
    .map_err(pg)?;
    Ok(())
}

/// Checks that `schema` holds a pool this build understands, and migrates an older one.
pub(super) fn check_and_migrate(conn: &mut Conn, schema: &str) -> Result<()> {
    let mut tx = conn.client.transaction().map_err(pg)?;
    let has_table: bool = tx
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_tables WHERE schemaname = $1 AND tablename = 'meta_version')",
            &[&schema],
        )
        .map_err(pg)?
        .get(0);
    if !has_table {
        return Err(MetaError::NotInitialized(format!(
            "schema {schema} holds no Presso metadata (create the pool first)"
        )));
    }
    // Taken by every migration, so two clients opening an old pool migrate it once.
    let row = tx
        .query_opt(
            &format!("SELECT version FROM {schema}.meta_version WHERE id = 0 FOR UPDATE"),
            &[],
        )
        .map_err(pg)?;
    let Some(row) = row else {
        return Err(MetaError::NotInitialized(format!(
            "schema {schema} has an empty version table"
        )));
    };
    let found: i64 = row.try_get(0).map_err(super::conn::bad_row)?;
    let supported = i64::from(PG_SCHEMA_VERSION);
    if found > supported {
        return Err(MetaError::SchemaTooNew {
            found: u32::try_from(found).unwrap_or(u32::MAX),
            supported: PG_SCHEMA_VERSION,
        });
    }
    if found < 1 {
        return Err(MetaError::Corrupt(format!(
            "schema {schema} has version {found}"
        )));
    }
    if found < supported {
        tx.batch_execute(&format!("SET LOCAL search_path TO {schema}"))
            .map_err(pg)?;
        migrate(&mut tx, found)?;
    }
    tx.commit().map_err(pg)
}
