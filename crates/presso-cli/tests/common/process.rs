//! Running the `presso` binary and other tools with a time limit, checking what a test needs
//! (root, FUSE, tools on the PATH), and child processes that die with the test.

use std::borrow::BorrowMut;
use std::ffi::OsStr;
use std::io::Read;
use std::os::unix::fs::PermissionsExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::time::{Duration, Instant};

/// Longest any single command of a test may take before the test fails instead of hanging.
pub const COMMAND_TIMEOUT: Duration = Duration::from_secs(120);

/// The `presso` binary under test.
pub fn presso_bin() -> PathBuf {
    PathBuf::from(env!("CARGO_BIN_EXE_presso"))
}

/// A `presso` command.
pub fn presso() -> Command {
    Command::new(presso_bin())
}

/// Fails the test with a clear message if `tool` is not on the PATH: the tests install nothing
/// themselves (CI installs the packages they need).
pub fn require_tool(tool: &str, package: &str) {
    let found = std::env::var_os("PATH")
        .map(|paths| {
            std::env::split_paths(&paths).any(|dir| {
                std::fs::metadata(dir.join(tool))
                    .map(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
                    .unwrap_or(false)
            })
        })
        .unwrap_or(false);
    assert!(
        found,
        "this test needs `{tool}` on the PATH (Debian package {package}); install it and run again"
    );
}

/// Fails the test with a clear message unless it runs as root (loop mounts, other users,
/// chown).
pub fn require_root(why: &str) {
    // SAFETY: geteuid has no arguments and cannot fail.
    let euid = unsafe { libc::geteuid() };
    assert_eq!(euid, 0, "this test must run as root: {why}");
}

/// Fails the test with a clear message unless FUSE mounts can be made here.
pub fn require_fuse() {
    assert!(
        Path::new("/dev/fuse").exists(),
        "the mount tests need /dev/fuse (load the fuse module, or give the container the device)"
    );
    require_tool("fusermount3", "fuse3");
}

/// What a finished command printed.
#[derive(Debug)]
pub struct Output {
    /// The command line, for messages.
    pub what: String,
    /// Exit status.
    pub status: ExitStatus,
    /// Standard output.
    pub stdout: String,
    /// Standard error.
    pub stderr: String,
}

impl Output {
    /// Panics with everything the command printed unless it succeeded; returns stdout.
    pub fn ok(self) -> String {
        assert!(
            self.status.success(),
            "`{}` failed with {}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self.stdout
    }

    /// Panics unless the command failed with a non-zero exit code; returns stderr.
    pub fn fails(self) -> String {
        assert!(
            !self.status.success() && self.status.code().is_some(),
            "`{}` should have failed with a non-zero exit code, got {}\nstdout:\n{}\nstderr:\n{}",
            self.what,
            self.status,
            self.stdout,
            self.stderr
        );
        self.stderr
    }
}

/// Runs `cmd` to the end with no standard input, failing the test if it takes longer than
/// [`COMMAND_TIMEOUT`] (the child is killed then).
pub fn exec(cmd: impl BorrowMut<Command>) -> Output {
    exec_within(cmd, COMMAND_TIMEOUT)
}

/// [`exec`] with a given time limit.
pub fn exec_within(mut cmd: impl BorrowMut<Command>, limit: Duration) -> Output {
    let cmd = cmd.borrow_mut();
    let what = describe(cmd);
    let mut child = cmd
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap_or_else(|e| panic!("cannot run `{what}`: {e}"));
    let stdout = drain(child.stdout.take().expect("piped stdout"));
    let stderr = drain(child.stderr.take().expect("piped stderr"));
    let deadline = Instant::now() + limit;
    let status = loop {
        match child.try_wait() {
            Ok(Some(status)) => break status,
            Ok(None) if Instant::now() < deadline => std::thread::sleep(Duration::from_millis(5)),
            Ok(None) => {
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "`{what}` did not finish within {limit:?}; killed it\nstdout:\n{}\nstderr:\n{}",
                    printed(stdout),
                    printed(stderr)
                );
            }
            Err(e) => panic!("waiting for `{what}`: {e}"),
        }
    };
    Output {
        what,
        status,
        stdout: stdout.join().expect("stdout reader"),
        stderr: stderr.join().expect("stderr reader"),
    }
}

/// What a killed command printed: its pipe's reader ends once no process holds the pipe, which
/// a process it started and left running may still do for a while.
fn printed(reader: std::thread::JoinHandle<String>) -> String {
    let deadline = Instant::now() + Duration::from_secs(5);
    while !reader.is_finished() {
        if Instant::now() > deadline {
            return "(still held open by a process it started)".into();
        }
        std::thread::sleep(Duration::from_millis(10));
    }
    reader.join().unwrap_or_default()
}

fn drain(mut pipe: impl Read + Send + 'static) -> std::thread::JoinHandle<String> {
    std::thread::spawn(move || {
        let mut bytes = Vec::new();
        let _ = pipe.read_to_end(&mut bytes);
        String::from_utf8_lossy(&bytes).into_owned()
    })
}

fn describe(cmd: &Command) -> String {
    let mut parts = vec![cmd.get_program().to_string_lossy().into_owned()];
    parts.extend(cmd.get_args().map(|a| a.to_string_lossy().into_owned()));
    parts.join(" ")
}

/// Runs `program` with `args` (see [`exec`]).
pub fn tool(program: &str, args: &[&dyn AsRef<OsStr>]) -> Output {
    exec(cmd(program, args.iter().map(|a| a.as_ref())))
}

/// A command from a program name and arguments.
pub fn cmd<I, S>(program: &str, args: I) -> Command
where
    I: IntoIterator<Item = S>,
    S: AsRef<OsStr>,
{
    let mut c = Command::new(program);
    c.args(args);
    c
}

/// Polls `condition` until it holds or `limit` passes; returns whether it held. For waiting on
/// something outside the test's control (a daemon exiting, a release reaching the daemon).
pub fn wait_until(limit: Duration, mut condition: impl FnMut() -> bool) -> bool {
    let deadline = Instant::now() + limit;
    loop {
        if condition() {
            return true;
        }
        if Instant::now() >= deadline {
            return false;
        }
        std::thread::sleep(Duration::from_millis(10));
    }
}

/// A child process killed and reaped on drop.
pub struct KillOnDrop(pub Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Runs `program args` as nobody; returns (success, stderr).
pub fn as_nobody(program: &str, args: &[&Path]) -> (bool, String) {
    let mut c = cmd(
        "setpriv",
        ["--reuid=65534", "--regid=65534", "--clear-groups", program],
    );
    c.args(args);
    let out = exec(&mut c);
    (out.status.success(), out.stderr)
}
