//! Garbage collection and scrub of a pool. Both run online (from the mount daemon, while files
//! are read and written) or offline (on a pool opened by the command itself), and report
//! progress through a callback.

use std::collections::{HashMap, HashSet};

use presso_meta::{RecordRef, TxgOp};
use presso_store::SegmentStats;
use serde::{Deserialize, Serialize};

use crate::error::Result;
use crate::pool::Pool;
use crate::props;
use crate::reclaim::ReclaimPolicy;

/// Progress of a long operation.
#[derive(Debug, Clone, Copy, Serialize, Deserialize)]
pub struct Progress {
    /// Units done (bytes).
    pub done: u64,
    /// Units in all.
    pub total: u64,
}

/// What garbage collection did.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct GcReport {
    /// Segments examined.
    pub segments: usize,
    /// Segments rewritten and removed.
    pub segments_collected: usize,
    /// Live records copied out of them.
    pub records_moved: u64,
    /// Bytes of segment files removed.
    pub bytes_removed: u64,
    /// Bytes written by the copies.
    pub bytes_copied: u64,
    /// Segments left as they are because their live records did not fit in the free space.
    #[serde(default)]
    pub skipped: usize,
    /// Of the segments removed, those left by clients of a shared pool that are gone.
    #[serde(default)]
    pub gone_clients_segments: usize,
}

/// Rewrites the live records of every segment whose live fraction is below `min_live` (0..=1;
/// 1 collects every segment holding any garbage) into the open segment, and removes those
/// segments. Writers and readers carry on meanwhile: each copy is committed as a
/// compare-and-swap that loses to any concurrent overwrite, and readers that meet a removed
/// segment look the record up again.
///
/// In a shared pool a client collects its own segments, and, while it holds the pool's
/// maintenance lease, those of clients that are gone (no session: unmounted, or taken for
/// stopped, after which nothing of theirs commits any more): their segments without a live
/// record go whatever `min_live` says, which covers what a killed client uploaded but never
/// committed. Other clients, which read those segments, meet a removed one like a local reader
/// does and look the record up again. Segment numbers are never reused, so no cached block of
/// a removed segment can stand for other bytes.
///
/// Segments go one at a time, most space freed per byte copied first (the least live share),
/// each removed before the next is copied: on a nearly full disk a pass needs room for one
/// segment's live records, not for all of them, and the first segments free the most. A
/// segment whose live records do not fit in the free space left is skipped (`skipped`).
pub fn gc(pool: &Pool, min_live: f64, progress: &mut dyn FnMut(Progress)) -> Result<GcReport> {
    collect(pool, Some(min_live), &|_| min_live, progress)
}

/// A shared pool's client's look at the segments: counts its own segments' live bytes again
/// from the metadata (other clients' overwrites make garbage there, which its automatic
/// reclaim then sees), and, if it holds the maintenance lease, goes over the segments of
/// clients that are gone: removes those without a live record, and collects those whose live
/// share is below `policy.min_live` when their garbage is worth it by `policy` (as the
/// automatic reclaim decides for a client's own segments).
pub fn collect_segments_of_gone_clients(pool: &Pool, policy: &ReclaimPolicy) -> Result<GcReport> {
    let min_live = |gone: &[SegmentStats]| match policy.worth_collecting(gone, false) {
        true => policy.min_live,
        false => 0.0,
    };
    collect(pool, None, &min_live, &mut |_| {})
}

/// A segment garbage collection may rewrite and remove.
struct Candidate {
    stats: SegmentStats,
    /// This store's own, or a gone client's.
    own: bool,
}

impl Candidate {
    fn live(&self) -> u64 {
        self.stats.total_bytes - self.stats.dead_bytes
    }

    /// Whether it holds garbage and less than `min_live` of it is live.
    fn worth(&self, min_live: f64) -> bool {
        self.stats.dead_bytes > 0 && (self.live() as f64) < min_live * self.stats.total_bytes as f64
    }

    fn live_share(&self) -> f64 {
        match self.stats.total_bytes {
            0 => 0.0,
            total => self.live() as f64 / total as f64,
        }
    }
}

