#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use presso_store::{FsDir, SimDir, StorageDir, Store, StoreConfig};

/// A fresh directory under the system temp dir, removed on drop.
pub struct TempDir(PathBuf);

impl TempDir {
    pub fn new(tag: &str) -> Self {
        static N: AtomicU64 = AtomicU64::new(0);
        let path = std::env::temp_dir().join(format!(
            "presso-store-{tag}-{}-{}",
            std::process::id(),
            N.fetch_add(1, Ordering::Relaxed)
        ));
        let _ = std::fs::remove_dir_all(&path);
        std::fs::create_dir_all(&path).unwrap();
        Self(path)
    }

    pub fn path(&self) -> &Path {
        &self.0
    }

    pub fn dir(&self) -> Arc<dyn StorageDir> {
        Arc::new(FsDir::open(&self.0).unwrap())
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// Deterministic payload number `i` of length `len`.
pub fn payload(i: u64, len: usize) -> Vec<u8> {
    let mut x = i.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

pub fn config(segment_size: u64) -> StoreConfig {
    StoreConfig {
        segment_size,
        ..StoreConfig::default()
    }
}

pub fn sim_store(segment_size: u64) -> (SimDir, Store) {
    let sim = SimDir::new();
    let store = Store::create(
        Arc::new(sim.clone()),
        Default::default(),
        config(segment_size),
    )
    .unwrap();
    (sim, store)
}
