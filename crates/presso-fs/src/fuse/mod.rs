//! The FUSE adapter: each method converts arguments, calls the [`Vfs`], and replies. Errors are
//! mapped to errno here and nowhere else ([`FsError::errno`](crate::error::FsError::errno)).
//!
//! Several session threads read requests, each from its own clone of the FUSE device
//! ([`DEFAULT_CHANNELS`], mount option `channels=`). Each runs namespace operations, writes,
//! flushes and releases inline (they only touch metadata, copy into record buffers or hand
//! records to the engine); reads, fsync and fallocate, which may wait for decodes or commits, go
//! to a small thread pool with their reply, so one slow decode never stalls the mount. A
//! hand-off costs a thread wake-up, which on a virtual machine can cost more than the request
//! itself: serving a close (FLUSH, then RELEASE) inline made creating small files 19% faster
//! there (docs/benchmarks.md).
//!
//! With mount option `uring`, where the kernel offers FUSE over io_uring, requests come instead
//! from one queue per CPU, each served by a thread bound to that CPU (the `ring` module, which
//! says why).
//!
//! This module holds the adapter's state (the [`Vfs`], the worker pool, the kernel's cache
//! timeout and notifier); `requests` serves the kernel's requests, one method each, answering
//! through the traits of `reply`; `session` (requests read from `/dev/fuse` by the FUSE library)
//! and `ring` (requests taken from io_uring queues) decode them.

use std::os::fd::BorrowedFd;
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use crossbeam_channel::{unbounded, Sender};
use fuser::{FopenFlags, INodeNo, Notifier};
use parking_lot::Mutex;

mod config;
mod convert;
mod reply;
mod requests;
mod ring;
mod session;

pub use config::{configure_kernel, mount_config};

use crate::vfs::Vfs;

/// How long the kernel may keep names and attributes without asking again, by default. One
/// daemon owns a pool and every change to it passes through the kernel, which updates or drops
/// what it cached as it forwards the change, so nothing it keeps goes stale while mounted: the
/// timeout only bounds how long memory of a name is kept, like a local file system's caches.
pub const DEFAULT_CACHE_TIMEOUT: Duration = Duration::from_secs(3600);

/// Threads reading requests from the kernel by default, each from its own clone of the FUSE
/// device: while one waits on a metadata commit or copies a write, another serves the next
/// request.
pub const DEFAULT_CHANNELS: usize = 2;

type Task = Box<dyn FnOnce() + Send>;

/// The `fuser` file system of a mounted pool.
#[derive(Clone)]
pub struct PressoFs {
    vfs: Arc<Vfs>,
    tasks: Sender<Task>,
    /// How long the kernel may cache names and attributes.
    ttl: Duration,
    /// Set once the session exists: see [`PressoFs::notifier_slot`].
    notifier: Arc<OnceLock<Notifier>>,
    /// Refused writes whose pages the kernel is to drop: see [`PressoFs::drop_refused_pages`].
    refused: Sender<RefusedWrite>,
    /// Whether to take requests from io_uring queues when the kernel offers them.
    ring_wanted: bool,
    /// The queues' rings, made at INIT when the kernel took them, until they are served.
    rings: Arc<Mutex<Option<Vec<ring::QueueRing>>>>,
}

impl PressoFs {
    /// Wraps `vfs`, with `threads` workers for blocking requests; the kernel may cache names
    /// and attributes for `ttl`. With `ring`, requests are taken from io_uring queues where the
    /// kernel offers them.
    pub fn new(vfs: Arc<Vfs>, threads: usize, ttl: Duration, ring: bool) -> PressoFs {
        let (tx, rx) = unbounded::<Task>();
        for i in 0..threads.max(1) {
            let rx = rx.clone();
            let _ = std::thread::Builder::new()
                .name(format!("presso-fuse{i}"))
                .spawn(move || {
                    for task in rx {
                        // A panicking request must not take the worker with it: the request
                        // gets EIO (its reply is dropped) and the next one is served.
                        let _ = std::panic::catch_unwind(std::panic::AssertUnwindSafe(task));
                    }
                });
        }
        let notifier = Arc::<OnceLock<Notifier>>::default();
        let refused = refused_pages_dropper(vfs.clone(), notifier.clone());
        PressoFs {
            vfs,
            tasks: tx,
            ttl,
            notifier,
            refused,
            ring_wanted: ring,
            rings: Arc::default(),
        }
    }

