//! The recommendation: which measured row to use, and a sentence saying why.

use std::fmt::Write as _;

use presso_codec::CodecId;
use serde::Serialize;

use super::matrix::Backend;
use super::Row;

/// Rows whose ratio is at least this fraction of the best ratio compete on CPU cost.
const NEAR_BEST: f64 = 0.9;

/// Below this best ratio the data is considered incompressible.
const BARELY_COMPRESSES: f64 = 1.1;

/// The recommended row and why.
#[derive(Clone, Debug, PartialEq, Serialize)]
pub struct Recommendation {
    /// The codec spec of the chosen row, e.g. `gzip-6`.
    pub codec: String,
    /// The backend of the chosen row, e.g. `isal`.
    pub backend: String,
    /// Why this row, in one or two sentences.
    pub reason: String,
}

/// Picks a codec and backend from measured rows.
///
/// If even the best ratio is below 1.1 the data barely compresses, and lz4 is recommended: it is
/// cheap, and the pre-check and budget store incompressible records raw early. Otherwise, among the
/// rows (codec `off` excluded) whose ratio is at least 90% of the best, the one with the lowest CPU
/// cost per GB wins (ties: higher ratio, then earlier row). `None` only when there are no rows.
pub fn recommend(rows: &[Row]) -> Option<Recommendation> {
    // The first row with the highest ratio (rows come in the order measured).
    let best = rows
        .iter()
        .reduce(|best, row| if row.ratio > best.ratio { row } else { best })?;
    let where_ = |row: &Row| format!("{} on {}", row.codec, row.backend);

    if best.ratio < BARELY_COMPRESSES {
        let lz4 = rows.iter().find(|r| r.codec == CodecId::Lz4.name());
        let cost = match lz4 {
            Some(row) => format!("lz4 is cheap ({:.2} CPU s/GB here)", row.cpu_s_per_gb),
            None => "lz4 is cheap (not measured in this run)".to_string(),
        };
        return Some(Recommendation {
            codec: CodecId::Lz4.name().to_string(),
            backend: lz4
                .map_or(Backend::Cpu.name(), |r| r.backend.as_str())
                .to_string(),
            reason: format!(
                "The data barely compresses: the best ratio is only {:.2} ({}), so stronger codecs \
                 would burn CPU for almost no space. {cost}, and its early abort stores \
                 incompressible records raw.",
                best.ratio,
                where_(best)
            ),
        });
    }

    let floor = NEAR_BEST * best.ratio;
    let candidates: Vec<&Row> = rows
        .iter()
        .filter(|r| r.codec != CodecId::Off.name() && r.ratio >= floor)
        .collect();
    let chosen = candidates.iter().copied().reduce(|keep, next| {
        let better = next
            .cpu_s_per_gb
            .total_cmp(&keep.cpu_s_per_gb)
            .then(keep.ratio.total_cmp(&next.ratio))
            .is_lt();
        if better {
            next
        } else {
            keep
        }
    })?;

    let mut reason = if std::ptr::eq(chosen, best) {
        format!(
            "The best ratio, {:.2}, at {:.2} CPU s/GB",
            chosen.ratio, chosen.cpu_s_per_gb
        )
    } else {
        format!(
            "Ratio {:.2} ({:.0}% of the best, {:.2} by {}), {:.2} CPU s/GB",
            chosen.ratio,
            // Rounded down, so a row below the best never reads "100% of the best".
            (100.0 * chosen.ratio / best.ratio).floor(),
            best.ratio,
            where_(best),
            chosen.cpu_s_per_gb
        )
    };
    if candidates.len() > 1 {
        let _ = write!(
            reason,
            ", the least CPU of the {} rows within {:.0}% of the best ratio",
            candidates.len(),
            100.0 * (1.0 - NEAR_BEST)
        );
    }
    reason.push('.');
    // Compare with the reference: zlib for the same codec (what ZFS's software gzip runs), or
    // else the row with the best ratio.
    let reference = rows
        .iter()
        .find(|r| r.codec == chosen.codec && r.backend == Backend::Zlib.name())
        .filter(|r| !std::ptr::eq(*r, chosen))
        .or_else(|| (!std::ptr::eq(best, chosen)).then_some(best));
    if let Some(reference) = reference {
        if chosen.cpu_s_per_gb > 0.0 && reference.cpu_s_per_gb > chosen.cpu_s_per_gb {
            let _ = write!(
                reason,
                " That is {:.1}x less CPU than {} ({:.2} CPU s/GB).",
                reference.cpu_s_per_gb / chosen.cpu_s_per_gb,
                where_(reference),
                reference.cpu_s_per_gb
            );
        }
    }
    Some(Recommendation {
        codec: chosen.codec.clone(),
        backend: chosen.backend.clone(),
        reason,
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::testing::row;

    #[test]
    fn no_rows_no_recommendation() {
        assert_eq!(recommend(&[]), None);
    }

    #[test]
    fn picks_cheapest_row_near_the_best_ratio() {
        let rows = [
            row("off", "cpu", 0.999, 0.1),
            row("lz4", "cpu", 2.0, 0.5),
            row("gzip-6", "zlib", 3.3, 20.0),
            row("gzip-6", "libdeflate", 3.35, 8.0),
            row("gzip-6", "isal", 3.2, 4.0),
            row("zstd-9", "cpu", 3.5, 12.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(
            (rec.codec.as_str(), rec.backend.as_str()),
            ("gzip-6", "isal")
        );
        // 3.2 / 3.5 = 91% of the best; zlib costs 5x more.
        assert!(rec.reason.contains("Ratio 3.20"), "{}", rec.reason);
        assert!(rec.reason.contains("91% of the best"), "{}", rec.reason);
        assert!(rec.reason.contains("zstd-9 on cpu"), "{}", rec.reason);
        assert!(
            rec.reason.contains("5.0x less CPU than gzip-6 on zlib"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn rows_below_ninety_percent_never_win() {
        // lz4 is far cheaper but at 2.0 / 3.0 = 67% of the best ratio it is out.
        let rows = [
            row("lz4", "cpu", 2.0, 0.5),
            row("zstd-3", "cpu", 2.8, 3.0),
            row("zstd-9", "cpu", 3.0, 9.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(rec.codec, "zstd-3");
        assert!(
            rec.reason.contains("3.0x less CPU than zstd-9 on cpu"),
            "{}",
            rec.reason
        );
        // Exactly 90% still qualifies.
        let rows = [row("lz4", "cpu", 2.7, 0.5), row("zstd-9", "cpu", 3.0, 9.0)];
        assert_eq!(recommend(&rows).unwrap().codec, "lz4");
    }

    #[test]
    fn best_row_wins_when_it_is_also_cheapest() {
        let rows = [
            row("zstd-3", "cpu", 4.0, 2.0),
            row("gzip-9", "zlib", 3.7, 40.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!(rec.codec, "zstd-3");
        assert!(
            rec.reason.contains("The best ratio, 4.00"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn equal_best_ratios_name_the_first_row() {
        let rows = [row("gzip-6", "zlib", 1.0, 1.0), row("lz4", "cpu", 1.0, 0.5)];
        let rec = recommend(&rows).unwrap();
        assert!(
            rec.reason.contains("1.00 (gzip-6 on zlib)"),
            "{}",
            rec.reason
        );
    }

    #[test]
    fn ties_on_cpu_go_to_the_better_ratio() {
        let rows = [row("lz4", "cpu", 2.0, 1.0), row("zstd-1", "cpu", 2.1, 1.0)];
        assert_eq!(recommend(&rows).unwrap().codec, "zstd-1");
    }

    #[test]
    fn off_is_never_recommended_for_compressible_data() {
        // off at 0.9998 is within 90% of 1.105, and cheapest, but it is not compression.
        let rows = [
            row("off", "cpu", 0.9998, 0.01),
            row("zstd-3", "cpu", 1.105, 2.0),
        ];
        assert_eq!(recommend(&rows).unwrap().codec, "zstd-3");
    }

    #[test]
    fn incompressible_data_gets_lz4() {
        let rows = [
            row("off", "cpu", 0.9998, 0.01),
            row("lz4", "cpu", 1.0, 0.3),
            row("gzip-6", "zlib", 1.02, 15.0),
            row("zstd-9", "cpu", 1.05, 30.0),
        ];
        let rec = recommend(&rows).unwrap();
        assert_eq!((rec.codec.as_str(), rec.backend.as_str()), ("lz4", "cpu"));
        assert!(rec.reason.contains("barely compresses"), "{}", rec.reason);
        assert!(
            rec.reason.contains("1.05 (zstd-9 on cpu)"),
            "{}",
            rec.reason
        );
        assert!(rec.reason.contains("0.30 CPU s/GB"), "{}", rec.reason);

        // lz4 is recommended even when it was not measured.
        let rows = [row("gzip-6", "zlib", 1.02, 15.0)];
        let rec = recommend(&rows).unwrap();
        assert_eq!((rec.codec.as_str(), rec.backend.as_str()), ("lz4", "cpu"));
        assert!(rec.reason.contains("not measured"), "{}", rec.reason);
    }
}
