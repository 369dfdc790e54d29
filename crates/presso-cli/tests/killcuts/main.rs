//! `kill -9` cuts on real mounts: one or two threads run seeded random operations (mkdir,
//! create, writes at random offsets, appends, truncates down and up, renames of files and
//! directories, also over existing targets, RENAME_EXCHANGE, unlink, rmdir, hard links, fsync,
//! fdatasync, fsync of directories, close) on a `presso mount -f` child, each in its own
//! subtree, until the daemon is killed at a random moment with operations in flight. The dead
//! mount is removed with `presso unmount`, the pool mounted again, and every subtree checked
//! against its model (the rules are in [`model`]), then `presso scrub` must find no damage.
//! Every few cuts a run moves to a fresh pool of a random configuration.
//!
//! - `PRESSO_KILLCUTS=N`: cuts in all (default 40).
//! - `PRESSO_KILLCUTS_SEED=S`: only the run of seed `S` (its cuts on one pool, up to the one
//!   that failed); the failure message prints it.

#[path = "../common/mod.rs"]
mod common;
#[path = "../../../presso-fs/tests/sim/configs.rs"]
mod configs;
#[path = "../exerciser/sys.rs"]
#[allow(dead_code)]
mod sys;

mod calls;
mod model;
mod verify;
mod workload;

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::time::{Duration, Instant};

use common::{wait_until, Daemon, Rng};
use configs::CONFIGS;
use model::Model;
use verify::Checked;
use workload::{Outcome, Signals, Worker};

/// Cuts on one pool before the next run takes a fresh one.
const CUTS_PER_POOL: usize = 5;
/// Lines of each worker's log a failure prints.
const LOG_TAIL: usize = 40;
/// How long a cut's workers may run before the test gives up on them.
const LIMIT: Duration = Duration::from_secs(120);

fn cuts() -> usize {
    std::env::var("PRESSO_KILLCUTS")
        .ok()
        .map(|v| v.parse().expect("PRESSO_KILLCUTS is a number"))
        .unwrap_or(40)
}

