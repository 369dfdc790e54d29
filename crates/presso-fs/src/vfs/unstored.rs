//! Data the file layer holds that could not be stored in the pool (a full disk, an I/O error):
//! kept in memory and retried, shown by status, and never dropped by an unmount that claims
//! success.

use serde::{Deserialize, Serialize};

use super::*;

/// Records written to the file layer whose last attempt to be stored failed.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct Unstored {
    /// The files holding them.
    pub files: Vec<UnstoredFile>,
    /// Their bytes in all.
    pub bytes: u64,
    /// Why the last attempt failed.
    pub error: Option<String>,
}

/// One file with records that could not be stored.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct UnstoredFile {
    /// Inode.
    pub ino: u64,
    /// A path of the file, if it still has a name.
    pub path: Option<String>,
    /// Bytes of its records not stored.
    pub bytes: u64,
}

impl Unstored {
    /// Whether everything written is stored.
    pub fn is_empty(&self) -> bool {
        self.files.is_empty()
    }
}

impl Vfs {
    /// What could not be stored so far (each record is retried at the next flush or sync).
    pub fn unstored(&self) -> Unstored {
        let nodes: Vec<_> = self.files.lock().values().cloned().collect();
        let mut out = Unstored::default();
        for node in nodes {
            let (bytes, error) = {
                let st = node.state.lock();
                let bytes: u64 = st
                    .unstored
                    .iter()
                    .filter_map(|i| match st.overlay.get(i) {
                        Some(Slot::Dirty { buf, .. }) => Some(buf.len() as u64),
                        _ => None,
                    })
                    .sum();
                (bytes, st.store_error.clone())
            };
            if bytes == 0 {
                continue;
            }
            out.bytes += bytes;
            out.error = out.error.or(error);
            let path = self.pool.path_of(node.ino);
            out.files.push(UnstoredFile {
                ino: node.ino,
                path,
                bytes,
            });
        }
        out.files.sort_by_key(|f| f.ino);
        out
    }

    /// `Ok` when every record written is stored, else [`FsError::Unstored`] naming how much
    /// is not.
    pub fn all_stored(&self) -> Result<()> {
        let unstored = self.unstored();
        if unstored.is_empty() {
            return Ok(());
        }
        Err(FsError::Unstored {
            bytes: unstored.bytes,
            files: unstored.files.len(),
            reason: unstored.error.unwrap_or_else(|| "unknown".to_string()),
        })
    }

    /// Counts a write refused (`bytes` long), by the file system's request layer once it has
    /// told the kernel to drop what it cached of it.
    pub fn note_refused_write(&self, bytes: u64) {
        self.traffic.refused.fetch_add(1, Ordering::Relaxed);
        self.traffic
            .refused_bytes
            .fetch_add(bytes, Ordering::Relaxed);
    }

    /// Writes refused since the mount (for space, or a record whose location cannot be looked
    /// up), and their bytes: their writers had the error, at the write or at fsync and close,
    /// and nothing of them is stored.
    pub fn refused_writes(&self) -> (u64, u64) {
        (
            self.traffic.refused.load(Ordering::Relaxed),
            self.traffic.refused_bytes.load(Ordering::Relaxed),
        )
    }

    /// Whether writes are refused for lack of space on the disk holding the pool.
    pub fn space_low(&self) -> bool {
        self.low_space.load(Ordering::Relaxed)
    }
}
