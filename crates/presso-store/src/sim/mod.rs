//! A simulated pool directory for tests: crashes, torn writes and injected I/O faults.
//!
//! Every file keeps a *durable* image (what survives a crash) and a *live* image (what reads see),
//! plus the list of operations since the last sync. [`Storage::sync`] applies them to the durable
//! image. [`SimDir::crash`] throws them away; [`SimDir::crash_torn`] keeps, per file, a random
//! prefix of them in order, the last one possibly cut short (a torn write).
//!
//! Directory operations (create, rename, remove) are durable at once; `sync_dir` is a no-op.
//! Handles opened before a crash fail afterwards (like a process that died).
//!
//! [`StorageDir::lock`] is an in-memory flag shared by the clones of one `SimDir`: a second lock
//! fails while the first is held, and dropping the lock or a crash releases it.
//!
//! Faults (see [`faults`]): writes, syncs and reads that fail with a given errno (`libc::EIO`,
//! `libc::ENOSPC`, ...), once or until cleared; a failed sync that also forgets the writes it
//! did not make durable, as Linux may after a failed fsync; a space budget capping the total
//! live bytes of all files (a write that would pass it writes what fits and then fails with
//! ENOSPC). [`SimDir::io_stats`] counts the calls and the faults they hit.

use std::collections::BTreeMap;
use std::io;
use std::sync::Arc;

use parking_lot::Mutex;
use rand::Rng;

use crate::io::{DirLock, LockError, Storage, StorageDir};

pub mod faults;

use faults::Faults;
pub use faults::IoStats;

#[derive(Clone, Debug)]
enum Op {
    Write { offset: u64, data: Vec<u8> },
    SetLen(u64),
}

fn apply(image: &mut Vec<u8>, op: &Op) {
    match op {
        Op::Write { offset, data } => write_into(image, *offset, data),
        Op::SetLen(len) => image.resize(*len as usize, 0),
    }
}

fn write_into(image: &mut Vec<u8>, offset: u64, data: &[u8]) {
    let start = offset as usize;
    let end = start + data.len();
    if image.len() < end {
        image.resize(end, 0);
    }
    image[start..end].copy_from_slice(data);
}

#[derive(Debug, Default)]
struct SimFile {
    id: u64,
    durable: Vec<u8>,
    live: Vec<u8>,
    pending: Vec<Op>,
}

#[derive(Debug, Default)]
struct SimState {
    files: BTreeMap<String, SimFile>,
    next_id: u64,
    generation: u64,
    faults: Faults,
    /// Token of the lock holder.
    lock: Option<u64>,
    next_lock: u64,
    stats: IoStats,
}

impl SimState {
    fn live_total(&self) -> u64 {
        self.files.values().map(|f| f.live.len() as u64).sum()
    }
}

/// A simulated directory (cheap to clone; clones share the same files).
#[derive(Clone, Debug, Default)]
pub struct SimDir {
    state: Arc<Mutex<SimState>>,
}

/// A file of a [`SimDir`].
#[derive(Debug)]
pub struct SimStorage {
    state: Arc<Mutex<SimState>>,
    name: String,
    id: u64,
    generation: u64,
}

impl SimDir {
    /// An empty directory.
    pub fn new() -> Self {
        Self::default()
    }

    /// Loses everything not synced.
    pub fn crash(&self) {
        let mut st = self.state.lock();
        for f in st.files.values_mut() {
            f.pending.clear();
            f.live = f.durable.clone();
        }
        st.after_crash();
    }

    /// Crashes keeping, per file, a random prefix of the unsynced operations; the first operation
    /// not kept whole may be kept in part (a random prefix of its bytes: a torn write).
    pub fn crash_torn<R: Rng>(&self, rng: &mut R) {
        let mut st = self.state.lock();
        for f in st.files.values_mut() {
            let pending = std::mem::take(&mut f.pending);
            let keep = rng.gen_range(0..=pending.len());
            for op in &pending[..keep] {
                apply(&mut f.durable, op);
            }
            if let Some(Op::Write { offset, data }) = pending.get(keep) {
                let cut = rng.gen_range(0..=data.len());
                write_into(&mut f.durable, *offset, &data[..cut]);
            }
            f.live = f.durable.clone();
        }
        st.after_crash();
    }

