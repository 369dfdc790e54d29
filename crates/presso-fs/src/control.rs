//! The mount daemon's control socket (`presso.sock` in the pool directory), through which
//! `presso status`, `get`, `set`, `gc` and `scrub` reach a mounted pool.
//!
//! Protocol: the client writes one JSON [`Request`] line; the daemon answers with zero or more
//! `{"progress":{"done":N,"total":N}}` lines and then one `{"ok":VALUE}` or `{"error":"..."}`
//! line. The socket is created with mode 0600: only the pool's owner (and root) may use it.

use std::io::{BufRead, BufReader, Write};
use std::os::unix::fs::PermissionsExt;
use std::os::unix::net::{UnixListener, UnixStream};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

use crate::error::{FsError, Result};
use crate::maintenance::{self, Progress};
use crate::status::Status;
use crate::vfs::Vfs;

/// File name of the control socket inside the pool directory.
pub const SOCKET_FILE: &str = "presso.sock";

/// A request to the daemon.
#[derive(Debug, Clone, Serialize, Deserialize)]
#[serde(tag = "op", rename_all = "lowercase")]
pub enum Request {
    /// The pool's status.
    Status,
    /// Effective value of a property on an inode (0 = pool).
    Get {
        /// Inode.
        ino: u64,
        /// Property name.
        name: String,
    },
    /// Sets a property on a directory inode (0 = pool).
    Set {
        /// Inode.
        ino: u64,
        /// Property name.
        name: String,
        /// Value.
        value: String,
    },
    /// Garbage collection of segments less than `min_live` live.
    Gc {
        /// Live fraction below which a segment is rewritten.
        min_live: f64,
    },
    /// Verify everything.
    Scrub,
    /// Commit everything written so far, durably; the reply is the [`crate::vfs::Unstored`]
    /// data (empty when everything is in the pool).
    Sync,
}

/// Serves requests on the socket in the pool directory `pool_dir` until the process ends.
pub fn serve(vfs: Arc<Vfs>, pool_dir: &Path, mountpoint: PathBuf) -> Result<PathBuf> {
    let path = pool_dir.join(SOCKET_FILE);
    let _ = std::fs::remove_file(&path);
    let listener = UnixListener::bind(&path)
        .map_err(|e| FsError::io(format!("cannot create {}", path.display()), e))?;
    std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
        .map_err(|e| FsError::io("cannot restrict the control socket", e))?;
    let socket = path.clone();
    std::thread::Builder::new()
        .name("presso-control".into())
        .spawn(move || {
            for stream in listener.incoming().flatten() {
                let (vfs, mountpoint) = (vfs.clone(), mountpoint.clone());
                let _ = std::thread::Builder::new()
                    .name("presso-request".into())
                    .spawn(move || handle(&vfs, &mountpoint, stream));
            }
        })
        .map_err(|e| FsError::io("cannot start the control thread", e))?;
    Ok(socket)
}

fn handle(vfs: &Vfs, mountpoint: &Path, stream: UnixStream) {
    let Ok(read_half) = stream.try_clone() else {
        return;
    };
    let mut line = String::new();
    if BufReader::new(read_half).read_line(&mut line).is_err() {
        return;
    }
    let mut out = stream;
    let mut send = |v: Value| {
        let _ = writeln!(out, "{v}");
    };
    let result = match serde_json::from_str::<Request>(&line) {
        Err(e) => Err(FsError::Control(format!("bad request: {e}"))),
        Ok(request) => run(vfs, mountpoint, request, &mut |p| {
            send(json!({ "progress": p }))
        }),
    };
    match result {
        Ok(v) => send(json!({ "ok": v })),
        Err(e) => send(json!({ "error": e.to_string() })),
    }
}

fn run(
    vfs: &Vfs,
    mountpoint: &Path,
    request: Request,
    progress: &mut dyn FnMut(Progress),
) -> Result<Value> {
    match request {
        Request::Status => {
            let status = Status::gather(
                vfs.pool(),
                Some(vfs),
                Some(mountpoint.display().to_string()),
            )?;
            serde_json::to_value(status)
                .map_err(|e| FsError::Control(format!("cannot encode the reply: {e}")))
        }
        // Through the file layer, so open files pick up the new value for their next records.
        Request::Set { ino, name, value } => {
            let value = vfs.set_prop(ino, &name, &value)?;
            Ok(json!({ "name": name, "value": value }))
        }
        Request::Get { .. } => run_offline(vfs.pool(), request, progress),
        // Everything written so far is compressed and committed first.
        Request::Gc { .. } | Request::Scrub => {
            vfs.sync_all()?;
            run_offline(vfs.pool(), request, progress)
        }
        // The reply lists what could not be stored.
        // A failure to store some records is the reply, not an error; any other is an error.
        Request::Sync => {
            let synced = vfs.sync_all();
            let unstored = vfs.unstored();
            if unstored.is_empty() {
                synced?;
            }
            serde_json::to_value(unstored)
                .map_err(|e| FsError::Control(format!("cannot encode the reply: {e}")))
        }
    }
}

/// Runs `request` on a pool without its file layer (a pool the caller opened, not mounted).
pub fn run_offline(
    pool: &crate::pool::Pool,
    request: Request,
    progress: &mut dyn FnMut(Progress),
) -> Result<Value> {
    let to_value = |v: Result<Value, serde_json::Error>| {
        v.map_err(|e| FsError::Control(format!("cannot encode the reply: {e}")))
    };
    match request {
        Request::Status => to_value(serde_json::to_value(Status::gather(pool, None, None)?)),
        Request::Get { ino, name } => {
            let (value, source) = pool.get_prop(ino, &name)?;
            Ok(json!({ "name": name, "value": value, "source": source }))
        }
        Request::Set { ino, name, value } => {
            let value = pool.set_prop(ino, &name, &value)?;
            Ok(json!({ "name": name, "value": value }))
        }
        Request::Gc { min_live } => to_value(serde_json::to_value(maintenance::gc(
            pool, min_live, progress,
        )?)),
        Request::Scrub => to_value(serde_json::to_value(maintenance::scrub(pool, progress)?)),
        Request::Sync => {
            pool.commit(true)?;
            Ok(Value::Null)
        }
    }
}

/// Sends `request` to the daemon serving the pool in `pool_dir`, passing progress lines to
/// `progress`. `Ok(None)` means no daemon is listening (the pool is not mounted).
pub fn call(
    pool_dir: &Path,
    request: &Request,
    progress: &mut dyn FnMut(Progress),
) -> std::result::Result<Option<Value>, String> {
    let path = pool_dir.join(SOCKET_FILE);
    let mut stream = match UnixStream::connect(&path) {
        Ok(s) => s,
        Err(_) => return Ok(None),
    };
    let line = serde_json::to_string(request).map_err(|e| e.to_string())?;
    writeln!(stream, "{line}").map_err(|e| format!("cannot talk to the daemon: {e}"))?;
    for line in BufReader::new(stream).lines() {
        let line = line.map_err(|e| format!("the daemon hung up: {e}"))?;
        let v: Value =
            serde_json::from_str(&line).map_err(|e| format!("bad reply from the daemon: {e}"))?;
        if let Some(p) = v.get("progress") {
            if let Ok(p) = serde_json::from_value::<Progress>(p.clone()) {
                progress(p);
            }
        } else if let Some(ok) = v.get("ok") {
            return Ok(Some(ok.clone()));
        } else if let Some(e) = v.get("error") {
            return Err(e.as_str().unwrap_or("unknown error").to_string());
        }
    }
    Err("the daemon closed the connection without an answer".into())
}
