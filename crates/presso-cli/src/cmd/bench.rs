//! `presso bench`: measures every requested codec, on every backend that can run it, over the
//! records of real files, and recommends one.
//!
//! Each row of the matrix (codec × backend) gets a fresh [`Engine`] that compresses every record of
//! every file in one batch; then every frame is decoded on `workers` threads and compared with the
//! original record, so a run is also an end-to-end correctness check of the engine.
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
//! | `cpu_util`        | compress CPU seconds / (wall seconds × workers)                         |
//! | `cost_efficiency` | `ratio / cpu_util` (the QZFS cost-efficiency figure; 0 if CPU time is 0) |
//! | `records`         | records compressed                                                      |
//! | `logical_bytes`   | bytes of all records                                                    |
//! | `stored_bytes`    | bytes of all frames                                                     |
//! | `offloaded`       | records compressed by the accelerator                                   |
//! | `software`        | records compressed by the CPU workers                                   |
//! | `stored_raw`      | records whose output did not fit the threshold's budget, stored raw     |
//! | `skipped`         | records the compressibility pre-check stored raw without compressing    |
//! | `holes`           | all-zero records stored as holes                                        |
//!
//! The last line is `{"recommended": {"codec": ..., "backend": ..., "reason": ...}}`.

use std::fmt::Write as _;
use std::io::{IsTerminal, Write};
use std::path::PathBuf;
use std::time::{Duration, Instant};

use anyhow::{bail, ensure, Context, Result};
use bytes::Bytes;
use clap::Args;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use presso_codec::accel::SizeWindow;
use presso_codec::codec::{self, CodecId};
use presso_codec::frame::{self, MAX_RECORD_SIZE};
use presso_codec::{
    BackendKind, CodecSpec, DecodeOptions, DeflateEngine, Engine, EngineConfig, Offload, Record,
    Threshold, CODECS,
};
use serde::Serialize;

use presso_fs::units::{format_size, parse_record_size};

/// Codecs measured when `--codecs` is not given.
const DEFAULT_CODECS: &[&str] = &[
    "off", "lz4", "zle", "gzip-1", "gzip-6", "gzip-9", "zstd-1", "zstd-3", "zstd-9",
];

/// Rows whose ratio is at least this fraction of the best ratio compete on CPU cost.
const NEAR_BEST: f64 = 0.9;

/// Below this best ratio the data is considered incompressible.
const BARELY_COMPRESSES: f64 = 1.1;

/// Measure codecs and backends on your own files, verify every record round-trips, and recommend
/// a codec.
///
/// Every FILE is read into memory and cut into records of --recordsize bytes (the last one may be
/// shorter). For each codec, and for gzip on each deflate backend (zlib, libdeflate, and the ISA-L
/// accelerator), all records go through a fresh compression engine exactly as the file system
/// would write them (zero check, pre-check, threshold, offload), then every frame is decoded and
/// compared with the original. Prints a table and a recommendation; with --json prints one JSON
/// object per row instead (fields listed below).
#[derive(Debug, Args)]
#[command(
    after_help = after_help(false),
    after_long_help = after_help(true),
)]
pub struct BenchArgs {
    /// Files to measure (read fully into memory).
    #[arg(value_name = "FILE", required = true)]
    pub files: Vec<PathBuf>,

    /// Record size: bytes, or with a K or M suffix (at most 16M).
    #[arg(long, value_name = "SIZE", default_value = "128K", value_parser = parse_record_size)]
    pub recordsize: usize,

    #[arg(long, value_name = "LIST", value_delimiter = ',', help = codecs_help())]
    pub codecs: Vec<CodecSpec>,

    /// Compression worker threads (also ISA-L threads and decode threads) [default: all cores]
    #[arg(long, value_name = "N", value_parser = clap::value_parser!(u16).range(1..=1024))]
    pub workers: Option<u16>,

    /// Minimum saving for a record to be stored compressed.
    #[arg(long, value_name = "PERCENT", default_value = "12.5%")]
    pub threshold: Threshold,

    /// Compress every record, without the cheap compressibility pre-check.
    #[arg(long)]
    pub no_precheck: bool,

    /// Print JSON Lines (one object per row, then the recommendation) instead of a table.
    #[arg(long)]
    pub json: bool,
}

fn codecs_help() -> String {
    format!(
        "Comma-separated codec specs to measure (see below) [default: {}]",
        DEFAULT_CODECS.join(",")
    )
}

