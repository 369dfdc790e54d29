//! Rebuilding a pool's metadata when `meta.db` is lost or damaged (`presso recover POOL`).
//!
//! Every record's segment entry names its inode, record index, transaction group and record size
//! (entry format 2, docs/design.md). Recovery starts from the pool's own metadata copy
//! (`meta.db.copy`, or empty metadata if there is no usable copy), then puts back, for every
//! record, the newest entry the segments hold if it is newer than the copy (its txg above the
//! copy's last group); files the copy does not know go to `/lost+found/<inode>`. The damaged
//! `meta.db` is renamed aside with a timestamp, never deleted; the copy is never changed.
//!
//! This module is the one door: the command only parses arguments and prints the report.

mod rebuild;

use std::path::{Path, PathBuf};
use std::sync::Arc;

use presso_meta::{MetaStore, POOL_INO};
use presso_store::segment::{scan_entries, EntryFormat, SEGMENT_HEADER_LEN};
use presso_store::{Committed, FsDir, Location, StorageDir, Store, StoreConfig, StoreError};
use serde::Serialize;

use crate::error::{FsError, Result};
use crate::maintenance::Progress;
use crate::pool::{checks, COPY_FILE, META_FILE};

/// Where the rebuilt metadata is written before it replaces `meta.db`.
const WORK_FILE: &str = "meta.db.recovering";

/// Settings of a recovery.
#[derive(Debug, Clone, Copy, Default)]
pub struct RecoverOptions {
    /// Rebuild even when `meta.db` opens and passes every check (it is moved aside as well).
    pub force: bool,
}

/// A file put into `/lost+found`: its inode was unknown to the metadata recovery started from.
#[derive(Debug, Clone, Serialize)]
pub struct LostFile {
    /// Its inode number, which is also its name in `/lost+found`.
    pub ino: u64,
    /// Its size: up to the end of its last record found.
    pub size: u64,
}

/// What a recovery did.
#[derive(Debug, Clone, Default, Serialize)]
pub struct RecoverReport {
    /// The pool directory.
    pub pool: String,
    /// What the metadata was rebuilt from: `meta.db.copy` or `empty metadata`.
    pub started_from: String,
    /// Why the copy was not used, if it was not.
    pub copy_unusable: Option<String>,
    /// The last transaction group the starting metadata holds (entries above it were applied).
    pub copy_txg: u64,
    /// Files moved aside (the damaged metadata and its log), by their new names.
    pub moved_aside: Vec<String>,
    /// Segments scanned.
    pub segments: usize,
    /// Entry bytes scanned.
    pub bytes_scanned: u64,
    /// Valid entries found (tagged or not).
    pub entries: u64,
    /// Damaged stretches the scan skipped.
    pub damaged_stretches: usize,
    /// Records put back from entries newer than the starting metadata.
    pub records_applied: u64,
    /// Logical bytes of those records.
    pub bytes_applied: u64,
    /// Records the starting metadata names at a place garbage collection has since emptied,
    /// found again where it copied them.
    pub records_relocated: u64,
    /// Files the starting metadata knows whose records were brought up to date.
    pub files_restored: usize,
    /// Files put into `/lost+found`.
    pub lost_found: Vec<LostFile>,
    /// Records that still name a frame no segment holds (they read as I/O errors; scrub names
    /// them).
    pub records_missing: u64,
    /// Entries of inodes that exist but are not regular files (skipped).
    pub entries_skipped: u64,
    /// The last transaction group of the rebuilt metadata.
    pub last_txg: u64,
}

