//! The 15 pool configurations the exerciser runs on (codec × record size; one table with the
//! model test's) and the environment knobs: how many operations, which seed, which
//! configurations.

#[path = "../../../presso-fs/tests/sim/configs.rs"]
mod table;

pub(crate) use table::one_test_per_config;
pub use table::{Config, CONFIGS};

/// Operations per configuration (`PRESSO_FSX_OPS`, default 14,000: 210,000 per run).
pub fn ops_per_config() -> usize {
    std::env::var("PRESSO_FSX_OPS")
        .ok()
        .map(|v| v.parse().expect("PRESSO_FSX_OPS is a number"))
        .unwrap_or(14_000)
}

/// The seeds of configuration `index`: `PRESSO_FSX_SEED` alone, or a fixed seed and one from the
/// clock (printed, so that a failure can be replayed).
pub fn seeds(index: usize) -> Vec<u64> {
    if let Ok(seed) = std::env::var("PRESSO_FSX_SEED") {
        return vec![seed.parse().expect("PRESSO_FSX_SEED is a number")];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    vec![0xF5_0000 + index as u64, clock ^ index as u64]
}

/// Whether configuration `config` is selected by `PRESSO_FSX_CONFIG` (a part of its name as
/// [`Config`] displays it, e.g. `zstd`, `recordsize=4K` or `offload=off`).
pub fn selected(config: &Config) -> bool {
    std::env::var("PRESSO_FSX_CONFIG").map_or(true, |want| config.to_string().contains(&want))
}
