//! In-memory engine: ordered maps behind one `RwLock`.
//!
//! A write transaction holds the write lock and applies changes in place while keeping an undo
//! log of the previous value of every key it touched; dropping it without commit replays the log
//! backwards, so an abandoned transaction leaves no trace (the same guarantee as a copy-on-write
//! snapshot, at a cost proportional to the transaction instead of the whole state).
//!
//! For power-cut simulation, [`MemoryEngine::simulated`] also keeps the state as of the last
//! durable commit: [`MemoryEngine::crash`] returns to it (what a database that was not synced
//! keeps after a power cut), and handles from before the crash fail from then on, like the
//! descriptors of a process that died. [`MemoryEngine::handle`] opens the same state again, as a
//! restarted process reopens its database file.
//!
//! For error-handling tests, [`faults`] makes commits or reads fail as on a disk returning EIO.
//!
//! Two secondary indexes mirror what the SQLite engine keeps: non-inline records by
//! (segment, offset) and the set of inodes with `nlink == 0`. Every change of an inode or record
//! row, rollback included, goes through `State::set_inode` / `State::set_record`, which keep
//! them in step.

use std::collections::{BTreeMap, BTreeSet};
use std::ops::{Bound, Range};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, RwLock, RwLockReadGuard, RwLockWriteGuard};

use crate::engine::{
    CodecSpace, Dentry, InodeRow, MetaEngine, RecordLocation, RecordRef, SegmentUsage, Txn,
};
use crate::error::{MetaError, Result};
use crate::types::ListAfter;

pub mod faults;

pub use faults::FaultStats;
use faults::Faults;

#[derive(Debug, Default, Clone)]
struct State {
    inodes: BTreeMap<u64, InodeRow>,
    dentries: BTreeMap<(u64, Vec<u8>), Dentry>,
    /// Every entry again, under (parent, ino, name): each directory's entries in listing order.
    listing: BTreeMap<(u64, u64, Vec<u8>), Dentry>,
    xattrs: BTreeMap<(u64, Vec<u8>), Vec<u8>>,
    records: BTreeMap<(u64, u64), RecordRef>,
    props: BTreeMap<(u64, String), String>,
    counters: BTreeMap<String, u64>,
    /// (segment, offset, ino, index) of every non-inline record.
    by_segment: BTreeSet<(u64, u64, u64, u64)>,
    /// Inodes with `nlink == 0`.
    orphans: BTreeSet<u64>,
}

/// The previous value of one key, to restore on rollback.
enum Undo {
    Inode(u64, Option<InodeRow>),
    Dentry((u64, Vec<u8>), Option<Dentry>),
    Xattr((u64, Vec<u8>), Option<Vec<u8>>),
    Record((u64, u64), Option<RecordRef>),
    Prop((u64, String), Option<String>),
    Counter(String, Option<u64>),
}

fn restore<K: Ord, V>(map: &mut BTreeMap<K, V>, key: K, old: Option<V>) {
    match old {
        Some(v) => {
            map.insert(key, v);
        }
        None => {
            map.remove(&key);
        }
    }
}

impl State {
    /// Replaces (or with `None` removes) an inode row, keeping the orphan set in step.
    fn set_inode(&mut self, ino: u64, row: Option<InodeRow>) -> Option<InodeRow> {
        let orphan = row.as_ref().is_some_and(|r| r.attr.nlink == 0);
        let old = match row {
            Some(r) => self.inodes.insert(ino, r),
            None => self.inodes.remove(&ino),
        };
        if orphan {
            self.orphans.insert(ino);
        } else {
            self.orphans.remove(&ino);
        }
        old
    }

    /// Replaces (or with `None` removes) a record, keeping the segment index in step.
    fn set_record(&mut self, key: (u64, u64), rec: Option<RecordRef>) -> Option<RecordRef> {
        if let Some(r) = rec.as_ref().filter(|r| r.in_segment()) {
            self.by_segment.insert((r.segment, r.offset, key.0, key.1));
        }
        let old = match rec {
            Some(r) => self.records.insert(key, r),
            None => self.records.remove(&key),
        };
        if let Some(o) = old.as_ref().filter(|o| o.in_segment()) {
            let still = self
                .records
                .get(&key)
                .is_some_and(|n| n.in_segment() && (n.segment, n.offset) == (o.segment, o.offset));
            if !still {
                self.by_segment.remove(&(o.segment, o.offset, key.0, key.1));
            }
        }
        old
    }

