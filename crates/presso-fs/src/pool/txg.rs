//! Transaction groups: the metadata ops waiting for the next commit, the numbering of groups,
//! the waiting of those who need a group committed, and the report of what each group committed.
//!
//! The commit thread (in the pool) takes the open group with [`Txgs::next_group`], commits it
//! and hands the outcome back with [`Txgs::finish`]. Nothing here calls up into the layers above:
//! they learn what committed from the [`Committed`] events of [`Txgs::events`].

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{unbounded, Receiver, Sender};
use parking_lot::{Condvar, Mutex, RwLock, RwLockReadGuard};
use presso_meta::TxgOp;

use crate::error::{FsError, Result};

/// Identifies a queued op for its queuer's bookkeeping when its group commits.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OpTag {
    /// File.
    pub ino: u64,
    /// Record index (or a marker the queuer chose).
    pub index: u64,
    /// The queuer's generation of that record's contents.
    pub generation: u64,
}

/// What one group committed: its number and the tags of its ops.
#[derive(Debug, Clone)]
pub struct Committed {
    /// The group's number.
    pub number: u64,
    /// Tags of the group's tagged ops, in queue order.
    pub tags: Vec<OpTag>,
}

/// A closed group, handed to the commit thread.
#[derive(Debug)]
pub struct Group {
    /// Its number.
    pub number: u64,
    /// Its ops, in queue order.
    pub ops: Vec<TxgOp>,
    tags: Vec<OpTag>,
    /// Whether someone asked for durability against power loss.
    pub durable: bool,
}

#[derive(Default)]
struct State {
    ops: Vec<TxgOp>,
    tags: Vec<OpTag>,
    /// Number of the open group; `committed` is the last one that was closed (committed or
    /// failed: see `error`).
    open: u64,
    committed: u64,
    requested: u64,
    durable: bool,
    /// The last failure and the group it hit.
    error: Option<(u64, Arc<FsError>)>,
    shutdown: bool,
    /// Stopped without committing what is queued.
    halted: bool,
    /// Stopped by this failure (of that group): nothing commits any more, and every commit
    /// asked for gets it.
    stopped: Option<(u64, Arc<FsError>)>,
}

/// The transaction groups of one pool.
pub struct Txgs {
    state: Mutex<State>,
    changed: Condvar,
    events: (Sender<Committed>, Receiver<Committed>),
    /// Read-held by a [`TxgHold`]; the open group closes only under the write side.
    gate: RwLock<()>,
}

/// Keeps the open group open: an op queued while this is held goes into group
/// [`TxgHold::number`], which a frame's tag can therefore name before the op is queued.
pub struct TxgHold<'a> {
    _gate: RwLockReadGuard<'a, ()>,
    number: u64,
}

impl TxgHold<'_> {
    /// The group every op queued while this is held goes into.
    pub fn number(&self) -> u64 {
        self.number
    }
}

impl Default for Txgs {
    fn default() -> Self {
        Txgs::starting_after(0)
    }
}

impl Txgs {
    /// Groups numbered from `last + 1`: a pool goes on above the last group its metadata
    /// committed, so group numbers (which segment entries carry) never go down.
    pub fn starting_after(last: u64) -> Self {
        Txgs {
            state: Mutex::new(State {
                open: last + 1,
                committed: last,
                requested: last,
                ..State::default()
            }),
            changed: Condvar::new(),
            events: unbounded(),
            gate: RwLock::new(()),
        }
    }

    /// The number of the last group committed.
    pub fn last_committed(&self) -> u64 {
        self.state.lock().committed
    }

