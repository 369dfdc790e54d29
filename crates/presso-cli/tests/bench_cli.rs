//! Runs the built `presso` binary's `bench` subcommand on generated data.

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use serde_json::Value;

const ROW_FIELDS: [&str; 19] = [
    "codec",
    "backend",
    "ratio",
    "compress_mbps",
    "decompress_mbps",
    "cpu_s_per_gb",
    "decompress_cpu_s_per_gb",
    "saved_mb_per_cpu_s",
    "cpu_util",
    "cost_efficiency",
    "records",
    "logical_bytes",
    "stored_bytes",
    "offloaded",
    "software",
    "stored_raw",
    "skipped",
    "holes",
    "codec_errors",
];

/// A scratch directory under the system temp dir, removed on drop.
struct Scratch(PathBuf);

impl Scratch {
    fn new(name: &str) -> Scratch {
        let dir = std::env::temp_dir().join(format!("presso-{name}-{}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir);
        std::fs::create_dir_all(&dir).expect("create scratch dir");
        Scratch(dir)
    }

    fn path(&self, file: &str) -> PathBuf {
        self.0.join(file)
    }
}

impl Drop for Scratch {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.0);
    }
}

/// A deterministic pseudo-random generator (xorshift64*), so the data is the same every run.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_f491_4f6c_dd1d)
    }
}

/// 512 KiB of log-like text, 256 KiB of zeros, 256 KiB of random bytes: 16 records of 64K.
fn generated_data() -> Vec<u8> {
    const WORDS: [&str; 16] = [
        "request",
        "served",
        "GET",
        "POST",
        "/index.html",
        "/api/v1/items",
        "status",
        "200",
        "404",
        "user",
        "agent",
        "bytes",
        "latency",
        "ms",
        "cache",
        "miss",
    ];
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15);
    let mut data = Vec::with_capacity(1 << 20);
    let mut line = 0u64;
    while data.len() < 512 << 10 {
        data.extend_from_slice(
            format!(
                "2024-05-{:02} 12:{:02}:{:02} ",
                line % 28 + 1,
                line % 60,
                rng.next() % 60
            )
            .as_bytes(),
        );
        for _ in 0..(4 + rng.next() % 8) {
            data.extend_from_slice(WORDS[(rng.next() % 16) as usize].as_bytes());
            data.push(b' ');
        }
        data.push(b'\n');
        line += 1;
    }
    data.truncate(512 << 10);
    data.resize(768 << 10, 0);
    while data.len() < 1 << 20 {
        data.extend_from_slice(&rng.next().to_le_bytes());
    }
    data
}

fn presso(args: &[&str]) -> Output {
    Command::new(env!("CARGO_BIN_EXE_presso"))
        .args(args)
        .output()
        .expect("run presso")
}

fn arg(path: &Path) -> &str {
    path.to_str().expect("temp path is UTF-8")
}

