//! `presso bench`: measures every requested codec, on every backend that can run it, over the
//! records of real files, and recommends one.
//!
//! Each row of the matrix (codec × backend) gets a fresh [`presso_codec::Engine`] that compresses
//! every record of every file in one batch; then every frame is decoded on `workers` threads and
//! compared with the original record, so a run is also an end-to-end correctness check of the
//! engine.
//!
//! # JSON output (`--json`)
//! One JSON object per row, one per line (JSON Lines), with these fields:
//!
//! | field             | meaning                                                                 |
//! |-------------------|-------------------------------------------------------------------------|
//! | `codec`           | codec spec, e.g. `gzip-6`, `lz4`                                        |
//! | `backend`         | `zlib`, `libdeflate` or `isal` for gzip; `cpu` for every other codec     |
//! | `ratio`           | logical bytes / frame bytes (frame headers included)                    |
//! | `compress_mbps`   | logical MB (10^6 bytes) compressed per second of wall time              |
//! | `decompress_mbps` | logical MB decoded per second of wall time, on `workers` threads        |
//! | `cpu_s_per_gb`    | process CPU seconds spent compressing per 10^9 logical bytes            |
//! | `decompress_cpu_s_per_gb` | process CPU seconds spent decoding per 10^9 logical bytes       |
//! | `saved_mb_per_cpu_s` | MB (10^6 bytes) saved (logical − stored) per CPU second compressing  |
//! | `cpu_util`        | compress CPU seconds / (wall seconds × workers)                         |
//! | `cost_efficiency` | `ratio / cpu_util` (the QZFS cost-efficiency figure; 0 if CPU time is 0) |
//!
//! What a user pays for is CPU time per byte, so the CPU columns are the ones to rank by.
//! `cost_efficiency` is kept for comparison with the QZFS paper, but it misleads when every row is
//! CPU-bound (utilisation near 1 for all): it then ranks by ratio alone, whatever the CPU cost.
//! | `records`         | records compressed                                                      |
//! | `logical_bytes`   | bytes of all records                                                    |
//! | `stored_bytes`    | bytes of all frames                                                     |
//! | `offloaded`       | records compressed by the accelerator                                   |
//! | `software`        | records compressed by the CPU workers                                   |
//! | `stored_raw`      | records whose output did not fit the threshold's budget, stored raw     |
//! | `skipped`         | records the compressibility pre-check stored raw without compressing    |
//! | `holes`           | all-zero records stored as holes                                        |
//! | `codec_errors`    | records the codec failed on, stored raw (also in `stored_raw`); a defect |
//!
//! The last line is `{"recommended": {"codec": ..., "backend": ..., "reason": ...}}`.
//!
//! The command is split by concern: `args` (command line, codecs to measure), `corpus` (the
//! records of the files), `matrix` (codec × backend rows and their engines), `measure` (one
//! row: compress, decode, verify, time), `recommend` and `report` (progress, table, JSON).

mod args;
mod corpus;
mod matrix;
mod measure;
mod recommend;
mod report;

use anyhow::Result;
use serde::Serialize;

pub use args::BenchArgs;
use recommend::recommend;

use corpus::Corpus;
use matrix::Settings;

/// One row of results; serialised as one JSON line (the fields are documented above).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    /// Codec spec, e.g. `gzip-6`.
    pub codec: String,
    /// `zlib`, `libdeflate` or `isal` for gzip; `cpu` for every other codec.
    pub backend: String,
    /// Logical bytes / frame bytes (frame headers included).
    pub ratio: f64,
    /// Logical MB (10^6 bytes) compressed per second of wall time.
    pub compress_mbps: f64,
    /// Logical MB decoded per second of wall time, on `workers` threads.
    pub decompress_mbps: f64,
    /// Process CPU seconds spent compressing per 10^9 logical bytes.
    pub cpu_s_per_gb: f64,
    /// Process CPU seconds spent decoding per 10^9 logical bytes.
    pub decompress_cpu_s_per_gb: f64,
    /// MB (10^6 bytes) saved (logical − stored) per CPU second spent compressing; negative when
    /// the frames are larger than the records.
    pub saved_mb_per_cpu_s: f64,
    /// Compress CPU seconds / (wall seconds × workers).
    pub cpu_util: f64,
    /// `ratio / cpu_util`; 0 if CPU time is 0. QZFS's figure, misleading when every row is
    /// CPU-bound.
    pub cost_efficiency: f64,
    /// Records compressed.
    pub records: u64,
    /// Bytes of all records.
    pub logical_bytes: u64,
    /// Bytes of all frames.
    pub stored_bytes: u64,
    /// Records compressed by the accelerator.
    pub offloaded: u64,
    /// Records compressed by the CPU workers.
    pub software: u64,
    /// Records whose output did not fit the threshold's budget, stored raw.
    pub stored_raw: u64,
    /// Records the compressibility pre-check stored raw without compressing.
    pub skipped: u64,
    /// All-zero records stored as holes.
    pub holes: u64,
    /// Records the codec failed on with an error (not a full budget), stored raw and counted in
    /// `stored_raw` too; anything but 0 is a defect.
    pub codec_errors: u64,
}

/// Runs `presso bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let specs = args::codec_list(&args.codecs)?;
    let workers = match args.workers {
        Some(n) => n as usize,
        None => std::thread::available_parallelism().map_or(2, |n| n.get()),
    };
    let settings = Settings {
        workers,
        threshold: args.threshold,
        precheck: !args.no_precheck,
    };
    let corpus = Corpus::load(&args.files, args.recordsize)?;
    let rows = matrix::measure_all(&corpus, &specs, &settings)?;

    let recommendation = recommend(&rows);
    let mut out = std::io::stdout().lock();
    if args.json {
        report::print_json(&mut out, &rows, recommendation.as_ref())?;
    } else {
        report::print_table(
            &mut out,
            &corpus,
            args.recordsize,
            &settings,
            &rows,
            recommendation.as_ref(),
        )?;
    }
    std::io::Write::flush(&mut out)?;
    Ok(())
}

/// Rows made up for the tests of the recommendation and the table.
#[cfg(test)]
mod testing {
    use super::Row;

    /// A row with the given codec, backend, ratio and CPU cost; the rest plausible.
    pub(super) fn row(codec: &str, backend: &str, ratio: f64, cpu_s_per_gb: f64) -> Row {
        Row {
            codec: codec.to_string(),
            backend: backend.to_string(),
            ratio,
            compress_mbps: 100.0,
            decompress_mbps: 500.0,
            cpu_s_per_gb,
            decompress_cpu_s_per_gb: cpu_s_per_gb / 4.0,
            saved_mb_per_cpu_s: (1.0 - 1.0 / ratio) * 1000.0 / cpu_s_per_gb,
            cpu_util: 0.5,
            cost_efficiency: ratio / 0.5,
            records: 10,
            logical_bytes: 1_000_000,
            stored_bytes: (1_000_000.0 / ratio) as u64,
            offloaded: 0,
            software: 10,
            stored_raw: 0,
            skipped: 0,
            holes: 0,
            codec_errors: 0,
        }
    }
}
