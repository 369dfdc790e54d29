//! The file layer on simulated parts, for the model and crash tests: a pool over the store's
//! [`SimDir`] and the in-memory metadata engine, with a [`Vfs`] on top and no FUSE. Files are
//! addressed by the tests' own ids; names are `f<n>` in the root directory.

#![allow(dead_code)]

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use presso_fs::maintenance;
use presso_fs::pool::{Pool, PoolOptions};
use presso_fs::vfs::{Vfs, VfsConfig};
use presso_fs::FsError;
use presso_meta::memory::MemoryEngine;
use presso_meta::postgres::test_server::TestServer;
use presso_meta::postgres::{PostgresOptions, PostgresTarget};
use presso_meta::{MetaStore, NewNode, SetAttr, ROOT_INO};
use presso_objects::segments::ObjectDir;
use presso_objects::Objects;
use presso_store::{FsDir, SimDir, StorageDir};

mod configs;
pub use configs::*;

/// A mounted pool on simulated parts, with one open handle per live file.
pub struct Fs {
    pub dir: SimDir,
    pub meta: MemoryEngine,
    /// When set, the metadata lives in this PostgreSQL pool instead of `meta`.
    pub postgres: Option<PostgresTarget>,
    /// When set, the segments live in an object store instead of `dir`.
    pub objects: Option<ObjectsPlace>,
    pub vfs: Option<Arc<Vfs>>,
    /// The file-layer settings of every [`Fs::mount`].
    vfs_config: VfsConfig,
    /// Test id → inode.
    inos: HashMap<u64, u64>,
    /// Test id → open handle.
    handles: HashMap<u64, u64>,
}

fn name(n: u8) -> Vec<u8> {
    format!("f{n}").into_bytes()
}

fn fail(what: &str, e: FsError) -> String {
    format!("{what} failed: {e} (errno {})", e.errno())
}

/// Options for a small, quick pool: two compression workers, small segments so that garbage
/// collection has whole segments to work on.
pub fn pool_options() -> PoolOptions {
    PoolOptions {
        txg_interval: Duration::from_millis(50),
        workers: 2,
        segment_size: 4 << 20,
        ..PoolOptions::default()
    }
}

/// File-layer settings for tests: automatic collection off (the tests collect explicitly).
pub fn vfs_config() -> VfsConfig {
    VfsConfig {
        reclaim: None,
        cache_bytes: 8 << 20,
        ..VfsConfig::default()
    }
}

/// A new pool with the default properties on simulated parts, not opened.
pub fn new_pool() -> (SimDir, MemoryEngine) {
    let (dir, meta) = (SimDir::new(), MemoryEngine::new());
    Pool::create_with(
        Arc::new(dir.clone()),
        &MetaStore::new(Box::new(meta.handle())),
        &[],
    )
    .expect("create");
    (dir, meta)
}

/// A file layer with `config` on a fresh pool on simulated parts ([`new_pool`], opened with
/// [`pool_options`]): the layer, its pool and the metadata engine (to look at or damage it).
pub fn mounted_with(config: VfsConfig) -> (Arc<Vfs>, Arc<Pool>, MemoryEngine) {
    let (dir, meta) = new_pool();
    let (pool, _) = Pool::open_with(
        Arc::new(dir),
        MetaStore::new(Box::new(meta.handle())),
        pool_options(),
    )
    .expect("open");
    (Vfs::new(pool.clone(), config), pool, meta)
}

/// Segments in the test process's S3 server, staged in a local directory of their own.
pub struct ObjectsPlace {
    local: std::path::PathBuf,
    objects: Arc<Objects>,
}

impl ObjectsPlace {
    fn new() -> ObjectsPlace {
        use std::sync::atomic::{AtomicU64, Ordering};
        static N: AtomicU64 = AtomicU64::new(0);
        let local = std::env::temp_dir().join(format!(
            "presso-fs-objects-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&local).expect("staging directory");
        let server = presso_objects::test_server::TestServer::shared();
        let url = presso_objects::test_server::TestServer::fresh_url("pool");
        let objects = Objects::connect(&url, &server.options()).expect("object store client");
        ObjectsPlace {
            local,
            objects: Arc::new(objects),
        }
    }

    fn dir(&self) -> ObjectDir {
        ObjectDir::new(
            FsDir::open(&self.local).expect("staging directory"),
            self.objects.clone(),
            16 << 20,
        )
    }
}

impl Drop for ObjectsPlace {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.local);
    }
}