/// Counts every segment's live bytes again, then collects this store's own segments whose
/// live share is below `own` (none if `None`) and the gone clients' segments below the share
/// `others` picks from their accounting, plus those of them without a live record.
fn collect(
    pool: &Pool,
    own: Option<f64>,
    others: &dyn Fn(&[SegmentStats]) -> f64,
    progress: &mut dyn FnMut(Progress),
) -> Result<GcReport> {
    let _one_at_a_time = pool.maintenance_lock();
    let mut report = GcReport::default();
    let mut candidates = Vec::new();
    let usage = pool.refresh_live()?;
    if let Some(min_live) = own {
        let all = pool.store().all_segment_stats();
        report.segments = all.len();
        candidates.extend(
            all.into_iter()
                .map(|stats| Candidate { stats, own: true })
                .filter(|c| c.worth(min_live)),
        );
    }
    let gone = pool.segments_of_gone_clients(&usage)?;
    report.segments += gone.len();
    let min_live = others(&gone);
    candidates.extend(
        gone.into_iter()
            .map(|stats| Candidate { stats, own: false })
            .filter(|c| c.live() == 0 || c.worth(min_live)),
    );
    candidates.sort_by(|a, b| a.live_share().total_cmp(&b.live_share()));
    let total: u64 = candidates.iter().map(Candidate::live).sum();
    let mut done = 0;
    progress(Progress { done, total });
    if candidates
        .iter()
        .any(|c| c.own && c.stats.segment == pool.store().current_segment())
    {
        pool.store().roll()?;
        // Frames appended since the commit above (writes go on during a pass) are in the
        // segment to collect: commit their ops too, so that its listing below names them and
        // they move with the rest. Left behind, they would keep the segment, and the pass would
        // have copied its live data for nothing, taking room instead of freeing it.
        pool.commit(true)?;
    }
    for seg in &candidates {
        if !seg.own && !pool.renew_maintenance_lease()? {
            // Another client collects the gone clients' segments now.
            continue;
        }
        if pool
            .store()
            .space()
            .is_some_and(|(_, avail)| seg.live() > avail)
        {
            report.skipped += 1;
            continue;
        }
        let number = seg.stats.segment;
        for r in pool.meta().records_in_segment(number)? {
            let (frame, tag) = pool.read_frame_tagged(r.ino, r.index, &r.rec)?;
            // The copy keeps the tag of the frame it copies, txg included: a newer version of
            // the record has a higher txg wherever it lies. A frame from before entries were
            // tagged gets txg 0, older than every tagged one.
            let tag = match tag {
                Some(tag) => tag,
                None => presso_store::EntryTag {
                    ino: r.ino,
                    index: r.index,
                    txg: 0,
                    record_size: record_size(pool, r.ino)?,
                },
            };
            let loc = pool.store().append_tagged(&frame, Some(&tag))?;
            let mut moved = r.rec.clone();
            moved.segment = loc.segment;
            moved.offset = loc.offset;
            pool.txgs().queue(
                TxgOp::MoveRecord {
                    ino: r.ino,
                    index: r.index,
                    from_segment: r.rec.segment,
                    from_offset: r.rec.offset,
                    rec: moved,
                },
                None,
            );
            report.records_moved += 1;
            report.bytes_copied += frame.len() as u64;
            done += loc.entry_len();
            progress(Progress { done, total });
        }
        // Every frame appended into the segment before the roll is named by a queued op by
        // now, and that op commits here: a segment is removed only if nothing refers to it.
        // A gone client's segment gets no new references: nothing of that client commits.
        let settled = pool.frames_settled();
        pool.commit(true)?;
        if !pool.meta().records_in_segment(number)?.is_empty() {
            // Only a write racing with the copy can leave a reference here; try next time.
            continue;
        }
        let garbage = pool.meta().space()?.garbage;
        let payload = seg.stats.total_bytes.min(garbage);
        if seg.own {
            pool.store().remove_segment(number)?;
        } else {
            pool.store().remove_other_segment(number)?;
            report.gone_clients_segments += 1;
        }
        pool.meta().release_garbage(payload)?;
        drop(settled);
        report.segments_collected += 1;
        report.bytes_removed += seg.stats.total_bytes;
    }
    progress(Progress { done: total, total });
    Ok(report)
}

/// The record size of file `ino` (its own, fixed at its first write; else the inherited one).
fn record_size(pool: &Pool, ino: u64) -> Result<u32> {
    let value = match pool.own_prop(ino, props::RECORDSIZE)? {
        Some(v) => v,
        None => pool.prop(ino, props::RECORDSIZE)?,
    };
    Ok(crate::units::parse_recordsize(&value).map_err(crate::error::FsError::Property)? as u32)
}

/// One damaged or dangling record found by scrub.
#[derive(Debug, Clone, Serialize, Deserialize)]
pub struct Damage {
    /// File.
    pub ino: u64,
    /// Record index.
    pub index: u64,
    /// Segment (0 = inline).
    pub segment: u64,
    /// Offset in the segment.
    pub offset: u64,
    /// What is wrong.
    pub error: String,
    /// A path of the file (`None`: unlinked while open, or not found).
    #[serde(default)]
    pub path: Option<String>,
    /// Where the record starts in the file.
    #[serde(default)]
    pub file_offset: Option<u64>,
}

