//! Space accounting: the logical/stored/garbage counters, the per-codec counters, and the
//! helpers that keep them exact.

use std::collections::BTreeMap;

use crate::engine::{
    CodecSpace, RecordRef, Txn, COUNTER_GARBAGE, COUNTER_LOGICAL, COUNTER_STORED, STATISTICS_PREFIX,
};
use crate::error::{MetaError, Result};
use crate::{MetaStore, SpaceUsage};

/// Set to 1 once the per-codec counters hold every live record: when the metadata is made, or
/// by a count of all records (pools from before the counters are counted at their first
/// [`MetaStore::codec_usage`]).
const CODEC_COUNTERS_KEPT: &str = "codec_counters";
/// Four 64-bit words, bit `id % 64` of word `id / 64` set for every codec id that has
/// counters, so that reading them needs no listing of counter names.
const CODECS_COUNTED: [&str; 4] = [
    "codecs_counted.0",
    "codecs_counted.1",
    "codecs_counted.2",
    "codecs_counted.3",
];

/// The names of codec `id`'s counters: records, logical bytes, stored bytes.
fn codec_counters(id: u8) -> [String; 3] {
    ["records", "logical_bytes", "stored_bytes"].map(|what| format!("codec.{id}.{what}"))
}

/// The codec ids with counters, as the [`CODECS_COUNTED`] words say.
fn counted_ids(tx: &mut dyn Txn) -> Result<Vec<u8>> {
    let mut ids = Vec::new();
    for (word, name) in CODECS_COUNTED.iter().enumerate() {
        let bits = tx.get_counter(name)?;
        ids.extend(
            (0..64)
                .filter(|b| bits & (1 << b) != 0)
                .map(|b| (word * 64 + b) as u8),
        );
    }
    Ok(ids)
}

/// Codec `id`'s figures as its counters hold them.
fn read_codec(tx: &mut dyn Txn, id: u8) -> Result<CodecSpace> {
    let [records, logical, stored] = codec_counters(id);
    Ok(CodecSpace {
        records: tx.get_counter(&records)?,
        logical_bytes: tx.get_counter(&logical)?,
        stored_bytes: tx.get_counter(&stored)?,
    })
}

/// Sets codec `id`'s counters to `space`.
fn write_codec(tx: &mut dyn Txn, id: u8, space: &CodecSpace) -> Result<()> {
    let [records, logical, stored] = codec_counters(id);
    tx.set_counter(&records, space.records)?;
    tx.set_counter(&logical, space.logical_bytes)?;
    tx.set_counter(&stored, space.stored_bytes)
}

/// Sets codec `id`'s bit in the [`CODECS_COUNTED`] words.
fn mark_counted(tx: &mut dyn Txn, id: u8) -> Result<()> {
    let word = CODECS_COUNTED[usize::from(id / 64)];
    let bits = tx.get_counter(word)?;
    match bits & (1 << (id % 64)) {
        0 => tx.set_counter(word, bits | 1 << (id % 64)),
        _ => Ok(()),
    }
}

/// Additions and subtractions to one codec's counters.
#[derive(Debug, Default)]
struct CodecDelta {
    add: CodecSpace,
    sub: CodecSpace,
}

fn grow(space: &mut CodecSpace, r: &RecordRef) {
    space.records = space.records.saturating_add(1);
    space.logical_bytes = space.logical_bytes.saturating_add(u64::from(r.logical_len));
    space.stored_bytes = space.stored_bytes.saturating_add(u64::from(r.stored_len));
}

/// Counter changes collected over a transaction group and written once at its end.
#[derive(Debug, Default)]
pub(crate) struct Delta {
    logical_add: u64,
    logical_sub: u64,
    stored_add: u64,
    stored_sub: u64,
    garbage_add: u64,
    codecs: BTreeMap<u8, CodecDelta>,
}

impl Delta {
    /// A record starts being referenced.
    pub(crate) fn take(&mut self, r: &RecordRef) {
        self.logical_add = self.logical_add.saturating_add(u64::from(r.logical_len));
        self.stored_add = self.stored_add.saturating_add(u64::from(r.stored_len));
        grow(&mut self.codecs.entry(r.codec).or_default().add, r);
    }

    /// A record stops being referenced; its segment bytes (if any) become garbage.
    pub(crate) fn drop_ref(&mut self, r: &RecordRef) {
        self.logical_sub = self.logical_sub.saturating_add(u64::from(r.logical_len));
        self.stored_sub = self.stored_sub.saturating_add(u64::from(r.stored_len));
        grow(&mut self.codecs.entry(r.codec).or_default().sub, r);
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
        if !tx.keeps_codec_counters() {
            return Ok(());
        }
        for (&id, d) in &self.codecs {
            let [records, logical, stored] = codec_counters(id);
            add_counter(tx, &records, d.add.records, d.sub.records)?;
            add_counter(tx, &logical, d.add.logical_bytes, d.sub.logical_bytes)?;
            add_counter(tx, &stored, d.add.stored_bytes, d.sub.stored_bytes)?;
            if d.add.records != 0 {
                mark_counted(tx, id)?;
            }
        }
        Ok(())
    }
}