impl Fs {
    /// A new pool with `config`'s properties, mounted.
    pub fn new(config: &Config) -> Fs {
        Fs::new_with(config, MemoryEngine::new())
    }

    /// Like [`Fs::new`], with the metadata in PostgreSQL (`postgres`) and the segments in the
    /// test process's S3 server (`objects`), each optional.
    pub fn new_remote(config: &Config, postgres: bool, objects: bool) -> Fs {
        let target =
            postgres.then(|| TestServer::shared().target(&TestServer::fresh_schema("model")));
        Fs::new_on(
            config,
            MemoryEngine::new(),
            target,
            objects.then(ObjectsPlace::new),
            vfs_config(),
        )
    }

    /// Like [`Fs::new`], mounted (now and at every [`Fs::mount`]) with `vfs` as the file-layer
    /// settings.
    pub fn new_with_vfs(config: &Config, vfs: VfsConfig) -> Fs {
        Fs::new_on(config, MemoryEngine::new(), None, None, vfs)
    }

    /// Like [`Fs::new`], over a given (for crash tests, simulated) metadata engine.
    pub fn new_with(config: &Config, meta: MemoryEngine) -> Fs {
        Fs::new_on(config, meta, None, None, vfs_config())
    }

    fn new_on(
        config: &Config,
        meta: MemoryEngine,
        postgres: Option<PostgresTarget>,
        objects: Option<ObjectsPlace>,
        vfs: VfsConfig,
    ) -> Fs {
        let dir = SimDir::new();
        let props = [
            ("compression".to_string(), config.compression.to_string()),
            ("offload".to_string(), config.offload.to_string()),
            ("recordsize".to_string(), config.recordsize.to_string()),
        ];
        let store = match &postgres {
            Some(t) => MetaStore::create_postgres(t, &PostgresOptions::default())
                .expect("create the postgres metadata"),
            None => MetaStore::new(Box::new(meta.handle())),
        };
        let storage: Arc<dyn StorageDir> = match &objects {
            Some(o) => Arc::new(o.dir()),
            None => Arc::new(dir.clone()),
        };
        Pool::create_with(storage, &store, &props).expect("create the pool");
        drop(store);
        let mut fs = Fs {
            dir,
            meta,
            postgres,
            objects,
            vfs: None,
            vfs_config: vfs,
            inos: HashMap::new(),
            handles: HashMap::new(),
        };
        fs.mount().expect("mount the new pool");
        fs
    }

    /// Opens the pool (after a remount or a crash).
    pub fn mount(&mut self) -> Result<(), String> {
        self.mount_with(self.vfs_config.clone())
    }

    /// [`Fs::mount`] with other file-layer settings.
    pub fn mount_with(&mut self, config: VfsConfig) -> Result<(), String> {
        let meta = match &self.postgres {
            Some(t) => MetaStore::open_postgres(t, &PostgresOptions::default())
                .map_err(|e| format!("open the postgres metadata: {e}"))?,
            None => MetaStore::new(Box::new(self.meta.handle())),
        };
        let storage: Arc<dyn StorageDir> = match &self.objects {
            Some(o) => Arc::new(o.dir()),
            None => Arc::new(self.dir.clone()),
        };
        let (pool, _) =
            Pool::open_with(storage, meta, pool_options()).map_err(|e| fail("open", e))?;
        self.vfs = Some(Vfs::new(pool, config));
        Ok(())
    }

    pub fn vfs(&self) -> &Arc<Vfs> {
        self.vfs.as_ref().expect("mounted")
    }

    fn ino(&self, id: u64) -> u64 {
        self.inos[&id]
    }

    /// Creates `f<name>` for test id `id` and opens it.
    pub fn create(&mut self, name_n: u8, id: u64) -> Result<(), String> {
        let attr = self
            .vfs()
            .make_node(ROOT_INO, &name(name_n), &NewNode::file(0o644, 0, 0))
            .map_err(|e| fail("create", e))?;
        // As the FUSE CREATE does: the new file is opened with the attributes just made.
        let fh = self
            .vfs()
            .open_created(ROOT_INO, &attr)
            .map_err(|e| fail("open", e))?;
        self.inos.insert(id, attr.ino);
        self.handles.insert(id, fh);
        Ok(())
    }

    pub fn expect_create_exists(&mut self, name_n: u8) -> Result<(), String> {
        match self
            .vfs()
            .make_node(ROOT_INO, &name(name_n), &NewNode::file(0o644, 0, 0))
        {
            Err(e) if e.errno() == libc::EEXIST => Ok(()),
            other => Err(format!(
                "create of an existing name: {other:?}, expected EEXIST"
            )),
        }
    }

