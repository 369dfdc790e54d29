//! Crash consistency against a model, and I/O fault handling, on the simulated directory.

mod common;

use std::sync::Arc;

use common::{config, payload, sim_store};
use presso_store::segment::segment_file_name;
use presso_store::{Committed, Location, Position, SimDir, Store, StoreConfig, StoreError};
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

#[derive(Default, Debug)]
struct Tally {
    checked: u64,
    survived: u64,
    lost: u64,
    reopens: u64,
    rolls: u64,
    removed_segments: u64,
    append_errors: u64,
    torn_discards: u64,
    poisoned_reopens: u64,
}

struct Entry {
    loc: Location,
    data: Vec<u8>,
    synced: bool,
}

fn end_of(loc: Location) -> Position {
    Position {
        segment: loc.segment,
        offset: loc.offset + loc.entry_len(),
    }
}

/// The segment file's live length equals the store's append position: no partial entry visible.
fn assert_no_partial_tail(sim: &SimDir, store: &Store) {
    let pos = store.append_position();
    let len = sim.contents(&segment_file_name(pos.segment)).unwrap().len() as u64;
    assert_eq!(len, pos.offset);
}

/// Checks the model after a reopen and updates it: synced entries must all read back; the
/// unsynced ones survive as a prefix (and become durable, recovery synced them) or are gone with
/// an error, never with wrong bytes.
fn check_after_reopen(
    store: &Store,
    model: &mut Vec<Entry>,
    may_lose: bool,
    ctx: &str,
    tally: &mut Tally,
) {
    let mut lost = false;
    model.retain_mut(|e| {
        let got = store.read(e.loc);
        if e.synced {
            tally.checked += 1;
            assert_eq!(
                got.as_deref().ok(),
                Some(&e.data[..]),
                "{ctx}: synced entry {:?} lost",
                e.loc
            );
            return true;
        }
        match got {
            Ok(d) => {
                assert_eq!(d, e.data, "{ctx}: {:?} returned other bytes", e.loc);
                assert!(!lost, "{ctx}: unsynced survivors are not a prefix");
                e.synced = true;
                tally.survived += 1;
                true
            }
            Err(StoreError::BadLocation { .. }) => {
                assert!(
                    may_lose,
                    "{ctx}: entry lost without a crash or a failed sync"
                );
                lost = true;
                tally.lost += 1;
                false
            }
            Err(err) => panic!("{ctx}: {:?}: {err}", e.loc),
        }
    });
    assert_eq!(store.corruptions(), 0, "{ctx}");
}

