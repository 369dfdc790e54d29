//! Injected I/O faults of the memory engine, for the error-handling tests of the layers above:
//! commits that fail as a database whose disk returns EIO, read transactions that cannot start,
//! and counts of what was tried and what failed.
//!
//! The faults are shared by every handle of one engine ([`MemoryEngine::handle`]) and hold
//! until [`MemoryEngine::clear_faults`]. A failed commit is rolled back in full, as SQLite rolls
//! back a transaction whose commit failed, and returns [`MetaError::Io`]; with the power-cut
//! simulation, a failed durable commit leaves the durable state as it was.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};

use super::MemoryEngine;
use crate::error::{MetaError, Result};

/// What a [`MemoryEngine`] was asked to do, and how much of it failed by an injected fault.
#[derive(Debug, Default, Clone, Copy, PartialEq, Eq)]
pub struct FaultStats {
    /// Write transactions that reached their commit.
    pub commits: u64,
    /// Of those, the ones failed by an injected fault (and rolled back).
    pub failed_commits: u64,
    /// Read transactions begun (the failed ones included).
    pub reads: u64,
    /// Read transactions refused by an injected fault.
    pub failed_reads: u64,
}

#[derive(Debug, Default)]
pub(super) struct Faults {
    commits: AtomicBool,
    durable_commits: AtomicBool,
    reads: AtomicBool,
    stats_commits: AtomicU64,
    stats_failed_commits: AtomicU64,
    stats_reads: AtomicU64,
    stats_failed_reads: AtomicU64,
}

fn injected(what: &str) -> MetaError {
    MetaError::Io(format!("injected I/O error on {what}"))
}

impl Faults {
    /// Counts a commit; its error if a fault fails it.
    pub(super) fn on_commit(&self, durable: bool) -> Result<()> {
        self.stats_commits.fetch_add(1, Ordering::Relaxed);
        let fail = self.commits.load(Ordering::SeqCst)
            || (durable && self.durable_commits.load(Ordering::SeqCst));
        if fail {
            self.stats_failed_commits.fetch_add(1, Ordering::Relaxed);
            return Err(injected(if durable {
                "a durable commit"
            } else {
                "a commit"
            }));
        }
        Ok(())
    }

    /// Counts a read transaction; its error if a fault refuses it.
    pub(super) fn on_read(&self) -> Result<()> {
        self.stats_reads.fetch_add(1, Ordering::Relaxed);
        if self.reads.load(Ordering::SeqCst) {
            self.stats_failed_reads.fetch_add(1, Ordering::Relaxed);
            return Err(injected("a read"));
        }
        Ok(())
    }
}

impl MemoryEngine {
    /// Every commit of a write transaction fails with [`MetaError::Io`] and is rolled back,
    /// until [`MemoryEngine::clear_faults`]: a database whose disk returns EIO on writes.
    pub fn fail_commits(&self) {
        self.faults.commits.store(true, Ordering::SeqCst);
    }

    /// Every commit of a durable write transaction ([`crate::MetaEngine::write_durable`])
    /// fails with [`MetaError::Io`] and is rolled back, until [`MemoryEngine::clear_faults`]:
    /// the sync of the database's log failing. Ordinary commits still work.
    pub fn fail_durable_commits(&self) {
        self.faults.durable_commits.store(true, Ordering::SeqCst);
    }

    /// Every read transaction fails to begin with [`MetaError::Io`], until
    /// [`MemoryEngine::clear_faults`]. Write transactions still read.
    pub fn fail_reads(&self) {
        self.faults.reads.store(true, Ordering::SeqCst);
    }

    /// Disarms every injected fault.
    pub fn clear_faults(&self) {
        self.faults.commits.store(false, Ordering::SeqCst);
        self.faults.durable_commits.store(false, Ordering::SeqCst);
        self.faults.reads.store(false, Ordering::SeqCst);
    }

    /// Commits and read transactions so far (over every handle of this engine), and how many
    /// an injected fault failed.
    pub fn fault_stats(&self) -> FaultStats {
        let f = &self.faults;
        FaultStats {
            commits: f.stats_commits.load(Ordering::Relaxed),
            failed_commits: f.stats_failed_commits.load(Ordering::Relaxed),
            reads: f.stats_reads.load(Ordering::Relaxed),
            failed_reads: f.stats_failed_reads.load(Ordering::Relaxed),
        }
    }
}
