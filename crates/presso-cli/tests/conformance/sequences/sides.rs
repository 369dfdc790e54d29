//! The two file systems a sequence runs on: the reference ext4 and a Presso mount, either of a
//! pool of its own ([`LocalPool`]) or of a shared pool on real servers ([`SharedPoolSides`]).

use std::path::PathBuf;

use crate::common::shared::{Client, SharedPool};
use crate::common::LoopMount;
use crate::harness::{reference_ext4, Env};

/// Where a sequence runs.
pub trait Sides {
    /// What the Presso side is, for messages.
    fn name(&self) -> &'static str;
    /// The directories sequences go under: ext4's, then Presso's.
    fn bases(&self) -> (PathBuf, PathBuf);
    /// Unmounts Presso and mounts it again.
    fn remount_presso(&mut self);
    /// Fails if the Presso daemon logged a panic.
    fn assert_presso_log_clean(&self);
}

/// A pool of its own, as the other conformance topics use.
pub struct LocalPool(Env);

impl LocalPool {
    /// Both mounted; ext4 with room for what a long run leaves (ext4 refusing a file for lack
    /// of room would be a difference).
    pub fn new() -> LocalPool {
        LocalPool(Env::with_megabytes("sequences", 512))
    }
}

impl Sides for LocalPool {
    fn name(&self) -> &'static str {
        "a pool of its own"
    }

    fn bases(&self) -> (PathBuf, PathBuf) {
        let [(_, ext4), (_, presso)] = self.0.sides();
        (ext4, presso)
    }

    fn remount_presso(&mut self) {
        self.0.remount_presso();
    }

    fn assert_presso_log_clean(&self) {
        self.0.assert_presso_log_clean();
    }
}

/// A shared pool (metadata in PostgreSQL, segments in SeaweedFS) and one client of it; a
/// remount unmounts the client and mounts a new one at the same mount point.
pub struct SharedPoolSides {
    // Dropped in this order: the client, the pool's scratch directory, the ext4 image.
    client: Client,
    pool: SharedPool,
    ext4: LoopMount,
    _scratch: tempfile::TempDir,
}

impl SharedPoolSides {
    /// A fresh shared pool on the servers the tests share, mounted, and a fresh ext4.
    pub fn new() -> SharedPoolSides {
        crate::common::require_root("it loop-mounts ext4");
        let scratch = crate::common::scratch_dir("conformance-sequences-shared");
        let ext4 = reference_ext4(scratch.path(), 512);
        let pool = SharedPool::create("nseq", &[]);
        let client = pool.mount("client");
        SharedPoolSides {
            client,
            pool,
            ext4,
            _scratch: scratch,
        }
    }
}

impl Sides for SharedPoolSides {
    fn name(&self) -> &'static str {
        "a shared pool"
    }

    fn bases(&self) -> (PathBuf, PathBuf) {
        (self.ext4.dir.clone(), self.client.mnt.clone())
    }

    fn remount_presso(&mut self) {
        self.client.unmount();
        let unmounted = std::mem::replace(&mut self.client, self.pool.mount("client"));
        // Its drop would unmount whatever is mounted at its mount point: the new client.
        std::mem::forget(unmounted);
    }

    fn assert_presso_log_clean(&self) {
        // A shared client logs beside its cache; a panic there fails as it does for a pool.
        for entry in walk(&self.pool.dir.path().join("cache")) {
            if entry.file_name().is_some_and(|n| n == "presso.log") {
                let log = std::fs::read_to_string(&entry).unwrap_or_default();
                assert!(!log.contains("panicked"), "the daemon panicked:\n{log}");
            }
        }
    }
}

/// Every file under `dir`.
fn walk(dir: &std::path::Path) -> Vec<PathBuf> {
    let mut files = Vec::new();
    let mut pending = vec![dir.to_path_buf()];
    while let Some(dir) = pending.pop() {
        for entry in std::fs::read_dir(&dir).into_iter().flatten().flatten() {
            let path = entry.path();
            if path.is_dir() {
                pending.push(path);
            } else {
                files.push(path);
            }
        }
    }
    files
}