    /// Sets or removes directory entry `key`, keeping [`State::listing`] in step; returns the
    /// entry it replaced.
    fn set_dentry(&mut self, key: (u64, Vec<u8>), entry: Option<Dentry>) -> Option<Dentry> {
        let (parent, name) = key;
        let old = match entry {
            Some(d) => self.dentries.insert((parent, name.clone()), d),
            None => self.dentries.remove(&(parent, name.clone())),
        };
        if let Some(o) = old {
            self.listing.remove(&(parent, o.ino, name.clone()));
        }
        if let Some(d) = entry {
            self.listing.insert((parent, d.ino, name), d);
        }
        old
    }

    fn undo(&mut self, u: Undo) {
        match u {
            Undo::Inode(k, v) => {
                self.set_inode(k, v);
            }
            Undo::Dentry(k, v) => {
                self.set_dentry(k, v);
            }
            Undo::Xattr(k, v) => restore(&mut self.xattrs, k, v),
            Undo::Record(k, v) => {
                self.set_record(k, v);
            }
            Undo::Prop(k, v) => restore(&mut self.props, k, v),
            Undo::Counter(k, v) => restore(&mut self.counters, k, v),
        }
    }
}

/// The in-memory engine. Nothing survives the process; meant for tests and as the reference
/// model the SQLite engine is checked against.
#[derive(Debug, Default)]
pub struct MemoryEngine {
    state: Arc<RwLock<State>>,
    /// The power-cut simulation, if enabled.
    sim: Option<Arc<Simulation>>,
    /// The simulation's crash count when this handle was opened.
    generation: u64,
    /// Injected faults, shared by every handle.
    faults: Arc<Faults>,
}

/// What survives a simulated power cut.
#[derive(Debug, Default)]
struct Simulation {
    /// The state as of the last durable commit.
    durable: Mutex<State>,
    /// Crashes so far; handles from an earlier generation are dead.
    generation: AtomicU64,
}

impl MemoryEngine {
    /// An empty engine.
    pub fn new() -> Self {
        Self::default()
    }

    /// An empty engine that simulates power cuts: see [`MemoryEngine::crash`].
    pub fn simulated() -> Self {
        MemoryEngine {
            sim: Some(Arc::new(Simulation::default())),
            ..Self::default()
        }
    }

    /// Another handle on the same state, as a restarted process reopens its database.
    pub fn handle(&self) -> Self {
        MemoryEngine {
            state: self.state.clone(),
            sim: self.sim.clone(),
            faults: self.faults.clone(),
            generation: self
                .sim
                .as_ref()
                .map_or(0, |s| s.generation.load(Ordering::SeqCst)),
        }
    }

    /// Cuts the power: the state goes back to the last durable commit (or to empty, if none
    /// was), and every handle opened before fails from now on. Only for an engine made with
    /// [`MemoryEngine::simulated`]; `keep_latest` keeps every commit instead, as a database
    /// whose last commits happened to reach the disk.
    pub fn crash(&self, keep_latest: bool) {
        let Some(sim) = &self.sim else { return };
        let mut state = self.state.write().unwrap_or_else(|e| e.into_inner());
        sim.generation.fetch_add(1, Ordering::SeqCst);
        let mut durable = sim.durable.lock().unwrap_or_else(|e| e.into_inner());
        if keep_latest {
            *durable = state.clone();
        } else {
            *state = durable.clone();
        }
    }

    /// Fails once the simulated power was cut after this handle was opened.
    fn check_alive(&self) -> Result<()> {
        match &self.sim {
            Some(sim) if sim.generation.load(Ordering::SeqCst) != self.generation => Err(
                MetaError::engine("the simulated power was cut: reopen the engine"),
            ),
            _ => Ok(()),
        }
    }
}

