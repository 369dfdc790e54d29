//! The 15 pool configurations the exerciser runs on (codec × record size) and the environment
//! knobs: how many operations, which seed, which configurations.

use std::fmt;

/// One pool configuration: the properties given to `presso create`.
#[derive(Clone, Copy, Debug)]
pub struct Config {
    /// The `compression` property.
    pub compression: &'static str,
    /// The `offload` property.
    pub offload: &'static str,
    /// The record size in bytes.
    pub recordsize: u64,
}

const fn config(compression: &'static str, offload: &'static str, recordsize: u64) -> Config {
    Config {
        compression,
        offload,
        recordsize,
    }
}

/// Every codec Presso offers a choice between, at the smallest, the default and a large
/// record size.
pub const CONFIGS: [Config; 15] = [
    config("off", "auto", 4 << 10),
    config("off", "auto", 128 << 10),
    config("off", "auto", 1 << 20),
    config("lz4", "auto", 4 << 10),
    config("lz4", "auto", 128 << 10),
    config("lz4", "auto", 1 << 20),
    config("gzip-6", "on", 4 << 10),
    config("gzip-6", "on", 128 << 10),
    config("gzip-6", "on", 1 << 20),
    config("gzip-6", "off", 4 << 10),
    config("gzip-6", "off", 128 << 10),
    config("gzip-6", "off", 1 << 20),
    config("zstd-3", "auto", 4 << 10),
    config("zstd-3", "auto", 128 << 10),
    config("zstd-3", "auto", 1 << 20),
];

impl Config {
    /// The record size as `presso create` spells it (4K, 128K, 1M).
    pub fn recordsize_text(&self) -> String {
        if self.recordsize >= 1 << 20 {
            format!("{}M", self.recordsize >> 20)
        } else {
            format!("{}K", self.recordsize >> 10)
        }
    }

    /// The `-o` properties of `presso create`.
    pub fn properties(&self) -> Vec<String> {
        vec![
            format!("compression={}", self.compression),
            format!("recordsize={}", self.recordsize_text()),
            format!("offload={}", self.offload),
        ]
    }

    /// Offsets are drawn below this: a few records, so that operations meet each other's
    /// records often; 1M records get fewer of them to keep each operation cheap.
    pub fn span(&self) -> u64 {
        if self.recordsize >= 1 << 20 {
            2 * self.recordsize + self.recordsize / 2
        } else {
            4 * self.recordsize + self.recordsize / 3
        }
    }
}

impl fmt::Display for Config {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "compression={} offload={} recordsize={}",
            self.compression,
            self.offload,
            self.recordsize_text()
        )
    }
}

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
