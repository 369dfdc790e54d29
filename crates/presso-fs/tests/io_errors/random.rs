//! Random writes, fsyncs and unmounts on a few files while random host faults come and go: EIO
//! on segment writes (once, or for a few steps), on segment syncs (once, and once dropping the
//! unsynced writes), on segment reads for a few steps, and on metadata commits (all, or only
//! durable ones) for a few steps. Every call has a deadline. A pool whose store a failed sync
//! poisoned is unmounted (which must fail) and opened again; every round ends with a power cut.
//! After every reopen, every file unchanged since an fsync or clean unmount that succeeded must
//! hold exactly its bytes, every other file must read without error, and scrub must be clean.
//!
//! `PRESSO_IOERR_ROUNDS=N` sets the number of rounds (default 40); `PRESSO_IOERR_SEED=S` runs
//! the round of seed `S` alone. The operations follow the seed; the interleaving with the
//! background threads does not.

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};

use super::{pool, power_cut, reopen, unmount, within, CONFIG};
use crate::sim::Fs;

const FILES: u64 = 3;

/// What the test knows of one file.
#[derive(Clone, Default)]
struct File {
    /// Its bytes as written, while known (a failed write may have left it either way).
    contents: Option<Vec<u8>>,
    /// Its bytes as of the last fsync (or clean unmount) that succeeded, if unchanged since.
    durable: Option<Vec<u8>>,
}

/// Faults armed for a few steps, cleared when the count runs out.
#[derive(Default)]
struct Armed {
    steps_left: u32,
}

#[derive(Default, Debug)]
struct Tally {
    rounds: u64,
    steps: u64,
    faults_armed: u64,
    failed_calls: u64,
    poisoned_reopens: u64,
    clean_unmounts: u64,
    files_checked: u64,
}

fn data(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let seed: u8 = rng.gen();
    (0..len)
        .map(|i| b"faults come and go "[i % 19] ^ seed)
        .collect()
}

/// Checks every file after a reopen: durable ones byte for byte, the others readable; the
/// model then takes what the others hold.
fn check(fs: &mut Fs, files: &mut [File], ctx: &str, log: &[String], tally: &mut Tally) {
    for (id, file) in files.iter_mut().enumerate() {
        let id = id as u64;
        let size = fs.size(id).unwrap_or_else(|e| panic!("{ctx}: f{id}: {e}"));
        let got = fs
            .read(id, 0, size)
            .unwrap_or_else(|e| panic!("{ctx}: reading f{id} after the reopen: {e}"));
        if let Some(durable) = &file.durable {
            let first = (0..got.len().max(durable.len())).find(|&i| got.get(i) != durable.get(i));
            assert!(
                first.is_none(),
                "{ctx}: f{id} lost bytes an fsync reported durable ({} bytes read, {} expected, \
                 first difference at {first:?}); the round so far:\n{}",
                got.len(),
                durable.len(),
                log.join("\n")
            );
            tally.files_checked += 1;
        }
        file.contents = Some(got);
    }
    fs.scrub().unwrap_or_else(|e| panic!("{ctx}: {e}"));
}

