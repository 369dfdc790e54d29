//! Connections to the server: a small pool, each connection with its prepared statements, and
//! the classification of PostgreSQL failures into [`MetaError`]s.

use std::collections::HashMap;
use std::ops::{Deref, DerefMut};
use std::str::FromStr;
use std::sync::{Condvar, Mutex};
use std::time::{Duration, Instant};

use postgres::error::SqlState;
use postgres::{Client, Config, NoTls, Statement};

use super::{PostgresOptions, PostgresTarget};
use crate::error::{MetaError, Result};

/// Classifies a failure of a statement by its SQLSTATE (never by its message): a full disk,
/// damaged data, a server that is gone, shutting down or out of connections, or anything else.
/// A failure with no SQLSTATE is the connection's (refused, reset, timed out).
pub(super) fn pg(e: postgres::Error) -> MetaError {
    let text = describe_error(&e);
    let Some(code) = e.code() else {
        return MetaError::Io(format!("postgres: {text}"));
    };
    let class = &code.code()[..2];
    if *code == SqlState::DISK_FULL {
        MetaError::Full
    } else if *code == SqlState::DATA_CORRUPTED || *code == SqlState::INDEX_CORRUPTED {
        MetaError::Corrupt(format!("postgres: {text}"))
    } else if matches!(class, "08" | "53" | "57" | "58") {
        // Connection exceptions, insufficient resources, operator intervention (a shutdown or
        // restart) and system errors: the server or the way to it failed, not the request.
        MetaError::Io(format!("postgres: {text}"))
    } else {
        MetaError::engine(format!("postgres: {text}"))
    }
}

/// `e` with its causes: the `postgres` crate's own text is only "db error" or "error
/// connecting to server"; the server's message or the system's error is in the source.
fn describe_error(e: &postgres::Error) -> String {
    let mut text = e.to_string();
    let mut source = std::error::Error::source(e);
    while let Some(cause) = source {
        text.push_str(": ");
        text.push_str(&cause.to_string());
        source = cause.source();
    }
    text
}

/// A stored value that does not convert to its field: no build writes one, so the data is
/// damaged.
pub(super) fn bad_row(e: postgres::Error) -> MetaError {
    MetaError::Corrupt(format!("postgres: {}", describe_error(&e)))
}

/// One connection and the statements prepared on it.
pub(super) struct Conn {
    pub(super) client: Client,
    statements: HashMap<&'static str, Statement>,
}

impl Conn {
    /// The statement for `sql`, prepared on this connection at its first use.
    pub(super) fn prepare(&mut self, sql: &'static str) -> Result<Statement> {
        if let Some(s) = self.statements.get(sql) {
            return Ok(s.clone());
        }
        let s = self.client.prepare(sql).map_err(pg)?;
        self.statements.insert(sql, s.clone());
        Ok(s)
    }
}

/// Opens connections to one pool's schema.
pub(super) struct Manager {
    config: Config,
    schema: String,
}

impl Manager {
    pub(super) fn new(target: &PostgresTarget, opts: &PostgresOptions) -> Result<Self> {
        let mut config = Config::from_str(&target.conninfo)
            .map_err(|e| MetaError::invalid(format!("postgres connection string: {e}")))?;
        config.connect_timeout(opts.connect_timeout);
        config.application_name("presso");
        Ok(Manager {
            config,
            schema: target.schema.clone(),
        })
    }

    fn connect(&self) -> Result<Conn> {
        let mut client = self.config.connect(NoTls).map_err(|e| {
            MetaError::Io(format!(
                "cannot reach the PostgreSQL server of the metadata ({}): {}",
                describe(&self.config),
                describe_error(&e)
            ))
        })?;
        // The schema name was checked to need no quoting (`PostgresTarget::check`).
        client
            .batch_execute(&format!("SET search_path TO {}", self.schema))
            .map_err(pg)?;
        Ok(Conn {
            client,
            statements: HashMap::new(),
        })
    }
}

/// Host, port and database of `config`, for messages (never the password).
fn describe(config: &Config) -> String {
    let hosts: Vec<String> = config
        .get_hosts()
        .iter()
        .map(|h| match h {
            postgres::config::Host::Tcp(name) => name.clone(),
            postgres::config::Host::Unix(path) => path.display().to_string(),
        })
        .collect();
    let ports: Vec<String> = config.get_ports().iter().map(u16::to_string).collect();
    format!(
        "host {}, port {}, database {}",
        if hosts.is_empty() {
            "default".into()
        } else {
            hosts.join(",")
        },
        if ports.is_empty() {
            "5432".into()
        } else {
            ports.join(",")
        },
        config.get_dbname().unwrap_or("default")
    )
}

struct Idle {
    conns: Vec<Conn>,
    /// Connections in existence, idle or lent out.
    open: u32,
}

/// At most `max_connections` connections, opened on demand and reused.
pub(super) struct Pool {
    manager: Manager,
    idle: Mutex<Idle>,
    returned: Condvar,
    max: u32,
    wait: Duration,
}

impl Pool {
    pub(super) fn new(manager: Manager, opts: &PostgresOptions) -> Self {
        Pool {
            manager,
            idle: Mutex::new(Idle {
                conns: Vec::new(),
                open: 0,
            }),
            returned: Condvar::new(),
            max: opts.max_connections.max(1),
            wait: opts.connect_timeout,
        }
    }