impl MemoryEngine {
    fn begin_write(&self, durable: bool) -> Result<Box<dyn Txn + '_>> {
        self.check_alive()?;
        let guard = self.state.write().map_err(poisoned)?;
        Ok(Box::new(MemTxn {
            guard: Guard::Write(guard),
            undo: Vec::new(),
            committed: false,
            durable,
            sim: if durable { self.sim.as_deref() } else { None },
            faults: Some(&self.faults),
        }))
    }
}

fn poisoned<T>(_: T) -> MetaError {
    MetaError::engine("memory engine lock poisoned")
}

impl MetaEngine for MemoryEngine {
    fn read(&self) -> Result<Box<dyn Txn + '_>> {
        self.check_alive()?;
        self.faults.on_read()?;
        let guard = self.state.read().map_err(poisoned)?;
        Ok(Box::new(MemTxn {
            guard: Guard::Read(guard),
            undo: Vec::new(),
            committed: false,
            durable: false,
            sim: None,
            faults: None,
        }))
    }

    fn write(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin_write(false)
    }

    /// Without the simulation nothing is ever durable and this is [`MetaEngine::write`]; with
    /// it, the state after the commit is what a later crash returns to.
    fn write_durable(&self) -> Result<Box<dyn Txn + '_>> {
        self.begin_write(true)
    }
}

enum Guard<'a> {
    Read(RwLockReadGuard<'a, State>),
    Write(RwLockWriteGuard<'a, State>),
}

struct MemTxn<'a> {
    guard: Guard<'a>,
    undo: Vec<Undo>,
    committed: bool,
    /// Whether the commit must survive a power loss.
    durable: bool,
    /// Where a durable transaction records the state it commits (with the simulation).
    sim: Option<&'a Simulation>,
    /// The engine's injected faults (write transactions only).
    faults: Option<&'a Faults>,
}

impl MemTxn<'_> {
    fn st(&self) -> &State {
        match &self.guard {
            Guard::Read(g) => g,
            Guard::Write(g) => g,
        }
    }

    /// Mutable state plus the undo log, or an error in a read transaction.
    fn st_mut(&mut self) -> Result<(&mut State, &mut Vec<Undo>)> {
        match &mut self.guard {
            Guard::Read(_) => Err(MetaError::engine(
                "write attempted in a read-only transaction",
            )),
            Guard::Write(g) => Ok((&mut **g, &mut self.undo)),
        }
    }
}

impl Drop for MemTxn<'_> {
    fn drop(&mut self) {
        if self.committed {
            return;
        }
        if let Guard::Write(g) = &mut self.guard {
            while let Some(u) = self.undo.pop() {
                g.undo(u);
            }
        }
    }
}