    /// Holds the open group open until the returned guard is dropped (briefly: a frame's
    /// append and the queuing of its op). Do not wait for a commit while holding it.
    pub fn hold(&self) -> TxgHold<'_> {
        let gate = self.gate.read();
        let number = self.state.lock().open;
        TxgHold {
            _gate: gate,
            number,
        }
    }

    /// Queues `op` in the open group and returns that group's number.
    pub fn queue(&self, op: TxgOp, tag: Option<OpTag>) -> u64 {
        let mut st = self.state.lock();
        st.ops.push(op);
        if let Some(tag) = tag {
            st.tags.push(tag);
        }
        if st.ops.len() == 1 {
            self.changed.notify_all();
        }
        st.open
    }

    /// Closes the open group now and waits until it (and everything queued before this call)
    /// is committed; with `durable`, also durable against power loss.
    pub fn commit(&self, durable: bool) -> Result<()> {
        let mut st = self.state.lock();
        let target = st.open;
        st.requested = st.requested.max(target);
        st.durable |= durable;
        self.changed.notify_all();
        while st.committed < target {
            if let Some((group, error)) = &st.stopped {
                return Err(FsError::Commit {
                    group: *group,
                    source: error.clone(),
                });
            }
            if st.shutdown {
                return Err(FsError::Closing);
            }
            self.changed.wait(&mut st);
        }
        // A failed group keeps its ops for the next one: the failure stands until a later
        // group commits them.
        match &st.error {
            Some((at, error)) if *at >= target => Err(FsError::Commit {
                group: *at,
                source: error.clone(),
            }),
            _ => Ok(()),
        }
    }

    /// Every group's [`Committed`] report, in order (one receiver per caller; each report goes
    /// to one of them).
    pub fn events(&self) -> Receiver<Committed> {
        self.events.1.clone()
    }

    /// Waits until the open group should close (someone asked, or it is older than `interval`)
    /// and closes it; `None` once the thread should stop.
    pub fn next_group(&self, interval: Duration) -> Option<Group> {
        let deadline = Instant::now() + interval;
        let mut st = self.state.lock();
        loop {
            if st.halted || (st.shutdown && st.ops.is_empty()) {
                return None;
            }
            if st.requested >= st.open {
                break;
            }
            let now = Instant::now();
            if now >= deadline {
                break;
            }
            self.changed.wait_for(&mut st, deadline - now);
        }
        // The gate before the state, as holders take them: the group closes once no frame
        // tagged with its number is between its append and its op's queuing.
        drop(st);
        let _closing = self.gate.write();
        let mut st = self.state.lock();
        if st.halted {
            return None;
        }
        let number = st.open;
        st.open += 1;
        Some(Group {
            number,
            ops: std::mem::take(&mut st.ops),
            tags: std::mem::take(&mut st.tags),
            durable: std::mem::take(&mut st.durable),
        })
    }

    /// The outcome of committing `group`: on success its report goes out; on failure its ops go
    /// back in front of the queue, in order (the frames they name are appended, and applying
    /// them later is still correct), and its waiters get the error. A failure after
    /// [`Txgs::shut_down`] stops the groups for good: a closing pool does not retry forever
    /// (its close reports the failure, and the ops are lost with it).
    pub fn finish(&self, group: Group, result: Result<()>) {
        let mut st = self.state.lock();
        match result {
            Ok(()) => {
                let _ = self.events.0.send(Committed {
                    number: group.number,
                    tags: group.tags,
                });
            }
            Err(e) => {
                let mut ops = group.ops;
                ops.append(&mut st.ops);
                st.ops = ops;
                let mut tags = group.tags;
                tags.append(&mut st.tags);
                st.tags = tags;
                st.error = Some((group.number, Arc::new(e)));
                if st.shutdown {
                    st.halted = true;
                    st.stopped = st.error.clone();
                }
            }
        }
        st.committed = group.number;
        self.changed.notify_all();
    }

    /// No more groups after the queued ones: the thread stops once they are committed.
    pub fn shut_down(&self) {
        self.state.lock().shutdown = true;
        self.changed.notify_all();
    }

    /// The commit thread stops because of the last failure (a failed segment sync, after which
    /// nothing can commit until the pool is reopened): queued ops stay uncommitted, and every
    /// commit waited for or asked for from now on fails with that failure instead of waiting.
    pub fn stop_failed(&self) {
        let mut st = self.state.lock();
        st.halted = true;
        let last = st.committed;
        st.stopped = Some(
            st.error
                .clone()
                .unwrap_or_else(|| (last, Arc::new(FsError::Closing))),
        );
        self.changed.notify_all();
    }

    /// Stop at once, committing nothing more (what a killed daemon leaves).
    pub fn halt(&self) {
        let mut st = self.state.lock();
        st.shutdown = true;
        st.halted = true;
        self.changed.notify_all();
    }
}