pub(crate) fn add_counter(tx: &mut dyn Txn, name: &str, add: u64, sub: u64) -> Result<()> {
    if add == 0 && sub == 0 {
        return Ok(());
    }
    let v = tx.get_counter(name)?;
    tx.set_counter(name, v.saturating_add(add).saturating_sub(sub))
}

/// Accounts for records that stopped being referenced.
pub(crate) fn account_dropped<'a>(
    tx: &mut dyn Txn,
    recs: impl IntoIterator<Item = &'a RecordRef>,
) -> Result<()> {
    let mut delta = Delta::default();
    for r in recs {
        delta.drop_ref(r);
    }
    delta.apply(tx)
}

/// Marks the per-codec counters as holding every record: for new metadata, which has none.
pub(crate) fn start_codec_counters(tx: &mut dyn Txn) -> Result<()> {
    tx.set_counter(CODEC_COUNTERS_KEPT, 1)
}

/// What the per-codec counters say.
enum Counted {
    /// The figures.
    Usage(BTreeMap<u8, CodecSpace>),
    /// Not to be trusted: never counted, or not adding up to the pool's totals (a build that did
    /// not keep them wrote since).
    Stale,
    /// The engine keeps none.
    NotKept,
}

fn counted_codec_usage(tx: &mut dyn Txn) -> Result<Counted> {
    if !tx.keeps_codec_counters() {
        return Ok(Counted::NotKept);
    }
    if tx.get_counter(CODEC_COUNTERS_KEPT)? != 1 {
        return Ok(Counted::Stale);
    }
    let mut usage = BTreeMap::new();
    for id in counted_ids(tx)? {
        let space = read_codec(tx, id)?;
        if space.records != 0 {
            usage.insert(id, space);
        }
    }
    let sum = |f: fn(&CodecSpace) -> u64| usage.values().map(f).fold(0u64, u64::saturating_add);
    let adds_up = sum(|s| s.logical_bytes) == tx.get_counter(COUNTER_LOGICAL)?
        && sum(|s| s.stored_bytes) == tx.get_counter(COUNTER_STORED)?;
    Ok(match adds_up {
        true => Counted::Usage(usage),
        false => Counted::Stale,
    })
}

/// Counts every record and sets the per-codec counters to the count, in the caller's
/// transaction.
fn recount_codec_usage(tx: &mut dyn Txn) -> Result<BTreeMap<u8, CodecSpace>> {
    let usage = tx.codec_usage()?;
    // Codecs counted before and gone since keep their bits, with zero records.
    for id in counted_ids(tx)? {
        if !usage.contains_key(&id) {
            write_codec(tx, id, &CodecSpace::default())?;
        }
    }
    for (&id, space) in &usage {
        write_codec(tx, id, space)?;
        mark_counted(tx, id)?;
    }
    tx.set_counter(CODEC_COUNTERS_KEPT, 1)?;
    Ok(usage)
}

impl MetaStore {
    /// Number, logical and stored bytes of the records of each codec id over the whole pool
    /// (codecs without records are absent): the per-codec ratio `presso status` shows.
    ///
    /// Read from counters every record change keeps, so it costs the same whatever the pool's
    /// size. The first call on a pool from before those counters (or after a build that did not
    /// keep them wrote to it) counts every record once and stores the count; engines that keep
    /// no such counters ([`Txn::keeps_codec_counters`]) count every time.
    pub fn codec_usage(&self) -> Result<BTreeMap<u8, CodecSpace>> {
        match self.read(counted_codec_usage)? {
            Counted::Usage(usage) => Ok(usage),
            // Counted and stored; a count that cannot be stored (a full disk) still answers.
            Counted::Stale => self
                .write(recount_codec_usage)
                .or_else(|_| self.count_codec_usage()),
            Counted::NotKept => self.count_codec_usage(),
        }
    }

    /// [`MetaStore::codec_usage`] as its counters alone hold it: `None` if the engine keeps
    /// none, or they were never counted or do not add up to the pool's totals (each of which
    /// `codec_usage` answers by counting).
    pub fn codec_counters(&self) -> Result<Option<BTreeMap<u8, CodecSpace>>> {
        Ok(match self.read(counted_codec_usage)? {
            Counted::Usage(usage) => Some(usage),
            Counted::Stale | Counted::NotKept => None,
        })
    }

    /// [`MetaStore::codec_usage`] counted from every record, without the counters: what they
    /// must equal.
    pub fn count_codec_usage(&self) -> Result<BTreeMap<u8, CodecSpace>> {
        self.read_scan(|tx| tx.codec_usage())
    }

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
        self.write_tagged(false, |tx| {
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
