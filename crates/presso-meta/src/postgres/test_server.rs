//! A throwaway PostgreSQL server for tests (feature `test-server`): `initdb` and `postgres` from
//! Debian's `postgresql` package in a new temporary directory, listening only on a unix socket
//! there, with trust authentication and without fsync (a crash of the test machine loses it; a
//! killed server does not).
//!
//! The server lives as long as the [`TestServer`], or, for [`TestServer::shared`], as long as the
//! test process: a shell keeps it, reading its standard input from a pipe this process holds, and
//! when that pipe closes (the value is dropped or the process ends, however it ends) it stops the
//! server and removes the directory. In between, a test may halt the server and resume it, as
//! an administrator's restart does.

use std::io::{BufRead, BufReader, Read};
use std::os::unix::fs::PermissionsExt;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Mutex, OnceLock};

use super::PostgresTarget;

/// A running test server.
pub struct TestServer {
    dir: PathBuf,
    bin: PathBuf,
    /// The user the server runs as, when this process is root.
    user: Option<(u32, u32)>,
    keeper: Mutex<Option<(Child, ChildStdin)>>,
}

/// The server's settings: a unix socket in its data directory (the server's working directory)
/// and no TCP port, no fsync.
const SERVER_OPTIONS: &str = "-k . -c listen_addresses= -c fsync=off -c full_page_writes=off \
     -c max_connections=300 -c shared_buffers=64MB";

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
        let server = TestServer {
            dir,
            bin,
            user,
            keeper: Mutex::new(None),
        };
        // The keeper: starts the server (`pg_ctl -w` returns once it accepts connections) and
        // says so; when its standard input closes, stops the server and removes the directory.
        // The server may be halted and resumed in between ([`TestServer::halt`]).
        let script = r#"
            exec 3<&0  # an asynchronous list would read /dev/null instead
            if "$1/pg_ctl" -D "$2/data" -l "$2/log" -o "$3" -w -t 60 start >/dev/null; then
                echo ready
            else
                cat "$2/log" >&2
                rm -rf "$2"
                exit 1
            fi
            cat > /dev/null <&3
            "$1/pg_ctl" -D "$2/data" -m immediate -w stop >/dev/null 2>&1
            rm -rf "$2"
        "#;
        let mut child = run_as(user, Command::new("sh"))
            .args(["-c", script, "keeper"])
            .arg(&server.bin)
            .arg(&server.dir)
            .arg(SERVER_OPTIONS)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting postgres: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let mut stdout = BufReader::new(child.stdout.take().expect("piped"));
        let mut line = String::new();
        let _ = stdout.read_line(&mut line);
        if line.trim() != "ready" {
            let mut log = String::new();
            if let Some(mut e) = child.stderr.take() {
                let _ = e.read_to_string(&mut log);
            }
            let _ = child.wait();
            return Err(format!("postgres did not start:\n{log}"));
        }
        *server.keeper.lock().expect("fresh lock") = Some((child, stdin));
        Ok(server)
    }

    /// Stops the server as an administrator's fast shutdown does (clients disconnected,
    /// everything committed kept), keeping its data for [`TestServer::resume`].
    pub fn halt(&self) -> Result<(), String> {
        self.pg_ctl(&["-m", "fast", "-w", "stop"])
    }

    /// Starts the server again after [`TestServer::halt`]; returns once it accepts connections.
    pub fn resume(&self) -> Result<(), String> {
        let log = self.dir.join("log");
        let log = log.to_str().ok_or("the log path is not UTF-8")?;
        self.pg_ctl(&["-l", log, "-o", SERVER_OPTIONS, "-w", "-t", "60", "start"])
    }

    fn pg_ctl(&self, args: &[&str]) -> Result<(), String> {
        let out = run_as(self.user, Command::new(self.bin.join("pg_ctl")))
            .arg("-D")
            .arg(self.dir.join("data"))
            .args(args)
            .output()
            .map_err(|e| format!("pg_ctl: {e}"))?;
        if out.status.success() {
            Ok(())
        } else {
            Err(format!(
                "pg_ctl {args:?} failed: {}",
                String::from_utf8_lossy(&out.stderr)
            ))
        }
    }

    /// The directory of the server's unix socket.
    pub fn socket_dir(&self) -> PathBuf {
        self.dir.join("data")
    }

    /// A connection string for the server's default database.
    pub fn conninfo(&self) -> String {
        format!(
            "host={} port=5432 user=presso dbname=postgres",
            self.socket_dir().display()
        )
    }

    /// A `postgres://` URL of the pool in `schema`.
    pub fn url(&self, schema: &str) -> String {
        let host: String = self
            .socket_dir()
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