    /// Total live bytes of all files.
    pub fn used_bytes(&self) -> u64 {
        self.state.lock().live_total()
    }

    /// The live contents of a file.
    pub fn contents(&self, name: &str) -> Option<Vec<u8>> {
        self.state.lock().files.get(name).map(|f| f.live.clone())
    }

    /// Replaces a file's contents, durably (creating it if needed): for damaging files in tests.
    pub fn set_contents(&self, name: &str, data: &[u8]) {
        let mut st = self.state.lock();
        let id = st.next_id;
        let f = st.files.entry(name.to_string()).or_insert_with(|| SimFile {
            id,
            ..Default::default()
        });
        f.durable = data.to_vec();
        f.live = data.to_vec();
        f.pending.clear();
        st.next_id += 1;
    }

    /// Whether the directory's lock is held.
    pub fn is_locked(&self) -> bool {
        self.state.lock().lock.is_some()
    }
}

impl SimState {
    fn after_crash(&mut self) {
        self.generation += 1;
        self.lock = None;
        self.faults.disarm();
    }
}

/// Releases a [`SimDir`]'s lock when dropped, unless a crash already did (and someone else may
/// hold it now).
struct SimLock {
    state: Arc<Mutex<SimState>>,
    token: u64,
}

impl Drop for SimLock {
    fn drop(&mut self) {
        let mut st = self.state.lock();
        if st.lock == Some(self.token) {
            st.lock = None;
        }
    }
}

fn stale() -> io::Error {
    io::Error::new(
        io::ErrorKind::NotFound,
        "simulated file handle is stale (removed or crashed)",
    )
}

impl SimStorage {
    fn with_file<T>(&self, f: impl FnOnce(&mut SimState) -> io::Result<T>) -> io::Result<T> {
        let mut st = self.state.lock();
        let valid = st.generation == self.generation
            && st
                .files
                .get(&self.name)
                .is_some_and(|file| file.id == self.id);
        if !valid {
            return Err(stale());
        }
        f(&mut st)
    }
}

impl Storage for SimStorage {
    fn len(&self) -> io::Result<u64> {
        self.with_file(|st| Ok(st.files[&self.name].live.len() as u64))
    }

    fn read_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.with_file(|st| {
            st.stats.reads += 1;
            if let Some(errno) = st.faults.read_error(&self.name, offset, buf.len() as u64) {
                st.stats.failed_reads += 1;
                return Err(io::Error::from_raw_os_error(errno));
            }
            let live = &st.files[&self.name].live;
            let start = usize::try_from(offset).unwrap_or(usize::MAX);
            match start.checked_add(buf.len()) {
                Some(end) if end <= live.len() => {
                    buf.copy_from_slice(&live[start..end]);
                    Ok(())
                }
                _ => Err(io::Error::new(
                    io::ErrorKind::UnexpectedEof,
                    "read past end of file",
                )),
            }
        })
    }

    fn write_at(&self, data: &[u8], offset: u64) -> io::Result<()> {
        self.with_file(|st| {
            st.stats.writes += 1;
            if let Some(errno) = st.faults.write_error() {
                st.stats.failed_writes += 1;
                return Err(io::Error::from_raw_os_error(errno));
            }
            let mut data = data;
            let mut result = Ok(());
            if let Some(budget) = st.faults.budget {
                let cur = st.files[&self.name].live.len() as u64;
                let grow = (offset + data.len() as u64).saturating_sub(cur);
                let room = budget.saturating_sub(st.live_total());
                if grow > room {
                    // Write what fits, then fail, like a real short write on a full device.
                    let fits = (cur + room).saturating_sub(offset).min(data.len() as u64);
                    data = &data[..fits as usize];
                    result = Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
            }
            if !data.is_empty() {
                let f = st.files.get_mut(&self.name).expect("checked");
                write_into(&mut f.live, offset, data);
                f.pending.push(Op::Write {
                    offset,
                    data: data.to_vec(),
                });
            }
            result
        })
    }

    fn sync(&self) -> io::Result<()> {
        self.with_file(|st| {
            st.stats.syncs += 1;
            if let Some((errno, forget)) = st.faults.sync_error() {
                st.stats.failed_syncs += 1;
                if forget {
                    // The kernel dropped the pages it could not write: what was not durable is
                    // gone, from reads too, and a later sync has nothing left to fail on.
                    let f = st.files.get_mut(&self.name).expect("checked");
                    let dropped = std::mem::take(&mut f.pending).len() as u64;
                    f.live = f.durable.clone();
                    st.stats.forgotten_writes += dropped;
                }
                return Err(io::Error::from_raw_os_error(errno));
            }
            let f = st.files.get_mut(&self.name).expect("checked");
            for op in std::mem::take(&mut f.pending) {
                apply(&mut f.durable, &op);
            }
            Ok(())
        })
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.with_file(|st| {
            let cur = st.files[&self.name].live.len() as u64;
            if let Some(budget) = st.faults.budget {
                if len > cur && len - cur > budget.saturating_sub(st.live_total()) {
                    return Err(io::Error::from_raw_os_error(libc::ENOSPC));
                }
            }
            let f = st.files.get_mut(&self.name).expect("checked");
            f.live.resize(len as usize, 0);
            f.pending.push(Op::SetLen(len));
            Ok(())
        })
    }
}

