//! Parsing of human-friendly quantities shared by subcommands.

use presso_codec::frame::MAX_RECORD_SIZE;

/// Parses a byte size: a plain number of bytes (`131072`) or a number with a binary suffix
/// `K`, `M` or `G` (case-insensitive, optionally followed by `B` or `iB`): `4K` = 4096,
/// `128K` = 131072, `1M` = 1048576.
pub fn parse_size(text: &str) -> Result<u64, String> {
    let trimmed = text.trim();
    let lower = trimmed.to_ascii_lowercase();
    let unit_start = lower
        .find(|c: char| !c.is_ascii_digit())
        .unwrap_or(lower.len());
    let (digits, unit) = lower.split_at(unit_start);
    if digits.is_empty() {
        return Err(format!(
            "invalid size '{trimmed}': expected a number of bytes, optionally with K, M or G (e.g. 128K)"
        ));
    }
    let shift = match unit.trim() {
        "" | "b" => 0,
        "k" | "kb" | "kib" => 10,
        "m" | "mb" | "mib" => 20,
        "g" | "gb" | "gib" => 30,
        _ => {
            return Err(format!(
                "invalid size '{trimmed}': unknown unit '{unit}'; use K, M or G (e.g. 128K)"
            ))
        }
    };
    let number: u64 = digits
        .parse()
        .map_err(|_| format!("invalid size '{trimmed}': number too large"))?;
    number
        .checked_mul(1u64 << shift)
        .ok_or_else(|| format!("invalid size '{trimmed}': number too large"))
}

/// Parses a record size for `presso bench`: a [`parse_size`] size from 1 byte to the frame
/// format's limit (16M). Looser than [`parse_recordsize`], the rule of pools and directories;
/// kept only until the bench calls that one.
pub fn parse_record_size(text: &str) -> Result<usize, String> {
    let size = parse_size(text)?;
    if size == 0 {
        return Err("record size must be at least 1 byte".to_string());
    }
    if size > MAX_RECORD_SIZE as u64 {
        return Err(format!(
            "record size {} is larger than the maximum of {} ({} bytes)",
            text.trim(),
            format_size(MAX_RECORD_SIZE as u64),
            MAX_RECORD_SIZE
        ));
    }
    Ok(size as usize)
}

/// The smallest `recordsize` a pool or directory may have.
pub const MIN_RECORDSIZE: u64 = 4 << 10;

/// Parses the `recordsize` property: a [`parse_size`] size that is a power of two from 4K to the
/// frame format's limit (16M). The one record-size rule of pools and directories.
pub fn parse_recordsize(text: &str) -> Result<usize, String> {
    let size = parse_size(text)?;
    let max = MAX_RECORD_SIZE as u64;
    if !size.is_power_of_two() || !(MIN_RECORDSIZE..=max).contains(&size) {
        return Err(format!(
            "invalid recordsize '{}': give a power of two from {} to {} (e.g. 128K)",
            text.trim(),
            format_size(MIN_RECORDSIZE),
            format_size(max)
        ));
    }
    Ok(size as usize)
}

/// Formats a byte count the way [`parse_size`] reads it back: `128K`, `1M`, or plain bytes.
pub fn format_size(bytes: u64) -> String {
    for (shift, unit) in [(30, "G"), (20, "M"), (10, "K")] {
        if bytes != 0 && bytes.trailing_zeros() >= shift {
            return format!("{}{unit}", bytes >> shift);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_plain_and_suffixed_sizes() {
        let cases = [
            ("131072", 131072),
            ("4K", 4096),
            ("4k", 4096),
            ("128K", 131072),
            ("128KiB", 131072),
            ("128kb", 131072),
            ("1M", 1 << 20),
            (" 16M ", 16 << 20),
            ("2G", 2 << 30),
            ("512B", 512),
            ("0", 0),
        ];
        for (text, want) in cases {
            assert_eq!(parse_size(text), Ok(want), "{text}");
        }
    }

    #[test]
    fn rejects_malformed_sizes() {
        for bad in [
            "",
            "K",
            "abc",
            "12X",
            "1.5M",
            "-4K",
            "4 K B",
            "99999999999999999999",
        ] {
            assert!(parse_size(bad).is_err(), "{bad:?} should be rejected");
        }
        assert!(parse_size("18446744073709551615K")
            .unwrap_err()
            .contains("too large"));
    }

    #[test]
    fn record_size_is_bounded() {
        assert_eq!(parse_record_size("1"), Ok(1));
        assert_eq!(parse_record_size("128K"), Ok(128 << 10));
        assert_eq!(parse_record_size("16M"), Ok(MAX_RECORD_SIZE));
        assert!(parse_record_size("0").unwrap_err().contains("at least 1"));
        let err = parse_record_size("17M").unwrap_err();
        assert!(err.contains("maximum") && err.contains("16M"), "{err}");
        assert!(parse_record_size(&(MAX_RECORD_SIZE + 1).to_string()).is_err());
    }

    #[test]
    fn recordsize_is_a_power_of_two_from_4k_to_16m() {
        assert_eq!(parse_recordsize("4K"), Ok(4096));
        assert_eq!(parse_recordsize("131072"), Ok(128 << 10));
        assert_eq!(parse_recordsize(" 16M "), Ok(MAX_RECORD_SIZE));
        for bad in ["2K", "100K", "32M", "0", "12X"] {
            assert!(parse_recordsize(bad).is_err(), "{bad}");
        }
        let err = parse_recordsize("100K").unwrap_err();
        assert!(
            err.contains("power of two") && err.contains("4K") && err.contains("16M"),
            "{err}"
        );
    }

    #[test]
    fn formats_sizes_for_messages() {
        assert_eq!(format_size(128 << 10), "128K");
        assert_eq!(format_size(16 << 20), "16M");
        assert_eq!(format_size(1 << 30), "1G");
        assert_eq!(format_size(1000), "1000");
        assert_eq!(format_size(0), "0");
    }
}
