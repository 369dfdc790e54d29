//! The codec table: the one place that names every codec, and the spec parser.
//!
//! A codec id is written into every record frame and is never renumbered or reused. To add a codec:
//! add a variant with a new explicit id to [`CodecId`], one row to [`CODECS`] naming its
//! compress/decompress functions, and those functions in `format/`. Everything else (spec parsing,
//! help texts, the software dispatch, frame validation) reads the table.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Serialize};

use crate::format::{self, CompressFn, DecompressFn};

/// Stable on-disk identifier of a codec (a compressed *format*, not an engine).
///
/// The numeric values live in every frame header on disk: never renumber, never reuse.
#[repr(u8)]
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "lowercase")]
pub enum CodecId {
    /// Stored as-is.
    Off = 0,
    /// Zero-run encoding (ZFS `zle`): literal runs and zero runs.
    Zle = 1,
    /// LZ4 block format.
    Lz4 = 2,
    /// Raw deflate (RFC 1951), the payload of a gzip member.
    Gzip = 3,
    /// Zstandard frame.
    Zstd = 4,
}

/// One row of the codec table.
#[derive(Debug)]
pub struct CodecInfo {
    /// The stable id written to disk.
    pub id: CodecId,
    /// The name used in specs, properties and output.
    pub name: &'static str,
    /// Lowest accepted level (0 for codecs without levels).
    pub min_level: u8,
    /// Highest accepted level (0 for codecs without levels).
    pub max_level: u8,
    /// The level used when a spec names the codec without one.
    pub default_level: u8,
    /// Whether this build can compress and decompress the codec.
    pub built_in: bool,
    /// One line for `--help` and status output.
    pub summary: &'static str,
    /// The software compressor (a stand-in that refuses with "not built in" when compiled out).
    pub compress: CompressFn,
    /// The software decompressor (a stand-in that refuses with "not built in" when compiled out).
    pub decompress: DecompressFn,
}

impl CodecInfo {
    /// Whether the codec takes a level (`gzip-6`) or not (`lz4`).
    pub fn has_levels(&self) -> bool {
        self.max_level > 0
    }

    /// The valid spellings of this codec, for error messages and `--help`.
    pub fn spellings(&self) -> String {
        if self.has_levels() {
            format!(
                "{name}, {name}-{}..{name}-{}",
                self.min_level,
                self.max_level,
                name = self.name
            )
        } else {
            self.name.to_string()
        }
    }
}

/// Every codec Presso knows, indexed by id. The only place that lists them all.
pub static CODECS: [CodecInfo; 5] = [
    CodecInfo {
        id: CodecId::Off,
        name: "off",
        min_level: 0,
        max_level: 0,
        default_level: 0,
        built_in: true,
        summary: "no compression: records are stored as they are",
        compress: format::off_compress,
        decompress: format::off_decompress,
    },
    CodecInfo {
        id: CodecId::Zle,
        name: "zle",
        min_level: 0,
        max_level: 0,
        default_level: 0,
        built_in: true,
        summary: "zero-run encoding: squeezes runs of zero bytes only, nearly free",
        compress: format::zle_compress,
        decompress: format::zle_decompress,
    },
    CodecInfo {
        id: CodecId::Lz4,
        name: "lz4",
        min_level: 0,
        max_level: 0,
        default_level: 0,
        built_in: cfg!(feature = "lz4"),
        summary: "LZ4: very fast, modest ratio",
        compress: format::lz4_compress,
        decompress: format::lz4_decompress,
    },
    CodecInfo {
        id: CodecId::Gzip,
        name: "gzip",
        min_level: 1,
        max_level: 9,
        default_level: 6,
        built_in: true,
        summary: "deflate (gzip member payload): strong ratio; offloaded to the ISA-L accelerator",
        compress: format::gzip_compress,
        decompress: format::gzip_decompress,
    },
    CodecInfo {
        id: CodecId::Zstd,
        name: "zstd",
        min_level: 1,
        max_level: 19,
        default_level: 3,
        built_in: cfg!(feature = "zstd"),
        summary: "Zstandard: strong ratio, fast decompression",
        compress: format::zstd_compress,
        decompress: format::zstd_decompress,
    },
];

