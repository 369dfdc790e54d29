//! What creating and opening a pool check before they change anything: a new pool never mixes
//! with other files or another pool, and metadata that is missing, empty, damaged or of
//! another pool is refused — never taken as an empty file system.

use std::path::Path;

use presso_meta::{MetaError, MetaStore};
use presso_store::header::POOL_FILE;
use presso_store::io::parse_segment_file_name;
use presso_store::{PoolHeader, StorageDir, LOCK_FILE};

use super::META_FILE;
use crate::error::{FsError, Result};

/// The pool's identity as the metadata records it: the header's uuid in hex.
pub(super) fn pool_id(header: &PoolHeader) -> String {
    header.uuid.iter().map(|b| format!("{b:02x}")).collect()
}

/// Refuses to create a pool in `path` if it holds anything, or, with `beside_files`, anything
/// of a pool (a header, metadata or segments).
pub(super) fn check_creatable(path: &Path, beside_files: bool) -> Result<()> {
    let entries = match std::fs::read_dir(path) {
        Ok(entries) => entries,
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => return Ok(()),
        Err(e) => return Err(FsError::io(format!("cannot list {}", path.display()), e)),
    };
    let mut names = Vec::new();
    for entry in entries {
        let entry = entry.map_err(|e| FsError::io(format!("cannot list {}", path.display()), e))?;
        names.push(entry.file_name().to_string_lossy().into_owned());
    }
    let of_a_pool = |n: &String| {
        n == POOL_FILE
            || n.starts_with(META_FILE)
            || n == LOCK_FILE
            || parse_segment_file_name(n).is_some()
    };
    if let Some(name) = names.iter().find(|n| of_a_pool(n)) {
        return Err(FsError::Refused(format!(
            "{} already holds a pool (or part of one: {name}); a new pool needs a directory \
             of its own",
            path.display()
        )));
    }
    if !names.is_empty() && !beside_files {
        names.sort();
        let shown: Vec<&str> = names.iter().take(3).map(String::as_str).collect();
        return Err(FsError::NotEmpty(format!(
            "{} is not empty ({} entries: {}{}); a pool needs a directory of its own",
            path.display(),
            names.len(),
            shown.join(", "),
            if names.len() > 3 { ", ..." } else { "" }
        )));
    }
    Ok(())
}

/// The error for the metadata of the pool at `pool` that cannot be opened.
pub(super) fn unusable_metadata(pool: &Path, error: MetaError) -> FsError {
    let reason = match error {
        MetaError::NotInitialized(why) => why,
        other => format!("{}: {other}", pool.join(META_FILE).display()),
    };
    FsError::MetadataUnusable(reason)
}

/// Refuses metadata that was never initialised or belongs to another pool. Reads only.
pub(super) fn check_metadata(meta: &MetaStore, dir: &dyn StorageDir, id: &str) -> Result<()> {
    if !meta.is_initialized()? {
        return Err(FsError::MetadataUnusable(format!(
            "the metadata of {} is empty (it has no root directory)",
            dir.describe()
        )));
    }
    match meta.pool_id()? {
        Some(found) if found != id => Err(FsError::MetadataUnusable(format!(
            "the metadata in {} belongs to another pool (pool id {found}; this pool's id is {id})",
            dir.describe()
        ))),
        // Pools created before the metadata named its pool are bound once opened.
        _ => Ok(()),
    }
}
