//! Background work: queuing file sizes, what committed groups mean for the overlay, the
//! flusher's tick and free space.

use super::*;

impl Vfs {
    // ---- sizes, committed groups and background work

    /// Queues the file's size as far as stored records cover it ([`FileState::size_to_queue`]),
    /// with its mtime; the rest stays pending (`size_dirty`) until they are stored.
    pub(super) fn queue_size(&self, node: &FileNode, st: &mut FileState) {
        let size = st.size_to_queue();
        self.queue_set_size(node, st, size, None);
    }

    /// Queues the file's whole size, as a truncate sets it; with `clearing`, the op's commit
    /// ends the truncate of that generation (see `FileState::cleared`).
    pub(super) fn queue_size_tagged(
        &self,
        node: &FileNode,
        st: &mut FileState,
        clearing: Option<u64>,
    ) {
        let size = st.size;
        self.queue_set_size(node, st, size, clearing);
    }

    fn queue_set_size(
        &self,
        node: &FileNode,
        st: &mut FileState,
        size: u64,
        clearing: Option<u64>,
    ) {
        st.queued_in = self.pool.txgs().queue(
            TxgOp::SetSize {
                ino: node.ino,
                size,
                mtime: st.mtime,
            },
            clearing.map(|generation| OpTag {
                ino: node.ino,
                index: CLEARING,
                generation,
            }),
        );
        st.size_queued = size;
        st.size_dirty = size < st.size;
    }

    /// Queues the pending size of every file whose stored records cover more of it than was
    /// queued (or all of it: then also an mtime-only change).
    pub(super) fn queue_sizes(&self) {
        let nodes: Vec<_> = self.files.lock().values().cloned().collect();
        for node in nodes {
            let mut st = node.state.lock();
            if st.size_dirty {
                let size = st.size_to_queue();
                if size == st.size || size > st.size_queued {
                    self.queue_set_size(&node, &mut st, size, None);
                }
            }
        }
    }

    pub(super) fn committed(&self, tags: &[OpTag], number: u64) {
        let mut by_ino: HashMap<u64, Vec<&OpTag>> = HashMap::new();
        for tag in tags {
            by_ino.entry(tag.ino).or_default().push(tag);
        }
        let mut files = self.files.lock();
        for (ino, tags) in by_ino {
            let Some(node) = files.get(&ino).cloned() else {
                continue;
            };
            let mut st = node.state.lock();
            // The metadata now answers for what these slots and watermarks held.
            st.recent.forget();
            for tag in tags {
                if tag.index == CLEARING {
                    st.cleared.retain(|&(_, g)| g != tag.generation);
                } else if matches!(st.overlay.get(&tag.index),
                    Some(Slot::Stored { generation, .. }) if *generation == tag.generation)
                {
                    st.overlay.remove(&tag.index);
                }
            }
        }
        // Forget files nobody has open whose every op is committed: the metadata answers now.
        files.retain(|_, node| {
            let st = node.state.lock();
            !(st.open == 0 && st.all_committed(number))
        });
    }

    /// Makes room in full record buffers: stores the least recently touched records still
    /// being written, a quarter of the limit's worth. Small random writes touch many records
    /// and finish none, and a writer waiting for room would otherwise wait for the tick or the
    /// durability sweep, which records touched again and again never meet (fio's 4K random
    /// writes over 2 × 256 MiB ran at 25 MB/s). One writer at a time looks; the others wait for
    /// the room it makes.
    pub(super) fn make_room(&self) {
        if !self.budget.is_full() {
            return;
        }
        let Some(_making) = self.budget.making_room.try_lock() else {
            return;
        };
        let nodes: Vec<Arc<FileNode>> = self.files.lock().values().cloned().collect();
        let mut dirty = Vec::new();
        for (n, node) in nodes.iter().enumerate() {
            let st = node.state.lock();
            for (&index, slot) in &st.overlay {
                if let Slot::Dirty { touched, .. } = slot {
                    dirty.push((*touched, n, index, st.recordsize as usize));
                }
            }
        }
        dirty.sort_unstable_by_key(|&(touched, ..)| touched);
        let mut picked: BTreeMap<usize, Vec<u64>> = BTreeMap::new();
        let goal = (self.budget.limit / 4).max(1);
        let mut bytes = 0;
        for (_, n, index, recordsize) in dirty {
            if bytes >= goal {
                break;
            }
            picked.entry(n).or_default().push(index);
            bytes += recordsize;
        }
        for (n, indexes) in picked {
            let node = &nodes[n];
            let jobs = {
                let mut st = node.state.lock();
                self.take_records(node, &mut st, indexes)
            };
            self.submit(node, jobs);
        }
    }