fn run_round(seed: u64, steps: usize, tally: &mut Tally) {
    let mut rng = StdRng::seed_from_u64(seed);
    let mut fs = pool();
    let rs = CONFIG.recordsize as usize;
    let mut files = vec![
        File {
            contents: Some(Vec::new()),
            durable: None,
        };
        FILES as usize
    ];
    for id in 0..FILES {
        fs.create(id as u8, id).unwrap();
    }
    let mut armed = Armed::default();
    let mut log = Vec::new();
    for step in 0..steps {
        let ctx = format!("seed {seed} step {step}");
        tally.steps += 1;
        if armed.steps_left > 0 {
            armed.steps_left -= 1;
            if armed.steps_left == 0 {
                fs.dir.clear_faults();
                fs.meta.clear_faults();
            }
        }
        let id = rng.gen_range(0..FILES);
        let ino = fs.ino_of(id).expect("open");
        match rng.gen_range(0..100) {
            0..=49 => {
                let offset = rng.gen_range(0..4 * rs);
                let len = rng.gen_range(1..=2 * rs);
                let bytes = data(&mut rng, len);
                let written = bytes.clone();
                let result = within(&mut fs, "write", move |vfs| {
                    vfs.write(ino, offset as u64, &written)
                });
                log.push(format!("{step}: write f{id} {offset}+{len}: {result:?}"));
                let file = &mut files[id as usize];
                file.durable = None;
                match result {
                    // Possibly short: a record it could not read ends it.
                    Ok(n) => {
                        if let Some(c) = &mut file.contents {
                            if c.len() < offset + n {
                                c.resize(offset + n, 0);
                            }
                            c[offset..offset + n].copy_from_slice(&bytes[..n]);
                        }
                    }
                    Err(e) => {
                        assert_eq!(e.errno(), libc::EIO, "{ctx}: write: {e}");
                        tally.failed_calls += 1;
                        file.contents = None;
                    }
                }
            }
            50..=69 => match within(&mut fs, "fsync", move |vfs| vfs.fsync(ino))
                .inspect(|()| log.push(format!("{step}: fsync f{id}: ok")))
                .inspect_err(|e| log.push(format!("{step}: fsync f{id}: {e}")))
            {
                Ok(()) => {
                    let file = &mut files[id as usize];
                    file.durable = file.contents.clone();
                }
                Err(e) => {
                    assert_eq!(e.errno(), libc::EIO, "{ctx}: fsync: {e}");
                    tally.failed_calls += 1;
                }
            },
            70..=84 => {
                tally.faults_armed += 1;
                let steps = rng.gen_range(1..6);
                let kind = rng.gen_range(0..7);
                log.push(format!("{step}: arm fault {kind} for {steps} steps"));
                match kind {
                    0 => fs.dir.fail_next_write(libc::EIO),
                    1 => {
                        fs.dir.fail_writes(libc::EIO);
                        armed.steps_left = steps;
                    }
                    2 => fs.dir.fail_next_sync(libc::EIO),
                    3 => fs.dir.fail_next_sync_forgetting(libc::EIO),
                    4 => {
                        fs.dir.fail_reads(libc::EIO);
                        armed.steps_left = steps;
                    }
                    5 => {
                        fs.meta.fail_commits();
                        armed.steps_left = steps;
                    }
                    _ => {
                        fs.meta.fail_durable_commits();
                        armed.steps_left = steps;
                    }
                }
            }
            85..=94 => {
                log.push(format!("{step}: clear faults"));
                fs.dir.clear_faults();
                fs.meta.clear_faults();
                armed.steps_left = 0;
            }
            _ => {
                // A clean unmount (faults may still be armed), then the pool opened again.
                let result = unmount(&mut fs);
                log.push(format!("{step}: unmount: {result:?}"));
                match result {
                    Ok(()) => {
                        tally.clean_unmounts += 1;
                        for file in files.iter_mut() {
                            file.durable = file.contents.clone();
                        }
                    }
                    Err(e) => {
                        assert_eq!(e.errno(), libc::EIO, "{ctx}: unmount: {e}");
                        tally.failed_calls += 1;
                    }
                }
                fs.dir.clear_faults();
                fs.meta.clear_faults();
                armed.steps_left = 0;
                reopen(&mut fs);
                check(
                    &mut fs,
                    &mut files,
                    &format!("{ctx}, after the unmount"),
                    &log,
                    tally,
                );
                continue;
            }
        }
        if fs.vfs().pool().store().is_failed() {
            // Nothing commits any more: the unmount must say so, and the reopen must keep
            // everything an fsync reported durable.
            tally.poisoned_reopens += 1;
            log.push(format!("{step}: the store is poisoned: unmount, reopen"));
            assert!(
                unmount(&mut fs).is_err(),
                "{ctx}: unmount of a poisoned pool reported success"
            );
            fs.dir.clear_faults();
            fs.meta.clear_faults();
            armed.steps_left = 0;
            reopen(&mut fs);
            check(
                &mut fs,
                &mut files,
                &format!("{ctx}, after the poisoned pool"),
                &log,
                tally,
            );
        }
    }
    fs.dir.clear_faults();
    fs.meta.clear_faults();
    log.push("power cut".to_string());
    power_cut(&mut fs);
    check(
        &mut fs,
        &mut files,
        &format!("seed {seed}, after the power cut"),
        &log,
        tally,
    );
    tally.rounds += 1;
}

#[test]
fn random_faults_never_lose_an_fsynced_byte() {
    let env = |name: &str| std::env::var(name).ok().and_then(|v| v.parse::<u64>().ok());
    let one = env("PRESSO_IOERR_SEED");
    let seeds: Vec<u64> = match one {
        Some(seed) => vec![seed],
        None => (0..env("PRESSO_IOERR_ROUNDS").unwrap_or(40)).collect(),
    };
    let mut tally = Tally::default();
    for seed in seeds {
        run_round(seed, 60, &mut tally);
    }
    eprintln!("random host faults: {tally:?}");
    if one.is_some() {
        return;
    }
    assert!(tally.faults_armed > 0 && tally.failed_calls > 0 && tally.files_checked > 0);
    assert!(tally.poisoned_reopens > 0 && tally.clean_unmounts > 0);
}