    pub fn write(&mut self, id: u64, offset: u64, data: &[u8]) -> Result<(), String> {
        let n = self
            .vfs()
            .write(self.ino(id), offset, data)
            .map_err(|e| fail("write", e))?;
        if n != data.len() {
            return Err(format!("write wrote {n} of {} bytes", data.len()));
        }
        Ok(())
    }

    /// Reads like the kernel does: in pieces of at most 1 MiB until a short read.
    pub fn read(&mut self, id: u64, offset: u64, len: u64) -> Result<Vec<u8>, String> {
        let mut out = Vec::new();
        while (out.len() as u64) < len {
            let want = (len - out.len() as u64).min(1 << 20) as u32;
            let got = self
                .vfs()
                .read(self.ino(id), offset + out.len() as u64, want)
                .map_err(|e| fail("read", e))?;
            out.extend_from_slice(&got);
            if got.len() < want as usize {
                break;
            }
        }
        Ok(out)
    }

    pub fn size(&mut self, id: u64) -> Result<u64, String> {
        Ok(self
            .vfs()
            .getattr(self.ino(id))
            .map_err(|e| fail("getattr", e))?
            .size)
    }

    pub fn truncate(&mut self, id: u64, size: u64) -> Result<(), String> {
        let set = SetAttr {
            size: Some(size),
            ..SetAttr::default()
        };
        self.vfs()
            .setattr(self.ino(id), set)
            .map_err(|e| fail("truncate", e))?;
        Ok(())
    }

    /// close(), then open(O_TRUNC) as the kernel sends it: a truncate to 0, then an open.
    pub fn open_trunc(&mut self, id: u64) -> Result<(), String> {
        self.close_file(id)?;
        self.truncate(id, 0)?;
        let fh = self.vfs().open(self.ino(id)).map_err(|e| fail("open", e))?;
        self.handles.insert(id, fh);
        Ok(())
    }

    pub fn fallocate(&mut self, id: u64, offset: u64, len: u64, mode: i32) -> Result<(), String> {
        self.vfs()
            .fallocate(self.ino(id), offset, len, mode)
            .map_err(|e| fail("fallocate", e))
    }

    pub fn copy_range(
        &mut self,
        from: u64,
        to: u64,
        src: u64,
        dst: u64,
        len: u64,
    ) -> Result<u64, String> {
        self.vfs()
            .copy_range(self.ino(from), src, self.ino(to), dst, len)
            .map_err(|e| fail("copy_file_range", e))
    }

    pub fn fsync(&mut self, id: u64) -> Result<(), String> {
        self.vfs().fsync(self.ino(id)).map_err(|e| fail("fsync", e))
    }

    pub fn sync_all(&mut self) -> Result<(), String> {
        self.vfs().sync_all().map_err(|e| fail("sync", e))
    }

    /// flush + release of the file's handle.
    pub fn close_file(&mut self, id: u64) -> Result<(), String> {
        let ino = self.ino(id);
        let fh = self.handles.remove(&id).expect("open");
        self.vfs().flush(ino).map_err(|e| fail("flush", e))?;
        self.vfs().release(ino, fh).map_err(|e| fail("release", e))
    }

    pub fn reopen(&mut self, id: u64) -> Result<(), String> {
        self.close_file(id)?;
        let fh = self.vfs().open(self.ino(id)).map_err(|e| fail("open", e))?;
        self.handles.insert(id, fh);
        Ok(())
    }

    pub fn rename(&mut self, from: u8, to: u8) -> Result<(), String> {
        self.vfs()
            .rename(ROOT_INO, &name(from), ROOT_INO, &name(to))
            .map_err(|e| fail("rename", e))
    }

    /// `renameat2(RENAME_EXCHANGE)` of `f<a>` and `f<b>`.
    pub fn exchange(&mut self, a: u8, b: u8) -> Result<(), String> {
        self.vfs()
            .rename_exchange(ROOT_INO, &name(a), ROOT_INO, &name(b))
            .map_err(|e| fail("rename(RENAME_EXCHANGE)", e))
    }

    pub fn expect_rename_missing(&mut self, from: u8, to: u8) -> Result<(), String> {
        match self
            .vfs()
            .rename(ROOT_INO, &name(from), ROOT_INO, &name(to))
        {
            Err(e) if e.errno() == libc::ENOENT => Ok(()),
            other => Err(format!(
                "rename of a missing name: {other:?}, expected ENOENT"
            )),
        }
    }