impl CodecId {
    /// Looks up an id read from disk.
    pub fn from_u8(raw: u8) -> Option<CodecId> {
        CODECS.iter().map(|c| c.id).find(|id| *id as u8 == raw)
    }

    /// This codec's row in [`CODECS`].
    pub fn info(self) -> &'static CodecInfo {
        &CODECS[self as usize]
    }

    /// The codec's name as used in specs.
    pub fn name(self) -> &'static str {
        self.info().name
    }
}

impl fmt::Display for CodecId {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// A codec with the level to use: what a `compression=` property or `--codecs` entry names.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub struct CodecSpec {
    /// The codec.
    pub codec: CodecId,
    /// The level; 0 for codecs without levels.
    pub level: u8,
}

impl CodecSpec {
    /// No compression.
    pub const OFF: CodecSpec = CodecSpec {
        codec: CodecId::Off,
        level: 0,
    };

    /// A spec with a checked level.
    pub fn new(codec: CodecId, level: u8) -> Result<CodecSpec, SpecError> {
        let info = codec.info();
        if level < info.min_level || level > info.max_level {
            return Err(SpecError::Level {
                codec: info.name,
                level: level.to_string(),
                valid: info.spellings(),
            });
        }
        Ok(CodecSpec { codec, level })
    }

    /// Every valid spec, in table order (for `--help`, benches and tests).
    pub fn all() -> impl Iterator<Item = CodecSpec> {
        CODECS.iter().flat_map(|info| {
            (info.min_level..=info.max_level).map(move |level| CodecSpec {
                codec: info.id,
                level,
            })
        })
    }
}

impl fmt::Display for CodecSpec {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        if self.codec.info().has_levels() {
            write!(f, "{}-{}", self.codec.name(), self.level)
        } else {
            f.write_str(self.codec.name())
        }
    }
}

/// Why a codec spec string was refused.
#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum SpecError {
    /// The name matches no codec.
    #[error("unknown codec '{name}'; valid codecs: {valid}")]
    Unknown {
        /// What was given.
        name: String,
        /// Every valid spelling.
        valid: String,
    },
    /// The codec exists but not at that level, or takes no level.
    #[error("codec '{codec}' has no level '{level}'; valid: {valid}")]
    Level {
        /// The codec's name.
        codec: &'static str,
        /// The level as given.
        level: String,
        /// The valid spellings of this codec.
        valid: String,
    },
}

/// All valid spellings, built from [`CODECS`] (`off, zle, lz4, gzip, gzip-1..gzip-9, zstd,
/// zstd-1..zstd-19`): the one source for error messages and help texts, which never list codecs
/// by hand.
pub fn valid_specs() -> String {
    CODECS
        .iter()
        .map(CodecInfo::spellings)
        .collect::<Vec<_>>()
        .join(", ")
}

impl FromStr for CodecSpec {
    type Err = SpecError;

