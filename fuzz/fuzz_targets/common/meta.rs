//! What the metadata fuzz targets share: a work directory, and the reads and writes a mount
//! makes of a metadata store, bounded so that damaged metadata cannot make them loop.
#![allow(dead_code)]

use std::collections::{HashSet, VecDeque};
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

use presso_meta::{
    FileKind, ListAfter, MetaError, MetaStore, NewNode, RecordRef, Timespec, TxgOp, ROOT_INO,
};

/// A directory of this process for the database files. Those of processes that are gone (a
/// fuzzing run ends by exiting, with no clean-up) are removed first.
pub fn work_dir(tag: &str) -> &'static Path {
    static DIR: OnceLock<PathBuf> = OnceLock::new();
    DIR.get_or_init(|| {
        let tmp = std::env::temp_dir();
        for entry in std::fs::read_dir(&tmp).into_iter().flatten().flatten() {
            let name = entry.file_name();
            let pid = name
                .to_str()
                .and_then(|n| n.strip_prefix(&format!("presso-fuzz-{tag}-")));
            if pid.is_some_and(|pid| !Path::new("/proc").join(pid).exists()) {
                let _ = std::fs::remove_dir_all(entry.path());
            }
        }
        let dir = tmp.join(format!("presso-fuzz-{tag}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("work directory");
        dir
    })
}

pub fn remove_db(path: &Path) {
    for suffix in ["", "-wal", "-shm", "-journal", "-intent"] {
        let mut p = path.as_os_str().to_owned();
        p.push(suffix);
        let _ = std::fs::remove_file(p);
    }
}

pub fn record(segment: u64, offset: u64, stored: u32, logical: u32, inline: bool) -> RecordRef {
    RecordRef {
        segment,
        offset,
        stored_len: stored,
        logical_len: logical,
        codec: (offset % 5) as u8,
        checksum: offset.wrapping_mul(0x9E37_79B9_7F4A_7C15),
        inline: inline.then(|| crate::common::pattern(offset, stored as usize)),
    }
}

/// Everything a mount and a scrub read, on every inode reachable from the root (bounded, so a
/// cycle in damaged directory entries ends the walk rather than the harness). A failing call on
/// one inode does not stop the walk.
pub fn read_all(s: &MetaStore) -> Result<Vec<u64>, MetaError> {
    let mut dirs = Vec::new();
    s.is_initialized()?;
    let _ = s.pool_id()?;
    let _ = s.space()?;
    let usage = s.segment_usage()?;
    let _ = s.codec_usage()?;
    for &segment in usage.keys().take(8) {
        let _ = s.records_in_segment(segment)?;
    }
    let mut after = None;
    for _ in 0..64 {
        let batch = s.scan_records(after, 64)?;
        let Some(last) = batch.last() else { break };
        after = Some((last.ino, last.index));
    }

    let mut seen = HashSet::new();
    let mut queue = VecDeque::from([ROOT_INO]);
    while let Some(ino) = queue.pop_front() {
        if !seen.insert(ino) || seen.len() > 100 {
            continue;
        }
        let Ok(attr) = s.getattr(ino) else { continue };
        let _ = s.path_of(ino);
        let _ = s.list_props(ino);
        let _ = s.get_prop_effective(ino, "compression");
        if let Ok(names) = s.list_xattrs(ino) {
            for name in names.iter().take(8) {
                let _ = s.get_xattr(ino, name);
            }
        }
        match attr.kind {
            FileKind::Dir => {
                dirs.push(ino);
                let _ = s.dir_parent(ino);
                let mut after: Option<(u64, Vec<u8>)> = None;
                for _ in 0..16 {
                    let from = after.as_ref().map(|(i, n)| ListAfter::entry(*i, n));
                    let Ok(entries) = s.readdir(ino, from, 64) else {
                        break;
                    };
                    let Some(last) = entries.last() else { break };
                    after = Some((last.ino, last.name.clone()));
                    for e in &entries {
                        let _ = s.lookup(ino, &e.name);
                        queue.push_back(e.ino);
                    }
                }
            }
            FileKind::Symlink => {
                let _ = s.readlink(ino);
            }
            FileKind::File => {
                let _ = s.records(ino, ..);
            }
            _ => {}
        }
    }
    Ok(dirs)
}

/// What a mount writes: the orphan purge at open, then a new directory with a file and a
/// record, moved into a directory found in the walk, and removed again.
pub fn write_some(s: &MetaStore, dirs: &[u64]) -> Result<(), MetaError> {
    s.purge_orphans()?;
    let d = s
        .make_node(ROOT_INO, b"fuzz-dir", &NewNode::dir(0o755, 0, 0))?
        .ino;
    let f = s
        .make_node(d, b"fuzz-file", &NewNode::file(0o644, 0, 0))?
        .ino;
    s.apply_txg(
        &[
            TxgOp::SetRecord {
                ino: f,
                index: 0,
                rec: record(9, 40, 10, 20, false),
            },
            TxgOp::SetSize {
                ino: f,
                size: 20,
                mtime: Timespec::default(),
            },
        ],
        false,
    )?;
    for &target in dirs.iter().rev().take(2) {
        if s.rename(ROOT_INO, b"fuzz-dir", target, b"fuzz-moved", &|_| false)
            .is_ok()
        {
            let _ = s.rename(target, b"fuzz-moved", ROOT_INO, b"fuzz-dir", &|_| false);
        }
    }
    s.unlink(d, b"fuzz-file", &|_| false)?;
    s.rmdir(ROOT_INO, b"fuzz-dir")?;
    s.checkpoint()
}
