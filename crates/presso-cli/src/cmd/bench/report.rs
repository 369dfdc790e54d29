//! What the user sees: the progress bar on standard error, and on standard output either the
//! table with the recommendation or JSON Lines.

use std::io::{IsTerminal, Write};

use anyhow::Result;
use indicatif::{ProgressBar, ProgressDrawTarget, ProgressStyle};
use presso_fs::units::format_size;
use serde::Serialize;

use super::corpus::Corpus;
use super::matrix::Settings;
use super::recommend::Recommendation;
use super::Row;

/// A progress bar over `total` records on standard error, hidden when that is not a terminal.
pub(super) fn progress_bar(total: u64) -> ProgressBar {
    if !std::io::stderr().is_terminal() {
        return ProgressBar::hidden();
    }
    let bar = ProgressBar::with_draw_target(Some(total), ProgressDrawTarget::stderr());
    bar.set_style(
        ProgressStyle::with_template(
            "{spinner} [{elapsed_precise}] {wide_bar} {pos}/{len} records  {msg}",
        )
        .expect("valid progress template"),
    );
    bar
}

/// Prints one JSON line per row, then `{"recommended": ...}`.
pub(super) fn print_json(
    out: &mut impl Write,
    rows: &[Row],
    recommendation: Option<&Recommendation>,
) -> Result<()> {
    for row in rows {
        writeln!(out, "{}", serde_json::to_string(row)?)?;
    }
    #[derive(Serialize)]
    struct Last<'a> {
        recommended: Option<&'a Recommendation>,
    }
    let last = Last {
        recommended: recommendation,
    };
    writeln!(out, "{}", serde_json::to_string(&last)?)?;
    Ok(())
}

/// Prints a line about the corpus and the settings, the table, and the recommendation.
pub(super) fn print_table(
    out: &mut impl Write,
    corpus: &Corpus,
    record_size: usize,
    settings: &Settings,
    rows: &[Row],
    recommendation: Option<&Recommendation>,
) -> Result<()> {
    writeln!(
        out,
        "{} file(s), {} bytes in {} records of {}; {} workers, threshold {}, pre-check {}\n",
        corpus.files.len(),
        corpus.logical_bytes,
        corpus.records.len(),
        format_size(record_size as u64),
        settings.workers,
        settings.threshold,
        if settings.precheck { "on" } else { "off" }
    )?;
    out.write_all(render_table(rows).as_bytes())?;
    out.write_all(codec_error_warnings(rows).as_bytes())?;
    writeln!(
        out,
        "\nCPU s/GB is what each byte costs. ratio/util is QZFS's cost-efficiency figure, kept for \
         comparison: when every row keeps the CPU busy it ranks by ratio alone."
    )?;
    if let Some(rec) = recommendation {
        writeln!(
            out,
            "\nRecommended: {} on {}. {}",
            rec.codec, rec.backend, rec.reason
        )?;
    }
    Ok(())
}

/// A line under the table for each row whose codec failed on records, which it stored raw:
/// such a row's ratio says nothing about the codec, and the failure is a defect to report.
fn codec_error_warnings(rows: &[Row]) -> String {
    rows.iter()
        .filter(|r| r.codec_errors > 0)
        .map(|r| {
            format!(
                "\nWarning: {} on {} failed on {} of {} records and stored them raw; its ratio \
                 does not show what the codec can do. Please report it.\n",
                r.codec, r.backend, r.codec_errors, r.records
            )
        })
        .collect()
}

/// The human table: one line per row, columns aligned (text left, numbers right).
fn render_table(rows: &[Row]) -> String {
    const HEADERS: [&str; 15] = [
        "codec",
        "backend",
        "ratio",
        "comp MB/s",
        "decomp MB/s",
        "comp CPU s/GB",
        "decomp CPU s/GB",
        "saved MB/CPU s",
        "CPU util",
        "ratio/util",
        "offloaded",
        "software",
        "stored raw",
        "skipped",
        "holes",
    ];
    let cells: Vec<[String; 15]> = rows
        .iter()
        .map(|r| {
            [
                r.codec.clone(),
                r.backend.clone(),
                format!("{:.2}", r.ratio),
                format!("{:.1}", r.compress_mbps),
                format!("{:.1}", r.decompress_mbps),
                format!("{:.2}", r.cpu_s_per_gb),
                format!("{:.2}", r.decompress_cpu_s_per_gb),
                format!("{:.0}", r.saved_mb_per_cpu_s),
                format!("{:.2}", r.cpu_util),
                format!("{:.2}", r.cost_efficiency),
                r.offloaded.to_string(),
                r.software.to_string(),
                r.stored_raw.to_string(),
                r.skipped.to_string(),
                r.holes.to_string(),
            ]
        })
        .collect();
    let mut widths = HEADERS.map(str::len);
    for line in &cells {
        for (width, cell) in widths.iter_mut().zip(line) {
            *width = (*width).max(cell.len());
        }
    }
    let mut text = String::new();
    let mut push_line = |line: &[&str]| {
        let mut parts = Vec::with_capacity(line.len());
        for (column, (cell, width)) in line.iter().zip(widths).enumerate() {
            if column < 2 {
                parts.push(format!("{cell:<width$}"));
            } else {
                parts.push(format!("{cell:>width$}"));
            }
        }
        text.push_str(parts.join("  ").trim_end());
        text.push('\n');
    };
    push_line(&HEADERS);
    for line in &cells {
        push_line(&line.each_ref().map(String::as_str));
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::cmd::bench::testing::row;

    #[test]
    fn table_columns_line_up() {
        let rows = [
            row("gzip-6", "libdeflate", 3.35, 8.0),
            row("lz4", "cpu", 2.0, 0.5),
        ];
        let table = render_table(&rows);
        let lines: Vec<&str> = table.lines().collect();
        assert_eq!(lines.len(), 3);
        assert!(lines[0].starts_with("codec   backend"), "{table}");
        let ratio_end = lines[0].find("ratio").unwrap() + "ratio".len();
        for line in &lines[1..] {
            assert!(line[..ratio_end].ends_with(char::is_numeric), "{table}");
        }
    }

    #[test]
    fn rows_with_codec_errors_are_flagged_under_the_table() {
        let mut failed = row("zstd-3", "cpu", 1.0, 1.0);
        failed.codec_errors = 7;
        let rows = [row("gzip-6", "libdeflate", 3.35, 8.0), failed];
        let text = codec_error_warnings(&rows);
        assert_eq!(text.lines().filter(|l| !l.is_empty()).count(), 1, "{text}");
        assert!(
            text.contains("zstd-3 on cpu failed on 7 of 10 records"),
            "{text}"
        );
        assert_eq!(codec_error_warnings(&rows[..1]), "");
    }
}
