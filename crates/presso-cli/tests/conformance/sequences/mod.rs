//! Random namespace sequences, differential: seeded sequences of mkdir, create, append,
//! truncate, unlink, rmdir, `rm -rf`, link, symlink, rename (plain, `RENAME_NOREPLACE`,
//! `RENAME_EXCHANGE`), chmod, lchown, extended attributes, stat, reads, a file unlinked while
//! open, fsync, listings (also paused while entries are removed and created, and resumed with
//! `seekdir`), directories filled with hundreds of names or hard links and emptied again, cache
//! drops and remounts, made on ext4 and on a Presso mount, and every result and the whole tree
//! every 50 operations compared. On a difference the sequence is shrunk to a minimal one that
//! still differs, replaying parts of it on both sides.
//!
//! The same sequences run on a shared pool too (metadata in PostgreSQL, data in SeaweedFS,
//! started by the test), whose mount lists directories through handles, and whose remount is a
//! new client.
//!
//! - `PRESSO_NSEQ_OPS=N`: operations per seed (default 3,000, two seeds).
//! - `PRESSO_NSEQ_SEED=S`: run only seed `S` (default: a fixed seed and one from the clock,
//!   printed).

mod apply;
mod dir_stream;
mod ops;
mod sides;

use std::fmt::Write as _;
use std::time::Instant;

use crate::common::shrink::{shrink, Failure};
use crate::common::{syncfs, Rng};
use apply::Side;
use ops::{generate, paths, Op};
use sides::{LocalPool, SharedPoolSides, Sides};

/// Runs `ops` on both sides in fresh directories (`run` numbers them), each op on ext4 and then
/// on Presso, and removes the directories again. `Err` names the first operation whose results
/// differ.
fn replay(sides: &mut dyn Sides, run: usize, ops: &[Op]) -> Result<(), Failure> {
    let paths = paths();
    let (ext4_base, presso_base) = sides.bases();
    let name = format!("sequence-{run}");
    let ext4 = Side {
        root: ext4_base.join(&name),
        paths: &paths,
    };
    let presso = Side {
        root: presso_base.join(&name),
        paths: &paths,
    };
    std::fs::create_dir(&ext4.root).unwrap();
    std::fs::create_dir(&presso.root).unwrap();
    let mut result = Ok(());
    for (step, op) in ops.iter().enumerate() {
        let on_ext4 = ext4.apply(op, &mut || syncfs(&ext4_base).expect("syncfs of ext4"));
        let on_presso = presso.apply(op, &mut || sides.remount_presso());
        if on_ext4 != on_presso {
            result = Err(Failure {
                step,
                message: format!("{op:?}:\n{}", difference(&on_ext4, &on_presso)),
            });
            break;
        }
    }
    std::fs::remove_dir_all(&ext4.root).unwrap();
    // Removing the tree is one more operation to get right (a listing that skips names fails it).
    match (result, std::fs::remove_dir_all(&presso.root)) {
        (Ok(()), Err(e)) => Err(Failure {
            step: ops.len(),
            message: format!("removing the tree afterwards (rm -rf): {e}"),
        }),
        (result, _) => result,
    }
}

/// Two results side by side; of whole trees, only the lines that differ (at most 20 a side).
fn difference(ext4: &str, presso: &str) -> String {
    if !ext4.contains('\n') && !presso.contains('\n') {
        return format!("    ext4:   {ext4}\n    presso: {presso}");
    }
    let only = |these: &str, those: &str| {
        let those: std::collections::HashSet<&str> = those.lines().collect();
        let lines: Vec<&str> = these.lines().filter(|l| !those.contains(l)).collect();
        let shown: Vec<String> = lines
            .iter()
            .take(20)
            .map(|l| format!("      {l}"))
            .collect();
        format!("{} lines:\n{}", lines.len(), shown.join("\n"))
    };
    format!(
        "    only on ext4, {}\n    only on presso, {}",
        only(ext4, presso),
        only(presso, ext4)
    )
}

fn ops_per_seed() -> usize {
    std::env::var("PRESSO_NSEQ_OPS")
        .ok()
        .map(|v| v.parse().expect("PRESSO_NSEQ_OPS is a number"))
        .unwrap_or(3_000)
}

fn seeds() -> Vec<u64> {
    if let Ok(seed) = std::env::var("PRESSO_NSEQ_SEED") {
        return vec![seed.parse().expect("PRESSO_NSEQ_SEED is a number")];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    vec![0x5E0_0015, clock]
}

/// Operations printed in a failure message at most (all of them go to a file).
const PRINTED: usize = 300;

/// The last [`PRINTED`] of `ops`, numbered, and where the whole sequence was saved.
fn listing(seed: u64, ops: &[Op]) -> String {
    let numbered = |from: usize| {
        let mut text = String::new();
        for (i, op) in ops.iter().enumerate().skip(from) {
            let _ = writeln!(text, "  {i:5}: {op:?}");
        }
        text
    };
    let file = std::env::temp_dir().join(format!("presso-sequence-{seed}-{}.log", ops.len()));
    let saved = match std::fs::write(&file, numbered(0)) {
        Ok(()) => format!("all {} operations are in {}", ops.len(), file.display()),
        Err(e) => format!("could not save them to {}: {e}", file.display()),
    };
    let from = ops.len().saturating_sub(PRINTED);
    format!("{saved}; from step {from}:\n{}", numbered(from))
}

/// Runs `count` operations of each of `seeds` on `sides`; on a difference, shrinks it and fails.
fn run_seeds(sides: &mut dyn Sides, seeds: &[u64], count: usize) {
    let mut runs = 0;
    for &seed in seeds {
        let replay_cmd = format!("PRESSO_NSEQ_SEED={seed} PRESSO_NSEQ_OPS={count}");
        let ops = generate(&mut Rng::new(seed), count);
        let started = Instant::now();
        runs += 1;
        let Err(failure) = replay(sides, runs, &ops) else {
            let slow = ops.iter().filter(|op| op.expensive()).count();
            eprintln!(
                "sequences on {}: seed {seed}: {} operations ({slow} cache drops and remounts) \
                 alike on ext4 and Presso in {:.1?}",
                sides.name(),
                ops.len(),
                started.elapsed()
            );
            continue;
        };
        let what = format!(
            "Presso ({}) differs from ext4, seed {seed} ({replay_cmd}), step {}: {}",
            sides.name(),
            failure.step,
            failure.message
        );
        let upto = &ops[..(failure.step + 1).min(ops.len())];
        eprintln!(
            "{what}\n{}\nshrinking by replaying parts of the sequence on both",
            listing(seed, upto)
        );
        let shrunk = shrink(ops, &failure, |ops| {
            runs += 1;
            replay(sides, runs, ops)
        });
        let Some(shrunk) = shrunk else {
            panic!("{what} (not again when replayed, so not shrunk)");
        };
        panic!(
            "{what}\n{}\n{}",
            shrunk.summary(),
            listing(seed, &shrunk.ops)
        );
    }
    sides.assert_presso_log_clean();
}

#[test]
fn random_namespace_sequences_match_ext4() {
    run_seeds(&mut LocalPool::new(), &seeds(), ops_per_seed());
}

#[test]
fn random_namespace_sequences_on_a_shared_pool_match_ext4() {
    run_seeds(&mut SharedPoolSides::new(), &seeds(), ops_per_seed());
}
