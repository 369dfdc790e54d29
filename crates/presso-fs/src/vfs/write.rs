//! The write path: record assembly in the overlay, submission to the engine, completions,
//! truncate, fallocate and copy_file_range.

use super::unread::UnreadBase;
use super::*;

impl Vfs {
    // ---- write path

    /// Writes `data` at `offset`. Returns once the bytes are in the file's record buffers;
    /// compression and storage happen in the background. A record whose location cannot be
    /// looked up (a metadata read error) ends the write there: a short write if bytes before it
    /// were written, else the error.
    pub fn write(&self, ino: u64, offset: u64, data: &[u8]) -> Result<usize> {
        let (written, submission) = self.write_deferred(ino, offset, data)?;
        submission.submit();
        Ok(written)
    }

    /// [`Vfs::write`] for a request thread: the records the write filled are taken for
    /// compression and returned as a [`Submission`], to be submitted after the reply.
    pub fn write_deferred(
        &self,
        ino: u64,
        offset: u64,
        data: &[u8],
    ) -> Result<(usize, Submission<'_>)> {
        // Checked before every write (a look, or a bound on what the writes since the last one
        // can have used), not only by the periodic tick: a fast writer would otherwise fill the
        // host file system before the next tick, leaving no room for the metadata, for deletes
        // or for GC to free space again.
        self.check_space_for(data.len() as u64);
        if self.low_space.load(Ordering::Relaxed) {
            self.reclaim_for_room();
            if self.low_space.load(Ordering::Relaxed) {
                return Err(FsError::NoSpace);
            }
        }
        let end = offset
            .checked_add(data.len() as u64)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(FsError::FileTooLarge)?;
        self.make_room();
        self.budget.wait_for_room().map_err(FsError::Shared)?;
        let node = self.node(ino)?;
        let (jobs, written) = {
            let mut st = node.state.lock();
            if let Some(error) = st.error.take() {
                return Err(FsError::Deferred(error));
            }
            if end > st.size {
                self.trim_past_size(&node, &mut st)?;
            }
            let rs = st.recordsize;
            let mut jobs = Vec::new();
            let mut pos = offset;
            let mut src = data;
            while !src.is_empty() {
                let index = pos / rs;
                let within = (pos % rs) as usize;
                let n = src.len().min(rs as usize - within);
                let buf = match self.dirty_buffer(&node, &mut st, index, within..within + n) {
                    Ok(buf) => buf,
                    // The records taken for compression above must still be submitted, or
                    // their slots stay Compressing and every fsync waits for them.
                    Err(_) if pos > offset => break,
                    Err(e) => return Err(e),
                };
                if buf.len() == within {
                    // Appending (the sequential case): no zero-fill before the copy.
                    buf.extend_from_slice(&src[..n]);
                } else {
                    if buf.len() < within + n {
                        buf.resize(within + n, 0);
                    }
                    buf[within..within + n].copy_from_slice(&src[..n]);
                }
                // Filled to its end: most likely written in order and done with. Not while
                // bytes before the write are still unread (that read waits for a flush).
                if within + n == rs as usize
                    && !matches!(
                        st.overlay.get(&index),
                        Some(Slot::Dirty { base: Some(_), .. })
                    )
                {
                    jobs.extend(self.take_records(&node, &mut st, vec![index]));
                }
                pos += n as u64;
                src = &src[n..];
            }
            st.size = st.size.max(pos);
            st.mtime = Timespec::now();
            st.size_dirty = true;
            (jobs, (pos - offset) as usize)
        };
        // Noted once the bytes are in the buffers: a sweep that took an earlier mark may have
        // missed them, and this mark makes the next one cover them.
        self.pool.unsynced().note();
        self.traffic
            .written
            .fetch_add(written as u64, Ordering::Relaxed);
        Ok((written, Submission::new(self, node, jobs)))
    }

    /// After a write from the kernel's page cache that [`Vfs::write`] refused (no room, a record
    /// whose location cannot be looked up): with the writeback cache the kernel keeps a file's size
    /// itself, has grown it past the refused bytes already, and takes no smaller size from this
    /// layer while it caches the file. So the file grows to `end` here too, zeros where the refused
    /// bytes were (nothing of them is stored), and reads the same while mounted, once the kernel
    /// has dropped the refused pages, as after a remount. The writer has had its error (at fsync or
    /// close).
    pub fn grow_for_refused_write(&self, ino: u64, end: u64) -> Result<()> {
        let node = self.node(ino)?;
        let mut st = node.state.lock();
        // Under the lock: a write accepted meanwhile past `end` is not cut back.
        if end <= st.size {
            return Ok(());
        }
        self.resize(&node, &mut st, end)
    }

