//! Measuring one row: compress the corpus in one batch, decode every frame on the workers and
//! compare it with its record, and turn the wall and CPU times into a [`Row`].

use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Result};
use indicatif::ProgressBar;
use presso_codec::frame;
use presso_codec::{BackendKind, CodecSpec, DecodeOptions, Engine};

use super::corpus::Corpus;
use super::matrix::{Backend, Settings};
use super::Row;

/// CPU time (user + system) of the whole process so far.
fn process_cpu_time() -> Duration {
    // SAFETY: an all-zero rusage is a valid value (plain integers), and getrusage writes one
    // rusage into the valid pointer given.
    let mut usage: libc::rusage = unsafe { std::mem::zeroed() };
    let rc = unsafe { libc::getrusage(libc::RUSAGE_SELF, &mut usage) };
    if rc != 0 {
        return Duration::ZERO;
    }
    let micros = |tv: libc::timeval| tv.tv_sec as u64 * 1_000_000 + tv.tv_usec as u64;
    Duration::from_micros(micros(usage.ru_utime) + micros(usage.ru_stime))
}

/// Wall and CPU time of a phase.
struct Timing {
    wall: Duration,
    cpu: Duration,
}

/// Runs `phase` and returns its value with the wall and CPU time it took.
fn timed<T>(phase: impl FnOnce() -> T) -> (T, Timing) {
    let cpu = process_cpu_time();
    let started = Instant::now();
    let value = phase();
    let timing = Timing {
        wall: started.elapsed(),
        cpu: process_cpu_time().saturating_sub(cpu),
    };
    (value, timing)
}

/// `num / den`, or 0 when the denominator is not positive (nothing measurable).
fn per(num: f64, den: f64) -> f64 {
    if den > 0.0 {
        num / den
    } else {
        0.0
    }
}

/// Compresses the corpus with one codec on one backend, decodes and verifies it.
pub(super) fn measure(
    corpus: &Corpus,
    spec: CodecSpec,
    backend: Backend,
    engine: Engine,
    settings: &Settings,
    progress: &ProgressBar,
) -> Result<Row> {
    let label = format!("{spec} on {}", backend.name());
    progress.set_message(format!("{label}: compress"));
    let (encoded, compress) = timed(|| {
        let mut batch = engine.batch();
        for record in &corpus.records {
            // Submission blocks while the engine's queue is full, so this tracks completions.
            batch.submit(record.clone(), spec);
            progress.inc(1);
        }
        batch.wait()
    });
    let stats = engine.stats();
    drop(engine);

    let codec_stats = stats.codec(spec.codec);
    let count = |pick: fn(&presso_codec::stats::CodecSnapshot) -> u64| codec_stats.map_or(0, pick);
    let stored_bytes: u64 = encoded.iter().map(|e| e.frame.len() as u64).sum();
    for (index, item) in encoded.iter().enumerate() {
        ensure!(
            item.logical_len == corpus.records[index].len(),
            "{label}: the engine reports {} bytes for {}, which has {}",
            item.logical_len,
            corpus.describe(index),
            corpus.records[index].len()
        );
    }

    progress.set_message(format!("{label}: decode + verify"));
    let options = DecodeOptions {
        deflate: backend.deflate(),
    };
    let chunk = encoded.len().div_ceil(settings.workers).max(1);
    let (decoded, decompress) = timed(|| {
        std::thread::scope(|scope| {
            let handles: Vec<_> = encoded
                .chunks(chunk)
                .map(|frames| {
                    scope.spawn(move || {
                        frames
                            .iter()
                            .map(|item| {
                                let out =
                                    frame::decode_frame_with(&item.frame.contiguous(), options);
                                progress.inc(1);
                                out
                            })
                            .collect::<Vec<_>>()
                    })
                })
                .collect();
            handles
                .into_iter()
                .flat_map(|h| h.join().expect("decode thread panicked"))
                .collect::<Vec<_>>()
        })
    });
    for (index, (result, record)) in decoded.iter().zip(&corpus.records).enumerate() {
        let out = result.as_ref().map_err(|err| {
            anyhow::anyhow!(
                "{label}: the frame of {} does not decode: {err}",
                corpus.describe(index)
            )
        })?;
        if out.as_slice() != &*record.contiguous() {
            let first = out
                .iter()
                .zip(record.contiguous().iter())
                .position(|(a, b)| a != b)
                .unwrap_or(out.len().min(record.len()));
            bail!(
                "{label}: VERIFICATION FAILED: {} decodes to different bytes (first difference at \
                 byte {first} of the record; {} bytes decoded, {} expected)",
                corpus.describe(index),
                out.len(),
                record.len()
            );
        }
    }

    let logical = corpus.logical_bytes as f64;
    let compress_cpu = compress.cpu.as_secs_f64();
    let compress_wall = compress.wall.as_secs_f64();
    let ratio = per(logical, stored_bytes as f64);
    let cpu_util = per(compress_cpu, compress_wall * settings.workers as f64);
    Ok(Row {
        codec: spec.to_string(),
        backend: backend.name().to_string(),
        ratio,
        compress_mbps: per(logical / 1e6, compress_wall),
        decompress_mbps: per(logical / 1e6, decompress.wall.as_secs_f64()),
        cpu_s_per_gb: per(compress_cpu, logical / 1e9),
        decompress_cpu_s_per_gb: per(decompress.cpu.as_secs_f64(), logical / 1e9),
        saved_mb_per_cpu_s: per((logical - stored_bytes as f64) / 1e6, compress_cpu),
        cpu_util,
        cost_efficiency: per(ratio, cpu_util),
        records: corpus.records.len() as u64,
        logical_bytes: corpus.logical_bytes,
        stored_bytes,
        offloaded: stats.backend(BackendKind::Accelerator).records,
        software: stats.backend(BackendKind::Software).records,
        stored_raw: count(|c| c.stored_raw),
        skipped: count(|c| c.precheck_skips),
        holes: count(|c| c.holes),
        codec_errors: count(|c| c.errors),
    })
}