/// The text after the options in `-h` (short) and `--help` (long, with the JSON fields).
fn after_help(long: bool) -> String {
    let mut text = String::from("Valid codecs:\n");
    for info in CODECS.iter() {
        let built = if info.built_in { "" } else { " (not built in)" };
        let _ = writeln!(text, "  {:<28} {}{built}", info.spellings(), info.summary);
    }
    text.push_str(
        "\nExamples:\n  \
         presso bench data.tar\n      \
         Measure the default codecs on data.tar in 128K records.\n  \
         presso bench --codecs gzip-6,zstd-3,lz4 --recordsize 1M logs/*.log\n      \
         Compare three codecs on 1M records of several files.\n  \
         presso bench --workers 4 --threshold 20% --no-precheck vm.img\n      \
         Four workers, store raw unless a record shrinks by 20%, compress every record.\n  \
         presso bench --json reads.fq > bench.jsonl\n      \
         Machine-readable output: one JSON object per row.\n",
    );
    if long {
        text.push_str(
            "\nJSON output (--json), one object per line, one line per row:\n  \
             codec            codec spec, e.g. gzip-6\n  \
             backend          zlib, libdeflate or isal for gzip; cpu for the other codecs\n  \
             ratio            logical bytes / frame bytes (frame headers included)\n  \
             compress_mbps    logical MB (1e6 bytes) compressed per wall-clock second\n  \
             decompress_mbps  logical MB decoded per wall-clock second (on N threads)\n  \
             cpu_s_per_gb     process CPU seconds spent compressing per 1e9 logical bytes\n  \
             cpu_util         compress CPU seconds / (wall seconds x workers)\n  \
             cost_efficiency  ratio / cpu_util (QZFS's figure; 0 when no CPU time was measured)\n  \
             records          records compressed\n  \
             logical_bytes    bytes of all records\n  \
             stored_bytes     bytes of all frames\n  \
             offloaded        records compressed by the accelerator\n  \
             software         records compressed by the CPU workers\n  \
             stored_raw       records over the threshold's budget, stored raw\n  \
             skipped          records the pre-check stored raw without compressing\n  \
             holes            all-zero records stored as holes\n\
             The last line is {\"recommended\": {\"codec\": ..., \"backend\": ..., \"reason\": ...}}.\n",
        );
    }
    text
}

/// Where a row's records are compressed.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Backend {
    /// The engine's CPU workers (every codec but gzip).
    Cpu,
    /// gzip on the CPU with zlib.
    Zlib,
    /// gzip on the CPU with libdeflate.
    Libdeflate,
    /// gzip offloaded to the ISA-L accelerator.
    Isal,
}

impl Backend {
    fn name(self) -> &'static str {
        match self {
            Backend::Cpu => "cpu",
            Backend::Zlib => "zlib",
            Backend::Libdeflate => "libdeflate",
            Backend::Isal => "isal",
        }
    }

    /// The backends measured for a codec.
    fn for_codec(codec: CodecId) -> &'static [Backend] {
        match codec {
            CodecId::Gzip => &[Backend::Zlib, Backend::Libdeflate, Backend::Isal],
            _ => &[Backend::Cpu],
        }
    }

    /// Deflate engine used to compress (CPU path) and to decode.
    fn deflate(self) -> DeflateEngine {
        match self {
            Backend::Zlib => DeflateEngine::Zlib,
            Backend::Isal => DeflateEngine::Isal,
            Backend::Cpu | Backend::Libdeflate => DeflateEngine::Libdeflate,
        }
    }
}

/// One row of results; serialised as one JSON line (field names are documented above).
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Row {
    pub codec: String,
    pub backend: String,
    pub ratio: f64,
    pub compress_mbps: f64,
    pub decompress_mbps: f64,
    pub cpu_s_per_gb: f64,
    pub cpu_util: f64,
    pub cost_efficiency: f64,
    pub records: u64,
    pub logical_bytes: u64,
    pub stored_bytes: u64,
    pub offloaded: u64,
    pub software: u64,
    pub stored_raw: u64,
    pub skipped: u64,
    pub holes: u64,
}

/// The recommended row and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    pub codec: String,
    pub backend: String,
    pub reason: String,
}