    /// Parses `off`, `zle`, `lz4`, `gzip` (= gzip-6), `gzip-1`..`gzip-9`, `zstd` (= zstd-3),
    /// `zstd-1`..`zstd-19`. Case-insensitive; surrounding blanks are ignored.
    fn from_str(text: &str) -> Result<CodecSpec, SpecError> {
        let text = text.trim().to_ascii_lowercase();
        let (name, level) = match text.split_once('-') {
            Some((name, level)) => (name, Some(level)),
            None => (text.as_str(), None),
        };
        let info = CODECS
            .iter()
            .find(|c| c.name == name)
            .ok_or_else(|| SpecError::Unknown {
                name: text.clone(),
                valid: valid_specs(),
            })?;
        let level = match level {
            None => info.default_level,
            Some(raw) => {
                let bad = || SpecError::Level {
                    codec: info.name,
                    level: raw.to_string(),
                    valid: info.spellings(),
                };
                if !info.has_levels() || raw.is_empty() || !raw.bytes().all(|b| b.is_ascii_digit())
                {
                    return Err(bad());
                }
                raw.parse::<u8>().map_err(|_| bad())?
            }
        };
        CodecSpec::new(info.id, level)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn table_is_indexed_by_id() {
        for (index, info) in CODECS.iter().enumerate() {
            assert_eq!(
                info.id as usize, index,
                "{} sits at the wrong row",
                info.name
            );
            assert_eq!(CodecId::from_u8(index as u8), Some(info.id));
        }
        assert_eq!(CodecId::from_u8(CODECS.len() as u8), None);
        assert_eq!(CodecId::from_u8(255), None);
    }

    #[test]
    fn ids_never_change() {
        // These values are on disk in every pool: this test guards against renumbering.
        assert_eq!(CodecId::Off as u8, 0);
        assert_eq!(CodecId::Zle as u8, 1);
        assert_eq!(CodecId::Lz4 as u8, 2);
        assert_eq!(CodecId::Gzip as u8, 3);
        assert_eq!(CodecId::Zstd as u8, 4);
    }

    #[test]
    fn parses_every_documented_spelling() {
        let cases = [
            ("off", CodecId::Off, 0),
            ("zle", CodecId::Zle, 0),
            ("lz4", CodecId::Lz4, 0),
            ("gzip", CodecId::Gzip, 6),
            ("gzip-1", CodecId::Gzip, 1),
            ("GZIP-9", CodecId::Gzip, 9),
            ("zstd", CodecId::Zstd, 3),
            ("zstd-1", CodecId::Zstd, 1),
            (" zstd-19 ", CodecId::Zstd, 19),
        ];
        for (text, codec, level) in cases {
            assert_eq!(
                text.parse::<CodecSpec>(),
                Ok(CodecSpec { codec, level }),
                "{text}"
            );
        }
    }

    #[test]
    fn display_round_trips_for_every_spec() {
        let all: Vec<_> = CodecSpec::all().collect();
        assert_eq!(all.len(), 3 + 9 + 19);
        for spec in all {
            assert_eq!(spec.to_string().parse::<CodecSpec>(), Ok(spec));
        }
    }

    #[test]
    fn every_row_dispatches_through_its_own_functions() {
        let data = b"presso presso \0\0\0\0\0\0\0\0\0\0 records and frames ".repeat(300);
        for info in CODECS.iter() {
            let spec = CodecSpec::new(info.id, info.default_level).unwrap();
            let mut packed = vec![0u8; data.len() + 64];
            let mut back = vec![0u8; data.len()];
            let packed_len = format::compress(spec, Default::default(), &data, &mut packed);
            let unpacked = match &packed_len {
                Ok(Some(n)) => {
                    format::decompress(info.id, Default::default(), &packed[..*n], &mut back)
                }
                _ => format::decompress(info.id, Default::default(), &[], &mut back),
            };
            if info.built_in {
                assert!(matches!(packed_len, Ok(Some(_))), "{}", info.name);
                assert_eq!(unpacked, Ok(()), "{}", info.name);
                assert!(back == data, "{} round trip", info.name);
            } else {
                assert_eq!(packed_len, Err(format::CodecError::NotBuiltIn(info.name)));
                assert_eq!(unpacked, Err(format::CodecError::NotBuiltIn(info.name)));
            }
        }
    }

    #[test]
    fn valid_specs_lists_every_row() {
        assert_eq!(
            valid_specs(),
            "off, zle, lz4, gzip, gzip-1..gzip-9, zstd, zstd-1..zstd-19"
        );
    }

    #[test]
    fn rejects_unknown_names_and_levels_listing_valid_ones() {
        let err = "brotli".parse::<CodecSpec>().unwrap_err();
        assert!(matches!(err, SpecError::Unknown { .. }));
        let text = err.to_string();
        assert!(
            text.contains("gzip-1..gzip-9") && text.contains("zstd-1..zstd-19"),
            "{text}"
        );

        for bad in [
            "gzip-0", "gzip-10", "zstd-20", "zstd-", "lz4-1", "gzip-+3", "gzip-x", "gzip-300",
        ] {
            let err = bad.parse::<CodecSpec>().unwrap_err();
            assert!(matches!(err, SpecError::Level { .. }), "{bad}: {err}");
        }
        assert!("".parse::<CodecSpec>().is_err());
    }
}
