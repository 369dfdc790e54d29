//! Dataset-like properties: the one table of every property a pool or directory can carry, with
//! defaults, validation and normalisation. Directories inherit them like ZFS datasets; a change
//! affects new writes only.

use presso_codec::frame::MAX_RECORD_SIZE;
use presso_codec::{CodecSpec, Offload, Threshold};

use crate::units::{format_size, parse_recordsize, MIN_RECORDSIZE};

/// `compression`: the codec spec records are written with.
pub const COMPRESSION: &str = "compression";
/// `recordsize`: the logical size of a file's records, fixed per file at its creation.
pub const RECORDSIZE: &str = "recordsize";
/// `threshold`: minimum saving for a record to be stored compressed.
pub const THRESHOLD: &str = "threshold";
/// `offload`: whether records may go to the accelerator (`auto`, `on`, `off`).
pub const OFFLOAD: &str = "offload";

/// One property.
#[derive(Debug)]
pub struct PropInfo {
    /// Its name.
    pub name: &'static str,
    /// The value when nothing sets it.
    pub default: &'static str,
    /// What it means.
    pub meaning: &'static str,
    /// The values it takes, built from the tables and rules that check them.
    pub values: fn() -> String,
}

impl PropInfo {
    /// What it means and what values it takes, for help texts:
    /// `codec of new records: off, zle, lz4, gzip, gzip-1..gzip-9, ...`.
    pub fn help(&self) -> String {
        format!("{}: {}", self.meaning, (self.values)())
    }
}

/// Every property, in display order.
pub const PROPS: &[PropInfo] = &[
    PropInfo {
        name: COMPRESSION,
        default: "gzip-6",
        meaning: "codec of new records",
        values: presso_codec::valid_specs,
    },
    PropInfo {
        name: RECORDSIZE,
        default: "128K",
        meaning: "record size of new files",
        values: || {
            format!(
                "a power of two from {} to {}",
                format_size(MIN_RECORDSIZE),
                format_size(MAX_RECORD_SIZE as u64)
            )
        },
    },
    PropInfo {
        name: THRESHOLD,
        default: "12.5%",
        meaning: "minimum saving to keep a record compressed",
        values: || format!("a percentage from 0% to {}%", Threshold::MAX * 100.0),
    },
    PropInfo {
        name: OFFLOAD,
        default: "auto",
        meaning: "use the accelerator for records in its size window",
        values: || "auto, on, off".to_string(),
    },
];

/// The properties as an indented table (name, help, default), for `--help` texts.
pub fn help_table() -> String {
    PROPS
        .iter()
        .map(|p| format!("  {:<12} {} (default {})\n", p.name, p.help(), p.default))
        .collect()
}

/// The entry of `name`, or an error listing the valid names.
pub fn info(name: &str) -> Result<&'static PropInfo, String> {
    PROPS.iter().find(|p| p.name == name).ok_or_else(|| {
        let names: Vec<_> = PROPS.iter().map(|p| p.name).collect();
        format!(
            "unknown property '{name}'; valid properties: {}",
            names.join(", ")
        )
    })
}

/// Checks `value` for property `name` and returns it in canonical spelling (`gzip` → `gzip-6`,
/// `131072` → `128K`, `20` → `20%`). Each value is checked by the one parser of its kind:
/// [`CodecSpec`], [`parse_recordsize`], [`Threshold`] and [`Offload`]'s `FromStr`.
pub fn normalize(name: &str, value: &str) -> Result<String, String> {
    info(name)?;
    let bad = |why: String| format!("invalid value '{value}' for {name}: {why}");
    match name {
        COMPRESSION => value
            .parse::<CodecSpec>()
            .map(|s| s.to_string())
            .map_err(|e| bad(e.to_string())),
        RECORDSIZE => parse_recordsize(value).map(|s| format_size(s as u64)),
        THRESHOLD => value
            .parse::<Threshold>()
            .map(|t| t.to_string())
            .map_err(|e| bad(e.to_string())),
        OFFLOAD => value
            .parse::<Offload>()
            .map(|o| offload_name(o).to_string())
            .map_err(bad),
        _ => unreachable!("info() accepted only known names"),
    }
}

/// The canonical spelling of an offload mode.
pub fn offload_name(offload: Offload) -> &'static str {
    match offload {
        Offload::Auto => "auto",
        Offload::On => "on",
        Offload::Off => "off",
    }
}

/// Parses `name=value` as given to `-o` or `presso set`.
pub fn parse_assignment(text: &str) -> Result<(String, String), String> {
    let (name, value) = text
        .split_once('=')
        .ok_or_else(|| format!("expected PROPERTY=VALUE, got '{text}'"))?;
    let name = name.trim();
    Ok((name.to_string(), normalize(name, value)?))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn normalizes_every_property() {
        assert_eq!(normalize(COMPRESSION, "GZIP").unwrap(), "gzip-6");
        assert_eq!(normalize(COMPRESSION, "zstd-3").unwrap(), "zstd-3");
        assert_eq!(normalize(RECORDSIZE, "131072").unwrap(), "128K");
        assert_eq!(normalize(RECORDSIZE, "1m").unwrap(), "1M");
        assert_eq!(normalize(THRESHOLD, "20").unwrap(), "20%");
        assert_eq!(normalize(THRESHOLD, "0.125%").unwrap(), "0.125%");
        assert_eq!(normalize(OFFLOAD, "Off").unwrap(), "off");
        for p in PROPS {
            assert_eq!(normalize(p.name, p.default).unwrap(), p.default);
        }
    }

    #[test]
    fn help_lists_the_codec_table_and_the_rules() {
        let help = info(COMPRESSION).unwrap().help();
        assert!(help.contains(&presso_codec::valid_specs()), "{help}");
        assert!(info(RECORDSIZE).unwrap().help().contains("4K to 16M"));
        assert!(info(THRESHOLD).unwrap().help().contains("0% to 50%"));
        let table = help_table();
        for p in PROPS {
            assert!(table.contains(&p.help()), "{table}");
        }
    }

    #[test]
    fn refuses_bad_values_with_the_valid_choices() {
        let e = normalize(COMPRESSION, "brotli").unwrap_err();
        assert!(e.contains("gzip") && e.contains("zstd"), "{e}");
        assert!(normalize(RECORDSIZE, "100K")
            .unwrap_err()
            .contains("power of two"));
        assert!(normalize(RECORDSIZE, "2K").is_err());
        assert!(normalize(RECORDSIZE, "32M").is_err());
        assert!(normalize(THRESHOLD, "60%").is_err());
        // A bare fraction was 12.5% here and 0.125% elsewhere: now it is refused, saying how
        // to write either.
        let e = normalize(THRESHOLD, "0.125").unwrap_err();
        assert!(e.contains("'12.5%'") && e.contains("'0.125%'"), "{e}");
        assert!(normalize(OFFLOAD, "maybe").unwrap_err().contains("auto"));
        let e = normalize("colour", "red").unwrap_err();
        assert!(e.contains("compression") && e.contains("recordsize"), "{e}");
        assert!(parse_assignment("compression").is_err());
        assert_eq!(
            parse_assignment("compression=lz4").unwrap(),
            ("compression".to_string(), "lz4".to_string())
        );
    }
}