/// Picks a codec and backend from measured rows.
///
/// If even the best ratio is below 1.1 the data barely compresses, and lz4 is recommended: it is
/// cheap, and the pre-check and budget store incompressible records raw early. Otherwise, among the
/// rows (codec `off` excluded) whose ratio is at least 90% of the best, the one with the lowest CPU
/// cost per GB wins (ties: higher ratio, then earlier row). `None` only when there are no rows.
pub fn recommend(rows: &[Row]) -> Option<Recommendation> {
    // The first row with the highest ratio (rows come in the order measured).
    let best = rows
        .iter()
        .reduce(|best, row| if row.ratio > best.ratio { row } else { best })?;
    let where_ = |row: &Row| format!("{} on {}", row.codec, row.backend);

    if best.ratio < BARELY_COMPRESSES {
        let lz4 = rows.iter().find(|r| r.codec == CodecId::Lz4.name());
        let cost = match lz4 {
            Some(row) => format!("lz4 is cheap ({:.2} CPU s/GB here)", row.cpu_s_per_gb),
            None => "lz4 is cheap (not measured in this run)".to_string(),
        };
        return Some(Recommendation {
            codec: CodecId::Lz4.name().to_string(),
            backend: lz4
                .map_or(Backend::Cpu.name(), |r| r.backend.as_str())
                .to_string(),
            reason: format!(
                "The data barely compresses: the best ratio is only {:.2} ({}), so stronger codecs \
                 would burn CPU for almost no space. {cost}, and its early abort stores \
                 incompressible records raw.",
                best.ratio,
                where_(best)
            ),
        });
    }

    let floor = NEAR_BEST * best.ratio;
    let candidates: Vec<&Row> = rows
        .iter()
        .filter(|r| r.codec != CodecId::Off.name() && r.ratio >= floor)
        .collect();
    let chosen = candidates.iter().copied().reduce(|keep, next| {
        let better = next
            .cpu_s_per_gb
            .total_cmp(&keep.cpu_s_per_gb)
            .then(keep.ratio.total_cmp(&next.ratio))
            .is_lt();
        if better {
            next
        } else {
            keep
        }
    })?;

    let mut reason = if std::ptr::eq(chosen, best) {
        format!(
            "The best ratio, {:.2}, at {:.2} CPU s/GB",
            chosen.ratio, chosen.cpu_s_per_gb
        )
    } else {
        format!(
            "Ratio {:.2} ({:.0}% of the best, {:.2} by {}), {:.2} CPU s/GB",
            chosen.ratio,
            // Rounded down, so a row below the best never reads "100% of the best".
            (100.0 * chosen.ratio / best.ratio).floor(),
            best.ratio,
            where_(best),
            chosen.cpu_s_per_gb
        )
    };
    if candidates.len() > 1 {
        let _ = write!(
            reason,
            ", the least CPU of the {} rows within {:.0}% of the best ratio",
            candidates.len(),
            100.0 * (1.0 - NEAR_BEST)
        );
    }
    reason.push('.');
    // Compare with the reference: zlib for the same codec (what ZFS's software gzip runs), or
    // else the row with the best ratio.
    let reference = rows
        .iter()
        .find(|r| r.codec == chosen.codec && r.backend == Backend::Zlib.name())
        .filter(|r| !std::ptr::eq(*r, chosen))
        .or_else(|| (!std::ptr::eq(best, chosen)).then_some(best));
    if let Some(reference) = reference {
        if chosen.cpu_s_per_gb > 0.0 && reference.cpu_s_per_gb > chosen.cpu_s_per_gb {
            let _ = write!(
                reason,
                " That is {:.1}x less CPU than {} ({:.2} CPU s/GB).",
                reference.cpu_s_per_gb / chosen.cpu_s_per_gb,
                where_(reference),
                reference.cpu_s_per_gb
            );
        }
    }
    Some(Recommendation {
        codec: chosen.codec.clone(),
        backend: chosen.backend.clone(),
        reason,
    })
}

/// Where a record came from, for error messages.
struct Origin {
    file: usize,
    offset: u64,
}

/// Every record of every file, in order.
struct Corpus {
    files: Vec<PathBuf>,
    records: Vec<Record>,
    origins: Vec<Origin>,
    logical_bytes: u64,
}

