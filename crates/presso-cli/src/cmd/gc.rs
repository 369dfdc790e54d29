//! `presso gc`: reclaims the space of overwritten and deleted data.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use presso_fs::control::Request;
use presso_fs::maintenance::GcReport;

use super::{request, target};

/// Reclaim the space of overwritten and deleted data: rewrite the live records of segments
/// holding garbage and remove them (online when mounted). On a shared pool this mount's own
/// segments, and those of clients that are gone if it holds the pool's maintenance lease.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso gc /mnt/data                  # reclaim all garbage
  presso gc /srv/pool --min-live 50%   # only segments less than half live (less copying)")]
pub struct GcArgs {
    /// A pool directory or a mount point.
    pub path: PathBuf,
    /// Rewrite only segments whose live share is below this (100%: every segment holding
    /// garbage).
    #[arg(long, default_value = "100%", value_parser = parse_percent)]
    pub min_live: f64,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

fn parse_percent(text: &str) -> Result<f64, String> {
    let t = text.trim();
    let n: f64 = t
        .trim_end_matches('%')
        .parse()
        .map_err(|_| format!("invalid percentage '{t}', e.g. 50%"))?;
    let f = if t.ends_with('%') || n > 1.0 {
        n / 100.0
    } else {
        n
    };
    if !(0.0..=1.0).contains(&f) {
        return Err(format!("{t} is not between 0% and 100%"));
    }
    Ok(f)
}

/// Runs `presso gc`.
pub fn run(args: GcArgs) -> Result<()> {
    let t = target::resolve(&args.path)?;
    let v = request::run(
        &t,
        Request::Gc {
            min_live: args.min_live,
        },
        Some("gc"),
    )?;
    if args.json {
        println!("{v}");
        return Ok(());
    }
    let r: GcReport = serde_json::from_value(v).context("unexpected gc reply")?;
    println!(
        "gc: {} of {} segments collected, {} records moved ({} bytes copied), {} bytes removed",
        r.segments_collected, r.segments, r.records_moved, r.bytes_copied, r.bytes_removed
    );
    if r.gone_clients_segments > 0 {
        println!(
            "gc: {} of them left by clients of this shared pool that are gone",
            r.gone_clients_segments
        );
    }
    if r.skipped > 0 {
        println!(
            "gc: {} segments left as they are: their live records do not fit in the free space \
             of the disk holding the pool; free space there (or delete files in the pool) and \
             run gc again",
            r.skipped
        );
    }
    Ok(())
}