impl Damage {
    /// Damage to record `index` of `ino`, with the file's path and the record's place in it.
    fn new(pool: &Pool, ino: u64, index: u64, rec: &RecordRef, error: String) -> Damage {
        let recordsize = pool
            .prop(ino, props::RECORDSIZE)
            .ok()
            .and_then(|v| crate::units::parse_recordsize(&v).ok());
        Damage {
            ino,
            index,
            segment: rec.segment,
            offset: rec.offset,
            error,
            path: pool.path_of(ino),
            file_offset: recordsize.and_then(|rs| index.checked_mul(rs as u64)),
        }
    }
}

/// What scrub found.
#[derive(Debug, Clone, Default, Serialize, Deserialize)]
pub struct ScrubReport {
    /// Records read, verified and decoded.
    pub records_checked: u64,
    /// Stored bytes verified.
    pub bytes_checked: u64,
    /// Records that fail verification or point at missing data.
    pub damaged: Vec<Damage>,
    /// Segment entries whose checksum fails (whether referenced or not).
    pub damaged_entries: Vec<(u64, u64, String)>,
    /// Segments whose header is damaged (found at open; their entries are checked as usual).
    #[serde(default)]
    pub damaged_headers: Vec<(u64, String)>,
    /// Valid frames no record references (written after the last commit before a crash, or
    /// not yet collected).
    pub orphan_frames: u64,
    /// Their bytes.
    pub orphan_bytes: u64,
    /// What was wrong with the pool's copy of its metadata (`meta.db.copy`), if anything: it was
    /// missing, did not open, or had damaged pages. A fresh copy then replaces it.
    #[serde(default)]
    pub metadata_copy_problem: Option<String>,
    /// Why the fresh copy could not be written, if it could not.
    #[serde(default)]
    pub metadata_copy_not_rewritten: Option<String>,
}

impl ScrubReport {
    /// Whether everything verified.
    pub fn clean(&self) -> bool {
        self.damaged.is_empty()
            && self.damaged_entries.is_empty()
            && self.damaged_headers.is_empty()
            && self.metadata_copy_not_rewritten.is_none()
    }
}

/// Verifies every record the metadata references (segment checksum, frame checksums, decode,
/// logical length), every segment entry and the pool's copy of its metadata, and reports damage
/// and orphans. A copy that is missing or damaged is written afresh: the metadata it copies has
/// just served every record.
///
/// Collection waits while a scrub runs: it moves records and removes their old segments, which
/// a scrub looking at them meanwhile would take for damage.
pub fn scrub(pool: &Pool, progress: &mut dyn FnMut(Progress)) -> Result<ScrubReport> {
    let _no_collection = pool.maintenance_lock();
    pool.commit(true)?;
    let mut report = ScrubReport::default();
    let usage = pool.meta().segment_usage()?;
    let total: u64 = usage.values().map(|u| u.stored_bytes).sum();
    let mut referenced: HashMap<u64, HashSet<u64>> = HashMap::new();
    let mut after = None;
    let mut done = 0;
    progress(Progress { done, total });
    loop {
        let batch = pool.meta().scan_records(after, 1024)?;
        let Some(last) = batch.last() else { break };
        after = Some((last.ino, last.index));
        for r in batch {
            if r.rec.inline.is_none() {
                referenced
                    .entry(r.rec.segment)
                    .or_default()
                    .insert(r.rec.offset);
                done += u64::from(r.rec.stored_len);
            }
            match pool.read_record_checking_all(r.ino, r.index, &r.rec) {
                Ok(data) if data.len() == r.rec.logical_len as usize => {}
                Ok(data) => {
                    let why = format!(
                        "decodes to {} bytes, the metadata says {}",
                        data.len(),
                        r.rec.logical_len
                    );
                    report
                        .damaged
                        .push(Damage::new(pool, r.ino, r.index, &r.rec, why));
                }
                Err(e) => {
                    report
                        .damaged
                        .push(Damage::new(pool, r.ino, r.index, &r.rec, e.to_string()));
                }
            }
            report.records_checked += 1;
            report.bytes_checked += u64::from(r.rec.stored_len);
        }
        progress(Progress { done, total });
    }
    for segment in pool.store().segments() {
        let entries = pool.store().entries(segment)?;
        let refs = referenced.get(&segment);
        for loc in &entries.entries {
            if !refs.is_some_and(|r| r.contains(&loc.offset)) {
                report.orphan_frames += 1;
                report.orphan_bytes += loc.entry_len();
            }
        }
        for d in &entries.damaged {
            report
                .damaged_entries
                .push((segment, d.offset, d.error.to_string()));
        }
    }
    report.damaged_headers = pool.store().recovery().bad_headers.clone();
    if let Some((problem, rewritten)) = pool.repair_metadata_copy()? {
        report.metadata_copy_problem = Some(problem);
        report.metadata_copy_not_rewritten = rewritten.err().map(|e| e.to_string());
    }
    progress(Progress { done: total, total });
    Ok(report)
}
