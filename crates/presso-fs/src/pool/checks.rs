//! What creating and opening a pool check before they change anything: a new pool never mixes
//! with other files or another pool, and metadata that is missing, empty, damaged or of
//! another pool is refused — never taken as an empty file system.

use std::collections::BTreeMap;
use std::path::Path;

use presso_meta::{MetaError, MetaStore, SegmentUsage};
use presso_store::header::POOL_FILE;
use presso_store::io::parse_segment_file_name;
use presso_store::{Committed, LockWatch, PoolHeader, StorageDir, Store, StoreError, LOCK_FILE};

use super::metacopy::COPY_FILE;
use super::META_FILE;
use crate::error::{FsError, Result};

/// The pool's identity as the metadata records it: the header's uuid in hex.
pub(crate) fn pool_id(header: &PoolHeader) -> String {
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

/// Reads the pool header. One that does not decode in a directory holding a pool's other
/// files (metadata, segments) is damage, and the error says how to recover; in any other
/// directory it is "not a pool".
pub(crate) fn read_header(dir: &dyn StorageDir) -> Result<PoolHeader> {
    match Store::read_header(dir) {
        Err(e @ (StoreError::NotAPool { .. } | StoreError::Corrupt { .. })) => {
            let names = dir.list().unwrap_or_default();
            let pool_files = names
                .iter()
                .any(|n| n.starts_with(META_FILE) || parse_segment_file_name(n).is_some());
            if pool_files && names.iter().any(|n| n == POOL_FILE) {
                Err(FsError::PoolHeaderDamaged(format!(
                    "the pool header of {} is damaged: {e}",
                    dir.describe()
                )))
            } else {
                Err(e.into())
            }
        }
        other => Ok(other?),
    }
}

/// The error for the metadata of the pool at `pool` that cannot be opened.
pub(super) fn unusable_metadata(pool: &Path, error: MetaError) -> FsError {
    let reason = match error {
        // Not damage: another process (a mount) has the pool open.
        MetaError::InUse(_) => return StoreError::InUse { pid: None }.into(),
        // Not damage either: the disk has no room for the metadata's first write.
        MetaError::Full => return FsError::PoolDiskFull(pool.to_path_buf()),
        MetaError::NotInitialized(why) => why,
        other => format!("{}: {other}", pool.join(META_FILE).display()),
    };
    with_copy_hint(pool, FsError::MetadataUnusable(reason))
}

/// Refuses a pool whose lock another process holds before its metadata is opened: the
/// metadata engine holds its file for one process, so opening it first would wait for the busy
/// timeout and then refuse with less to say.
pub(super) fn refuse_if_in_use(pool: &Path) -> Result<()> {
    match LockWatch::open(pool) {
        Ok(watch) if watch.is_held().unwrap_or(false) => {
            Err(StoreError::InUse { pid: None }.into())
        }
        // No lock file yet, or one we cannot open: the store's own lock decides.
        _ => Ok(()),
    }
}

/// Adds to a refusal of the metadata of the pool at `pool` how to rebuild it: `presso recover`,
/// from the pool's own copy if it has one.
pub(super) fn with_copy_hint(pool: &Path, error: FsError) -> FsError {
    match error {
        FsError::MetadataUnusable(reason) if pool.join(COPY_FILE).is_file() => {
            FsError::MetadataUnusable(format!(
                "{reason}. Run `presso recover {}`: it moves {META_FILE} aside and rebuilds it \
                 from the pool's own copy of the metadata, {COPY_FILE} (as of its last clean \
                 unmount, or a few minutes before it stopped), and the records written after \
                 it; files whose names are not in the copy go to /lost+found",
                pool.display()
            ))
        }
        FsError::MetadataUnusable(reason) => FsError::MetadataUnusable(format!(
            "{reason}. Run `presso recover {}`: it moves {META_FILE} aside and rebuilds it from \
             the records in the pool's segments (the pool has no {COPY_FILE}, so every file \
             goes to /lost+found, named by its inode number)",
            pool.display()
        )),
        other => other,
    }
}

/// Refuses metadata that was never initialised or belongs to another pool. Reads only.
pub(crate) fn check_metadata(meta: &MetaStore, dir: &dyn StorageDir, id: &str) -> Result<()> {
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

/// What the metadata committed in the store, for its recovery: the highest segment committed
/// records point into, and the last committed entry of the last segment file (only that
/// segment is scanned; every other one is durable in full).
pub(super) fn committed(
    meta: &MetaStore,
    usage: &BTreeMap<u64, SegmentUsage>,
    dir: &dyn StorageDir,
) -> Result<Committed> {
    let mut committed = Committed {
        highest_segment: usage.keys().next_back().copied().unwrap_or(0),
        ..Committed::default()
    };
    let listed = dir
        .list_segments()
        .map_err(|e| FsError::io(format!("cannot list {}", dir.describe()), e))?;
    if let Some(&last) = listed.last() {
        // Entries of one segment share one envelope length, so the last to end is the one at
        // the highest offset with the longest payload there.
        if let Some(loc) = meta
            .records_in_segment(last)?
            .iter()
            .map(|r| super::location(&r.rec))
            .max_by_key(|loc| loc.offset + u64::from(loc.len))
        {
            committed.last_entries.insert(last, loc);
        }
    }
    Ok(committed)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn metadata_that_cannot_open_on_a_full_disk_is_not_called_damage() {
        let pool = Path::new("/srv/pool");
        let full = unusable_metadata(pool, MetaError::Full);
        assert_eq!(full.errno(), libc::ENOSPC);
        let text = full.to_string();
        assert!(
            text.contains("/srv/pool: the disk holding the pool is full")
                && text.contains("Free space on it"),
            "{text}"
        );
        assert!(!text.contains("recover"), "{text}");
        let damaged = unusable_metadata(pool, MetaError::Corrupt("not a database".into()));
        assert!(damaged.to_string().contains("presso recover"), "{damaged}");
    }
}