    /// An idle connection, a new one if fewer than the most are open, or the next one returned.
    /// While the server cannot be reached (a restart), connecting is tried again with growing
    /// pauses; [`MetaError::Io`] once the connect timeout has passed.
    pub(super) fn get(&self) -> Result<Pooled<'_>> {
        self.get_until(Instant::now() + self.wait)
    }

    /// [`Pool::get`], trying until `deadline`.
    fn get_until(&self, deadline: Instant) -> Result<Pooled<'_>> {
        let mut pause = Duration::from_millis(20);
        let mut idle = self.idle.lock().map_err(poisoned)?;
        loop {
            while let Some(conn) = idle.conns.pop() {
                if conn.client.is_closed() {
                    // The server closed it while idle (a restart): open another.
                    idle.open -= 1;
                    continue;
                }
                return Ok(Pooled {
                    pool: self,
                    conn: Some(conn),
                });
            }
            if idle.open < self.max {
                idle.open += 1;
                drop(idle);
                match self.manager.connect() {
                    Ok(conn) => {
                        return Ok(Pooled {
                            pool: self,
                            conn: Some(conn),
                        })
                    }
                    Err(e) => {
                        self.forget_one();
                        let now = Instant::now();
                        if now + pause >= deadline {
                            return Err(e);
                        }
                        // Shown (at most every few seconds) by the layer that presents retries.
                        tracing::warn!(
                            "{e}; trying again, for {:.0} s more at most",
                            deadline.saturating_duration_since(now).as_secs_f64().ceil()
                        );
                        // The server is down or restarting: an outage, not a wait for a
                        // condition this process could be told of.
                        std::thread::sleep(pause);
                        pause = (pause * 2).min(Duration::from_millis(500));
                    }
                }
                idle = self.idle.lock().map_err(poisoned)?;
                continue;
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(MetaError::Io(format!(
                    "postgres: all {} connections stayed busy for {:?}",
                    self.max, self.wait
                )));
            }
            idle = self
                .returned
                .wait_timeout(idle, deadline - now)
                .map_err(poisoned)?
                .0;
        }
    }

    /// Like [`Pool::get`], and runs `begin` on the connection: a connection the server dropped
    /// since its last use (a restart) is closed and another one taken, until the connect timeout.
    pub(super) fn begin(&self, begin: &str) -> Result<Pooled<'_>> {
        let deadline = Instant::now() + self.wait;
        loop {
            let mut conn = self.get_until(deadline)?;
            match conn.client.batch_execute(begin) {
                Ok(()) => return Ok(conn),
                Err(_) if conn.client.is_closed() && Instant::now() < deadline => conn.discard(),
                Err(e) => return Err(pg(e)),
            }
        }
    }

    /// Like [`Pool::begin`], for a `begin` whose last statement is a query: also returns how
    /// many rows that query found, from the same round trip.
    pub(super) fn begin_counting(&self, begin: &str) -> Result<(Pooled<'_>, u64)> {
        let deadline = Instant::now() + self.wait;
        loop {
            let mut conn = self.get_until(deadline)?;
            match conn.client.simple_query(begin) {
                Ok(messages) => {
                    let rows = messages
                        .iter()
                        .filter_map(|m| match m {
                            postgres::SimpleQueryMessage::CommandComplete(n) => Some(*n),
                            _ => None,
                        })
                        .last()
                        .unwrap_or(0);
                    return Ok((conn, rows));
                }
                Err(_) if conn.client.is_closed() && Instant::now() < deadline => conn.discard(),
                Err(e) => return Err(pg(e)),
            }
        }
    }

    fn forget_one(&self) {
        if let Ok(mut idle) = self.idle.lock() {
            idle.open -= 1;
        }
        self.returned.notify_one();
    }

    fn give_back(&self, conn: Conn) {
        if conn.client.is_closed() {
            return self.forget_one();
        }
        if let Ok(mut idle) = self.idle.lock() {
            idle.conns.push(conn);
        }
        self.returned.notify_one();
    }
}

fn poisoned<T>(_: T) -> MetaError {
    MetaError::engine("postgres connection pool lock poisoned")
}

/// A connection lent by the pool; it goes back when dropped (or is closed if broken).
pub(super) struct Pooled<'a> {
    pool: &'a Pool,
    conn: Option<Conn>,
}

impl Pooled<'_> {
    /// Closes the connection instead of returning it: its state is unknown (a rollback failed).
    pub(super) fn discard(mut self) {
        self.conn = None;
        self.pool.forget_one();
    }
}

impl Deref for Pooled<'_> {
    type Target = Conn;
    fn deref(&self) -> &Conn {
        self.conn.as_ref().expect("present until dropped")
    }
}

impl DerefMut for Pooled<'_> {
    fn deref_mut(&mut self) -> &mut Conn {
        self.conn.as_mut().expect("present until dropped")
    }
}

impl Drop for Pooled<'_> {
    fn drop(&mut self) {
        if let Some(conn) = self.conn.take() {
            self.pool.give_back(conn);
        }
    }
}
