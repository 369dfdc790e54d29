//! Helpers the file layer's integration tests share: a scratch directory removed on drop, and
//! bytes that do not compress.
#![allow(dead_code)]

use std::path::PathBuf;

/// A scratch path under the system's temp dir, removed with everything in it on drop.
pub struct TempDir(pub PathBuf);

impl TempDir {
    /// A fresh path (not created) named after the suite and `tag`, unique to this process and
    /// moment.
    pub fn new(suite: &str, tag: &str) -> TempDir {
        let nanos = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap()
            .as_nanos();
        TempDir(std::env::temp_dir().join(format!(
            "presso-{suite}-{tag}-{}-{nanos}",
            std::process::id()
        )))
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// `len` bytes that do not compress (so every record is a frame of its own), the same for the
/// same `seed`.
pub fn noise(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}
