//! The durability bound, in process: everything the file layer received is durable within the
//! sync interval without any fsync. Checked by cutting the power once the bound has passed
//! (unsynced segment writes lost, the metadata back at its last durable commit), on the store's
//! simulated directory and the in-memory metadata engine's power-cut simulation.
//!
//! The flusher's own compression of idle partial records is switched off (`flush_after` of an
//! hour), so only the durability sweep can make a partial record durable here.

mod sim;

use std::time::{Duration, Instant};

use presso_fs::vfs::VfsConfig;
use presso_meta::memory::MemoryEngine;
use sim::{Config, Fs, CONFIGS};

/// A pool on simulated parts whose only durability without fsync is the sweep, every
/// `interval`.
fn pool_with_interval(config: &Config, interval: Duration) -> Fs {
    let mut fs = Fs::new_with(config, MemoryEngine::simulated());
    fs.close();
    fs.mount_with(VfsConfig {
        flush_after: Duration::from_secs(3600),
        sync_interval: interval,
        ..sim::vfs_config()
    })
    .expect("mount");
    fs
}

/// Cuts the power (unsynced segment writes lost, the metadata back at its last durable commit)
/// and opens the pool again.
fn power_cut(fs: &mut Fs) {
    fs.dir.crash();
    fs.meta.crash(false);
    fs.halt();
    fs.mount().expect("open after the power cut");
    fs.reopen_named();
}

fn pattern(seed: u8, len: u64) -> Vec<u8> {
    (0..len)
        .map(|i| b"durable within the bound "[(i % 25) as usize] ^ seed)
        .collect()
}

/// Polls `condition` until it holds or `limit` passes; returns how long that took, if it held.
fn time_until(limit: Duration, mut condition: impl FnMut() -> bool) -> Option<Duration> {
    let start = Instant::now();
    loop {
        if condition() {
            return Some(start.elapsed());
        }
        if start.elapsed() >= limit {
            return None;
        }
        std::thread::sleep(Duration::from_millis(5));
    }
}

/// Partial records, several records with a partial tail, a tail appended after an fsync, a
/// truncate and a rename, none fsync'd afterwards: once the sweep reports everything durable
/// (within the interval), a power cut keeps every byte, size and name.
fn everything_received_survives_a_power_cut_after_the_bound(config: &Config) {
    let interval = Duration::from_millis(500);
    let rs = config.recordsize;
    let mut fs = pool_with_interval(config, interval);
    let mut expected: Vec<(u8, u64, Vec<u8>)> = Vec::new();

    fs.create(0, 0).unwrap();
    let partial = pattern(0, rs / 3);
    fs.write(0, 0, &partial).unwrap();
    expected.push((0, 0, partial));

    fs.create(1, 1).unwrap();
    let several = pattern(1, 3 * rs + rs / 2);
    fs.write(1, 0, &several).unwrap();
    expected.push((1, 1, several));

    fs.create(2, 2).unwrap();
    let mut appended = pattern(2, 2 * rs);
    fs.write(2, 0, &appended).unwrap();
    fs.fsync(2).unwrap();
    let tail = pattern(22, rs / 4 + 1);
    fs.write(2, 2 * rs, &tail).unwrap();
    appended.extend_from_slice(&tail);
    expected.push((2, 2, appended));

    fs.create(3, 3).unwrap();
    let cut = pattern(3, 2 * rs);
    fs.write(3, 0, &cut).unwrap();
    fs.fsync(3).unwrap();
    fs.truncate(3, rs / 2).unwrap();
    expected.push((3, 3, cut[..(rs / 2) as usize].to_vec()));

    fs.create(4, 4).unwrap();
    let renamed = pattern(4, 100);
    fs.write(4, 0, &renamed).unwrap();
    fs.rename(4, 9).unwrap();
    expected.push((9, 4, renamed));

    let vfs = fs.vfs().clone();
    let limit = interval + Duration::from_secs(2);
    let waited = time_until(limit, || !vfs.durability_pending());
    assert!(
        waited.is_some(),
        "{config}: still not durable {limit:?} after the last change (interval {interval:?})"
    );
    drop(vfs);
    power_cut(&mut fs);

    assert_eq!(
        fs.list_names().unwrap(),
        expected
            .iter()
            .map(|(name, _, _)| *name)
            .collect::<Vec<_>>(),
        "{config}: names after the power cut"
    );
    for (name, id, data) in &expected {
        fs.check_name(*name, *id).unwrap();
        let size = fs.size(*id).unwrap();
        let got = fs.read(*id, 0, u64::MAX >> 1).unwrap();
        let first = got.iter().zip(data).position(|(a, b)| a != b);
        assert!(
            size == data.len() as u64 && got == *data,
            "{config}: f{name} after the power cut: size {size}, {} bytes read, expected {}; \
             first differing byte {first:?} (waited {waited:?} for the sweep)",
            got.len(),
            data.len()
        );
    }
    fs.scrub().unwrap();
    fs.close();
}