impl Corpus {
    fn load(paths: &[PathBuf], record_size: usize) -> Result<Corpus> {
        let mut corpus = Corpus {
            files: paths.to_vec(),
            records: Vec::new(),
            origins: Vec::new(),
            logical_bytes: 0,
        };
        for (file, path) in paths.iter().enumerate() {
            let data = Bytes::from(
                std::fs::read(path).with_context(|| format!("cannot read {}", path.display()))?,
            );
            let mut start = 0;
            while start < data.len() {
                let end = (start + record_size).min(data.len());
                corpus
                    .records
                    .push(Record::from_segments([data.slice(start..end)]));
                corpus.origins.push(Origin {
                    file,
                    offset: start as u64,
                });
                start = end;
            }
            corpus.logical_bytes += data.len() as u64;
        }
        ensure!(
            corpus.logical_bytes > 0,
            "nothing to measure: every file given is empty"
        );
        Ok(corpus)
    }

    fn describe(&self, index: usize) -> String {
        let origin = &self.origins[index];
        format!(
            "record {index} ({} at offset {})",
            self.files[origin.file].display(),
            origin.offset
        )
    }
}

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

struct Settings {
    workers: usize,
    threshold: Threshold,
    precheck: bool,
}

/// Starts the engine of one row; `Err` says why the ISA-L accelerator did not start.
fn start_engine(backend: Backend, settings: &Settings) -> Result<Engine, String> {
    let config = EngineConfig {
        workers: settings.workers,
        queue_depth: settings.workers * 8,
        threshold: settings.threshold,
        precheck: settings.precheck,
        deflate: backend.deflate(),
        decode_deflate: backend.deflate(),
        offload: Offload::Off,
        ..EngineConfig::default()
    };
    if backend != Backend::Isal {
        return Ok(Engine::with_accelerator(config, None));
    }
    // The production accelerator, but offloading every record size, so the row measures the
    // accelerator whatever --recordsize is. CPU fallbacks use libdeflate, as in production.
    let accel = presso_codec::engine::default_accelerator(
        settings.workers,
        SizeWindow {
            min: 1,
            max: MAX_RECORD_SIZE,
        },
    )?;
    let config = EngineConfig {
        offload: Offload::On,
        deflate: DeflateEngine::Libdeflate,
        ..config
    };
    Ok(Engine::with_accelerator(config, Some(accel)))
}

/// Compresses the corpus with one codec on one backend, decodes and verifies it.
fn measure(
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
                                let out = frame::decode_frame_with(&item.frame, options);
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
    })
}

/// The codecs to measure: as given (duplicates dropped), or the defaults.
fn codec_list(given: &[CodecSpec]) -> Result<Vec<CodecSpec>> {
    let mut specs: Vec<CodecSpec> = Vec::new();
    if given.is_empty() {
        for text in DEFAULT_CODECS {
            let spec: CodecSpec = text.parse().expect("default codecs are valid");
            if spec.codec.info().built_in {
                specs.push(spec);
            }
        }
    } else {
        for &spec in given {
            if !spec.codec.info().built_in {
                bail!(
                    "codec {spec} is not built into this presso; valid codecs: {}",
                    codec::valid_specs()
                );
            }
            if !specs.contains(&spec) {
                specs.push(spec);
            }
        }
    }
    Ok(specs)
}

fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records  {msg}",
        )
        .expect("valid progress template"),
    );
    bar
}

/// Runs `presso bench`.
pub fn run(args: BenchArgs) -> Result<()> {
    let specs = codec_list(&args.codecs)?;
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

    let matrix: Vec<(CodecSpec, Backend)> = specs
        .iter()
        .flat_map(|&spec| {
            Backend::for_codec(spec.codec)
                .iter()
                .map(move |&backend| (spec, backend))
        })
        .collect();
    let per_row = 2 * corpus.records.len() as u64;
    let progress = progress_bar(per_row * matrix.len() as u64);

    let mut rows = Vec::new();
    let mut isal_failed = false;
    for (spec, backend) in matrix {
        if backend == Backend::Isal && isal_failed {
            progress.inc(per_row);
            continue;
        }
        let engine = match start_engine(backend, &settings) {
            Ok(engine) => engine,
            Err(why) => {
                isal_failed = true;
                progress.suspend(|| {
                    eprintln!(
                        "presso: warning: the ISA-L accelerator did not start ({why}); \
                         skipping the isal rows"
                    )
                });
                progress.inc(per_row);
                continue;
            }
        };
        rows.push(measure(
            &corpus, spec, backend, engine, &settings, &progress,
        )?);
    }
    progress.finish_and_clear();

    let recommendation = recommend(&rows);
    let mut out = std::io::stdout().lock();
    if args.json {
        for row in &rows {
            writeln!(out, "{}", serde_json::to_string(row)?)?;
        }
        #[derive(Serialize)]
        struct Last<'a> {
            recommended: Option<&'a Recommendation>,
        }
        let last = Last {
            recommended: recommendation.as_ref(),
        };
        writeln!(out, "{}", serde_json::to_string(&last)?)?;
    } else {
        writeln!(
            out,
            "{} file(s), {} bytes in {} records of {}; {} workers, threshold {}, pre-check {}\n",
            corpus.files.len(),
            corpus.logical_bytes,
            corpus.records.len(),
            format_size(args.recordsize as u64),
            workers,
            settings.threshold,
            if settings.precheck { "on" } else { "off" }
        )?;
        out.write_all(render_table(&rows).as_bytes())?;
        if let Some(rec) = recommendation {
            writeln!(
                out,
                "\nRecommended: {} on {}. {}",
                rec.codec, rec.backend, rec.reason
            )?;
        }
    }
    out.flush()?;
    Ok(())
}

