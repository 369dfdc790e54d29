//! Dataset-like properties: the one table of every property a pool or directory can carry, with
//! defaults, validation and normalisation. Directories inherit them like ZFS datasets; a change
//! affects new writes only.

use presso_codec::{CodecSpec, Offload, Threshold};

use crate::units::{format_size, parse_size};

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
    /// What it means and what values it takes.
    pub help: &'static str,
}

/// Every property, in display order.
pub const PROPS: &[PropInfo] = &[
    PropInfo {
        name: COMPRESSION,
        default: "gzip-6",
        help: "codec of new records: off, zle, lz4, gzip-1..9, zstd-1..19",
    },
    PropInfo {
        name: RECORDSIZE,
        default: "128K",
        help: "record size of new files: a power of two from 4K to 16M",
    },
    PropInfo {
        name: THRESHOLD,
        default: "12.5%",
        help: "minimum saving to keep a record compressed: 0% to 50%",
    },
    PropInfo {
        name: OFFLOAD,
        default: "auto",
        help: "use the accelerator for records in its size window: auto, on, off",
    },
];

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
/// `131072` → `128K`, `0.2` or `20` → `20%`).
pub fn normalize(name: &str, value: &str) -> Result<String, String> {
    info(name)?;
    let bad = |why: String| format!("invalid value '{value}' for {name}: {why}");
    match name {
        COMPRESSION => value
            .parse::<CodecSpec>()
            .map(|s| s.to_string())
            .map_err(|e| bad(e.to_string())),
        RECORDSIZE => parse_recordsize(value).map(|s| format_size(s as u64)),
        THRESHOLD => parse_threshold(value)
            .map(|t| format!("{}%", t.fraction() * 100.0))
            .map_err(bad),
        OFFLOAD => value
            .parse::<Offload>()
            .map(|o| offload_name(o).to_string())
            .map_err(bad),
        _ => unreachable!("info() accepted only known names"),
    }
}

/// Parses a record size: a power of two from 4K to 16M.
pub fn parse_recordsize(value: &str) -> Result<usize, String> {
    let size = parse_size(value)?;
    let max = presso_codec::frame::MAX_RECORD_SIZE as u64;
    if !size.is_power_of_two() || !(4096..=max).contains(&size) {
        return Err(format!(
            "invalid recordsize '{}': give a power of two from 4K to {} (e.g. 128K)",
            value.trim(),
            format_size(max)
        ));
    }
    Ok(size as usize)
}

/// Parses a threshold: `12.5%`, or a bare number taken as a percentage if above 1 (`20`) and as
/// a fraction otherwise (`0.2`).
pub fn parse_threshold(value: &str) -> Result<Threshold, String> {
    let text = value.trim();
    let (number, percent) = match text.strip_suffix('%') {
        Some(n) => (n.trim(), true),
        None => (text, false),
    };
    let number: f64 = number
        .parse()
        .map_err(|_| "expected a percentage such as 12.5%".to_string())?;
    let fraction = if percent || number > 1.0 {
        number / 100.0
    } else {
        number
    };
    Threshold::from_fraction(fraction).map_err(|e| e.to_string())
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
        assert_eq!(normalize(THRESHOLD, "0.125").unwrap(), "12.5%");
        assert_eq!(normalize(OFFLOAD, "Off").unwrap(), "off");
        for p in PROPS {
            assert_eq!(normalize(p.name, p.default).unwrap(), p.default);
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