fn run_sequence(seed: u64, steps: usize, tally: &mut Tally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let seg_size = [200u64, 700, 4096][rng.gen_range(0..3)];
    let cfg = StoreConfig {
        segment_size: seg_size,
        ..StoreConfig::default()
    };
    let sim = SimDir::new();
    let mut store = Some(Store::create(Arc::new(sim.clone()), Default::default(), cfg).unwrap());
    let mut model: Vec<Entry> = Vec::new();
    let mut armed = false;
    let mut poisoned = false;
    let mut next = 0u64;
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        let s = store.as_ref().unwrap();
        match rng.gen_range(0..106) {
            0..=54 => {
                let len = if rng.gen_bool(0.1) {
                    0
                } else {
                    rng.gen_range(1..400)
                };
                let data = payload(next, len);
                next += 1;
                match s.append(&data) {
                    Ok(loc) => {
                        assert!(!poisoned, "{ctx}: append after failed sync");
                        assert_eq!(s.read(loc).unwrap(), data, "{ctx}");
                        model.push(Entry {
                            loc,
                            data,
                            synced: false,
                        });
                    }
                    Err(StoreError::Failed { .. }) => assert!(poisoned, "{ctx}"),
                    Err(e @ (StoreError::NoSpace { .. } | StoreError::Io { .. })) => {
                        assert!(armed, "{ctx}: unexpected {e}");
                        tally.append_errors += 1;
                        // Only a failed sync of a segment with entries poisons (when a full
                        // segment is sealed); a failed creation of the next one does not.
                        poisoned = s.is_failed();
                        if poisoned {
                            assert!(matches!(&e, StoreError::Io { op: "sync", .. }), "{ctx}");
                        }
                        if !poisoned {
                            assert_no_partial_tail(&sim, s);
                        }
                    }
                    Err(e) => panic!("{ctx}: {e}"),
                }
            }
            55..=69 => match s.sync() {
                Ok(pos) => {
                    assert!(!poisoned, "{ctx}");
                    for e in model.iter_mut() {
                        assert!(end_of(e.loc) <= pos, "{ctx}: {:?} beyond {pos:?}", e.loc);
                        e.synced = true;
                    }
                }
                Err(StoreError::Failed { .. }) => assert!(poisoned, "{ctx}"),
                Err(e) => {
                    assert!(armed, "{ctx}: unexpected {e}");
                    assert!(s.is_failed(), "{ctx}");
                    poisoned = true;
                }
            },
            70..=77 => {
                armed = true;
                match rng.gen_range(0..5) {
                    0 => sim.fail_next_write(libc::EIO),
                    1 => sim.fail_next_write(libc::ENOSPC),
                    2 => sim.fail_next_sync(libc::EIO),
                    // What Linux may do: the failed sync drops the writes it did not make durable.
                    3 => sim.fail_next_sync_forgetting(libc::EIO),
                    _ => sim.set_space_budget(Some(sim.used_bytes() + rng.gen_range(0..600))),
                }
            }
            78..=82 => sim.set_space_budget(None),
            83..=85 => match s.roll() {
                Ok(sealed) => {
                    assert!(!poisoned, "{ctx}");
                    assert_eq!(s.current_segment(), sealed + 1, "{ctx}");
                    tally.rolls += 1;
                    for e in model.iter_mut() {
                        e.synced = true;
                    }
                }
                Err(StoreError::Failed { .. }) => assert!(poisoned, "{ctx}"),
                Err(e) => {
                    assert!(armed, "{ctx}: unexpected {e}");
                    poisoned = s.is_failed();
                }
            },
            86..=88 => {
                // What GC does once nothing references a sealed segment any more.
                let sealed: Vec<u64> = s
                    .segments()
                    .into_iter()
                    .filter(|&n| n != s.current_segment())
                    .collect();
                if !sealed.is_empty() {
                    let n = sealed[rng.gen_range(0..sealed.len())];
                    s.remove_segment(n)
                        .unwrap_or_else(|e| panic!("{ctx}: remove {n}: {e}"));
                    tally.removed_segments += 1;
                    model.retain(|e| {
                        if e.loc.segment != n {
                            return true;
                        }
                        assert!(
                            matches!(s.read(e.loc), Err(StoreError::NoSuchSegment { .. })),
                            "{ctx}"
                        );
                        false
                    });
                }
            }
            _ => {
                let crash = rng.gen_range(0..4);
                let s = store.take().expect("open");
                if crash == 3 {
                    // A clean close: everything synced, or (poisoned) cut back to the durable
                    // end, never below it.
                    match s.close() {
                        Ok(()) => {
                            assert!(!poisoned, "{ctx}: close of a poisoned store succeeded");
                            for e in model.iter_mut() {
                                e.synced = true;
                            }
                        }
                        Err(StoreError::Failed { .. }) => assert!(poisoned, "{ctx}"),
                        Err(e) => {
                            assert!(armed, "{ctx}: unexpected {e}");
                            poisoned = true;
                        }
                    }
                }
                drop(s);
                match crash {
                    0 => sim.crash(),
                    1 => sim.crash_torn(&mut rng),
                    _ => {}
                }
                // A poisoned store loses its unsynced entries without a crash too: a failed
                // sync may have dropped them, and its close cuts them off.
                let may_lose = crash < 2 || poisoned;
                if poisoned {
                    tally.poisoned_reopens += 1;
                }
                sim.clear_faults();
                armed = false;
                poisoned = false;
                let reopened = Store::open(Arc::new(sim.clone()), cfg, &Committed::default())
                    .unwrap_or_else(|e| panic!("{ctx}: reopen failed: {e}"));
                tally.reopens += 1;
                if reopened.recovery().discarded_bytes > 0 {
                    tally.torn_discards += 1;
                }
                check_after_reopen(&reopened, &mut model, may_lose, &ctx, tally);
                store = Some(reopened);
            }
        }
    }
    // Finally: crash for real and check once more.
    drop(store.take());
    sim.crash_torn(&mut rng);
    sim.clear_faults();
    let s = Store::open(Arc::new(sim.clone()), cfg, &Committed::default()).unwrap();
    check_after_reopen(&s, &mut model, true, &format!("seed {seed} final"), tally);
    let loc = s.append(b"still works").unwrap();
    assert_eq!(s.read(loc).unwrap(), b"still works");
}

#[test]
fn crash_consistency_against_model() {
    let start = std::time::Instant::now();
    let sequences = 10_000;
    let mut tally = Tally::default();
    for seed in 0..sequences {
        run_sequence(seed, 80, &mut tally);
    }
    eprintln!("{sequences} sequences in {:?}: {tally:?}", start.elapsed());
    assert!(
        tally.survived > 0 && tally.lost > 0 && tally.torn_discards > 0 && tally.append_errors > 0
    );
    assert!(tally.rolls > 0 && tally.removed_segments > 0 && tally.poisoned_reopens > 0);
}

