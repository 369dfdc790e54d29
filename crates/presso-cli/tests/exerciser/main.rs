//! A model-based random-operation exerciser on real mounts (of the xfstests fsx kind): seeded
//! random writes, reads, truncates, fallocates, mapped reads and writes, copy_file_range, fsyncs,
//! reopens, remounts, cache drops and `kill -9` of the daemon, made with real system calls on a
//! FUSE mount (so through the kernel's page cache, writeback cache and attribute cache) on four
//! files at once, and checked against an in-memory model after every read and, at every
//! checkpoint, every size and byte. 15 configurations: off, lz4, gzip-6 offloaded and in
//! software, zstd-3, each at record sizes 4K, 128K and 1M.
//!
//! On a mismatch it prints the configuration, the seed, the failing step and the log, then the
//! log shrunk to a minimal failing sequence, and how to replay it.
//!
//! - `PRESSO_FSX_OPS=N`: operations per configuration (default 14,000: 210,000 per run).
//! - `PRESSO_FSX_SEED=S`: run only seed `S` (default: a fixed seed per configuration, plus one
//!   from the clock, printed).
//! - `PRESSO_FSX_CONFIG=TEXT`: only the configurations whose description contains `TEXT`
//!   (e.g. `zstd`, `recordsize=4K`, `offload=off`).

#[path = "../common/mod.rs"]
mod common;
mod configs;
mod model;
mod ops;
mod run;
mod sys;

use std::fmt::Write as _;
use std::time::Instant;

use common::shrink::{shrink, Failure};
use common::{require_root, Rng};
use configs::{one_test_per_config, ops_per_config, seeds, selected, Config, CONFIGS};
use ops::{generate, Op};
use run::run;

/// Log lines printed in a failure message at most (the whole log goes to a file).
const PRINTED_LOG: usize = 300;

fn run_config(index: usize) {
    let config = &CONFIGS[index];
    if !selected(config) {
        eprintln!("{config}: not selected by PRESSO_FSX_CONFIG");
        return;
    }
    require_root("it drops the kernel's caches");
    let seeds = seeds(index);
    let per_seed = ops_per_config() / seeds.len();
    // The seeds run side by side, each on its own pool and mount: much of a run is waiting for
    // the daemon and the disk.
    std::thread::scope(|scope| {
        let runs: Vec<_> = seeds
            .iter()
            .map(|&seed| scope.spawn(move || run_seed(config, seed, per_seed)))
            .collect();
        for run in runs {
            if let Err(panic) = run.join() {
                std::panic::resume_unwind(panic);
            }
        }
    });
}

fn run_seed(config: &Config, seed: u64, count: usize) {
    eprintln!("{config}: seed {seed}, {count} operations");
    let ops = generate(&mut Rng::new(seed), config, count);
    let started = Instant::now();
    match run(config, &ops) {
        Ok(()) => {
            let secs = started.elapsed().as_secs_f64();
            let slow = ops.iter().filter(|op| op.expensive()).count();
            eprintln!(
                "{config}: seed {seed}: {count} operations ({slow} remounts, kills and cache \
                 drops) in {secs:.1} s, {:.0} per second",
                count as f64 / secs
            );
        }
        Err(failure) => report(config, seed, count, ops, failure),
    }
}

/// Prints the failure and its log, shrinks the log and panics with the shrunk one.
fn report(config: &Config, seed: u64, per_seed: usize, ops: Vec<Op>, failure: Failure) -> ! {
    let replay = format!("PRESSO_FSX_SEED={seed} PRESSO_FSX_OPS={per_seed}");
    let upto = &ops[..(failure.step + 1).min(ops.len())];
    let file = std::env::temp_dir().join(format!("presso-fsx-{seed}.log"));
    let saved = match std::fs::write(&file, listing(upto)) {
        Ok(()) => format!("the whole log up to it is in {}", file.display()),
        Err(e) => format!("could not save the log to {}: {e}", file.display()),
    };
    let tail = upto.len().saturating_sub(PRINTED_LOG);
    eprintln!(
        "exerciser mismatch on {config}, seed {seed} (replay: {replay}), step {}: {}\n\
         {saved}; its last {} operations:\n{}",
        failure.step,
        failure.message,
        upto.len() - tail,
        listing_from(&upto[tail..], tail)
    );
    eprintln!("shrinking the log by replaying parts of it on fresh pools");
    let Some(shrunk) = shrink(ops, &failure, |ops| run(config, ops)) else {
        panic!(
            "exerciser mismatch on {config}, seed {seed} (replay: {replay}), step {}: {} \
             (it did not fail again when replayed on a fresh pool, so it was not shrunk)",
            failure.step, failure.message
        );
    };
    panic!(
        "exerciser mismatch on {config}, seed {seed} (replay: {replay}), step {}: {}\n{}\n{}",
        failure.step,
        failure.message,
        shrunk.summary(),
        listing(&shrunk.ops)
    );
}

fn listing(ops: &[Op]) -> String {
    listing_from(ops, 0)
}

fn listing_from(ops: &[Op], first: usize) -> String {
    let mut text = String::new();
    for (i, op) in ops.iter().enumerate() {
        let _ = writeln!(text, "  {:6}: {op:?}", first + i);
    }
    text
}

one_test_per_config!();