/// The human table: one line per row, columns aligned (text left, numbers right).
fn render_table(rows: &[Row]) -> String {
    const HEADERS: [&str; 13] = [
        "codec",
        "backend",
        "ratio",
        "comp MB/s",
        "decomp MB/s",
        "CPU s/GB",
        "CPU util",
        "cost eff",
        "offloaded",
        "software",
        "stored raw",
        "skipped",
        "holes",
    ];
    let cells: Vec<[String; 13]> = rows
        .iter()
        .map(|r| {
            [
                r.codec.clone(),
                r.backend.clone(),
                format!("{:.2}", r.ratio),
                format!("{:.1}", r.compress_mbps),
                format!("{:.1}", r.decompress_mbps),
                format!("{:.2}", r.cpu_s_per_gb),
                format!("{:.2}", r.cpu_util),
                format!("{:.2}", r.cost_efficiency),
                r.offloaded.to_string(),
                r.software.to_string(),
                r.stored_raw.to_string(),
                r.skipped.to_string(),
                r.holes.to_string(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let mut text = String::new();
    let mut push_line = |line: &[&str]| {
        let mut parts = Vec::with_capacity(line.len());
        for (column, (cell, width)) in line.iter().zip(widths).enumerate() {
            if column < 2 {
                parts.push(format!("{cell:<width$}"));
            } else {
                parts.push(format!("{cell:>width$}"));
            }
        }
        text.push_str(parts.join("  ").trim_end());
        text.push('\n');
    };
    push_line(&HEADERS);
    for line in &cells {
        push_line(&line.each_ref().map(String::as_str));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;

    fn row(codec: &str, backend: &str, ratio: f64, cpu_s_per_gb: f64) -> Row {
        Row {
            codec: codec.to_string(),
            backend: backend.to_string(),
            ratio,
            compress_mbps: 100.0,
            decompress_mbps: 500.0,
            cpu_s_per_gb,
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
        }
    }

    #[test]
    fn no_rows_no_recommendation() {
        assert_eq!(recommend(&[]), None);
    }

    #[test]
    fn picks_cheapest_row_near_the_best_ratio() {
        let rows = [
            row("off", "cpu", 0.999, 0.1),
            row("lz4", "cpu", 2.0, 0.5),
            row("gzip-6", "zlib", 3.3, 20.0),
            row("gzip-6", "libdeflate", 3.35, 8.0),
            row("gzip-6", "isal", 3.2, 4.0),
            row("zstd-9", "cpu", 3.5, 12.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(
            (rec.codec.as_str(), rec.backend.as_str()),
            ("gzip-6", "isal")
        );
        // 3.2 / 3.5 = 91% of the best; zlib costs 5x more.
        assert!(rec.reason.contains("Ratio 3.20"), "{}", rec.reason);
        assert!(rec.reason.contains("91% of the best"), "{}", rec.reason);
        assert!(rec.reason.contains("zstd-9 on cpu"), "{}", rec.reason);
        assert!(
            rec.reason.contains("5.0x less CPU than gzip-6 on zlib"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn rows_below_ninety_percent_never_win() {
        // lz4 is far cheaper but at 2.0 / 3.0 = 67% of the best ratio it is out.
        let rows = [
            row("lz4", "cpu", 2.0, 0.5),
            row("zstd-3", "cpu", 2.8, 3.0),
            row("zstd-9", "cpu", 3.0, 9.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(rec.codec, "zstd-3");
        assert!(
            rec.reason.contains("3.0x less CPU than zstd-9 on cpu"),
            "{}",
            rec.reason
        );
        // Exactly 90% still qualifies.
        let rows = [row("lz4", "cpu", 2.7, 0.5), row("zstd-9", "cpu", 3.0, 9.0)];
        assert_eq!(recommend(&rows).unwrap().codec, "lz4");
    }

    #[test]
    fn best_row_wins_when_it_is_also_cheapest() {
        let rows = [
            row("zstd-3", "cpu", 4.0, 2.0),
            row("gzip-9", "zlib", 3.7, 40.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(rec.codec, "zstd-3");
        assert!(
            rec.reason.contains("The best ratio, 4.00"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn equal_best_ratios_name_the_first_row() {
        let rows = [row("gzip-6", "zlib", 1.0, 1.0), row("lz4", "cpu", 1.0, 0.5)];
        let rec = recommend(&rows).unwrap();
        assert!(
            rec.reason.contains("1.00 (gzip-6 on zlib)"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn ties_on_cpu_go_to_the_better_ratio() {
        let rows = [row("lz4", "cpu", 2.0, 1.0), row("zstd-1", "cpu", 2.1, 1.0)];
        assert_eq!(recommend(&rows).unwrap().codec, "zstd-1");
    }

    #[test]
    fn off_is_never_recommended_for_compressible_data() {
        // off at 0.9998 is within 90% of 1.105, and cheapest, but it is not compression.
        let rows = [
            row("off", "cpu", 0.9998, 0.01),
            row("zstd-3", "cpu", 1.105, 2.0),
        ];
        assert_eq!(recommend(&rows).unwrap().codec, "zstd-3");
    }

    #[test]
    fn incompressible_data_gets_lz4() {
        let rows = [
            row("off", "cpu", 0.9998, 0.01),
            row("lz4", "cpu", 1.0, 0.3),
            row("gzip-6", "zlib", 1.02, 15.0),
            row("zstd-9", "cpu", 1.05, 30.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!((rec.codec.as_str(), rec.backend.as_str()), ("lz4", "cpu"));
        assert!(rec.reason.contains("barely compresses"), "{}", rec.reason);
        assert!(
            rec.reason.contains("1.05 (zstd-9 on cpu)"),
            "{}",
            rec.reason
        );
        assert!(rec.reason.contains("0.30 CPU s/GB"), "{}", rec.reason);

        // lz4 is recommended even when it was not measured.
        let rows = [row("gzip-6", "zlib", 1.02, 15.0)];
        let rec = recommend(&rows).unwrap();
        assert_eq!((rec.codec.as_str(), rec.backend.as_str()), ("lz4", "cpu"));
        assert!(rec.reason.contains("not measured"), "{}", rec.reason);
    }

    #[test]
    fn default_codecs_parse_and_cover_the_spec() {
        let specs = codec_list(&[]).unwrap();
        let names: Vec<String> = specs.iter().map(ToString::to_string).collect();
        for want in ["off", "zle", "gzip-1", "gzip-6", "gzip-9"] {
            assert!(
                names.iter().any(|n| n == want),
                "{want} missing from {names:?}"
            );
        }
    }

    #[test]
    fn duplicate_codecs_are_measured_once() {
        let gzip6: CodecSpec = "gzip-6".parse().unwrap();
        let gzip: CodecSpec = "gzip".parse().unwrap();
        assert_eq!(codec_list(&[gzip6, gzip]).unwrap(), vec![gzip6]);
    }

    #[test]
    fn gzip_runs_on_three_backends_and_the_rest_on_the_cpu() {
        assert_eq!(
            Backend::for_codec(CodecId::Gzip),
            &[Backend::Zlib, Backend::Libdeflate, Backend::Isal]
        );
        for info in CODECS.iter().filter(|c| c.id != CodecId::Gzip) {
            assert_eq!(Backend::for_codec(info.id), &[Backend::Cpu]);
        }
    }

    #[test]
    fn table_columns_line_up() {
        let rows = [
            row("gzip-6", "libdeflate", 3.35, 8.0),
            row("lz4", "cpu", 2.0, 0.5),
        ];
        let table = render_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("codec   backend"), "{table}");
        let ratio_end = lines[0].find("ratio").unwrap() + "ratio".len();
        for line in &lines[1..] {
            assert!(line[..ratio_end].ends_with(char::is_numeric), "{table}");
        }
    }
}