#[test]
fn everything_received_is_durable_within_the_bound_with_small_records() {
    everything_received_survives_a_power_cut_after_the_bound(&CONFIGS[3]);
}

#[test]
fn everything_received_is_durable_within_the_bound_with_large_records() {
    everything_received_survives_a_power_cut_after_the_bound(&CONFIGS[13]);
}

/// A writer that keeps appending to one partial record (a log) keeps it "touched", so the
/// flusher never compresses it; the sweep must still make it durable. The power is cut while the
/// writer runs: every byte appended more than the interval before the cut (plus the time one
/// sweep may take on a loaded machine) must survive. Elapsed time is the behaviour under test
/// here, so the test measures it.
#[test]
fn a_record_appended_to_without_pause_is_durable_within_the_bound() {
    let config = &CONFIGS[4];
    let interval = Duration::from_millis(600);
    let sweep_allowance = Duration::from_millis(600);
    let mut fs = pool_with_interval(config, interval);
    fs.create(0, 0).unwrap();
    // The name is durable before the appends start: only the appended bytes are in question.
    fs.fsync(0).unwrap();
    let line = pattern(7, 100);
    // (when each append returned, the length it made)
    let mut appended: Vec<(Instant, u64)> = Vec::new();
    let mut len = 0u64;
    let start = Instant::now();
    while start.elapsed() < 4 * interval {
        fs.write(0, len, &line).unwrap();
        len += line.len() as u64;
        appended.push((Instant::now(), len));
        std::thread::sleep(Duration::from_millis(10));
    }
    assert!(
        len < config.recordsize,
        "the appends must stay in one record"
    );
    let cut_at = Instant::now();
    power_cut(&mut fs);
    let must_survive = appended
        .iter()
        .filter(|(at, _)| cut_at.duration_since(*at) > interval + sweep_allowance)
        .map(|&(_, len)| len)
        .max()
        .expect("appends older than the bound");
    let size = fs.size(0).unwrap();
    assert!(
        size >= must_survive && size <= len,
        "{size} bytes survived the power cut; {must_survive} were appended more than \
         {interval:?} + {sweep_allowance:?} before it (of {len})"
    );
    let got = fs.read(0, 0, size).unwrap();
    let want: Vec<u8> = line.iter().copied().cycle().take(size as usize).collect();
    // The contract covers the bytes older than the bound. Past them the committed size may run
    // ahead of the committed data (zeros there): see the ignored test below.
    let first = got[..must_survive as usize]
        .iter()
        .zip(&want)
        .position(|(a, b)| a != b);
    assert!(
        first.is_none(),
        "of the {must_survive} bytes appended more than the bound before the power cut, byte \
         {first:?} differs from what was appended ({size} bytes survived)"
    );
    fs.close();
}

/// The sweep runs only after a change: an idle pool makes no durable commit at all. Elapsed
/// time is the behaviour under test (nothing happens while idle), so the test waits three
/// intervals.
#[test]
fn an_idle_pool_makes_no_durable_commit() {
    let interval = Duration::from_millis(200);
    let mut fs = pool_with_interval(&CONFIGS[3], interval);
    fs.create(0, 0).unwrap();
    fs.write(0, 0, b"one change").unwrap();
    let vfs = fs.vfs().clone();
    let waited = time_until(interval + Duration::from_secs(2), || {
        !vfs.durability_pending()
    });
    assert!(waited.is_some(), "the change did not become durable");
    let counters = vfs.pool().counters();
    let load = || {
        counters
            .durable_commits
            .load(std::sync::atomic::Ordering::SeqCst)
    };
    let after_sweep = load();
    assert!(after_sweep >= 1, "no durable commit for the change");
    std::thread::sleep(3 * interval);
    assert_eq!(
        load(),
        after_sweep,
        "durable commits while nothing changed (interval {interval:?})"
    );
    drop(vfs);
    fs.close();
}