    /// The Dirty buffer of record `index`, into which the caller writes `range` next: created
    /// from the record's current contents, or (when those must be read from the pool) as zeros
    /// that remember the version they stand for (see [`UnreadBase`]), the write noted in it.
    pub(super) fn dirty_buffer<'a>(
        &self,
        node: &FileNode,
        st: &'a mut FileState,
        index: u64,
        range: std::ops::Range<usize>,
    ) -> Result<&'a mut Vec<u8>> {
        let rs = st.recordsize;
        let whole = range.start == 0 && range.end == rs as usize;
        if !st.recordsize_fixed {
            // From its first write on, the file's records keep this size whatever the inherited
            // property becomes. Queued before any record of the file, so it commits with its
            // first records or before them, never after; the node stays in memory (and answers
            // for it) until then.
            st.queued_in = self.pool.txgs().queue(
                TxgOp::SetProp {
                    ino: node.ino,
                    name: props::RECORDSIZE.into(),
                    value: crate::units::format_size(rs),
                },
                None,
            );
            self.pool.unsynced().note();
            st.recordsize_fixed = true;
        }
        if !matches!(st.overlay.get(&index), Some(Slot::Dirty { .. })) {
            let in_file = st.size.saturating_sub(index * rs).min(rs) as usize;
            // What the record's queued or committed version holds, known without a read.
            let covered = match st.overlay.get(&index) {
                Some(Slot::Compressing { covered, .. }) => *covered,
                Some(Slot::Stored { rec, .. }) => rec.as_ref().map_or(0, |r| r.logical_len.into()),
                _ => 0,
            };
            let (mut buf, covered, older) = if whole || in_file == 0 {
                (Vec::with_capacity(rs as usize), covered, None)
            } else {
                match st.overlay.get(&index) {
                    Some(Slot::Compressing { data, .. }) => (data.to_vec(), covered, None),
                    Some(Slot::Stored { rec: Some(rec), .. }) => {
                        (Vec::new(), covered, Some(rec.clone()))
                    }
                    Some(Slot::Stored { rec: None, .. }) => (Vec::new(), 0, None),
                    Some(Slot::Dirty { .. }) => unreachable!("checked above"),
                    None if st.is_cleared(index) => (Vec::new(), 0, None),
                    None => match self.pool.record(node.ino, index)? {
                        Some(rec) => (Vec::new(), rec.logical_len.into(), Some(rec)),
                        None => (Vec::new(), 0, None),
                    },
                }
            };
            if !whole {
                buf.reserve(rs as usize - buf.len().min(rs as usize));
                if buf.len() < in_file {
                    buf.resize(in_file, 0);
                }
            }
            self.budget.take(rs as usize);
            st.overlay.insert(
                index,
                Slot::Dirty {
                    buf,
                    touched: Instant::now(),
                    covered,
                    base: older.map(|rec| Box::new(UnreadBase::new(rec, in_file))),
                },
            );
        }
        match st.overlay.get_mut(&index) {
            Some(Slot::Dirty {
                buf, touched, base, ..
            }) => {
                *touched = Instant::now();
                if base.as_mut().is_some_and(|b| b.note_written(range)) {
                    *base = None;
                }
                Ok(buf)
            }
            _ => unreachable!("inserted above"),
        }
    }

    /// Reads the version Dirty record `index` was written over, if it has not been read yet,
    /// into the bytes of its buffer no write covered.
    pub(super) fn read_base(&self, ino: u64, st: &mut FileState, index: u64) -> Result<()> {
        let Some(Slot::Dirty { buf, base, .. }) = st.overlay.get_mut(&index) else {
            return Ok(());
        };
        let Some(unread) = base else {
            return Ok(());
        };
        let older = self.load(ino, index, &unread.rec)?;
        unread.fill(buf, &older);
        *base = None;
        Ok(())
    }

    /// Turns the Dirty slots selected by `pick` into Compressing ones and returns the jobs to
    /// submit once the node lock is released.
    pub(super) fn take_dirty(
        &self,
        node: &FileNode,
        st: &mut FileState,
        pick: impl Fn(u64) -> bool,
    ) -> Vec<Job> {
        let picked: Vec<u64> = st
            .overlay
            .iter()
            .filter(|(i, s)| matches!(s, Slot::Dirty { .. }) && pick(**i))
            .map(|(i, _)| *i)
            .collect();
        self.take_records(node, st, picked)
    }

    /// [`Vfs::take_dirty`] for the records `picked`; those not Dirty are skipped. A writer that
    /// just filled a record names it here instead of scanning the whole overlay, which holds
    /// every record written since the last commit.
    pub(super) fn take_records(
        &self,
        node: &FileNode,
        st: &mut FileState,
        picked: Vec<u64>,
    ) -> Vec<Job> {
        if picked.is_empty() {
            return Vec::new();
        }
        let (spec, options) = match self.settings(node.ino, st) {
            Ok(s) => s,
            Err(_) => (CodecSpec::OFF, self.pool.engine().default_options()),
        };
        let mut jobs = Vec::with_capacity(picked.len());
        for index in picked {
            if let Err(e) = self.read_base(node.ino, st, index) {
                let why = format!("the rest of a record written in part could not be read: {e}");
                st.store_failed(index, why, e);
                continue;
            }
            let Some(slot) = st.overlay.get_mut(&index) else {
                continue;
            };
            let Slot::Dirty { buf, covered, .. } = slot else {
                continue;
            };
            let data = Bytes::from(std::mem::take(buf));
            let generation = st.next_generation;
            *slot = Slot::Compressing {
                generation,
                data: data.clone(),
                covered: *covered,
            };
            st.next_generation += 1;
            st.inflight += 1;
            jobs.push((index, generation, data, spec, options));
        }
        jobs
    }

    /// Hands `jobs` to the engine. Called without the node's lock: a record may complete (and be
    /// stored) on this thread before the engine's submit returns (codec `off`, a hole, a small
    /// record, see [`Engine::submit`](presso_codec::Engine::submit)).
    pub(super) fn submit(&self, node: &Arc<FileNode>, jobs: Vec<Job>) {
        for (index, generation, data, spec, options) in jobs {
            let node = node.clone();
            let pool = self.pool.clone();
            let budget = self.budget.clone();
            let record = Record::from_segments([data.clone()]);
            self.pool
                .engine()
                .submit_with(record, spec, options, move |encoded: Encoded| {
                    completed(&pool, &node, &budget, index, generation, data, &encoded)
                });
        }
    }

    pub(super) fn truncate(&self, node: &Arc<FileNode>, size: u64) -> Result<()> {
        let mut st = node.state.lock();
        self.resize(node, &mut st, size)
    }

    /// [`Vfs::truncate`] with the node locked.
    fn resize(&self, node: &Arc<FileNode>, st: &mut FileState, size: u64) -> Result<()> {
        if size > i64::MAX as u64 {
            return Err(FsError::FileTooLarge);
        }
        let mut clearing = None;
        let mut cut = Ok(());
        if size < st.size {
            let (generation, result) = self.cut_at(node, st, size)?;
            clearing = Some(generation);
            cut = result;
        } else if size > st.size {
            self.trim_past_size(node, st)?;
        }
        st.size = size;
        st.mtime = Timespec::now();
        st.size_dirty = true;
        // Queued after the ClearRecord ops: when it commits, so have they. Queued even when the
        // new last record could not be looked up, so the watermark always ends.
        self.queue_size_tagged(node, st, clearing);
        self.pool.unsynced().note();
        cut
    }

    /// Drops every byte at and past `size`: the overlay forgets the records from the first one
    /// past it at once and a watermark in `cleared` hides the committed ones until their
    /// ClearRecord ops commit, so nothing (a read, or the read-modify-write of a later partial
    /// write) sees their old bytes; the record holding `size` is cut there. Returns the
    /// watermark's generation (the caller queues the size with it, which ends the watermark)
    /// and the result of cutting that record.
    fn cut_at(
        &self,
        node: &Arc<FileNode>,
        st: &mut FileState,
        size: u64,
    ) -> Result<(u64, Result<()>)> {
        let rs = st.recordsize;
        let keep = size.div_ceil(rs);
        let dropped = st.overlay.split_off(&keep);
        st.unstored.split_off(&keep);
        let dirty = dropped
            .values()
            .filter(|s| matches!(s, Slot::Dirty { .. }))
            .count();
        self.budget.give(dirty * rs as usize);
        let mut clear: HashSet<u64> = dropped.into_keys().collect();
        // Those an earlier pending truncate clears already get a second ClearRecord: a no-op.
        for (index, _) in self.pool.records(node.ino, keep..)? {
            clear.insert(index);
        }
        let mut clear: Vec<u64> = clear.into_iter().collect();
        clear.sort_unstable();
        for index in clear {
            st.queued_in = self.pool.txgs().queue(
                TxgOp::ClearRecord {
                    ino: node.ino,
                    index,
                },
                None,
            );
        }
        let generation = st.next_generation;
        st.next_generation += 1;
        st.cleared.push((keep, generation));
        let mut cut = Ok(());
        if !size.is_multiple_of(rs) {
            let index = size / rs;
            let keep = size - index * rs;
            cut = self.dirty_buffer(node, st, index, 0..0).map(drop);
            if let Some(Slot::Dirty {
                buf, base, covered, ..
            }) = st.overlay.get_mut(&index)
            {
                buf.truncate(keep as usize);
                if base.as_mut().is_some_and(|b| b.cut(keep as usize)) {
                    *base = None;
                }
                // The bytes cut are no longer covered: a queued version may still hold them.
                *covered = (*covered).min(keep);
            }
        }
        Ok((generation, cut))
    }

    /// Before a file loaded from the metadata first grows: a crash can leave committed bytes
    /// past its committed size (a record written past the end commits once compressed, the size
    /// only with the next tick; a truncate's size commits before the record it cut, which is
    /// compressed later), and growing the file must not bring them back where zeros belong. So
    /// if the metadata holds any, they are cut as a truncate to the current size would.
    fn trim_past_size(&self, node: &Arc<FileNode>, st: &mut FileState) -> Result<()> {
        if st.tail_checked {
            return Ok(());
        }
        let (size, rs) = (st.size, st.recordsize);
        let stale = self
            .pool
            .records(node.ino, size / rs..)?
            .iter()
            .any(|(index, rec)| index * rs + u64::from(rec.logical_len) > size);
        if stale {
            let (generation, cut) = self.cut_at(node, st, size)?;
            // The record holding `size` keeps its bytes below it and loses those past it. It is
            // stored now, on this thread, so its op is queued before any size that grows the
            // file over it: otherwise a crash could commit the grown size with the old record
            // (bytes a truncate cut, back after a second kill).
            let stored = cut.and_then(|()| self.store_now(node, st, size / rs));
            self.queue_size_tagged(node, st, Some(generation));
            stored?;
        }
        st.tail_checked = true;
        Ok(())
    }

    /// Stores record `index` of `node` at once if it is Dirty (uncompressed, on this thread: no
    /// engine round trip with the node locked) and queues its op.
    fn store_now(&self, node: &FileNode, st: &mut FileState, index: u64) -> Result<()> {
        self.read_base(node.ino, st, index)?;
        let Some(Slot::Dirty { buf, .. }) = st.overlay.get(&index) else {
            return Ok(());
        };
        let (stored, _pending) = self
            .pool
            .store_raw(buf, node.ino, index, st.recordsize as u32);
        let rec = stored?;
        let generation = st.next_generation;
        st.next_generation += 1;
        record_stored(&self.pool, node, st, index, generation, rec);
        self.budget.give(st.recordsize as usize);
        Ok(())
    }

    /// Preallocates (mode 0: extends the size; space is not reserved in a copy-on-write pool),
    /// punches a hole (`FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE`) or zeroes a range
    /// (`FALLOC_FL_ZERO_RANGE`, extending the file unless `FALLOC_FL_KEEP_SIZE`).
    pub fn fallocate(&self, ino: u64, offset: u64, length: u64, mode: i32) -> Result<()> {
        let node = self.node(ino)?;
        let end = offset
            .checked_add(length)
            .filter(|&e| e <= i64::MAX as u64)
            .ok_or(FsError::FileTooLarge)?;
        let keep_size = mode & libc::FALLOC_FL_KEEP_SIZE != 0;
        let punch = mode & libc::FALLOC_FL_PUNCH_HOLE != 0;
        let zero_range = mode & libc::FALLOC_FL_ZERO_RANGE != 0;
        let known =
            libc::FALLOC_FL_KEEP_SIZE | libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_ZERO_RANGE;
        if mode & !known != 0 || (punch && zero_range) {
            return Err(FsError::Unsupported("this fallocate mode"));
        }
        if punch && !keep_size {
            return Err(FsError::BadArgument("PUNCH_HOLE needs KEEP_SIZE"));
        }
        if punch || zero_range {
            let size = node.state.lock().size;
            // Zeros written through the normal path become holes (all-zero records).
            let chunk = vec![0u8; 1 << 20];
            let mut pos = offset;
            while pos < end.min(size) {
                let n = (end.min(size) - pos).min(chunk.len() as u64) as usize;
                // A short write (a record that cannot be looked up) fails at the next call.
                pos += self.write(ino, pos, &chunk[..n])? as u64;
            }
        }
        if !keep_size && end > node.state.lock().size {
            self.truncate(&node, end)?;
        }
        Ok(())
    }

    /// `copy_file_range`: copies up to `len` bytes from `from` at `src` to `to` at `dst` (fewer
    /// at the end of the source) through the record buffers, and returns how many it copied.
    /// Overlapping ranges of one file are refused, as copy_file_range(2) does.
    pub fn copy_range(&self, from: u64, src: u64, to: u64, dst: u64, len: u64) -> Result<u64> {
        if from == to && src < dst.saturating_add(len) && dst < src.saturating_add(len) {
            return Err(FsError::BadArgument("overlapping copy within one file"));
        }
        let mut done = 0;
        while done < len {
            let want = (len - done).min(1 << 20) as u32;
            let data = self.read(from, src + done, want)?;
            if data.is_empty() {
                break;
            }
            let written = self.write(to, dst + done, &data)? as u64;
            done += written;
            if written < data.len() as u64 {
                break;
            }
        }
        Ok(done)
    }
}

