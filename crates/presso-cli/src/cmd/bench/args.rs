//! The command line of `presso bench`: its arguments, help text, and the list of codecs to
//! measure (as given, or the defaults).

use std::fmt::Write as _;
use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use presso_codec::codec;
use presso_codec::{CodecId, CodecSpec, Threshold, CODECS};
use presso_fs::units::parse_record_size;

/// Codecs measured when `--codecs` is not given: the cheap ones, then gzip and zstd at a fast, the
/// default and a strong level. Names come from the codec table; levels are checked in the tests.
const DEFAULT_CODECS: [CodecSpec; 9] = [
    CodecSpec::OFF,
    spec(CodecId::Lz4, 0),
    spec(CodecId::Zle, 0),
    spec(CodecId::Gzip, 1),
    spec(CodecId::Gzip, 6),
    spec(CodecId::Gzip, 9),
    spec(CodecId::Zstd, 1),
    spec(CodecId::Zstd, 3),
    spec(CodecId::Zstd, 9),
];

/// A spec in a constant (where [`CodecSpec::new`]'s check cannot run).
const fn spec(codec: CodecId, level: u8) -> CodecSpec {
    CodecSpec { codec, level }
}

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

    /// Codecs to measure (the help line, which names the defaults, is `codecs_help`).
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

/// The help line of `--codecs`, naming the defaults.
fn codecs_help() -> String {
    let defaults: Vec<String> = DEFAULT_CODECS.iter().map(ToString::to_string).collect();
    format!(
        "Comma-separated codec specs to measure (see below) [default: {}]",
        defaults.join(",")
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
             decompress_cpu_s_per_gb  the same for decoding\n  \
             saved_mb_per_cpu_s  MB saved (logical - stored) per CPU second compressing\n  \
             cpu_util         compress CPU seconds / (wall seconds x workers)\n  \
             cost_efficiency  ratio / cpu_util (QZFS's figure; 0 when no CPU time was measured;\n                  \
             it ranks by ratio alone when every row is CPU-bound: rank by the CPU columns)\n  \
             records          records compressed\n  \
             logical_bytes    bytes of all records\n  \
             stored_bytes     bytes of all frames\n  \
             offloaded        records compressed by the accelerator\n  \
             software         records compressed by the CPU workers\n  \
             stored_raw       records over the threshold's budget, stored raw\n  \
             skipped          records the pre-check stored raw without compressing\n  \
             holes            all-zero records stored as holes\n  \
             codec_errors     records the codec failed on, stored raw (also in stored_raw);\n                  \
             anything but 0 is a defect to report\n\
             The last line is {\"recommended\": {\"codec\": ..., \"backend\": ..., \"reason\": ...}}.\n",
        );
    }
    text
}

/// The codecs to measure: as given (duplicates dropped), or the defaults.
pub(super) fn codec_list(given: &[CodecSpec]) -> Result<Vec<CodecSpec>> {
    let mut specs: Vec<CodecSpec> = Vec::new();
    if given.is_empty() {
        for spec in DEFAULT_CODECS {
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

#[cfg(test)]
mod tests {
    use super::*;

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
    fn default_codecs_are_valid_specs() {
        for spec in DEFAULT_CODECS {
            assert_eq!(CodecSpec::new(spec.codec, spec.level), Ok(spec));
        }
    }

    #[test]
    fn the_help_examples_name_valid_codecs() {
        let help = after_help(false);
        let mut lists = 0;
        for (at, flag) in help.match_indices("--codecs ") {
            let list = help[at + flag.len()..].split_whitespace().next().unwrap();
            for text in list.split(',') {
                text.parse::<CodecSpec>()
                    .unwrap_or_else(|e| panic!("example codec {text}: {e}"));
            }
            lists += 1;
        }
        assert!(lists > 0, "no --codecs example in:\n{help}");
    }
}
