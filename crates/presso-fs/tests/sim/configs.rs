//! The 15 pool configurations the random-operation tests run on, in process (the model test)
//! and on real mounts (the exerciser in presso-cli, which includes this file by path): every
//! codec, gzip with and without offload, at record sizes 4K, 128K and 1M.

use std::fmt;

/// One pool configuration: codec, offload and record size.
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

/// Every configuration, in the order of the tests [`one_test_per_config`] defines.
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
    /// The record size as the `recordsize` property spells it (4K, 128K, 1M).
    pub fn recordsize_text(&self) -> String {
        if self.recordsize >= 1 << 20 {
            format!("{}M", self.recordsize >> 20)
        } else {
            format!("{}K", self.recordsize >> 10)
        }
    }

    /// The properties as `name=value` pairs, as `presso create -o` takes them.
    pub fn properties(&self) -> Vec<String> {
        vec![
            format!("compression={}", self.compression),
            format!("recordsize={}", self.recordsize_text()),
            format!("offload={}", self.offload),
        ]
    }

    /// How far into a file the tests reach: a few records, so that operations meet each
    /// other's records often; fewer of the large ones, to keep each operation cheap.
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

/// One `#[test]` per configuration, named after it, each calling `run_config(index)` of the
/// module where it is invoked (which must `use` this macro: it calls itself by name).
// Not every test target that includes this file defines per-configuration tests.
#[allow(unused_macros)]
macro_rules! one_test_per_config {
    () => {
        one_test_per_config! {
            off_4k = 0; off_128k = 1; off_1m = 2;
            lz4_4k = 3; lz4_128k = 4; lz4_1m = 5;
            gzip_offload_4k = 6; gzip_offload_128k = 7; gzip_offload_1m = 8;
            gzip_software_4k = 9; gzip_software_128k = 10; gzip_software_1m = 11;
            zstd_4k = 12; zstd_128k = 13; zstd_1m = 14;
        }

        #[test]
        fn every_configuration_has_a_test() {
            assert_eq!(CONFIGS.len(), 15);
        }
    };
    ($($name:ident = $index:expr;)*) => {
        $(#[test] fn $name() { run_config($index) })*
    };
}
#[allow(unused_imports)]
pub(crate) use one_test_per_config;
