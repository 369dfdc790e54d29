//! Transaction groups: a batch of record-map, size and file-property updates applied in one
//! write transaction.

use std::collections::HashMap;

use crate::accounting::Delta;
use crate::engine::{FileKind, RecordRef, Txn, COUNTER_LAST_TXG};
use crate::error::{MetaError, Result};
use crate::records::check_record;
use crate::xattr::check_attr_name;
use crate::{MetaStore, TxgOp, TxgOutcome, RECORD_INDEX_LIMIT};

fn check_txg_op(op: &TxgOp) -> Result<()> {
    match op {
        TxgOp::SetRecord { index, rec, .. } | TxgOp::MoveRecord { index, rec, .. } => {
            check_record(*index, rec)
        }
        TxgOp::ClearRecord { index, .. } if *index >= RECORD_INDEX_LIMIT => {
            Err(MetaError::invalid("record index too large"))
        }
        TxgOp::SetProp { name, .. } => check_attr_name(name.as_bytes()),
        TxgOp::ClearRecord { .. } | TxgOp::SetSize { .. } => Ok(()),
    }
}

/// Whether `ino` exists and is a regular file, remembered in `files`. Sound for one transaction
/// group because none of its ops creates, removes or retypes an inode.
fn is_file(tx: &mut dyn Txn, files: &mut HashMap<u64, bool>, ino: u64) -> Result<bool> {
    if let Some(&known) = files.get(&ino) {
        return Ok(known);
    }
    let yes = tx
        .get_inode(ino)?
        .is_some_and(|row| row.attr.kind == FileKind::File);
    files.insert(ino, yes);
    Ok(yes)
}

/// Applies the ops of one transaction group inside `tx`; see [`MetaStore::apply_txg`].
fn apply_ops(tx: &mut dyn Txn, ops: &[TxgOp]) -> Result<TxgOutcome> {
    let mut out = TxgOutcome::default();
    let mut delta = Delta::default();
    let mut files = HashMap::new();
    let skip = |delta: &mut Delta, out: &mut TxgOutcome, rec: &RecordRef| {
        delta.waste(rec);
        if rec.in_segment() {
            out.not_applied.push(rec.clone());
        }
    };
    for op in ops {
        match op {
            TxgOp::SetRecord { ino, index, rec } => {
                if !is_file(tx, &mut files, *ino)? {
                    skip(&mut delta, &mut out, rec);
                    continue;
                }
                let old = tx.replace_record(*ino, *index, rec)?;
                if old.as_ref() == Some(rec) {
                    continue;
                }
                delta.take(rec);
                if let Some(old) = old {
                    delta.drop_ref(&old);
                    if old.in_segment() {
                        out.replaced.push(old);
                    }
                }
            }
            TxgOp::ClearRecord { ino, index } => {
                if !is_file(tx, &mut files, *ino)? {
                    continue;
                }
                if let Some(old) = tx.get_record(*ino, *index)? {
                    tx.delete_record(*ino, *index)?;
                    delta.drop_ref(&old);
                    if old.in_segment() {
                        out.replaced.push(old);
                    }
                }
            }
            TxgOp::MoveRecord {
                ino,
                index,
                from_segment,
                from_offset,
                rec,
            } => {
                let cur = if is_file(tx, &mut files, *ino)? {
                    tx.get_record(*ino, *index)?
                } else {
                    None
                };
                match cur {
                    Some(cur)
                        if cur.in_segment()
                            && cur.segment == *from_segment
                            && cur.offset == *from_offset =>
                    {
                        if cur != *rec {
                            tx.put_record(*ino, *index, rec)?;
                            delta.take(rec);
                            delta.drop_ref(&cur);
                            out.replaced.push(cur);
                        }
                    }
                    _ => skip(&mut delta, &mut out, rec),
                }
            }
            TxgOp::SetSize { ino, size, mtime } => {
                let Some(mut row) = tx.get_inode(*ino)? else {
                    files.insert(*ino, false);
                    continue;
                };
                files.insert(*ino, row.attr.kind == FileKind::File);
                if row.attr.kind != FileKind::File {
                    continue;
                }
                row.attr.size = *size;
                row.attr.mtime = *mtime;
                row.attr.ctime = row.attr.ctime.max(*mtime);
                tx.put_inode(&row)?;
            }
            TxgOp::SetProp { ino, name, value } => {
                if is_file(tx, &mut files, *ino)? {
                    tx.set_prop(*ino, name, value)?;
                }
            }
        }
    }
    delta.apply(tx)?;
    Ok(out)
}

impl MetaStore {
    /// Applies a transaction group: every op of `ops`, in order, in one write transaction, so a
    /// crash keeps all of them or none.
    ///
    /// - Ops on an inode that no longer exists or is not a regular file are skipped, not errors
    ///   (the file may have been removed while its data was in flight).
    /// - Accounting is that of [`MetaStore::set_record`] / [`MetaStore::truncate_records`], op by
    ///   op. Non-inline frames that end up referenced by no record — the old frames of replaced,
    ///   cleared and moved records ([`TxgOutcome::replaced`]) and the new frames of skipped
    ///   `SetRecord`/`MoveRecord` ops ([`TxgOutcome::not_applied`]) — are all added to the
    ///   garbage counter here; the caller only marks their store entries dead. That keeps
    ///   "live stored bytes in segments + garbage == frame bytes handed over − released" exact
    ///   (see the crate docs).
    /// - With `durable`, the commit (and every commit before it) survives a power loss once this
    ///   returns; otherwise it has the durability the store was opened with. The SQLite engine
    ///   commits this transaction with `synchronous=FULL`.
    ///
    /// Fails without applying anything if an op is malformed (record index at or above
    /// [`RECORD_INDEX_LIMIT`], inline data whose length is not `stored_len`).
    pub fn apply_txg(&self, ops: &[TxgOp], durable: bool) -> Result<TxgOutcome> {
        self.apply_group(None, ops, durable)
    }

    /// [`MetaStore::apply_txg`] for group `number` of the layer above: the same transaction also
    /// records `number` as the last committed group ([`MetaStore::last_txg`]; it never goes
    /// down), so group numbers go on from there after a restart.
    pub fn apply_txg_numbered(
        &self,
        number: u64,
        ops: &[TxgOp],
        durable: bool,
    ) -> Result<TxgOutcome> {
        self.apply_group(Some(number), ops, durable)
    }

    fn apply_group(&self, number: Option<u64>, ops: &[TxgOp], durable: bool) -> Result<TxgOutcome> {
        for op in ops {
            check_txg_op(op)?;
        }
        // A durable group with nothing to apply only promises that what came before survives,
        // which the engine may keep without a write (an fsync of a file only read, on a full
        // disk, must not fail). Its number is then not recorded: numbers of groups that wrote
        // nothing may come again after a restart, as those of groups a crash cut off do.
        if ops.is_empty() && durable && self.engine.sync_committed()? {
            return Ok(TxgOutcome::default());
        }
        let mut tx = self.engine.write_as(durable, self.client())?;
        let out = apply_ops(&mut *tx, ops)?;
        if let Some(number) = number {
            if number > tx.get_counter(COUNTER_LAST_TXG)? {
                tx.set_counter(COUNTER_LAST_TXG, number)?;
            }
        }
        if !ops.is_empty() {
            crate::copies::note_change(&mut *tx)?;
        }
        tx.commit()?;
        Ok(out)
    }

    /// The number of the last group committed with [`MetaStore::apply_txg_numbered`] (0 if none).
    pub fn last_txg(&self) -> Result<u64> {
        self.read(|tx| tx.get_counter(COUNTER_LAST_TXG))
    }
}
