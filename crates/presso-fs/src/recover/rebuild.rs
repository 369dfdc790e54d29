//! The two halves of a recovery: finding the newest entry of every record in the segments, and
//! putting the ones the starting metadata lacks into it.

use std::collections::{BTreeMap, BTreeSet, HashSet};

use presso_codec::frame::FrameHeader;
use presso_meta::{FileKind, MetaError, MetaStore, NewNode, RecordRef, TxgOp, ROOT_INO};
use presso_store::{EntryTag, Location, Store};

use super::{LostFile, RecoverReport};
use crate::error::{FsError, Result};
use crate::maintenance::Progress;
use crate::props;

/// Name of the directory under the root that receives files whose names are unknown.
pub const LOST_FOUND: &str = "lost+found";

/// Ops per metadata transaction while applying.
const BATCH: usize = 4096;

/// The newest entry found for one record.
#[derive(Debug, Clone, Copy)]
pub(super) struct Found {
    tag: EntryTag,
    loc: Location,
}

impl Found {
    /// Newer first by txg, then by place in the pool (within one group, entries of one record
    /// are appended in the order of their ops).
    fn order(&self) -> (u64, u64, u64) {
        (self.tag.txg, self.loc.segment, self.loc.offset)
    }
}

/// Scans every segment and keeps, per (inode, record index), the newest tagged entry.
pub(super) fn scan(
    store: &Store,
    report: &mut RecoverReport,
    progress: &mut dyn FnMut(Progress),
) -> Result<BTreeMap<(u64, u64), Found>> {
    let stats = store.all_segment_stats();
    let total: u64 = stats.iter().map(|s| s.total_bytes).sum();
    let mut done = 0;
    progress(Progress { done, total });
    let mut newest: BTreeMap<(u64, u64), Found> = BTreeMap::new();
    for s in &stats {
        let scanned = store.entries(s.segment)?;
        report.segments += 1;
        report.entries += scanned.entries.len() as u64;
        report.damaged_stretches += scanned.damaged.len();
        report.bytes_scanned += scanned.total_bytes;
        for (loc, tag) in scanned.entries.iter().zip(&scanned.tags) {
            let Some(tag) = tag else { continue };
            let found = Found {
                tag: *tag,
                loc: *loc,
            };
            newest
                .entry((tag.ino, tag.index))
                .and_modify(|f| {
                    if found.order() > f.order() {
                        *f = found;
                    }
                })
                .or_insert(found);
        }
        done += s.total_bytes;
        progress(Progress { done, total });
    }
    Ok(newest)
}

