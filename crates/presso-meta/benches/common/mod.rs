//! What the benches share.

use std::path::PathBuf;

/// A database file under `PRESSO_BENCH_DIR` (default: the system temporary directory), removed
/// with its write-ahead log and index when dropped.
pub struct TempDb(pub PathBuf);

impl TempDb {
    /// A file named after `tag` and this process.
    pub fn new(tag: &str) -> Self {
        let dir = std::env::var_os("PRESSO_BENCH_DIR")
            .map(PathBuf::from)
            .unwrap_or_else(std::env::temp_dir);
        TempDb(dir.join(format!("presso-meta-bench-{tag}-{}.db", std::process::id())))
    }
}

impl Drop for TempDb {
    fn drop(&mut self) {
        for suffix in ["", "-wal", "-shm"] {
            let mut p = self.0.as_os_str().to_owned();
            p.push(suffix);
            let _ = std::fs::remove_file(p);
        }
    }
}