    /// Compresses partial records nobody has touched for `flush_after`, and refreshes the
    /// free-space check.
    pub(super) fn tick(self: &Arc<Self>) {
        let now = Instant::now();
        let nodes: Vec<_> = self.files.lock().values().cloned().collect();
        for node in nodes {
            let jobs = {
                let mut st = node.state.lock();
                let stale: HashSet<u64> = st
                    .overlay
                    .iter()
                    .filter_map(|(i, s)| match s {
                        Slot::Dirty { touched, .. }
                            if now.duration_since(*touched) >= self.config.flush_after =>
                        {
                            Some(*i)
                        }
                        _ => None,
                    })
                    .collect();
                self.take_dirty(&node, &mut st, |i| stale.contains(&i))
            };
            self.submit(&node, jobs);
        }
        // Sizes reach the metadata with the next group after this tick.
        self.queue_sizes();
        self.check_space();
        let mut samples = self.samples.lock();
        samples.push((
            now,
            self.traffic.written.load(Ordering::Relaxed),
            self.traffic.read.load(Ordering::Relaxed),
        ));
        if samples.len() > 11 {
            samples.remove(0);
        }
    }

    /// Short of room: while the pool holds garbage, collects it now (the writer waits) and
    /// checks the free space again. A few passes at most: other writers' overwrites go on making
    /// garbage meanwhile, and the next pass collects that too.
    pub(super) fn reclaim_for_room(&self) {
        let Some(reclaimer) = &self.reclaimer else {
            return;
        };
        for _ in 0..3 {
            if self.pool.store().dead_bytes() == 0 {
                // Another writer's pass may have freed the room since this one looked.
                self.check_space();
                return;
            }
            reclaimer.reclaim_now();
            self.check_space();
            if !self.low_space.load(Ordering::Relaxed) {
                return;
            }
        }
    }

    /// Space is low when the host file system's free space, less the record buffers not yet
    /// stored (counted uncompressed), is under `min_free`.
    pub(super) fn check_space(&self) {
        let written = self.traffic.written.load(Ordering::Relaxed);
        let headroom = match self.pool.space() {
            Some((_, avail)) => avail
                .saturating_sub(self.dirty_bytes() as u64)
                .checked_sub(self.config.min_free),
            None => Some(u64::MAX),
        };
        self.low_space.store(headroom.is_none(), Ordering::Relaxed);
        *self.space_seen.lock() = headroom.map(|headroom| SpaceSeen {
            at: Instant::now(),
            written,
            headroom,
        });
    }

    /// [`Vfs::check_space`] before a write of `len` bytes, unless the last look is recent and
    /// the writes since, this one included, take at most half the headroom it saw: this
    /// client's writes cannot have made space low then, and another program's are caught
    /// within [`SPACE_RECHECK`]. Looking costs a `statfs`, a tenth of a small write's time.
    pub(super) fn check_space_for(&self, len: u64) {
        let written = self.traffic.written.load(Ordering::Relaxed);
        let fresh = self.space_seen.lock().as_ref().is_some_and(|seen| {
            seen.at.elapsed() < SPACE_RECHECK
                && written.saturating_sub(seen.written).saturating_add(len) <= seen.headroom / 2
        });
        if !fresh {
            self.check_space();
        }
    }
}

/// How long a look at the free space stands for writes.
const SPACE_RECHECK: Duration = Duration::from_millis(100);

/// A look at the free space that found it above `min_free` (see [`Vfs::check_space_for`]).
pub(super) struct SpaceSeen {
    at: Instant,
    /// Bytes written to this client's files until then ([`Traffic`]).
    written: u64,
    /// Free space beyond `min_free` and the unstored buffers.
    headroom: u64,
}

pub(super) fn flusher(vfs: std::sync::Weak<Vfs>) {
    loop {
        let Some(v) = vfs.upgrade() else { return };
        if v.stopping.load(Ordering::SeqCst) {
            return;
        }
        let period = (v.config.flush_after / 2).max(Duration::from_millis(100));
        v.tick();
        drop(v);
        // A periodic timer, not synchronisation: the work it starts is idempotent.
        std::thread::sleep(period.min(Duration::from_secs(1)));
    }
}
