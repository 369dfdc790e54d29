//! Single-thread codec throughput on 128 KiB records of the real-data corpus, side by side:
//! zlib (the ZFS software reference), libdeflate (Presso's CPU path), ISA-L (the accelerator
//! engine), zstd, lz4, zle, and the pre-check on incompressible data.
//!
//! The corpus comes from `scripts/make-corpus.sh DIR`; point `PRESSO_CORPUS` at DIR (default:
//! `corpus/` at the workspace root). Each file's first `PRESSO_BENCH_MB` MB (default 16) is used.
//! Ratios are printed before the timings, since criterion reports only time.
//!
//! Run: `PRESSO_CORPUS=corpus cargo bench -p presso-codec --bench codecs`

use std::path::PathBuf;

use criterion::{criterion_group, criterion_main, BenchmarkId, Criterion, Throughput};
use presso_codec::format::{self, DeflateEngine};
use presso_codec::policy::{probe, Threshold};
use presso_codec::CodecSpec;

const RECORD: usize = 128 << 10;

fn corpus_dir() -> PathBuf {
    std::env::var_os("PRESSO_CORPUS")
        .map(PathBuf::from)
        .unwrap_or_else(|| PathBuf::from(concat!(env!("CARGO_MANIFEST_DIR"), "/../../corpus")))
}

fn load(name: &str) -> Option<Vec<u8>> {
    let mb: usize = std::env::var("PRESSO_BENCH_MB")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(16);
    let mut data = std::fs::read(corpus_dir().join(name)).ok()?;
    data.truncate(mb * 1_000_000 / RECORD * RECORD);
    Some(data)
}

/// (label, spec, deflate engine)
fn variants() -> Vec<(String, CodecSpec, DeflateEngine)> {
    let mut out = Vec::new();
    for level in [1u8, 6, 9] {
        let spec = CodecSpec::new(presso_codec::CodecId::Gzip, level).unwrap();
        for engine in DeflateEngine::ALL {
            out.push((format!("gzip-{level}/{}", engine.name()), spec, engine));
        }
    }
    for spec in ["zstd-1", "zstd-3", "lz4", "zle"] {
        out.push((
            spec.to_string(),
            spec.parse().unwrap(),
            DeflateEngine::default(),
        ));
    }
    out
}

fn compress_all(data: &[u8], spec: CodecSpec, engine: DeflateEngine, out: &mut [u8]) -> usize {
    let budget = Threshold::DEFAULT.budget(RECORD);
    data.chunks(RECORD)
        .map(|record| {
            format::compress(spec, engine, record, &mut out[..budget])
                .unwrap()
                .unwrap_or(record.len())
        })
        .sum()
}

fn bench_codecs(c: &mut Criterion) {
    let mut out = vec![0u8; RECORD];
    for file in ["text.tar", "reads.fq"] {
        let Some(data) = load(file) else {
            eprintln!(
                "{file}: not found in {}; run scripts/make-corpus.sh first",
                corpus_dir().display()
            );
            continue;
        };
        let mut group = c.benchmark_group(format!("compress/{file}"));
        group.throughput(Throughput::Bytes(data.len() as u64));
        group.sample_size(10);
        for (label, spec, engine) in variants() {
            let stored = compress_all(&data, spec, engine, &mut out);
            eprintln!(
                "ratio {file} {label}: {:.3}",
                data.len() as f64 / stored as f64
            );
            group.bench_function(BenchmarkId::from_parameter(&label), |b| {
                b.iter(|| compress_all(&data, spec, engine, &mut out))
            });
        }
        group.finish();
    }
}

fn bench_precheck(c: &mut Criterion) {
    let Some(data) = load("media.bin") else {
        return;
    };
    let gzip: CodecSpec = "gzip-6".parse().unwrap();
    let budget = Threshold::DEFAULT.budget(RECORD);
    let mut group = c.benchmark_group("incompressible/media.bin");
    group.throughput(Throughput::Bytes(data.len() as u64));
    group.sample_size(10);
    group.bench_function("precheck", |b| {
        b.iter(|| {
            data.chunks(RECORD)
                .filter(|r| probe(gzip, &[r], budget, r.len()) == presso_codec::policy::Probe::Skip)
                .count()
        })
    });
    let mut out = vec![0u8; RECORD];
    group.bench_function("gzip-6/libdeflate without precheck", |b| {
        b.iter(|| compress_all(&data, gzip, DeflateEngine::Libdeflate, &mut out))
    });
    group.finish();
}

criterion_group!(benches, bench_codecs, bench_precheck);
criterion_main!(benches);