    pub fn link(&mut self, id: u64, to: u8) -> Result<(), String> {
        self.vfs()
            .link(self.ino(id), ROOT_INO, &name(to))
            .map_err(|e| fail("link", e))?;
        Ok(())
    }

    pub fn expect_link_exists(&mut self, id: u64, to: u8) -> Result<(), String> {
        match self.vfs().link(self.ino(id), ROOT_INO, &name(to)) {
            Err(e) if e.errno() == libc::EEXIST => Ok(()),
            other => Err(format!(
                "link over an existing name: {other:?}, expected EEXIST"
            )),
        }
    }

    pub fn unlink(&mut self, name_n: u8) -> Result<(), String> {
        self.vfs()
            .unlink(ROOT_INO, &name(name_n))
            .map_err(|e| fail("unlink", e))
    }

    pub fn expect_unlink_missing(&mut self, name_n: u8) -> Result<(), String> {
        match self.vfs().unlink(ROOT_INO, &name(name_n)) {
            Err(e) if e.errno() == libc::ENOENT => Ok(()),
            other => Err(format!(
                "unlink of a missing name: {other:?}, expected ENOENT"
            )),
        }
    }

    pub fn gc(&mut self) -> Result<(), String> {
        maintenance::gc(self.vfs().pool(), 1.0, &mut |_| {})
            .map(|_| ())
            .map_err(|e| fail("gc", e))
    }

    pub fn scrub(&mut self) -> Result<(), String> {
        let report =
            maintenance::scrub(self.vfs().pool(), &mut |_| {}).map_err(|e| fail("scrub", e))?;
        if report.clean() {
            Ok(())
        } else {
            Err(format!("scrub is not clean: {report:?}"))
        }
    }

    /// Clean unmount and mount again; handles of files with names are opened again.
    pub fn remount(&mut self) {
        self.close();
        self.mount().expect("remount");
        self.reopen_named();
    }

    /// Reopens every file that still has a name (after a remount or a crash); files without one
    /// are forgotten.
    pub fn reopen_named(&mut self) {
        let ids: Vec<u64> = self.inos.keys().copied().collect();
        self.handles.clear();
        for id in ids {
            match self.vfs().open(self.inos[&id]) {
                Ok(fh) => {
                    self.handles.insert(id, fh);
                }
                Err(_) => {
                    self.inos.remove(&id);
                }
            }
        }
    }

    /// What a killed daemon does: stops at once, flushing and committing nothing.
    pub fn halt(&mut self) {
        if let Some(vfs) = self.vfs.take() {
            vfs.halt();
        }
        self.handles.clear();
    }

    /// The inode of test id `id`, while it has one.
    pub fn ino_of(&self, id: u64) -> Option<u64> {
        self.inos.get(&id).copied()
    }

    /// The test id of inode `ino`.
    pub fn id_of(&self, ino: u64) -> Option<u64> {
        self.inos.iter().find(|(_, &i)| i == ino).map(|(&id, _)| id)
    }

    /// Clean unmount: releases every handle and shuts the file layer down.
    pub fn close(&mut self) {
        if let Some(vfs) = self.vfs.take() {
            for (id, fh) in self.handles.drain() {
                let ino = self.inos[&id];
                let _ = vfs.flush(ino);
                let _ = vfs.release(ino, fh);
            }
            vfs.shutdown().expect("clean unmount");
        }
    }

    /// Names in the root directory, as numbers.
    pub fn list_names(&mut self) -> Result<Vec<u8>, String> {
        let entries = self
            .vfs()
            .readdir(ROOT_INO, None, 1000)
            .map_err(|e| fail("readdir", e))?;
        let mut names: Vec<u8> = entries
            .iter()
            .map(|e| {
                std::str::from_utf8(&e.name[1..])
                    .ok()
                    .and_then(|n| n.parse().ok())
                    .expect("names are f<n>")
            })
            .collect();
        names.sort_unstable();
        Ok(names)
    }

    /// `f<name>` is the file of test id `id`.
    pub fn check_name(&mut self, name_n: u8, id: u64) -> Result<(), String> {
        let attr = self
            .vfs()
            .lookup(ROOT_INO, &name(name_n))
            .map_err(|e| fail("lookup", e))?;
        if attr.ino != self.ino(id) {
            return Err(format!(
                "f{name_n} is inode {}, expected {}",
                attr.ino,
                self.ino(id)
            ));
        }
        Ok(())
    }
}

impl Drop for Fs {
    fn drop(&mut self) {
        if let Some(vfs) = self.vfs.take() {
            let _ = vfs.shutdown();
        }
    }
}