/// The seed of each run: `PRESSO_KILLCUTS_SEED` alone, or seeds from the clock.
fn seeds(runs: usize) -> Vec<u64> {
    if let Ok(seed) = std::env::var("PRESSO_KILLCUTS_SEED") {
        return vec![seed.parse().expect("PRESSO_KILLCUTS_SEED is a number")];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    (0..runs as u64)
        .map(|i| clock.wrapping_add(i.wrapping_mul(0x9e37_79b9_7f4a_7c15)))
        .collect()
}

#[test]
fn kill_9_keeps_every_name_and_every_fsynced_byte() {
    let total = cuts();
    let started = Instant::now();
    let mut done = 0;
    let mut checked = Checked::default();
    for seed in seeds(total.div_ceil(CUTS_PER_POOL)) {
        let n = CUTS_PER_POOL.min(total - done).max(1);
        run(seed, n, &mut checked);
        done += n;
        if done >= total {
            break;
        }
    }
    eprintln!(
        "{done} kill -9 cuts in {:.1} s: {} operations, {} in flight at a kill ({} of them \
         had happened); checked {} names, {} files byte for byte, {} for foreign bytes",
        started.elapsed().as_secs_f64(),
        checked.ops,
        checked.in_flight,
        checked.in_flight_applied,
        checked.names,
        checked.exact,
        checked.loose
    );
}

/// One pool of a random configuration, `cuts` kills on it, a clean unmount.
fn run(seed: u64, cuts: usize, checked: &mut Checked) {
    let mut rng = Rng::new(seed);
    let config = CONFIGS[rng.below(CONFIGS.len() as u64) as usize];
    eprintln!("seed {seed}: {config}, {cuts} cuts");
    let props = config.properties();
    let props: Vec<&str> = props.iter().map(String::as_str).collect();
    let fail = |cut: usize, what: String| -> ! {
        panic!(
            "kill cut {cut} of seed {seed} ({config}; replay: PRESSO_KILLCUTS_SEED={seed} \
             PRESSO_KILLCUTS={cut}): {what}"
        )
    };
    let mut daemon = Daemon::start("killcuts", &props).unwrap_or_else(|e| fail(0, e));
    let span = config.span().min(512 << 10);
    let mut models: Vec<Model> = (0..2).map(|w| Model::new(w << 40, w << 40)).collect();
    for w in 0..models.len() {
        calls::mkdir(&daemon.mnt().join(format!("t{w}")))
            .unwrap_or_else(|e| fail(0, format!("mkdir t{w}: errno {e}")));
    }
    for cut in 1..=cuts {
        let cut_seed = rng.next_u64();
        models =
            one_cut(&mut daemon, models, cut_seed, span, checked).unwrap_or_else(|e| fail(cut, e));
    }
    daemon.unmount().unwrap_or_else(|e| fail(cuts, e));
}

/// Workers on the mount, a kill with operations in flight, a remount, every subtree checked
/// and a scrub; the models of what was found.
fn one_cut(
    daemon: &mut Daemon,
    models: Vec<Model>,
    seed: u64,
    span: u64,
    checked: &mut Checked,
) -> Result<Vec<Model>, String> {
    let mut rng = Rng::new(seed);
    let active = 1 + rng.below(models.len() as u64) as usize;
    let ops: Vec<usize> = (0..active).map(|_| rng.range(20, 300) as usize).collect();
    let kill_at = rng.range(1, ops.iter().sum::<usize>() as u64 + 1) as usize;
    let signals = Signals {
        killed: AtomicBool::new(false),
        done: AtomicUsize::new(0),
        stopped: AtomicUsize::new(0),
    };
    let mnt = daemon.mnt().to_path_buf();
    let mut at_kill = 0;
    let outcomes: Vec<Result<Outcome, (String, Vec<String>)>> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..active)
            .map(|w| {
                let worker = Worker::new(
                    mnt.join(format!("t{w}")),
                    models[w].clone(),
                    rng.next_u64(),
                    span,
                    &signals,
                );
                let (count, signals) = (ops[w], &signals);
                scope.spawn(move || {
                    let outcome = worker.run(count);
                    signals.stopped.fetch_add(1, Ordering::SeqCst);
                    outcome
                })
            })
            .collect();
        let reached = wait_until(LIMIT, || {
            signals.done.load(Ordering::SeqCst) >= kill_at
                || signals.stopped.load(Ordering::SeqCst) == active
        });
        signals.killed.store(true, Ordering::SeqCst);
        at_kill = signals.done.load(Ordering::SeqCst);
        daemon.kill();
        assert!(
            reached,
            "the workers did not reach {kill_at} operations in {LIMIT:?}"
        );
        handles
            .into_iter()
            .map(|h| h.join().expect("a worker panicked"))
            .collect()
    });
    let mut report = format!(
        "seed of the cut {seed}: the kill was due after {kill_at} operations and came after \
         {at_kill}, {} completed in all",
        signals.done.load(Ordering::SeqCst)
    );
    let mut results = Vec::new();
    for (w, outcome) in outcomes.into_iter().enumerate() {
        match outcome {
            Ok(o) => {
                append_log(&mut report, w, &o.log);
                checked.ops += o.log.len();
                checked.in_flight += usize::from(o.in_flight.is_some());
                results.push(o);
            }
            Err((message, log)) => {
                append_log(&mut report, w, &log);
                return Err(format!("worker {w}: {message}\n{report}"));
            }
        }
    }
    let with_report = |e: String| format!("{e}\n{report}");
    daemon.check_log().map_err(with_report)?;
    daemon.detach().map_err(with_report)?;
    daemon.mount().map_err(with_report)?;
    let mut next = Vec::new();
    for (w, model) in models.iter().enumerate() {
        let (model, in_flight) = match results.get(w) {
            Some(o) => (&o.model, o.in_flight.as_ref()),
            None => (model, None),
        };
        let found = verify::scan(&mnt.join(format!("t{w}"))).map_err(with_report)?;
        let checked = verify::check(model, in_flight, &found, checked)
            .map_err(|e| with_report(format!("subtree t{w}: {e}")))?;
        next.push(checked);
    }
    daemon.scrub().map_err(with_report)?;
    Ok(next)
}

fn append_log(report: &mut String, worker: usize, log: &[String]) {
    let tail = log.len().saturating_sub(LOG_TAIL);
    report.push_str(&format!(
        "\nworker {worker} (subtree t{worker}), {} operations, the last {}:",
        log.len(),
        log.len() - tail
    ));
    for (i, line) in log.iter().enumerate().skip(tail) {
        report.push_str(&format!("\n  {i:4}: {line}"));
    }
}
