//! Shrinking a failing sequence of operations to a minimal failing one by replaying parts of it
//! (delta debugging: remove chunks, halving their size, while the sequence still fails), bounded
//! by a number of replays and a time limit so that a failure still ends soon.

use std::time::{Duration, Instant};

/// At most this many replays per shrink.
const MAX_REPLAYS: usize = 300;
/// At most this long per shrink.
const MAX_TIME: Duration = Duration::from_secs(150);

/// How a replayed sequence failed: the index of the failing operation (the sequence's length for
/// a check after the last one), and what differed.
#[derive(Clone, Debug)]
pub struct Failure {
    /// The index of the failing operation.
    pub step: usize,
    /// What differed.
    pub message: String,
}

/// What shrinking found.
pub struct Shrunk<O> {
    /// The shortest failing sequence found.
    pub ops: Vec<O>,
    /// How it fails.
    pub failure: Failure,
    /// How many replays it took.
    pub replays: usize,
    /// Whether the bounds stopped it before the sequence was minimal.
    pub cut_short: bool,
}

impl<O> Shrunk<O> {
    /// "shrunk in R replays to N operations, failing at step S: what differed".
    pub fn summary(&self) -> String {
        format!(
            "shrunk in {} replays{} to {} operations, failing at step {}: {}",
            self.replays,
            if self.cut_short {
                " (stopped by the replay or time bound)"
            } else {
                ""
            },
            self.ops.len(),
            self.failure.step,
            self.failure.message
        )
    }
}

/// Shrinks `ops`, which failed with `failure`, replaying candidates with `replay` (each on a
/// fresh file system). `None` if the sequence does not fail again when replayed (a failure that
/// depends on timing).
pub fn shrink<O: Clone>(
    mut ops: Vec<O>,
    failure: &Failure,
    mut replay: impl FnMut(&[O]) -> Result<(), Failure>,
) -> Option<Shrunk<O>> {
    let deadline = Instant::now() + MAX_TIME;
    ops.truncate(failure.step + 1);
    let mut failure = replay(&ops).err()?;
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
            match replay(&candidate) {
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