#[test]
fn enospc_mid_append_then_space_freed() {
    let (sim, store) = sim_store(1 << 20);
    let mut kept = Vec::new();
    for i in 0..20 {
        kept.push((store.append(&payload(i, 500)).unwrap(), payload(i, 500)));
    }
    store.sync().unwrap();
    // Room for less than one more entry: the write is short, then ENOSPC.
    sim.set_space_budget(Some(sim.used_bytes() + 200));
    let before = store.append_position();
    match store.append(&payload(99, 500)) {
        Err(e @ StoreError::NoSpace { .. }) => {
            assert_eq!(e.errno(), libc::ENOSPC);
            let msg = e.to_string();
            assert!(
                msg.contains("host file system holding the pool is full"),
                "{msg}"
            );
            let StoreError::NoSpace { file, offset, .. } = e else {
                unreachable!()
            };
            assert_eq!(file, segment_file_name(1));
            assert_eq!(offset, before.offset);
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(store.append_position(), before);
    assert_no_partial_tail(&sim, &store);
    // Small entries still fit; a second big one still fails.
    let small = store.append(b"tiny").unwrap();
    assert!(matches!(
        store.append(&payload(98, 500)),
        Err(StoreError::NoSpace { .. })
    ));
    sim.set_space_budget(None);
    let after = store.append(&payload(100, 500)).unwrap();
    store.sync().unwrap();
    for (loc, data) in &kept {
        assert_eq!(&store.read(*loc).unwrap(), data);
    }
    assert_eq!(store.read(small).unwrap(), b"tiny");
    assert_eq!(store.read(after).unwrap(), payload(100, 500));
    drop(store);
    sim.crash();
    let store = Store::open(Arc::new(sim), config(1 << 20), &Committed::default()).unwrap();
    assert_eq!(store.recovery().discarded_bytes, 0);
    assert_eq!(store.read(after).unwrap(), payload(100, 500));
    assert_eq!(store.read(kept[3].0).unwrap(), kept[3].1);
}

#[test]
fn enospc_when_creating_a_segment() {
    let (sim, store) = sim_store(300);
    let a = store.append(&payload(1, 200)).unwrap();
    sim.set_space_budget(Some(sim.used_bytes() + 10));
    assert!(matches!(
        store.append(&payload(2, 200)),
        Err(StoreError::NoSpace { .. })
    ));
    assert_eq!(
        sim.contents(&segment_file_name(2)),
        None,
        "partial segment removed"
    );
    sim.set_space_budget(None);
    let b = store.append(&payload(2, 200)).unwrap();
    assert_eq!(b.segment, 2);
    assert_eq!(store.read(a).unwrap(), payload(1, 200));
    assert_eq!(store.read(b).unwrap(), payload(2, 200));
}

#[test]
fn eio_on_write_leaves_store_usable() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(b"first").unwrap();
    sim.fail_next_write(libc::EIO);
    match store.append(b"second") {
        Err(e @ StoreError::Io { .. }) => {
            assert!(e.to_string().contains("seg-1.dat"), "{e}");
            assert_eq!(e.errno(), libc::EIO);
        }
        other => panic!("{other:?}"),
    }
    let b = store.append(b"third").unwrap();
    assert_eq!(b.offset, a.offset + a.entry_len());
    store.sync().unwrap();
    assert_eq!(store.read(a).unwrap(), b"first");
    assert_eq!(store.read(b).unwrap(), b"third");
}

#[test]
fn failed_sync_poisons_until_reopen() {
    let (sim, store) = sim_store(1 << 20);
    let a = store.append(b"synced").unwrap();
    let p1 = store.sync().unwrap();
    let b = store.append(b"not synced").unwrap();
    sim.fail_next_sync(libc::EIO);
    assert!(matches!(
        store.sync(),
        Err(StoreError::Io { op: "sync", .. })
    ));
    assert!(matches!(store.append(b"x"), Err(StoreError::Failed { .. })));
    assert!(matches!(store.sync(), Err(StoreError::Failed { .. })));
    assert_eq!(store.durable_position(), p1);
    // Reads still work.
    assert_eq!(store.read(b).unwrap(), b"not synced");
    drop(store);
    sim.crash();
    let store = Store::open(Arc::new(sim), config(1 << 20), &Committed::default()).unwrap();
    assert_eq!(store.read(a).unwrap(), b"synced");
    assert!(store.read(b).is_err());
    store.append(b"y").unwrap();
    store.sync().unwrap();
}
