//! One file under concurrent writers, a truncating and extending thread, a reader and garbage
//! collection, checked for torn, stale and misplaced bytes.
//!
//! Every 8-byte word a writer stores names its write (a stamp) and its own word index, so a read
//! can tell which operation a word came from. Each operation takes a tick from one global counter
//! before and after its system call, which orders operations the way real time does. A word read
//! is admissible when it was stored by a write (or zeroed by a truncate below it, a punched hole,
//! or never written) that began before the read ended and that no other operation on that word
//! replaced entirely before the read began: the rule of a linearizable register, applied word by
//! word. The kernel gives no stronger promise between a buffered read and a concurrent write (a
//! read may see part of a write), so that is what is asserted; after the threads stop, the whole
//! file is checked the same way, and again after dropping caches and after a remount.

use std::collections::HashMap;
use std::fs::{File, OpenOptions};
use std::os::fd::AsRawFd;
use std::os::unix::fs::FileExt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;

/// Writes, truncates and holes are aligned to cells, so one cell's words share their history.
const CELL: u64 = 512;
const WORD: u64 = 8;
/// Mixed into each word's index half so that no stamped word is all zeros or a plain counter.
const INDEX_MIX: u32 = 0x5a5a_5a5a;

#[test]
fn concurrent_writers_truncaters_and_readers_see_no_stale_or_torn_words() {
    let runs: u32 = std::env::var("PRESSO_CONCURRENCY_RUNS")
        .map(|s| s.parse().expect("PRESSO_CONCURRENCY_RUNS is a number"))
        .unwrap_or(1);
    for run in 0..runs {
        for (props, max_size) in [
            (&["compression=lz4", "recordsize=4K"][..], 512 << 10),
            (&["compression=gzip-6", "recordsize=128K"][..], 2 << 20),
        ] {
            run_one(props, max_size, seed() ^ u64::from(run));
        }
    }
}

/// `PRESSO_CONCURRENCY_SEED` if set, else a fresh one (printed). A seed fixes the operations,
/// not how the threads interleave.
fn seed() -> u64 {
    match std::env::var("PRESSO_CONCURRENCY_SEED") {
        Ok(s) => {
            let s = s.trim_start_matches("0x");
            u64::from_str_radix(s, 16).expect("PRESSO_CONCURRENCY_SEED is a hex number")
        }
        Err(_) => std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .map(|d| d.as_nanos() as u64)
            .unwrap_or(0),
    }
}

/// What an operation did to a range of cells, and when (ticks of the shared clock).
#[derive(Clone, Debug)]
struct Event {
    start: u64,
    end: u64,
    effect: Effect,
}

#[derive(Clone, Debug)]
enum Effect {
    /// Stored words stamped `stamp` over `[offset, offset + len)`.
    Write { stamp: u32, offset: u64, len: u64 },
    /// Made everything from `from` on zero: a truncate down (or to any size: words past it).
    ZeroFrom { from: u64 },
    /// Punched a hole over `[offset, offset + len)`.
    ZeroRange { offset: u64, len: u64 },
}

impl Effect {
    fn covers(&self, offset: u64) -> bool {
        match *self {
            Effect::Write { offset: o, len, .. } | Effect::ZeroRange { offset: o, len } => {
                (o..o + len).contains(&offset)
            }
            Effect::ZeroFrom { from } => offset >= from,
        }
    }
}

/// A read's result, checked once every operation is known.
struct Observed {
    start: u64,
    end: u64,
    offset: u64,
    data: Vec<u8>,
}

struct Shared {
    clock: AtomicU64,
    stamps: AtomicU64,
    events: Mutex<Vec<Event>>,
}

impl Shared {
    fn tick(&self) -> u64 {
        self.clock.fetch_add(1, Ordering::SeqCst) + 1
    }

    fn record(&self, event: Event) {
        self.events.lock().unwrap().push(event);
    }
}

fn stamped(stamp: u32, offset: u64, len: u64) -> Vec<u8> {
    let mut out = Vec::with_capacity(len as usize);
    for w in (offset..offset + len).step_by(WORD as usize) {
        let index = (w / WORD) as u32 ^ INDEX_MIX;
        out.extend_from_slice(&((u64::from(stamp) << 32) | u64::from(index)).to_le_bytes());
    }
    out
}