#[test]
fn bench_json_reports_every_row_and_a_recommendation() {
    let scratch = Scratch::new("bench-json");
    let file = scratch.path("mixed.bin");
    std::fs::write(&file, generated_data()).unwrap();

    let out = presso(&[
        "bench",
        arg(&file),
        "--codecs",
        "gzip-6,lz4",
        "--json",
        "--recordsize",
        "64K",
        "--workers",
        "2",
    ]);
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        out.status.success(),
        "exit {:?}\nstdout:\n{stdout}\nstderr:\n{stderr}",
        out.status
    );

    let lines: Vec<Value> = stdout
        .lines()
        .map(|line| {
            serde_json::from_str(line).unwrap_or_else(|e| panic!("bad JSON line {line:?}: {e}"))
        })
        .collect();
    let (last, rows) = lines.split_last().expect("some output");
    for row in rows {
        let object = row.as_object().expect("row is an object");
        for field in ROW_FIELDS {
            assert!(object.contains_key(field), "{field} missing from {row}");
        }
        assert_eq!(object.len(), ROW_FIELDS.len(), "unexpected fields in {row}");
        assert_eq!(row["records"], 16, "{row}");
        assert_eq!(row["logical_bytes"], 1 << 20, "{row}");
        assert_eq!(row["holes"], 4, "{row}");
        assert_eq!(row["codec_errors"], 0, "{row}");
        assert!(row["compress_mbps"].as_f64().unwrap() > 0.0, "{row}");
        assert!(row["decompress_mbps"].as_f64().unwrap() > 0.0, "{row}");
        // The CPU figures describe the same CPU seconds: bytes saved per CPU second is the
        // saving divided by the CPU seconds that CPU s/GB implies.
        let f = |name: &str| row[name].as_f64().unwrap();
        let cpu_seconds = f("cpu_s_per_gb") * f("logical_bytes") / 1e9;
        let saved_mb = (f("logical_bytes") - f("stored_bytes")) / 1e6;
        assert!(
            cpu_seconds > 0.0 && f("decompress_cpu_s_per_gb") >= 0.0,
            "{row}"
        );
        let expected = saved_mb / cpu_seconds;
        assert!(
            (f("saved_mb_per_cpu_s") - expected).abs() <= 1e-6 * expected.abs().max(1.0),
            "saved_mb_per_cpu_s should be {expected}: {row}"
        );
    }
    let backends_of = |codec: &str| -> Vec<&str> {
        rows.iter()
            .filter(|r| r["codec"] == codec)
            .map(|r| r["backend"].as_str().unwrap())
            .collect()
    };
    assert_eq!(backends_of("gzip-6"), ["zlib", "libdeflate", "isal"]);
    assert_eq!(backends_of("lz4"), ["cpu"]);
    for row in rows.iter().filter(|r| r["codec"] == "gzip-6") {
        assert!(row["ratio"].as_f64().unwrap() > 1.0, "{row}");
        // The random quarter never compresses: the pre-check skips it or the budget refuses it.
        let raw = row["skipped"].as_u64().unwrap() + row["stored_raw"].as_u64().unwrap();
        assert!(raw >= 4, "{row}");
    }
    let isal = rows
        .iter()
        .find(|r| r["backend"] == "isal")
        .expect("isal row");
    assert!(isal["offloaded"].as_u64().unwrap() > 0, "{isal}");

    let recommended = &last["recommended"];
    for field in ["codec", "backend", "reason"] {
        assert!(
            recommended[field].is_string(),
            "{field} missing from {last}"
        );
    }
}

#[test]
fn unknown_codec_is_refused_listing_the_valid_ones() {
    let scratch = Scratch::new("bench-codec");
    let file = scratch.path("small.bin");
    std::fs::write(&file, b"hello hello hello hello").unwrap();

    let out = presso(&["bench", arg(&file), "--codecs", "brotli"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "brotli accepted");
    assert!(stderr.contains("brotli"), "{stderr}");
    for valid in ["lz4", "gzip-1..gzip-9", "zstd-1..zstd-19"] {
        assert!(stderr.contains(valid), "{valid} not listed in: {stderr}");
    }
    assert!(out.stdout.is_empty());
}

#[test]
fn missing_file_is_named_in_the_error() {
    let scratch = Scratch::new("bench-missing");
    let missing = scratch.path("no-such-file.dat");
    let out = presso(&["bench", arg(&missing), "--codecs", "lz4"]);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!out.status.success(), "missing file accepted");
    assert!(stderr.contains(arg(&missing)), "{stderr}");
    assert!(out.stdout.is_empty());
}

#[test]
fn help_lists_codecs_and_examples() {
    let out = presso(&["bench", "--help"]);
    assert!(out.status.success());
    let help = String::from_utf8_lossy(&out.stdout);
    for want in [
        "Examples:",
        "presso bench",
        "zstd-1..zstd-19",
        "gzip-1..gzip-9",
        "cost_efficiency",
    ] {
        assert!(help.contains(want), "{want} missing from --help:\n{help}");
    }
}
