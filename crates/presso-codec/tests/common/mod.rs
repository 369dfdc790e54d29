//! Test data and engine set-ups shared by the integration tests.
#![allow(dead_code)]

use std::sync::Arc;

use presso_codec::accel::isal::{IsalAccelerator, IsalConfig};
use presso_codec::accel::{Accelerator, SizeWindow};
use presso_codec::frame::MAX_RECORD_SIZE;
use presso_codec::{DeflateEngine, Engine, EngineConfig, Offload};
use rand::{Rng, RngCore, SeedableRng};

/// Text-like bytes: words from a small vocabulary with numbers, compressible about 3-4x.
pub fn text(len: usize, seed: u64) -> Vec<u8> {
    const WORDS: [&str; 24] = [
        "record",
        "pool",
        "segment",
        "the",
        "of",
        "compression",
        "ratio",
        "gzip",
        "kernel",
        "read",
        "write",
        "ACGT",
        "GATTACA",
        "quality",
        "struct",
        "return",
        "if",
        "else",
        "fn",
        "let",
        "mut",
        "=",
        "{",
        "}",
    ];
    let mut rng = rand::rngs::StdRng::seed_from_u64(seed);
    let mut out = Vec::with_capacity(len + 32);
    while out.len() < len {
        out.extend_from_slice(WORDS[rng.gen_range(0..WORDS.len())].as_bytes());
        if rng.gen_bool(0.1) {
            out.extend_from_slice(rng.gen_range(0..100_000u32).to_string().as_bytes());
        }
        out.push(if rng.gen_bool(0.08) { b'\n' } else { b' ' });
    }
    out.truncate(len);
    out
}

/// Uniformly random bytes: incompressible.
pub fn random(len: usize, seed: u64) -> Vec<u8> {
    let mut out = vec![0u8; len];
    rand::rngs::StdRng::seed_from_u64(seed).fill_bytes(&mut out);
    out
}

/// An engine of 2 CPU workers that must offload to `accel`, with `tweak` applied to its settings.
pub fn engine_with(accel: Arc<dyn Accelerator>, tweak: impl FnOnce(&mut EngineConfig)) -> Engine {
    let mut config = EngineConfig {
        workers: 2,
        offload: Offload::On,
        ..EngineConfig::default()
    };
    tweak(&mut config);
    Engine::with_accelerator(config, Some(accel))
}

/// One named way of running the engine.
pub struct Backend {
    pub name: &'static str,
    pub engine: Engine,
}

/// An ISA-L accelerator that takes every record size, so small test records are offloaded too.
pub fn isal_everything(workers: usize, queue_depth: usize) -> Arc<dyn Accelerator> {
    isal_taking_everything(workers, queue_depth, false)
}

/// [`isal_everything`] running each job on the thread that submits it.
pub fn isal_on_submitter() -> Arc<dyn Accelerator> {
    isal_taking_everything(1, 1, true)
}

fn isal_taking_everything(
    workers: usize,
    queue_depth: usize,
    on_submitter: bool,
) -> Arc<dyn Accelerator> {
    Arc::new(
        IsalAccelerator::start(IsalConfig {
            workers,
            queue_depth,
            window: SizeWindow {
                min: 1,
                max: MAX_RECORD_SIZE,
            },
            on_submitter,
        })
        .expect("ISA-L starts"),
    )
}

/// The engine configurations every conformance test runs against.
pub fn backends() -> Vec<Backend> {
    let cpu = |deflate| EngineConfig {
        workers: 2,
        offload: Offload::Off,
        deflate,
        decode_deflate: deflate,
        ..EngineConfig::default()
    };
    let offloading = || EngineConfig {
        workers: 2,
        offload: Offload::On,
        decode_deflate: DeflateEngine::Isal,
        ..EngineConfig::default()
    };
    vec![
        Backend {
            name: "cpu-libdeflate",
            engine: Engine::with_accelerator(cpu(DeflateEngine::Libdeflate), None),
        },
        Backend {
            name: "cpu-zlib",
            engine: Engine::with_accelerator(cpu(DeflateEngine::Zlib), None),
        },
        Backend {
            name: "isal-accelerator",
            engine: Engine::with_accelerator(offloading(), Some(isal_everything(2, 8))),
        },
        Backend {
            name: "isal-on-submitter",
            engine: Engine::with_accelerator(offloading(), Some(isal_on_submitter())),
        },
    ]
}