    /// Starts serving io_uring queues if the kernel took them at INIT (the session exists,
    /// so INIT is done), addressing the connection through the session's FUSE `device`.
    /// Requests then come through the queues once every CPU's queue has an entry.
    pub fn serve_ring(&self, device: BorrowedFd<'_>) {
        let Some(mut rings) = self.rings.lock().take() else {
            return;
        };
        match device.try_clone_to_owned() {
            Ok(device) => ring::start(self.clone(), Arc::new(device), rings),
            Err(e) => {
                crate::log!("presso: cannot serve the io_uring queues ({e})");
                if let Some(queue) = rings.pop() {
                    ring::give_up(std::os::fd::AsRawFd::as_raw_fd(&device), queue);
                }
            }
        }
    }

    /// At INIT: whether to ask the kernel for io_uring queues, their rings made first (see
    /// [`ring::QueueRing`] for why), or why not, logged.
    fn prepare_ring(&self, offered: bool) -> bool {
        if !self.ring_wanted {
            return false;
        }
        if !offered {
            crate::log!(
                "presso: mount option uring: this kernel does not offer FUSE over io_uring \
                 (Linux 6.14 on, with /sys/module/fuse/parameters/enable_uring set to Y before \
                 mounting); requests come through /dev/fuse"
            );
            return false;
        }
        match ring::prepare() {
            Ok(rings) => {
                *self.rings.lock() = Some(rings);
                true
            }
            Err(e) => {
                crate::log!(
                    "presso: mount option uring: io_uring cannot be used here ({e}); requests \
                     come through /dev/fuse"
                );
                false
            }
        }
    }

    /// Where the daemon puts the session's notifier once the session exists. In a shared pool
    /// an open then first drops the attributes the kernel cached for the file, since another
    /// client may have changed it: the size read next is the committed one (close-to-open).
    /// In any pool the kernel is told to drop the pages of a write the daemon refused.
    pub fn notifier_slot(&self) -> Arc<OnceLock<Notifier>> {
        self.notifier.clone()
    }

    /// Whether the pool is shared with other clients, whose changes this kernel does not see.
    fn shared(&self) -> bool {
        self.vfs.pool().client().is_some()
    }

    /// Drops what the kernel cached of `ino`'s attributes if the pool is shared.
    fn forget_cached_attributes(&self, ino: u64) {
        if !self.shared() {
            return;
        }
        if let Some(notifier) = self.notifier.get() {
            // Offset -1: attributes only; the open itself drops the cached pages. ENOENT (the
            // kernel no longer has the inode) needs nothing more.
            let _ = notifier.inval_inode(INodeNo(ino), -1, 0);
        }
    }

    /// Tells the kernel to drop its cached pages of a refused write's range, which it would
    /// otherwise go on reading as if they were stored (see [`Vfs::grow_for_refused_write`]).
    /// Call after the reply: the kernel drops a page only once its writeback has ended, and
    /// that waits for the reply.
    fn drop_refused_pages(&self, ino: u64, offset: u64, len: usize) {
        let _ = self.refused.send(RefusedWrite { ino, offset, len });
    }

    /// What the kernel may keep of a file it opens: its cached pages, when every change to the
    /// pool passes through this kernel (a pool of its own), so that reading a file again after
    /// reopening it needs no request. A shared pool's files may change on other clients: an
    /// open there drops the pages (close-to-open).
    fn file_cache(&self) -> FopenFlags {
        if self.shared() {
            FopenFlags::empty()
        } else {
            FopenFlags::FOPEN_KEEP_CACHE
        }
    }

    fn spawn(&self, task: impl FnOnce(Arc<Vfs>) + Send + 'static) {
        let vfs = self.vfs.clone();
        let _ = self.tasks.send(Box::new(move || task(vfs)));
    }
}

/// A write the daemon refused, whose pages the kernel still holds.
struct RefusedWrite {
    ino: u64,
    offset: u64,
    len: usize,
}

/// The thread that has the kernel drop refused writes' pages, one write after the other, then
/// counts each ([`Vfs::note_refused_write`]: once status counts a write, its pages are gone). A
/// thread of its own: dropping a page waits for its lock, which a read of it holds until the
/// worker pool has served that read, so a worker waiting there could wait for itself.
fn refused_pages_dropper(vfs: Arc<Vfs>, notifier: Arc<OnceLock<Notifier>>) -> Sender<RefusedWrite> {
    let (tx, rx) = unbounded::<RefusedWrite>();
    let _ = std::thread::Builder::new()
        .name("presso-refused".into())
        .spawn(move || {
            for write in rx {
                if let Some(notifier) = notifier.get() {
                    let offset = write.offset.min(i64::MAX as u64) as i64;
                    // ENOENT (the kernel no longer has the inode) needs nothing more.
                    let _ = notifier.inval_inode(INodeNo(write.ino), offset, write.len as i64);
                }
                vfs.note_refused_write(write.len as u64);
            }
        });
    tx
}