/// Puts the found records into `meta`: those newer than it, and those it names at a place
/// garbage collection emptied since (found again by their checksum). Files it does not know go
/// to `/lost+found/<inode>`; sizes grow to cover the records put back.
pub(super) fn apply(
    store: &Store,
    meta: &MetaStore,
    found: &BTreeMap<(u64, u64), Found>,
    report: &mut RecoverReport,
) -> Result<()> {
    let copy_txg = report.copy_txg;
    let present: HashSet<u64> = store.segments().into_iter().collect();
    let last_txg = found
        .values()
        .map(|f| f.tag.txg)
        .max()
        .unwrap_or(0)
        .max(copy_txg);
    let mut ops = Vec::new();
    // Per file: its record size and the end of its last record put back.
    let mut ends: BTreeMap<u64, (u32, u64)> = BTreeMap::new();
    let mut lost_found = None;
    let mut lost = BTreeSet::new();
    let mut known = BTreeSet::new();
    let mut kinds: BTreeMap<u64, Option<FileKind>> = BTreeMap::new();
    for (&(ino, index), f) in found {
        let current = match meta.get_record(ino, index) {
            Ok(current) => current,
            Err(MetaError::NotFound) => None,
            Err(e) => return Err(e.into()),
        };
        let newer = f.tag.txg > copy_txg;
        let relocate = !newer
            && current
                .as_ref()
                .is_some_and(|c| c.in_segment() && !present.contains(&c.segment));
        if !newer && !relocate {
            continue;
        }
        let Some((rec, hole)) = record_at(store, f.loc)? else {
            continue;
        };
        if relocate {
            if hole {
                continue;
            }
            let same = current
                .as_ref()
                .is_some_and(|c| c.checksum == rec.checksum && c.logical_len == rec.logical_len);
            if same {
                ops.push(TxgOp::SetRecord { ino, index, rec });
                report.records_relocated += 1;
            }
            continue;
        }
        let kind = match kinds.get(&ino) {
            Some(kind) => *kind,
            None => {
                let kind = match meta.getattr(ino) {
                    Ok(attr) => Some(attr.kind),
                    Err(MetaError::NotFound) => None,
                    Err(e) => return Err(e.into()),
                };
                kinds.insert(ino, kind);
                kind
            }
        };
        match kind {
            Some(FileKind::File) => {
                if !lost.contains(&ino) {
                    known.insert(ino);
                }
            }
            Some(_) => {
                report.entries_skipped += 1;
                continue;
            }
            None => {
                let dir = match lost_found {
                    Some(dir) => dir,
                    None => *lost_found.insert(lost_found_dir(meta, found)?),
                };
                meta.make_node_numbered(
                    dir,
                    ino.to_string().as_bytes(),
                    &NewNode::file(0o600, 0, 0),
                    ino,
                )?;
                kinds.insert(ino, Some(FileKind::File));
                lost.insert(ino);
            }
        }
        let end = index
            .saturating_mul(u64::from(f.tag.record_size))
            .saturating_add(u64::from(rec.logical_len));
        let e = ends.entry(ino).or_insert((f.tag.record_size, 0));
        e.1 = e.1.max(end);
        report.records_applied += 1;
        report.bytes_applied += u64::from(rec.logical_len);
        // A record that became a hole is zeros of its logical length: no record at all.
        ops.push(if hole {
            TxgOp::ClearRecord { ino, index }
        } else {
            TxgOp::SetRecord { ino, index, rec }
        });
        if ops.len() >= BATCH {
            meta.apply_txg_numbered(last_txg, &std::mem::take(&mut ops), false)?;
        }
    }
    for (&ino, &(record_size, end)) in &ends {
        if meta.get_prop(ino, props::RECORDSIZE)?.is_none() {
            let value = crate::units::format_size(u64::from(record_size));
            meta.set_prop(ino, props::RECORDSIZE, &value)?;
        }
        let attr = meta.getattr(ino)?;
        if end > attr.size {
            ops.push(TxgOp::SetSize {
                ino,
                size: end,
                mtime: presso_meta::Timespec::now(),
            });
        }
        if lost.contains(&ino) {
            report.lost_found.push(LostFile {
                ino,
                size: end.max(attr.size),
            });
        }
    }
    meta.apply_txg_numbered(last_txg, &ops, true)?;
    report.files_restored = known.len();
    report.last_txg = last_txg;
    for (segment, _) in meta.segment_usage()? {
        if !present.contains(&segment) {
            report.records_missing += meta.records_in_segment(segment)?.len() as u64;
        }
    }
    Ok(())
}

/// The record the entry at `loc` holds and whether it is a hole (all zeros, no payload), or
/// `None` if it does not read back as a frame (the entry is then left out, like damage).
fn record_at(store: &Store, loc: Location) -> Result<Option<(RecordRef, bool)>> {
    let frame = match store.read(loc) {
        Ok(frame) => frame,
        Err(presso_store::StoreError::CorruptEntry { .. }) => return Ok(None),
        Err(e) => return Err(e.into()),
    };
    let Ok(header) = FrameHeader::parse(&frame) else {
        return Ok(None);
    };
    let rec = RecordRef {
        segment: loc.segment,
        offset: loc.offset,
        stored_len: loc.len,
        logical_len: header.logical_len,
        codec: header.codec as u8,
        checksum: header.stored_hash,
        inline: None,
    };
    Ok(Some((rec, header.hole)))
}

/// `/lost+found`, made (mode 0700, owned by root) if missing. A new one is numbered above every
/// inode the segments name: the starting metadata's next free number may be one of theirs (an
/// inode made after the copy), and making it numbered moves the next free number above them all.
fn lost_found_dir(meta: &MetaStore, found: &BTreeMap<(u64, u64), Found>) -> Result<u64> {
    match meta.lookup(ROOT_INO, LOST_FOUND.as_bytes()) {
        Ok(attr) if attr.kind == FileKind::Dir => Ok(attr.ino),
        Ok(_) => Err(FsError::Refused(format!(
            "/{LOST_FOUND} exists and is not a directory: rename it and run recover again"
        ))),
        Err(MetaError::NotFound) => {
            let mut ino = found.keys().map(|&(ino, _)| ino).max().unwrap_or(ROOT_INO) + 1;
            while meta.getattr(ino).is_ok() {
                ino += 1;
            }
            let dir = NewNode::dir(0o700, 0, 0);
            Ok(meta
                .make_node_numbered(ROOT_INO, LOST_FOUND.as_bytes(), &dir, ino)?
                .ino)
        }
        Err(e) => Err(e.into()),
    }
}
