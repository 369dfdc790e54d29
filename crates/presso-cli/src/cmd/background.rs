//! `presso mount` without `-f`: the process forks, the child becomes the daemon (its own
//! session, standard error to the pool's log), and the parent waits to tell the user whether the
//! mount came up, showing meanwhile the retries of a shared pool's servers the daemon relays.

use std::io::{BufRead, Read, Write};
use std::os::fd::{FromRawFd, OwnedFd};
use std::path::{Path, PathBuf};
use std::sync::{Arc, Mutex};

use anyhow::{bail, Context, Result};
use presso_fs::daemon::{self, MountConfig, PoolSource};

/// The pool as messages name it (a shared pool's URL without its password) and the directory
/// of its daemon's log.
fn describe(source: &PoolSource) -> (String, PathBuf) {
    match source {
        PoolSource::Dir(dir) => (dir.display().to_string(), dir.clone()),
        PoolSource::Shared { meta_url, place } => (
            presso_fs::pool::without_password(meta_url),
            place.cache.clone(),
        ),
    }
}

/// What the daemon writes to the parent before its answer, line by line: a retry of a shared
/// pool's server (the parent shows it at once), then `ok` or `error: MESSAGE`.
const RETRY_LINE: &str = "retry ";

/// Forks; the child becomes the daemon and tells the parent through a pipe whether the mount
/// came up, so errors still reach the user's terminal, and so do the retries of a shared pool's
/// servers while the mount waits for them.
pub(super) fn mount(source: &PoolSource, mountpoint: &Path, config: MountConfig) -> Result<()> {
    let (pool, log_dir) = describe(source);
    let mut fds = [0; 2];
    // SAFETY: `fds` has room for the two descriptors pipe() writes.
    if unsafe { libc::pipe2(fds.as_mut_ptr(), libc::O_CLOEXEC) } != 0 {
        bail!("cannot create a pipe: {}", std::io::Error::last_os_error());
    }
    // SAFETY: both descriptors were just created and are owned here only.
    let (read_end, write_end) =
        unsafe { (OwnedFd::from_raw_fd(fds[0]), OwnedFd::from_raw_fd(fds[1])) };
    // SAFETY: no other thread exists yet in this process, so the child may run Rust code.
    match unsafe { libc::fork() } {
        -1 => bail!("cannot fork: {}", std::io::Error::last_os_error()),
        0 => {
            drop(read_end);
            let code = child(source, &log_dir, mountpoint, config, write_end);
            std::process::exit(code);
        }
        _ => {
            drop(write_end);
            let answer = hear_daemon(std::fs::File::from(read_end))?;
            match answer.strip_prefix("ok") {
                Some(_) => {
                    println!("mounted {pool} on {}", mountpoint.display());
                    Ok(())
                }
                None if answer.is_empty() => {
                    bail!(
                        "the daemon exited before mounting; see {}/presso.log",
                        log_dir.display()
                    )
                }
                None => bail!("{}", answer.trim_start_matches("error: ").trim()),
            }
        }
    }
}

/// `line` as the daemon sends it before its answer: one [`RETRY_LINE`], its own line breaks
/// made spaces, so that no part of it can be taken for the answer.
fn retry_report(line: &str) -> String {
    format!("{RETRY_LINE}{}\n", line.replace('\n', " "))
}

/// Reads the daemon's report ([`retry_report`]s, shown on standard error as they come, then its
/// answer) until the daemon closes the pipe; the answer.
fn hear_daemon(pipe: impl Read) -> Result<String> {
    let mut lines = std::io::BufReader::new(pipe);
    loop {
        let mut line = String::new();
        if lines
            .read_line(&mut line)
            .context("cannot hear from the daemon")?
            == 0
        {
            return Ok(line);
        }
        match line.strip_prefix(RETRY_LINE) {
            Some(retry) => eprint!("{retry}"),
            None => {
                lines
                    .read_to_string(&mut line)
                    .context("cannot hear from the daemon")?;
                return Ok(line);
            }
        }
    }
}

fn child(
    source: &PoolSource,
    log_dir: &Path,
    mountpoint: &Path,
    config: MountConfig,
    report: OwnedFd,
) -> i32 {
    // SAFETY: setsid takes no pointers; it detaches from the terminal's session.
    unsafe { libc::setsid() };
    let _ = std::fs::create_dir_all(log_dir);
    let log = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(log_dir.join("presso.log"));
    let devnull = std::fs::File::open("/dev/null");
    use std::os::fd::AsRawFd;
    // SAFETY: dup2 onto the standard descriptors of this process, from descriptors owned here.
    unsafe {
        if let Ok(null) = &devnull {
            libc::dup2(null.as_raw_fd(), 0);
            libc::dup2(null.as_raw_fd(), 1);
        }
        if let Ok(log) = &log {
            libc::dup2(log.as_raw_fd(), 2);
        }
    }
    // The pipe to the parent, until the mount is answered: retries of the servers go to it
    // too, so that the user waiting for the mount sees them.
    let report = Arc::new(Mutex::new(Some(std::fs::File::from(report))));
    let relay = report.clone();
    presso_fs::retries::show_server_retries_to(move |line| {
        presso_fs::log!("{line}");
        if let Some(f) = relay.lock().unwrap_or_else(|p| p.into_inner()).as_mut() {
            let _ = f.write_all(retry_report(line).as_bytes());
        }
    });
    let result = daemon::serve(source, mountpoint, config, |r| {
        let taken = report.lock().unwrap_or_else(|p| p.into_inner()).take();
        if let Some(mut f) = taken {
            let _ = match r {
                Ok(()) => f.write_all(b"ok"),
                Err(e) => f.write_all(format!("error: {e}").as_bytes()),
            };
        }
    });
    match result {
        Ok(()) => 0,
        Err(e) => {
            presso_fs::log!("presso: {e}");
            1
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn retries_before_the_answer_are_never_taken_for_it() {
        // A retry whose message has a line break of its own (a server's error text may).
        let mut report = retry_report("first");
        report += &retry_report("a message\nof two lines");
        report += "ok";
        assert_eq!(hear_daemon(report.as_bytes()).unwrap(), "ok");
        let refused = retry_report("again") + "error: no room\nfree some";
        assert_eq!(
            hear_daemon(refused.as_bytes()).unwrap(),
            "error: no room\nfree some"
        );
        assert_eq!(hear_daemon(retry_report("died").as_bytes()).unwrap(), "");
    }
}