impl Txn for MemTxn<'_> {
    fn get_inode(&mut self, ino: u64) -> Result<Option<InodeRow>> {
        Ok(self.st().inodes.get(&ino).cloned())
    }

    fn put_inode(&mut self, row: &InodeRow) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let old = st.set_inode(row.attr.ino, Some(row.clone()));
        undo.push(Undo::Inode(row.attr.ino, old));
        Ok(())
    }

    fn delete_inode(&mut self, ino: u64) -> Result<bool> {
        let (st, undo) = self.st_mut()?;
        let old = st.set_inode(ino, None);
        let existed = old.is_some();
        undo.push(Undo::Inode(ino, old));
        Ok(existed)
    }

    fn get_dentry(&mut self, parent: u64, name: &[u8]) -> Result<Option<Dentry>> {
        Ok(self.st().dentries.get(&(parent, name.to_vec())).copied())
    }

    fn put_dentry(&mut self, parent: u64, name: &[u8], entry: Dentry) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let key = (parent, name.to_vec());
        let old = st.set_dentry(key.clone(), Some(entry));
        undo.push(Undo::Dentry(key, old));
        Ok(())
    }

    fn delete_dentry(&mut self, parent: u64, name: &[u8]) -> Result<bool> {
        let (st, undo) = self.st_mut()?;
        let key = (parent, name.to_vec());
        let old = st.set_dentry(key.clone(), None);
        let existed = old.is_some();
        undo.push(Undo::Dentry(key, old));
        Ok(existed)
    }

    fn list_dentries(
        &mut self,
        parent: u64,
        after: Option<ListAfter<'_>>,
        limit: usize,
    ) -> Result<Vec<(Vec<u8>, Dentry)>> {
        let start = match after {
            Some(a) => Bound::Excluded((parent, a.ino, a.name.to_vec())),
            None => Bound::Included((parent, 0, Vec::new())),
        };
        Ok(self
            .st()
            .listing
            .range((start, Bound::Unbounded))
            .take_while(|((p, _, _), _)| *p == parent)
            .take(limit)
            .map(|((_, _, n), d)| (n.clone(), *d))
            .collect())
    }

    fn count_dentries(&mut self, parent: u64) -> Result<u64> {
        Ok(self
            .st()
            .dentries
            .range((parent, Vec::new())..)
            .take_while(|((p, _), _)| *p == parent)
            .count() as u64)
    }

    fn get_xattr(&mut self, ino: u64, name: &[u8]) -> Result<Option<Vec<u8>>> {
        Ok(self.st().xattrs.get(&(ino, name.to_vec())).cloned())
    }

    fn set_xattr(&mut self, ino: u64, name: &[u8], value: &[u8]) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let key = (ino, name.to_vec());
        let old = st.xattrs.insert(key.clone(), value.to_vec());
        undo.push(Undo::Xattr(key, old));
        Ok(())
    }

    fn delete_xattr(&mut self, ino: u64, name: &[u8]) -> Result<bool> {
        let (st, undo) = self.st_mut()?;
        let key = (ino, name.to_vec());
        let old = st.xattrs.remove(&key);
        let existed = old.is_some();
        undo.push(Undo::Xattr(key, old));
        Ok(existed)
    }

    fn list_xattrs(&mut self, ino: u64) -> Result<Vec<Vec<u8>>> {
        Ok(self
            .st()
            .xattrs
            .range((ino, Vec::new())..)
            .take_while(|((i, _), _)| *i == ino)
            .map(|((_, n), _)| n.clone())
            .collect())
    }

    fn xattr_name_in_use(&mut self, name: &[u8]) -> Result<bool> {
        Ok(self.st().xattrs.keys().any(|(_, n)| n == name))
    }

    fn get_record(&mut self, ino: u64, index: u64) -> Result<Option<RecordRef>> {
        Ok(self.st().records.get(&(ino, index)).cloned())
    }

    fn put_record(&mut self, ino: u64, index: u64, rec: &RecordRef) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let old = st.set_record((ino, index), Some(rec.clone()));
        undo.push(Undo::Record((ino, index), old));
        Ok(())
    }

    fn delete_record(&mut self, ino: u64, index: u64) -> Result<bool> {
        let (st, undo) = self.st_mut()?;
        let old = st.set_record((ino, index), None);
        let existed = old.is_some();
        undo.push(Undo::Record((ino, index), old));
        Ok(existed)
    }

    fn list_records(&mut self, ino: u64, range: Range<u64>) -> Result<Vec<(u64, RecordRef)>> {
        if range.start >= range.end {
            return Ok(Vec::new());
        }
        Ok(self
            .st()
            .records
            .range((ino, range.start)..(ino, range.end))
            .map(|((_, i), r)| (*i, r.clone()))
            .collect())
    }

    fn delete_records_from(&mut self, ino: u64, from: u64) -> Result<Vec<(u64, RecordRef)>> {
        let doomed: Vec<u64> = self
            .st()
            .records
            .range((ino, from)..=(ino, u64::MAX))
            .map(|((_, i), _)| *i)
            .collect();
        let (st, undo) = self.st_mut()?;
        let mut out = Vec::with_capacity(doomed.len());
        for i in doomed {
            if let Some(r) = st.set_record((ino, i), None) {
                undo.push(Undo::Record((ino, i), Some(r.clone())));
                out.push((i, r));
            }
        }
        Ok(out)
    }

    fn segment_usage(&mut self) -> Result<BTreeMap<u64, SegmentUsage>> {
        let mut out: BTreeMap<u64, SegmentUsage> = BTreeMap::new();
        for r in self.st().records.values().filter(|r| r.in_segment()) {
            let u = out.entry(r.segment).or_default();
            u.records += 1;
            u.stored_bytes += u64::from(r.stored_len);
        }
        Ok(out)
    }

    fn codec_usage(&mut self) -> Result<BTreeMap<u8, CodecSpace>> {
        let mut out: BTreeMap<u8, CodecSpace> = BTreeMap::new();
        for r in self.st().records.values() {
            let u = out.entry(r.codec).or_default();
            u.records += 1;
            u.logical_bytes += u64::from(r.logical_len);
            u.stored_bytes += u64::from(r.stored_len);
        }
        Ok(out)
    }

    fn records_in_segment(&mut self, segment: u64) -> Result<Vec<RecordLocation>> {
        let st = self.st();
        st.by_segment
            .range((segment, 0, 0, 0)..=(segment, u64::MAX, u64::MAX, u64::MAX))
            .map(|&(_, _, ino, index)| {
                let rec =
                    st.records.get(&(ino, index)).cloned().ok_or_else(|| {
                        MetaError::engine("memory engine segment index out of step")
                    })?;
                Ok(RecordLocation { ino, index, rec })
            })
            .collect()
    }

    fn scan_records(
        &mut self,
        after: Option<(u64, u64)>,
        limit: usize,
    ) -> Result<Vec<RecordLocation>> {
        let start = match after {
            Some(k) => Bound::Excluded(k),
            None => Bound::Unbounded,
        };
        Ok(self
            .st()
            .records
            .range((start, Bound::Unbounded))
            .take(limit)
            .map(|(&(ino, index), rec)| RecordLocation {
                ino,
                index,
                rec: rec.clone(),
            })
            .collect())
    }

    fn list_orphans(&mut self) -> Result<Vec<u64>> {
        Ok(self.st().orphans.iter().copied().collect())
    }

    fn get_prop(&mut self, ino: u64, name: &str) -> Result<Option<String>> {
        Ok(self.st().props.get(&(ino, name.to_string())).cloned())
    }

    fn set_prop(&mut self, ino: u64, name: &str, value: &str) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let key = (ino, name.to_string());
        let old = st.props.insert(key.clone(), value.to_string());
        undo.push(Undo::Prop(key, old));
        Ok(())
    }

    fn delete_prop(&mut self, ino: u64, name: &str) -> Result<bool> {
        let (st, undo) = self.st_mut()?;
        let key = (ino, name.to_string());
        let old = st.props.remove(&key);
        let existed = old.is_some();
        undo.push(Undo::Prop(key, old));
        Ok(existed)
    }

    fn list_props(&mut self, ino: u64) -> Result<Vec<(String, String)>> {
        Ok(self
            .st()
            .props
            .range((ino, String::new())..)
            .take_while(|((i, _), _)| *i == ino)
            .map(|((_, n), v)| (n.clone(), v.clone()))
            .collect())
    }

    fn get_counter(&mut self, name: &str) -> Result<u64> {
        Ok(self.st().counters.get(name).copied().unwrap_or(0))
    }

    fn set_counter(&mut self, name: &str, value: u64) -> Result<()> {
        let (st, undo) = self.st_mut()?;
        let old = st.counters.insert(name.to_string(), value);
        undo.push(Undo::Counter(name.to_string(), old));
        Ok(())
    }

    fn commit(mut self: Box<Self>) -> Result<()> {
        if let Some(faults) = self.faults {
            // Dropping `self` on the error rolls the transaction back.
            faults.on_commit(self.durable)?;
        }
        self.committed = true;
        self.undo.clear();
        if let (Some(sim), Guard::Write(state)) = (self.sim, &self.guard) {
            *sim.durable.lock().unwrap_or_else(|e| e.into_inner()) = (**state).clone();
        }
        Ok(())
    }
}