/// Rebuilds the metadata of the pool at `path`; see the module docs. Refuses a pool in use (a
/// mount or another command holds its lock) before changing anything, and, unless
/// `options.force`, a pool whose `meta.db` is intact. `progress` gets scanned bytes.
pub fn recover(
    path: &Path,
    options: RecoverOptions,
    progress: &mut dyn FnMut(Progress),
) -> Result<RecoverReport> {
    let fs_dir = FsDir::open(path)
        .map_err(|e| FsError::io(format!("cannot open pool {}", path.display()), e))?;
    let header = checks::read_header(&fs_dir)?;
    let id = checks::pool_id(&header);
    let dir: Arc<dyn StorageDir> = Arc::new(fs_dir);
    let committed = committed_from_segments(dir.as_ref())?;
    // Taking the lock first: nothing is read for real, or changed, while a mount holds it.
    let store =
        Store::open(dir.clone(), StoreConfig::default(), &committed).map_err(|e| match e {
            StoreError::InUse { pid } => FsError::Refused(format!(
                "{} is in use{}: unmount it first (`presso unmount MOUNTPOINT`); recovery changed \
             nothing",
                path.display(),
                pid.map(|p| format!(" by process {p}")).unwrap_or_default()
            )),
            other => other.into(),
        })?;
    if !options.force {
        if let Ok(meta) = MetaStore::open_sqlite(path.join(META_FILE)) {
            let intact = checks::check_metadata(&meta, dir.as_ref(), &id).is_ok();
            let _ = meta.close();
            if intact {
                return Err(FsError::Refused(format!(
                    "the metadata of {} is intact: nothing to recover (`--force` rebuilds it \
                     anyway from {COPY_FILE} and the segments, which forgets the renames, \
                     removals and truncations made since the copy)",
                    path.display()
                )));
            }
        }
    }
    let mut report = RecoverReport {
        pool: path.display().to_string(),
        ..RecoverReport::default()
    };
    let work = path.join(WORK_FILE);
    remove_with_log(&work)?;
    let meta = start_metadata(path, &work, dir.as_ref(), &id, &header, &mut report)?;
    report.copy_txg = meta.last_txg()?;
    let found = rebuild::scan(&store, &mut report, progress)?;
    rebuild::apply(&store, &meta, &found, &mut report)?;
    // Folds the log into the file: the file alone is the whole metadata.
    meta.close()?;
    drop(meta);
    report.moved_aside = move_aside(path)?;
    let target = path.join(META_FILE);
    std::fs::rename(&work, &target).map_err(|e| {
        FsError::io(
            format!("cannot rename {} to {}", work.display(), target.display()),
            e,
        )
    })?;
    sync_dir(path)?;
    store.close()?;
    Ok(report)
}

/// The last valid entry of the last segment file, as if the metadata had committed it: the
/// store's open then cuts only a torn tail after it and keeps any damage before it. Reads only.
fn committed_from_segments(dir: &dyn StorageDir) -> Result<Committed> {
    let listed = dir
        .list_segments()
        .map_err(|e| FsError::io(format!("cannot list {}", dir.describe()), e))?;
    let mut committed = Committed {
        highest_segment: listed.last().copied().unwrap_or(0),
        ..Committed::default()
    };
    if let Some(&last) = listed.last() {
        let name = presso_store::segment::segment_file_name(last);
        let storage = dir
            .open(&name)
            .map_err(|e| FsError::io(format!("cannot open {name}"), e))?;
        // The entries' format is the one the segment's header names; with a damaged header,
        // this build's (the store's open reports the damage either way).
        let format = storage
            .read_vec_at(SEGMENT_HEADER_LEN as usize, 0)
            .ok()
            .and_then(|h| presso_store::segment::SegmentHeader::decode(&h, &name).ok())
            .map_or(EntryFormat::V2, |h| {
                EntryFormat::of_segment_version(h.version)
            });
        let scan = scan_entries(storage.as_ref(), SEGMENT_HEADER_LEN, u64::MAX, format)
            .map_err(|e| FsError::io(format!("cannot read {name}"), e))?;
        if let Some(e) = scan.entries.last() {
            committed.last_entries.insert(
                last,
                Location {
                    segment: last,
                    offset: e.offset,
                    len: e.len,
                },
            );
        }
    }
    Ok(committed)
}

