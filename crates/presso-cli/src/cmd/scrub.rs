//! `presso scrub`: verifies every stored record and every segment entry.

use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::Args;
use presso_fs::control::Request;
use presso_fs::maintenance::ScrubReport;

use super::{request, target};

/// Verify every record's checksums and decoding, every segment entry and the pool's copy of its
/// metadata (rewritten if missing or damaged); report damage and orphaned frames. Exits non-zero
/// if anything is damaged.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso scrub /mnt/data
  presso scrub /srv/pool --json")]
pub struct ScrubArgs {
    /// A pool directory or a mount point.
    pub path: PathBuf,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `presso scrub`.
pub fn run(args: ScrubArgs) -> Result<()> {
    let t = target::resolve(&args.path)?;
    let v = request::run(&t, Request::Scrub, Some("scrub"))?;
    let r: ScrubReport = serde_json::from_value(v.clone()).context("unexpected scrub reply")?;
    if args.json {
        println!("{v}");
    } else {
        println!(
            "scrub: {} records ({} bytes) verified; {} damaged records, {} damaged segment entries, {} damaged segment headers; {} orphaned frames ({} bytes, reclaimed by `presso gc`)",
            r.records_checked,
            r.bytes_checked,
            r.damaged.len(),
            r.damaged_entries.len(),
            r.damaged_headers.len(),
            r.orphan_frames,
            r.orphan_bytes
        );
        for d in &r.damaged {
            let file = d
                .path
                .clone()
                .unwrap_or_else(|| format!("inode {} (no name)", d.ino));
            let at = d
                .file_offset
                .map_or_else(|| format!("record {}", d.index), |o| format!("offset {o}"));
            println!(
                "  damaged: {file} at {at} (inode {}, record {}; segment {} offset {}): {}",
                d.ino, d.index, d.segment, d.offset, d.error
            );
        }
        for (segment, why) in &r.damaged_headers {
            println!("  damaged segment header: segment {segment}: {why}");
        }
        for (segment, offset, why) in &r.damaged_entries {
            println!("  damaged entry: segment {segment} offset {offset}: {why}");
        }
        if let Some(problem) = &r.metadata_copy_problem {
            match &r.metadata_copy_not_rewritten {
                None => println!("  metadata copy: {problem}; a fresh copy was written"),
                Some(why) => {
                    println!("  metadata copy: {problem}; a fresh copy could not be written: {why}")
                }
            }
        }
    }
    if !r.clean() {
        bail!("the pool has damaged data (see above)");
    }
    Ok(())
}