fn completed(
    pool: &Pool,
    node: &FileNode,
    budget: &Budget,
    index: u64,
    generation: u64,
    data: Bytes,
    encoded: &Encoded,
) {
    let mut st = node.state.lock();
    st.inflight -= 1;
    let current = matches!(st.overlay.get(&index),
        Some(Slot::Compressing { generation: g, .. }) if *g == generation);
    let rs = st.recordsize as usize;
    if !current {
        // The record was rewritten, truncated or its file removed meanwhile. The frame is not
        // stored at all: appending under the node lock, after this check, keeps every entry of
        // a record in the order of its ops, so an older version never carries a newer tag.
        budget.give(rs);
        drop(st);
        node.changed.notify_all();
        return;
    }
    let (result, _pending) = pool.store_encoded(encoded, node.ino, index, rs as u32);
    let worked = matches!(&result, Ok(Some(rec)) if rec.inline.is_none());
    let mut failed = None;
    match result {
        Ok(rec) => {
            record_stored(pool, node, &mut st, index, generation, rec);
            budget.give(rs);
        }
        Err(e) => {
            // Keep the data (reads still see it) and retry at the next flush; the error is
            // reported once to the next write, close or fsync of this file.
            // Covering nothing is the safe answer here: the size waits for this record.
            st.overlay.insert(
                index,
                Slot::Dirty {
                    buf: data.to_vec(),
                    touched: Instant::now(),
                    covered: 0,
                    base: None,
                },
            );
            failed = Some(st.store_failed(index, e.to_string(), e));
        }
    }
    drop(st);
    node.changed.notify_all();
    if worked {
        budget.store_worked();
    }
    if let Some(e) = failed {
        budget.store_failed(e);
    }
}

/// Record `index` of `node` is stored as `rec` (`None`: a hole): the overlay holds it until its
/// op, queued here, commits.
fn record_stored(
    pool: &Pool,
    node: &FileNode,
    st: &mut FileState,
    index: u64,
    generation: u64,
    rec: Option<RecordRef>,
) {
    let op = match &rec {
        Some(rec) => TxgOp::SetRecord {
            ino: node.ino,
            index,
            rec: rec.clone(),
        },
        None => TxgOp::ClearRecord {
            ino: node.ino,
            index,
        },
    };
    st.overlay.insert(index, Slot::Stored { generation, rec });
    // A failure not yet reported concerned records kept for a retry: once every one of them is
    // stored, nothing was lost and there is nothing left to report.
    if st.unstored.remove(&index) && st.unstored.is_empty() {
        st.error = None;
        st.store_error = None;
    }
    st.queued_in = pool.txgs().queue(
        op,
        Some(OpTag {
            ino: node.ino,
            index,
            generation,
        }),
    );
}