impl SimDir {
    fn handle(&self, st: &SimState, name: &str) -> Arc<dyn Storage> {
        Arc::new(SimStorage {
            state: self.state.clone(),
            name: name.to_string(),
            id: st.files[name].id,
            generation: st.generation,
        })
    }
}

impl StorageDir for SimDir {
    fn create(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        let mut st = self.state.lock();
        if st.files.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::AlreadyExists));
        }
        let id = st.next_id;
        st.next_id += 1;
        st.files.insert(
            name.to_string(),
            SimFile {
                id,
                ..Default::default()
            },
        );
        Ok(self.handle(&st, name))
    }

    fn open(&self, name: &str) -> io::Result<Arc<dyn Storage>> {
        let st = self.state.lock();
        if !st.files.contains_key(name) {
            return Err(io::Error::from(io::ErrorKind::NotFound));
        }
        Ok(self.handle(&st, name))
    }

    fn list(&self) -> io::Result<Vec<String>> {
        Ok(self.state.lock().files.keys().cloned().collect())
    }

    fn remove(&self, name: &str) -> io::Result<()> {
        match self.state.lock().files.remove(name) {
            Some(_) => Ok(()),
            None => Err(io::Error::from(io::ErrorKind::NotFound)),
        }
    }

    fn rename(&self, from: &str, to: &str) -> io::Result<()> {
        let mut st = self.state.lock();
        let file = st
            .files
            .remove(from)
            .ok_or_else(|| io::Error::from(io::ErrorKind::NotFound))?;
        st.files.insert(to.to_string(), file);
        Ok(())
    }

    fn sync_dir(&self) -> io::Result<()> {
        Ok(())
    }

    fn describe(&self) -> String {
        "<simulated directory>".to_string()
    }

    /// Known only under a space budget: the budget, and what of it is not used yet.
    fn space(&self) -> Option<(u64, u64)> {
        let st = self.state.lock();
        st.faults
            .budget
            .map(|budget| (budget, budget.saturating_sub(st.live_total())))
    }

    fn lock(&self) -> Result<DirLock, LockError> {
        let mut st = self.state.lock();
        if st.lock.is_some() {
            // Every holder of a simulated directory lives in this process.
            return Err(LockError::Held {
                pid: Some(std::process::id()),
            });
        }
        let token = st.next_lock;
        st.next_lock += 1;
        st.lock = Some(token);
        Ok(DirLock::new(SimLock {
            state: self.state.clone(),
            token,
        }))
    }
}
