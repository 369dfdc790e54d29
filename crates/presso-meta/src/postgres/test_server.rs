//! A throwaway PostgreSQL server for tests (feature `test-server`): `initdb` and `postgres` from
//! Debian's `postgresql` package in a new temporary directory, listening only on a unix socket
//! there, with trust authentication and without fsync (a crash of the test machine loses it; a
//! killed server does not).
//!
//! The server lives as long as the [`TestServer`], or, for [`TestServer::shared`], as long as the
//! test process: a shell keeps it, reading its standard input from a pipe this process holds, and
//! when that pipe closes (the value is dropped or the process ends, however it ends) it stops the
//! server and removes the directory.

use std::io::{BufRead, BufReader};
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Mutex, OnceLock};
use std::time::Duration;

use super::PostgresTarget;

/// A running test server.
pub struct TestServer {
    dir: PathBuf,
    keeper: Mutex<Option<(Child, ChildStdin)>>,
}

/// How long a starting server may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(60);

impl TestServer {
    /// The server shared by every test of this process, started at the first call.
    pub fn shared() -> &'static TestServer {
        static SHARED: OnceLock<TestServer> = OnceLock::new();
        SHARED.get_or_init(|| TestServer::start().unwrap_or_else(|e| panic!("{e}")))
    }

    /// Starts a server of its own, for tests that stop or restart it.
    pub fn start() -> Result<TestServer, String> {
        let bin = bin_dir()?;
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "presso-pg-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let _ = std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o700));
        // PostgreSQL refuses to run as root: as root, it runs as the package's user.
        let user = as_user()?;
        if let Some((uid, gid)) = user {
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(|e| format!("chown {}: {e}", dir.display()))?;
        }
        let data = dir.join("data");
        let out = run_as(user, Command::new(bin.join("initdb")))
            .args(["-D"])
            .arg(&data)
            .args([
                "-U",
                "presso",
                "--auth=trust",
                "--no-sync",
                "-E",
                "UTF8",
                "--locale=C",
            ])
            .output()
            .map_err(|e| format!("initdb: {e}"))?;
        if !out.status.success() {
            return Err(format!(
                "initdb failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ));
        }
        // The keeper: starts the server and stops it when its standard input closes; when the
        // server ends (stopped, or failing to start), removes the directory and ends, which
        // closes the log pipe.
        let script = r#"
            exec 3<&0  # an asynchronous list would read /dev/null instead
            "$1/postgres" -D "$2/data" -k "$2" -c listen_addresses= -c fsync=off \
                -c full_page_writes=off -c max_connections=300 -c shared_buffers=64MB \
                -c logging_collector=off &
            pid=$!
            ( cat > /dev/null <&3; kill -QUIT "$pid" ) 2>/dev/null &
            wait "$pid"
            rm -rf "$2"
        "#;
        let mut child = run_as(user, Command::new("sh"))
            .args(["-c", script, "keeper"])
            .arg(&bin)
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        // The server's log: read until it accepts connections, then drained so it never blocks
        // on a full pipe.
        let (ready_tx, ready_rx) = mpsc::channel();
        std::thread::spawn(move || {
            let mut log = Vec::new();
            let mut ready = Some(ready_tx);
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(tx) = &ready {
                    if line.contains("ready to accept connections") {
                        let _ = tx.send(Ok(()));
                        ready = None;
                    } else {
                        log.push(line);
                    }
                }
            }
            if let Some(tx) = ready {
                let _ = tx.send(Err(log.join("\n")));
            }
        });
        let server = TestServer {
            dir,
            keeper: Mutex::new(Some((child, stdin))),
        };
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(())) => Ok(server),
            Ok(Err(log)) => Err(format!("postgres did not start:\n{log}")),
            Err(_) => Err(format!("postgres did not start within {START_TIMEOUT:?}")),
        }
    }

    /// The directory of the server's unix socket.
    pub fn socket_dir(&self) -> &Path {
        &self.dir
    }

    /// A connection string for the server's default database.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port=5432 user=presso dbname=postgres",
            self.dir.display()
        )
    }

    /// A `postgres://` URL of the pool in `schema`.
    pub fn url(&self, schema: &str) -> String {
        let host: String = self
            .dir
            .display()
            .to_string()
            .bytes()
            .map(|b| match b {
                b'/' => "%2F".to_string(),
                b => (b as char).to_string(),
            })
            .collect();
        format!("postgres://presso@{host}:5432/postgres?schema={schema}")
    }

    /// Where the pool in `schema` lives.
    pub fn target(&self, schema: &str) -> PostgresTarget {
        PostgresTarget {
            conninfo: self.conninfo(),
            schema: schema.to_string(),
        }
    }

    /// A schema name no other call of this process has returned.
    pub fn fresh_schema(tag: &str) -> String {
        static N: AtomicU64 = AtomicU64::new(0);
        format!("{tag}_{}", N.fetch_add(1, Ordering::Relaxed))
    }

    /// Stops the server and waits until it is gone (its directory too).
    pub fn stop(&self) {
        let taken = self.keeper.lock().ok().and_then(|mut k| k.take());
        if let Some((mut child, stdin)) = taken {
            drop(stdin);
            let _ = child.wait();
        }
    }
}

impl Drop for TestServer {
    fn drop(&mut self) {
        self.stop();
    }
}

/// `PRESSO_PG_BIN`, or the newest `/usr/lib/postgresql/*/bin` with `initdb` in it.
fn bin_dir() -> Result<PathBuf, String> {
    if let Some(dir) = std::env::var_os("PRESSO_PG_BIN") {
        return Ok(PathBuf::from(dir));
    }
    let mut versions: Vec<(u32, PathBuf)> = std::fs::read_dir("/usr/lib/postgresql")
        .into_iter()
        .flatten()
        .flatten()
        .filter_map(|e| {
            let v = e.file_name().to_str()?.parse::<u32>().ok()?;
            let bin = e.path().join("bin");
            bin.join("initdb").exists().then_some((v, bin))
        })
        .collect();
    versions.sort();
    versions.pop().map(|(_, b)| b).ok_or_else(|| {
        "no PostgreSQL server here: install Debian's postgresql package \
         (scripts/install-packages.sh postgresql), or set PRESSO_PG_BIN"
            .to_string()
    })
}

/// The user and group to run the server as: `postgres` when this process is root, else none.
fn as_user() -> Result<Option<(u32, u32)>, String> {
    // SAFETY: getuid has no preconditions.
    if unsafe { libc::getuid() } != 0 {
        return Ok(None);
    }
    let name = std::ffi::CString::new("postgres").expect("no NUL");
    // SAFETY: getpwnam reads a NUL-terminated name and returns a pointer to static storage or
    // NULL; the fields are copied before any other call could overwrite it.
    let pw = unsafe { libc::getpwnam(name.as_ptr()) };
    if pw.is_null() {
        return Err(
            "running as root, and there is no postgres user to run the server as \
                    (Debian's postgresql package makes one)"
                .into(),
        );
    }
    // SAFETY: pw is non-null and points at a valid passwd entry (see above).
    Ok(Some(unsafe { ((*pw).pw_uid, (*pw).pw_gid) }))
}

/// `command`, set to run as `user` when given.
fn run_as(user: Option<(u32, u32)>, mut command: Command) -> Command {
    if let Some((uid, gid)) = user {
        use std::os::unix::process::CommandExt;
        // As root, std also drops the supplementary groups.
        command.uid(uid).gid(gid);
    }
    command
}
