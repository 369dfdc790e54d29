//! Serving a pool at a mount point: open the pool, start the file layer and the control socket,
//! run the FUSE session until unmount or a termination signal, then flush and close.

use std::path::{Path, PathBuf};
use std::time::Duration;

use crate::control;
use crate::error::{FsError, Result};
use crate::fuse::{mount_config, PressoFs, DEFAULT_CACHE_TIMEOUT, DEFAULT_CHANNELS};
use crate::pool::{ClientPlace, Pool, PoolOptions};
use crate::vfs::{Vfs, VfsConfig};

/// How to mount.
#[derive(Debug, Clone, Default)]
pub struct MountConfig {
    /// Let other users in (still subject to permissions).
    pub allow_other: bool,
    /// Mount read-only.
    pub read_only: bool,
    /// Forbid executing files from the mount (`noexec`).
    pub no_exec: bool,
    /// Mount over a directory that holds files (hiding them while mounted).
    pub nonempty: bool,
    /// Pool settings; the mount sets their `offload_on_submitter` itself, from the number of
    /// workers and request channels.
    pub pool: PoolOptions,
    /// File-layer settings.
    pub vfs: VfsConfig,
    /// How long the kernel may cache names and attributes ([`DEFAULT_CACHE_TIMEOUT`] unless
    /// set).
    pub cache_timeout: Option<Duration>,
    /// Threads reading requests from the kernel, each on its own channel ([`DEFAULT_CHANNELS`]
    /// unless set).
    pub channels: Option<usize>,
    /// Take requests from one io_uring queue per CPU where the kernel offers FUSE over io_uring
    /// (else, and by default, every request comes through `/dev/fuse`).
    pub io_uring: bool,
}

/// The pool to serve.
#[derive(Debug, Clone)]
pub enum PoolSource {
    /// A pool in a local directory, served by this daemon alone.
    Dir(PathBuf),
    /// A pool shared by several clients, its metadata at this `postgres://` URL; this mount
    /// becomes a new client of it.
    Shared {
        /// The metadata's URL.
        meta_url: String,
        /// This machine's place for the client's own files, and the object store's credentials.
        place: ClientPlace,
    },
}

/// How long the kernel may cache names and attributes of a shared pool by default: what another
/// client changes shows within this time (an open always sees a file's committed size).
pub const SHARED_CACHE_TIMEOUT: Duration = Duration::from_secs(1);

/// Whether the accelerator should compress on the mount's request threads rather than on its
/// own `workers`: ISA-L computes on the host's cores, and the request threads hand records over
/// after replying, so where there are at least as many of them as there would be workers, the
/// workers add no parallelism, only a hand-off per record (a wake-up, and the record's bytes
/// read on another CPU). On two cores and two channels, compressing writes then cost the daemon
/// a fifth less CPU (docs/benchmarks.md). With more cores the workers keep the parallelism.
fn offload_on_request_threads(workers: usize, channels: usize) -> bool {
    workers <= channels
}

/// Refuses a mount that would hide the pool itself or files already in the mount point.
fn check_mountpoint(pool: &Path, mountpoint: &Path, nonempty: bool) -> Result<()> {
    if pool.starts_with(mountpoint) {
        return Err(FsError::Refused(format!(
            "the pool {} is inside the mount point {}: the mount would hide it from its own \
             daemon; mount it somewhere else",
            pool.display(),
            mountpoint.display()
        )));
    }
    let mut entries = std::fs::read_dir(mountpoint)
        .map_err(|e| FsError::io(format!("mount point {}", mountpoint.display()), e))?;
    if !nonempty && entries.next().is_some() {
        return Err(FsError::NotEmpty(format!(
            "the mount point {} is not empty: the mount would hide what is there; use an empty \
             directory, or -o nonempty to mount over it anyway",
            mountpoint.display()
        )));
    }
    Ok(())
}

