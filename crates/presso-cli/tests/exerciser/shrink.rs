//! Shrinking a failing log to a minimal failing sequence by replaying subsequences on fresh
//! pools (delta debugging: remove chunks, halving their size, while the log still fails),
//! bounded by a number of replays and a time limit so that a failure still ends soon.

use std::time::{Duration, Instant};

use crate::configs::Config;
use crate::ops::Op;
use crate::run::{run, Failure};

/// At most this many replays per shrink.
const MAX_REPLAYS: usize = 300;
/// At most this long per shrink.
const MAX_TIME: Duration = Duration::from_secs(150);

/// What shrinking found.
pub struct Shrunk {
    /// The shortest failing log found.
    pub ops: Vec<Op>,
    /// How it fails.
    pub failure: Failure,
    /// How many replays it took.
    pub replays: usize,
    /// Whether the bounds stopped it before the log was minimal.
    pub cut_short: bool,
}

/// Shrinks `ops`, which failed with `failure`. `None` if the log does not fail again when
/// replayed on a fresh pool (a failure that depends on timing).
pub fn shrink(config: &Config, mut ops: Vec<Op>, failure: &Failure) -> Option<Shrunk> {
    let deadline = Instant::now() + MAX_TIME;
    ops.truncate(failure.step + 1);
    let mut failure = run(config, &ops).err()?;
    ops.truncate(failure.step + 1);
    let mut replays = 1;
    let mut chunk = ops.len().div_ceil(2);
    let mut cut_short = false;
    'outer: while chunk >= 1 {
        let mut start = 0;
        while start < ops.len() {
            if replays >= MAX_REPLAYS || Instant::now() >= deadline {
                cut_short = true;
                break 'outer;
            }
            let mut candidate = ops.clone();
            candidate.drain(start..(start + chunk).min(ops.len()));
            replays += 1;
            match run(config, &candidate) {
                Err(f) => {
                    candidate.truncate(f.step + 1);
                    ops = candidate;
                    failure = f;
                }
                Ok(()) => start += chunk,
            }
        }
        if chunk == 1 {
            break;
        }
        chunk = chunk.div_ceil(2);
    }
    Some(Shrunk {
        ops,
        failure,
        replays,
        cut_short,
    })
}
