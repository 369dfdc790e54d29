//! Reading a copy `copy_to` wrote (`VACUUM INTO`) without changing it: one counter, or whether
//! it is sound.

use std::path::Path;

use rusqlite::{Connection, OpenFlags, OptionalExtension};

use super::{eng, eng_on};
use crate::error::Result;

/// A read-only connection to the copy at `path`: a database without a log (`VACUUM INTO`
/// writes one in rollback mode), so the connection creates no file beside it.
fn open(path: &Path) -> Result<Connection> {
    let flags = OpenFlags::SQLITE_OPEN_READ_ONLY | OpenFlags::SQLITE_OPEN_NO_MUTEX;
    Connection::open_with_flags(path, flags).map_err(eng)
}

/// Counter `name` of the copy at `path`, if it has one.
pub(super) fn counter(path: &Path, name: &str) -> Result<Option<u64>> {
    let conn = open(path)?;
    let value: Option<i64> = conn
        .query_row("SELECT value FROM counters WHERE name = ?1", [name], |r| {
            r.get(0)
        })
        .optional()
        .map_err(eng_on(&conn))?;
    Ok(value.map(|v| v as u64))
}

/// What is wrong with the copy at `path`, if anything.
pub(super) fn check(path: &Path) -> Result<Option<String>> {
    let conn = match open(path) {
        Ok(conn) => conn,
        Err(e) => return Ok(Some(format!("it does not open: {e}"))),
    };
    // Every page and every B-tree's structure (not whether indexes match their tables, which
    // takes far longer); then the table every open reads first.
    let checked = conn.prepare("PRAGMA quick_check(5)").and_then(|mut st| {
        st.query_map([], |r| r.get::<_, String>(0))?
            .collect::<rusqlite::Result<Vec<String>>>()
    });
    let problems = match checked {
        Ok(rows) if rows == ["ok"] => {
            match conn.query_row("SELECT count(*) FROM counters", [], |r| r.get::<_, i64>(0)) {
                Ok(_) => return Ok(None),
                Err(e) => vec![e.to_string()],
            }
        }
        // SQLite's report starts with a line naming the database, then one line per problem.
        Ok(rows) => rows
            .iter()
            .flat_map(|row| row.lines())
            .filter(|line| !line.starts_with("***"))
            .map(str::to_owned)
            .collect(),
        Err(e) => vec![e.to_string()],
    };
    Ok(Some(format!("it is damaged: {}", problems.join("; "))))
}