/// Opens the metadata recovery starts from, in `work`: a copy of `meta.db.copy` if that opens
/// and belongs to this pool, else new empty metadata with the pool's creation properties.
fn start_metadata(
    path: &Path,
    work: &Path,
    dir: &dyn StorageDir,
    id: &str,
    header: &presso_store::PoolHeader,
    report: &mut RecoverReport,
) -> Result<MetaStore> {
    let copy = path.join(COPY_FILE);
    if copy.is_file() {
        match open_copy(&copy, work, dir, id) {
            Ok(meta) => {
                report.started_from = COPY_FILE.to_string();
                return Ok(meta);
            }
            Err(e) => {
                remove_with_log(work)?;
                report.copy_unusable = Some(e.to_string());
            }
        }
    } else {
        report.copy_unusable = Some(format!("there is no {COPY_FILE}"));
    }
    report.started_from = "empty metadata".to_string();
    let meta = MetaStore::create_sqlite(work)?;
    meta.init()?;
    meta.bind_pool(id)?;
    for (name, value) in &header.properties {
        meta.set_prop(POOL_INO, name, value)?;
    }
    Ok(meta)
}

fn open_copy(copy: &Path, work: &Path, dir: &dyn StorageDir, id: &str) -> Result<MetaStore> {
    std::fs::copy(copy, work).map_err(|e| {
        FsError::io(
            format!("cannot copy {} to {}", copy.display(), work.display()),
            e,
        )
    })?;
    std::fs::File::open(work)
        .and_then(|f| f.sync_all())
        .map_err(|e| FsError::io(format!("cannot sync {}", work.display()), e))?;
    let meta = MetaStore::open_sqlite(work)?;
    checks::check_metadata(&meta, dir, id)?;
    Ok(meta)
}

/// Renames `meta.db` and its log files (SQLite's and the intent log), if present, to
/// `<name>.damaged-<UTC time>`.
fn move_aside(path: &Path) -> Result<Vec<String>> {
    let stamp = utc_stamp();
    let mut moved = Vec::new();
    for suffix in ["", "-wal", "-shm", "-intent"] {
        let name = format!("{META_FILE}{suffix}");
        let from = path.join(&name);
        if std::fs::symlink_metadata(&from).is_err() {
            continue;
        }
        let mut to_name = format!("{META_FILE}.damaged-{stamp}{suffix}");
        let mut n = 1;
        while path.join(&to_name).exists() {
            n += 1;
            to_name = format!("{META_FILE}.damaged-{stamp}.{n}{suffix}");
        }
        std::fs::rename(&from, path.join(&to_name)).map_err(|e| {
            FsError::io(format!("cannot rename {} to {to_name}", from.display()), e)
        })?;
        moved.push(to_name);
    }
    Ok(moved)
}

/// Removes `file` and its SQLite log files, if present (a leftover of an interrupted recovery).
fn remove_with_log(file: &Path) -> Result<()> {
    for suffix in ["", "-wal", "-shm", "-journal", "-intent"] {
        let mut name = file.as_os_str().to_owned();
        name.push(suffix);
        let p = PathBuf::from(name);
        match std::fs::remove_file(&p) {
            Err(e) if e.kind() != std::io::ErrorKind::NotFound => {
                return Err(FsError::io(format!("cannot remove {}", p.display()), e))
            }
            _ => {}
        }
    }
    Ok(())
}

fn sync_dir(path: &Path) -> Result<()> {
    std::fs::File::open(path)
        .and_then(|f| f.sync_all())
        .map_err(|e| FsError::io(format!("cannot sync {}", path.display()), e))
}

/// The time now as `YYYYMMDDTHHMMSSZ` (UTC), for names of files moved aside.
fn utc_stamp() -> String {
    let secs = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let (days, rem) = (secs / 86_400, secs % 86_400);
    // Civil date from days since 1970-01-01 (Howard Hinnant's algorithm).
    let z = days as i64 + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = doy - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = yoe + era * 400 + i64::from(month <= 2);
    format!(
        "{year:04}{month:02}{day:02}T{:02}{:02}{:02}Z",
        rem / 3600,
        rem % 3600 / 60,
        rem % 60
    )
}