/// fsync of a directory makes the names made and changed before it durable, though the sweep
/// is an hour away (the lower rung of the real-mount test that found the FUSE adapter never
/// handled it).
#[test]
fn fsync_of_a_directory_makes_its_names_durable() {
    let mut fs = pool_with_interval(&CONFIGS[3], Duration::from_secs(3600));
    fs.create(0, 0).unwrap();
    fs.create(1, 1).unwrap();
    fs.rename(1, 5).unwrap();
    fs.vfs().fsync_dir().unwrap();
    power_cut(&mut fs);
    assert_eq!(
        fs.list_names().unwrap(),
        [0, 5],
        "names after the power cut"
    );
    fs.close();
}

/// Waits until the flusher's tick has queued sizes at least once after this call: file `witness`
/// (open, empty) gets one whole record, which is stored at once, and only a tick queues its
/// size; once that size is in the metadata, a tick ran after the call (twice over, so the first
/// tick seen cannot have started before it). The tick queues every file's size in one pass.
fn wait_for_a_tick(fs: &mut Fs, witness: u64, recordsize: u64) {
    let pool = fs.vfs().pool().clone();
    let ino = fs.ino_of(witness).unwrap();
    let before = pool.getattr(ino).unwrap().size;
    for round in 1..=2 {
        let at = before + (round - 1) * recordsize;
        fs.write(witness, at, &pattern(9, recordsize)).unwrap();
        let queued = time_until(Duration::from_secs(10), || {
            pool.getattr(ino).unwrap().size == at + recordsize
        });
        assert!(queued.is_some(), "no tick queued the witness's size");
    }
}

/// After a kill a file's size must not cover bytes that were never stored: either the old size
/// with the old bytes, or the new size with the new ones (never zeros where the appended bytes
/// were). The flusher's tick queues sizes every second, while the last record of a file can
/// stay a buffer in memory much longer (`flush_after`, here an hour).
#[test]
fn a_committed_size_never_covers_bytes_that_were_not_stored() {
    let config = &CONFIGS[4];
    let mut fs = pool_with_interval(config, Duration::from_secs(3600));
    fs.create(0, 0).unwrap();
    fs.create(1, 1).unwrap();
    let first = pattern(1, 1000);
    fs.write(0, 0, &first).unwrap();
    fs.fsync(0).unwrap();
    let more = pattern(2, 500);
    fs.write(0, 1000, &more).unwrap();
    wait_for_a_tick(&mut fs, 1, config.recordsize);
    fs.halt();
    fs.mount().unwrap();
    fs.reopen_named();
    let got = fs.read(0, 0, 1 << 20).unwrap();
    let new: Vec<u8> = first.iter().chain(&more).copied().collect();
    assert!(
        got == first || got == new,
        "after the kill the file holds {} bytes, neither the 1000 before the append nor the \
         1500 after it; first byte differing from the latter: {:?}",
        got.len(),
        got.iter().zip(&new).position(|(a, b)| a != b)
    );
    fs.close();
}

/// A truncate into a record, then growth past the old end, with the cut record still a buffer:
/// the grown size must not commit ahead of the cut record, or a kill shows the bytes the
/// truncate cut under the grown size.
#[test]
fn growth_after_a_truncate_never_commits_over_the_cut_bytes() {
    let config = &CONFIGS[4];
    let mut fs = pool_with_interval(config, Duration::from_secs(3600));
    fs.create(0, 0).unwrap();
    fs.create(1, 1).unwrap();
    let old = pattern(3, 1500);
    fs.write(0, 0, &old).unwrap();
    fs.fsync(0).unwrap();
    fs.truncate(0, 700).unwrap();
    fs.write(0, 1800, &pattern(4, 200)).unwrap();
    wait_for_a_tick(&mut fs, 1, config.recordsize);
    fs.halt();
    fs.mount().unwrap();
    fs.reopen_named();
    let got = fs.read(0, 0, 1 << 20).unwrap();
    let size = got.len();
    let cut_bytes_back = got
        .iter()
        .zip(&old)
        .enumerate()
        .skip(700)
        .find(|&(_, (a, b))| a == b && *a != 0);
    assert!(
        cut_bytes_back.is_none(),
        "after the kill the file holds {size} bytes, and byte {:?} is one the truncate to 700 \
         cut",
        cut_bytes_back.map(|(i, _)| i)
    );
    assert_eq!(
        got[..700.min(size)],
        old[..700.min(size)],
        "bytes the truncate kept"
    );
    fs.close();
}