fn run_one(props: &[&str], max_size: u64, seed: u64) {
    eprintln!("concurrency: {props:?}, seed {seed:#x}");
    let mut f = Fixture::unmounted("concurrency", props);
    f.mount(&[]);
    let path = f.p("shared");
    File::create(&path).unwrap().sync_all().unwrap();
    let shared = Arc::new(Shared {
        clock: AtomicU64::new(0),
        stamps: AtomicU64::new(0),
        events: Mutex::new(Vec::new()),
    });
    let open = || {
        OpenOptions::new()
            .read(true)
            .write(true)
            .open(&path)
            .unwrap()
    };
    let cells = max_size / CELL;
    let range = move |rng: &mut Rng, max_cells: u64| {
        let start = rng.below(cells);
        let n = 1 + rng.below(max_cells.min(cells - start));
        (start * CELL, n * CELL)
    };

    let mut threads = Vec::new();
    for writer in 0..2u64 {
        let (shared, file) = (shared.clone(), open());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ (writer + 1));
            for _ in 0..1500 {
                let (offset, len) = range(&mut rng, 128);
                let stamp = shared.stamps.fetch_add(1, Ordering::SeqCst) as u32 + 1;
                let data = stamped(stamp, offset, len);
                let start = shared.tick();
                file.write_all_at(&data, offset).unwrap();
                let end = shared.tick();
                let effect = Effect::Write { stamp, offset, len };
                shared.record(Event { start, end, effect });
            }
            Vec::new()
        }));
    }
    {
        let (shared, file) = (shared.clone(), open());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ 0x7a7a);
            for _ in 0..600 {
                let choice = rng.below(10);
                let start = shared.tick();
                let effect = match choice {
                    0..=5 => {
                        // Down, up, to zero, to a record boundary or inside a record.
                        let size = if rng.below(8) == 0 {
                            0
                        } else {
                            range(&mut rng, 1).0
                        };
                        file.set_len(size).unwrap();
                        Some(Effect::ZeroFrom { from: size })
                    }
                    6..=7 => {
                        let (offset, len) = range(&mut rng, 64);
                        let mode = libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE;
                        // SAFETY: a valid descriptor and plain integers.
                        let r = unsafe {
                            libc::fallocate(file.as_raw_fd(), mode, offset as i64, len as i64)
                        };
                        assert_eq!(r, 0, "punch hole: errno {}", errno());
                        Some(Effect::ZeroRange { offset, len })
                    }
                    8 => {
                        file.sync_data().unwrap();
                        None
                    }
                    _ => {
                        file.sync_all().unwrap();
                        None
                    }
                };
                let end = shared.tick();
                if let Some(effect) = effect {
                    shared.record(Event { start, end, effect });
                }
            }
            Vec::new()
        }));
    }
    {
        let (shared, file) = (shared.clone(), open());
        threads.push(std::thread::spawn(move || {
            let mut rng = Rng::new(seed ^ 0x4ead);
            let mut seen = Vec::new();
            for _ in 0..1500 {
                let (offset, len) = range(&mut rng, 32);
                let mut data = vec![0u8; len as usize];
                let start = shared.tick();
                let n = file.read_at(&mut data, offset).unwrap();
                let end = shared.tick();
                data.truncate(n);
                seen.push(Observed {
                    start,
                    end,
                    offset,
                    data,
                });
            }
            seen
        }));
    }
    // Garbage collection moving records underneath all of it.
    {
        let mnt = f.mnt.clone();
        threads.push(std::thread::spawn(move || {
            for _ in 0..3 {
                exec(presso().arg("gc").arg(&mnt)).ok();
            }
            Vec::new()
        }));
    }
    let mut observed = Vec::new();
    for t in threads {
        observed.extend(t.join().expect("a worker thread panicked"));
    }

    let events = shared.events.lock().unwrap().clone();
    let history = History::new(&events, cells);
    for (i, o) in observed.iter().enumerate() {
        if let Err(e) = history.check(o.start, o.end, o.offset, &o.data) {
            panic!(
                "seed {seed:#x}, {props:?}: read {i} at {} ({} bytes): {e}",
                o.offset,
                o.data.len()
            );
        }
    }
    // Quiescent: every operation is over, so each word must hold its last value.
    let after = shared.tick();
    let settled = std::fs::read(&path).unwrap();
    history
        .check(after, after, 0, &settled)
        .unwrap_or_else(|e| panic!("seed {seed:#x}, {props:?}: settled file: {e}"));
    history
        .check_size(settled.len() as u64)
        .unwrap_or_else(|e| panic!("seed {seed:#x}, {props:?}: {e}"));

    File::open(&path).unwrap().sync_all().unwrap();
    std::fs::write("/proc/sys/vm/drop_caches", "3").unwrap();
    assert_bytes_eq(
        &std::fs::read(&path).unwrap(),
        &settled,
        "after dropping caches",
    );
    f.remount(&[]);
    assert_bytes_eq(&std::fs::read(&path).unwrap(), &settled, "after a remount");
    f.unmount();
    exec(presso().arg("scrub").arg(&f.pool)).ok();
}