/// Mounts the pool `source` on `mountpoint` and serves it until it is unmounted or the process
/// gets SIGTERM, SIGINT or SIGHUP (which unmount it). `ready` is called once the mount is live
/// (or with the reason it could not be made). Everything written is durable when this returns
/// `Ok`.
///
/// Call from a process with no other threads yet: termination signals are blocked here so
/// that one thread can wait for them.
pub fn serve(
    source: &PoolSource,
    mountpoint: &Path,
    config: MountConfig,
    ready: impl FnOnce(std::result::Result<(), String>),
) -> Result<()> {
    let signals = block_signals();
    crate::memory::limit_arenas();
    let setup = || -> Result<_> {
        let mountpoint = std::fs::canonicalize(mountpoint)
            .map_err(|e| FsError::io(format!("mount point {}", mountpoint.display()), e))?;
        match std::fs::metadata(&mountpoint) {
            Ok(m) if m.is_dir() => {}
            Err(e) if e.raw_os_error() == Some(libc::ENOTCONN) => {
                return Err(FsError::Refused(format!(
                    "{} is still mounted by a daemon that stopped (\"Transport endpoint is not \
                     connected\"); run `presso unmount {}` to remove that mount, then mount again",
                    mountpoint.display(),
                    mountpoint.display()
                )));
            }
            _ => {
                return Err(FsError::Mount(format!(
                    "mount point {} is not a directory",
                    mountpoint.display()
                )));
            }
        }
        let channels = config.channels.unwrap_or(DEFAULT_CHANNELS);
        let pool_options = PoolOptions {
            offload_on_submitter: offload_on_request_threads(config.pool.workers, channels),
            ..config.pool.clone()
        };
        let (pool, report, pool_path) = match source {
            PoolSource::Dir(dir) => {
                let pool_path = std::fs::canonicalize(dir)
                    .map_err(|e| FsError::io(format!("pool {}", dir.display()), e))?;
                check_mountpoint(&pool_path, &mountpoint, config.nonempty)?;
                let (pool, report) = Pool::open(&pool_path, pool_options)?;
                (pool, report, pool_path)
            }
            PoolSource::Shared { meta_url, place } => {
                check_mountpoint(&place.cache, &mountpoint, config.nonempty)?;
                let (pool, report) = Pool::open_shared(meta_url, place, pool_options)?;
                // The client's directory stands for the pool on this machine: the mount's name,
                // where the control socket is.
                let local = pool
                    .client()
                    .map(|c| c.local_dir().to_path_buf())
                    .unwrap_or_default();
                (pool, report, local)
            }
        };
        if report.orphan_records_purged > 0 || report.torn_bytes > 0 {
            crate::log!(
                "presso: recovered {}: {} records of files unlinked while open removed, {} bytes of a torn segment tail discarded",
                pool_path.display(),
                report.orphan_records_purged,
                report.torn_bytes
            );
        }
        for (segment, why) in &report.damaged_segment_headers {
            crate::log!("presso: damaged segment header, segment {segment} kept as it is: {why}");
        }
        if let Some(segment) = report.damage_kept {
            crate::log!(
                "presso: segment {segment} is damaged below its committed entries; nothing was \
                 cut, new data goes to a new segment"
            );
        }
        if !report.missing_segments.is_empty() {
            crate::log!(
                "presso: segment files missing although the metadata points into them: {:?}",
                report.missing_segments
            );
        }
        if report.found_damage() {
            crate::log!(
                "presso: the pool is damaged; files that do not touch the damage read as \
                 before, damaged records read as I/O errors. Run `presso scrub {}` to list \
                 the files and offsets affected, and restore those files from a backup.",
                mountpoint.display()
            );
        }
        let vfs = Vfs::new(pool, config.vfs.clone());
        let threads = vfs.pool().options().workers * 2;
        let options = mount_config(
            &pool_path,
            config.allow_other,
            config.read_only,
            config.no_exec,
            channels,
        );
        let shared = matches!(source, PoolSource::Shared { .. });
        let ttl = config.cache_timeout.unwrap_or(if shared {
            SHARED_CACHE_TIMEOUT
        } else {
            DEFAULT_CACHE_TIMEOUT
        });
        let fs = PressoFs::new(vfs.clone(), threads, ttl, config.io_uring);
        let notifier = fs.notifier_slot();
        let serving = fs.clone();
        // The control socket answers before the mount shows: whoever sees the mount (a script
        // waiting for it, `presso status`) may ask the daemon at once.
        let socket = control::serve(vfs.clone(), &pool_path, mountpoint.clone())?;
        let session = fuser::Session::new(fs, &mountpoint, &options).map_err(|e| {
            let _ = std::fs::remove_file(&socket);
            FsError::io(format!("cannot mount on {}", mountpoint.display()), e)
        })?;
        let _ = notifier.set(session.notifier());
        serving.serve_ring(std::os::fd::AsFd::as_fd(&session));
        Ok((vfs, session, socket, mountpoint))
    };
    let (vfs, mut session, socket, mountpoint) = match setup() {
        Ok(s) => s,
        Err(e) => {
            ready(Err(e.to_string()));
            return Err(e);
        }
    };
    let unmounter = std::sync::Mutex::new(session.unmount_callable());
    let target: PathBuf = mountpoint.clone();
    std::thread::Builder::new()
        .name("presso-signals".into())
        .spawn(move || {
            if wait_signal(&signals) {
                crate::log!("presso: signal received, unmounting {}", target.display());
                if let Ok(mut u) = unmounter.lock() {
                    let _ = u.unmount();
                }
            }
        })
        .map_err(|e| FsError::io("cannot start the signal thread", e))?;
    let moved = vfs.clone();
    let trimmer = crate::memory::Trimmer::start(move || {
        let (written, read, _, _) = moved.traffic();
        written.wrapping_add(read)
    });
    ready(Ok(()));
    let served = session
        .run()
        .map_err(|e| FsError::io("the FUSE session failed", e));
    let _ = std::fs::remove_file(&socket);
    let closed = vfs.shutdown();
    drop(trimmer);
    let lost = vfs.unstored();
    for file in &lost.files {
        crate::log!(
            "presso: lost at unmount, could not be stored: {} bytes of {}",
            file.bytes,
            file.path
                .clone()
                .unwrap_or_else(|| format!("inode {}", file.ino))
        );
    }
    served.and(closed)
}

fn block_signals() -> libc::sigset_t {
    // SAFETY: sigset manipulation on a local, zero-initialised set; pthread_sigmask only changes
    // this thread's mask, which threads spawned later inherit.
    unsafe {
        let mut set: libc::sigset_t = std::mem::zeroed();
        libc::sigemptyset(&mut set);
        libc::sigaddset(&mut set, libc::SIGTERM);
        libc::sigaddset(&mut set, libc::SIGINT);
        libc::sigaddset(&mut set, libc::SIGHUP);
        libc::pthread_sigmask(libc::SIG_BLOCK, &set, std::ptr::null_mut());
        set
    }
}

fn wait_signal(set: &libc::sigset_t) -> bool {
    let mut signal = 0;
    // SAFETY: `set` is an initialised signal set and `signal` a valid out-parameter.
    unsafe { libc::sigwait(set, &mut signal) == 0 }
}
