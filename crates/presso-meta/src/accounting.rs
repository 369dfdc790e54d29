//! Space accounting: the logical/stored/garbage counters and the helpers that keep them exact.

use crate::engine::{
    RecordRef, Txn, COUNTER_GARBAGE, COUNTER_LOGICAL, COUNTER_STORED, STATISTICS_PREFIX,
};
use crate::error::{MetaError, Result};
use crate::{MetaStore, SpaceUsage};

/// Counter changes collected over a transaction group and written once at its end.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    logical_add: u64,
    logical_sub: u64,
    stored_add: u64,
    stored_sub: u64,
    garbage_add: u64,
}

impl Delta {
    /// A record starts being referenced.
    pub(crate) fn take(&mut self, r: &RecordRef) {
        self.logical_add = self.logical_add.saturating_add(u64::from(r.logical_len));
        self.stored_add = self.stored_add.saturating_add(u64::from(r.stored_len));
    }

    /// A record stops being referenced; its segment bytes (if any) become garbage.
    pub(crate) fn drop_ref(&mut self, r: &RecordRef) {
        self.logical_sub = self.logical_sub.saturating_add(u64::from(r.logical_len));
        self.stored_sub = self.stored_sub.saturating_add(u64::from(r.stored_len));
        self.waste(r);
    }

    /// A frame was handed over but never referenced: straight to garbage.
    pub(crate) fn waste(&mut self, r: &RecordRef) {
        if r.in_segment() {
            self.garbage_add = self.garbage_add.saturating_add(u64::from(r.stored_len));
        }
    }

    pub(crate) fn apply(&self, tx: &mut dyn Txn) -> Result<()> {
        if self.logical_add != 0 || self.logical_sub != 0 {
            add_counter(tx, COUNTER_LOGICAL, self.logical_add, self.logical_sub)?;
        }
        if self.stored_add != 0 || self.stored_sub != 0 {
            add_counter(tx, COUNTER_STORED, self.stored_add, self.stored_sub)?;
        }
        if self.garbage_add != 0 {
            add_counter(tx, COUNTER_GARBAGE, self.garbage_add, 0)?;
        }
        Ok(())
    }
}

pub(crate) fn add_counter(tx: &mut dyn Txn, name: &str, add: u64, sub: u64) -> Result<()> {
    let v = tx.get_counter(name)?;
    tx.set_counter(name, v.saturating_add(add).saturating_sub(sub))
}

/// Accounts for records that stopped being referenced.
pub(crate) fn account_dropped<'a>(
    tx: &mut dyn Txn,
    recs: impl IntoIterator<Item = &'a RecordRef>,
) -> Result<()> {
    let (mut logical, mut stored, mut garbage) = (0u64, 0u64, 0u64);
    for r in recs {
        logical += u64::from(r.logical_len);
        stored += u64::from(r.stored_len);
        if r.inline.is_none() {
            garbage += u64::from(r.stored_len);
        }
    }
    if logical == 0 && stored == 0 {
        return Ok(());
    }
    add_counter(tx, COUNTER_LOGICAL, 0, logical)?;
    add_counter(tx, COUNTER_STORED, 0, stored)?;
    add_counter(tx, COUNTER_GARBAGE, garbage, 0)
}

impl MetaStore {
    /// Current space accounting totals.
    pub fn space(&self) -> Result<SpaceUsage> {
        self.read(|tx| {
            Ok(SpaceUsage {
                logical: tx.get_counter(COUNTER_LOGICAL)?,
                stored: tx.get_counter(COUNTER_STORED)?,
                garbage: tx.get_counter(COUNTER_GARBAGE)?,
            })
        })
    }

    /// Adds `amount` to each named statistics counter (missing ones start at 0; sums saturate),
    /// all in one transaction. Names must start with [`STATISTICS_PREFIX`], so statistics never
    /// touch the accounting and inode counters.
    pub fn add_statistics(&self, adds: &[(&str, u64)]) -> Result<()> {
        if let Some((name, _)) = adds.iter().find(|(n, _)| !n.starts_with(STATISTICS_PREFIX)) {
            return Err(MetaError::invalid(format!(
                "statistics counter {name:?} does not start with {STATISTICS_PREFIX:?}"
            )));
        }
        if adds.iter().all(|&(_, amount)| amount == 0) {
            return Ok(());
        }
        self.write(|tx| {
            for &(name, amount) in adds {
                add_counter(tx, name, amount, 0)?;
            }
            Ok(())
        })
    }

    /// The values of the named statistics counters (0 for one never added to), read in one
    /// transaction.
    pub fn statistics(&self, names: &[&str]) -> Result<Vec<u64>> {
        self.read(|tx| names.iter().map(|name| tx.get_counter(name)).collect())
    }

    /// Tells the accounting that `bytes` of garbage were reclaimed (e.g. by segment compaction).
    pub fn release_garbage(&self, bytes: u64) -> Result<()> {
        self.write(|tx| add_counter(tx, COUNTER_GARBAGE, 0, bytes))
    }
}