/// Every operation's effect per cell, to answer which values a read may see.
struct History<'a> {
    events: &'a [Event],
    /// For each cell, the indices of the events that changed it.
    by_cell: Vec<Vec<usize>>,
    by_stamp: HashMap<u32, usize>,
}

impl<'a> History<'a> {
    fn new(events: &'a [Event], cells: u64) -> History<'a> {
        let mut by_cell = vec![Vec::new(); cells as usize];
        let mut by_stamp = HashMap::new();
        for (i, e) in events.iter().enumerate() {
            let (first, last) = match e.effect {
                Effect::Write { stamp, offset, len } => {
                    by_stamp.insert(stamp, i);
                    (offset / CELL, (offset + len) / CELL)
                }
                Effect::ZeroRange { offset, len } => (offset / CELL, (offset + len) / CELL),
                Effect::ZeroFrom { from } => (from.div_ceil(CELL), cells),
            };
            for cell in first..last.min(cells) {
                by_cell[cell as usize].push(i);
            }
        }
        History {
            events,
            by_cell,
            by_stamp,
        }
    }

    /// Checks the bytes a read that ran between ticks `start` and `end` returned at `offset`.
    fn check(&self, start: u64, end: u64, offset: u64, data: &[u8]) -> Result<(), String> {
        let mut at = offset;
        for piece in data.chunks((CELL - offset % CELL) as usize) {
            self.check_cell(start, end, at, piece)?;
            at += piece.len() as u64;
        }
        Ok(())
    }

    /// [`History::check`] within one cell, whose words share one history.
    fn check_cell(&self, start: u64, end: u64, offset: u64, data: &[u8]) -> Result<(), String> {
        let changes: Vec<&Event> = (self.by_cell[(offset / CELL) as usize].iter())
            .map(|&i| &self.events[i])
            .collect();
        // The latest start among the operations that finished before the read began: a value
        // whose operation ended before that tick was replaced before the read.
        let replaced_before = (changes.iter())
            .filter(|e| e.end < start)
            .map(|e| e.start)
            .max()
            .unwrap_or(0);
        let admissible = |e: &Event| e.start < end && e.end > replaced_before;
        // Zero is admissible if nothing replaced the empty file's zeros before the read, or an
        // admissible truncate or hole made them.
        let zero_admissible = replaced_before == 0
            || (changes.iter()).any(|e| !matches!(e.effect, Effect::Write { .. }) && admissible(e));
        for (k, word) in data.chunks(WORD as usize).enumerate() {
            let at = offset + k as u64 * WORD;
            let value = u64::from_le_bytes(word.try_into().map_err(|_| "a short word")?);
            if value == 0 {
                if !zero_admissible {
                    return Err(format!("word at {at} reads zero, but it was written since"));
                }
                continue;
            }
            let stamp = (value >> 32) as u32;
            let index = value as u32 ^ INDEX_MIX;
            if u64::from(index) != at / WORD {
                return Err(format!(
                    "word at {at} holds the word of offset {} (stamp {stamp}): misplaced",
                    u64::from(index) * WORD
                ));
            }
            let Some(&i) = self.by_stamp.get(&stamp) else {
                return Err(format!("word at {at} holds stamp {stamp}, never written"));
            };
            let e = &self.events[i];
            if !e.effect.covers(at) {
                return Err(format!(
                    "word at {at} holds stamp {stamp}, which wrote elsewhere"
                ));
            }
            if !admissible(e) {
                return Err(format!(
                    "word at {at} holds stamp {stamp} (ticks {}..{}), replaced by an operation \
                     that started at tick {replaced_before}, before the read began at tick \
                     {start}: stale",
                    e.start, e.end
                ));
            }
        }
        Ok(())
    }

    /// The settled size: at least the end of every write no truncate could have followed, and
    /// no more than the largest size any operation set.
    fn check_size(&self, size: u64) -> Result<(), String> {
        let truncates: Vec<&Event> = (self.events.iter())
            .filter(|e| matches!(e.effect, Effect::ZeroFrom { .. }))
            .collect();
        let mut largest = 0;
        for e in self.events {
            match e.effect {
                Effect::Write { offset, len, .. } => {
                    largest = largest.max(offset + len);
                    let last = truncates.iter().all(|t| t.end < e.start);
                    if last && size < offset + len {
                        return Err(format!(
                            "size {size}, but a write after every truncate ended at {}",
                            offset + len
                        ));
                    }
                }
                Effect::ZeroFrom { from } => largest = largest.max(from),
                Effect::ZeroRange { .. } => {}
            }
        }
        if size > largest {
            return Err(format!(
                "size {size}, larger than any operation made it ({largest})"
            ));
        }
        Ok(())
    }
}
