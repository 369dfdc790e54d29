//! `presso status`: space, ratio, offload and throughput of a pool.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use presso_fs::control::Request;
use presso_fs::status::Status;

use super::{request, target};

/// Show a pool's space accounting, compression ratio, offload counters and throughput.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso status /mnt/data
  presso status /srv/pool --json | jq .ratio

JSON fields include logical_bytes, stored_bytes, garbage_bytes, disk_bytes, ratio, codecs[]
(per codec, over the whole pool: records, logical_bytes, stored_bytes, ratio), records_offloaded,
records_software,
fallback_busy, fallback_failure, fallback_unavailable, holes, stored_raw, precheck_skips,
codec_errors (records a codec failed on, stored raw; anything but 0 is worth a report),
inline_records, corruptions, txgs, durable_commits, durability_pending (the mount holds changes
not durable yet), io_uring_queues (CPU queues requests came through over FUSE io_uring; 0: all
through /dev/fuse), throughput{written_bytes, read_bytes,
write_bytes_per_sec, read_bytes_per_sec}, work and lifetime (since the mount, and over the pool's
life: written_bytes, read_bytes, records_compressed, records_offloaded, compressed_bytes,
frame_bytes, compress_cpu_ns, records_decoded, decoded_bytes, decode_cpu_ns), cost and
lifetime_cost (compress_cpu_s_per_gb, decode_cpu_s_per_gb, saved_mb_per_cpu_s), the engine's
full counters under engine, and for a shared pool shared{client, clients[]{id, host, pid,
silent_secs}}. The space figures, codecs[] and lifetime cover the whole pool; the
other counters count since the pool was mounted (or opened).")]
pub struct StatusArgs {
    /// A pool directory or a mount point.
    pub path: PathBuf,
    /// Print one JSON object instead of a table.
    #[arg(long)]
    pub json: bool,
}

/// Runs `presso status`.
pub fn run(args: StatusArgs) -> Result<()> {
    let t = target::resolve(&args.path)?;
    let value = request::run(&t, Request::Status, None)?;
    if args.json {
        println!("{value}");
        return Ok(());
    }
    let s: Status = serde_json::from_value(value).context("unexpected status reply")?;
    print!("{}", render(&s));
    Ok(())
}

fn human(bytes: u64) -> String {
    let units = ["B", "KiB", "MiB", "GiB", "TiB"];
    let mut v = bytes as f64;
    let mut i = 0;
    while v >= 1024.0 && i + 1 < units.len() {
        v /= 1024.0;
        i += 1;
    }
    if i == 0 {
        format!("{bytes} B")
    } else {
        format!("{v:.1} {}", units[i])
    }
}

/// The human-readable status.
pub fn render(s: &Status) -> String {
    use std::fmt::Write;
    let mut out = String::new();
    let _ = writeln!(out, "pool        {}", s.pool);
    let _ = writeln!(
        out,
        "mounted     {}",
        s.mountpoint.as_deref().unwrap_or("no")
    );
    if let Some(shared) = &s.shared {
        let others: Vec<String> = shared
            .clients
            .iter()
            .filter(|c| c.id != shared.client)
            .map(|c| {
                format!(
                    "{} ({} pid {}, beat {} s ago)",
                    c.id, c.host, c.pid, c.silent_secs
                )
            })
            .collect();
        let _ = writeln!(
            out,
            "shared      client {}; other clients: {}",
            shared.client,
            if others.is_empty() {
                "none".to_string()
            } else {
                others.join(", ")
            }
        );
    }
    let _ = writeln!(out, "logical     {}", human(s.logical_bytes));
    let _ = writeln!(out, "stored      {}", human(s.stored_bytes));
    let _ = writeln!(
        out,
        "garbage     {}  (collected automatically while mounted, or now with `presso gc`)",
        human(s.garbage_bytes)
    );
    let _ = writeln!(out, "on disk     {}", human(s.disk_bytes));
    let _ = writeln!(out, "ratio       {:.2}x", s.ratio);
    let _ = writeln!(
        out,
        "engine      {} offloaded, {} on the CPU; fallbacks: {} busy, {} failure, {} unavailable",
        s.records_offloaded,
        s.records_software,
        s.fallback_busy,
        s.fallback_failure,
        s.fallback_unavailable
    );
    let _ = writeln!(
        out,
        "records     {} holes, {} stored raw, {} pre-check skips, {} inline",
        s.holes, s.stored_raw, s.precheck_skips, s.inline_records
    );
    if s.codec_errors > 0 {
        let _ = writeln!(
            out,
            "warning     {} records stored raw because their codec failed: a defect worth \
             reporting, with `presso status --json`",
            s.codec_errors
        );
    }
    if !s.codecs.is_empty() {
        let _ = writeln!(out, "codec       records   logical     stored      ratio");
        for c in &s.codecs {
            let _ = writeln!(
                out,
                "  {:<9} {:>7}   {:<11} {:<11} {:.2}x",
                c.codec,
                c.records,
                human(c.logical_bytes),
                human(c.stored_bytes),
                c.ratio
            );
        }
    }
    if s.mountpoint.is_some() {
        let _ = writeln!(
            out,
            "requests    {}",
            match s.io_uring_queues {
                0 => "through /dev/fuse".to_string(),
                n => format!("through FUSE io_uring, {n} CPU queues"),
            }
        );
        let t = &s.throughput;
        let _ = writeln!(
            out,
            "throughput  write {}/s, read {}/s (last 10 s); {} written, {} read since mount",
            human(t.write_bytes_per_sec as u64),
            human(t.read_bytes_per_sec as u64),
            human(t.written_bytes),
            human(t.read_bytes)
        );
    }
    let cost = |label: &str, w: &presso_fs::lifetime::Work, c: &presso_fs::lifetime::CpuCost| {
        format!(
            "{label}{} written, {} read; CPU {:.2} s/GB compressing, {:.2} s/GB decoding; {:.0} MB \
             saved per CPU second\n",
            human(w.written_bytes),
            human(w.read_bytes),
            c.compress_cpu_s_per_gb,
            c.decode_cpu_s_per_gb,
            c.saved_mb_per_cpu_s
        )
    };
    if s.mountpoint.is_some() {
        out.push_str(&cost("this mount  ", &s.work, &s.cost));
    }
    out.push_str(&cost("lifetime    ", &s.lifetime, &s.lifetime_cost));
    if s.space_low || !s.unstored.is_empty() {
        let _ = writeln!(
            out,
            "NOT STORED  {} in {} files{}; writes get ENOSPC while the disk holding the pool is \
             short of space: free space there or delete files in the pool (their space is \
             collected at once); the data is retried, and `presso unmount` refuses to drop it",
            human(s.unstored.bytes),
            s.unstored.files.len(),
            s.unstored
                .error
                .as_deref()
                .map(|e| format!(" ({e})"))
                .unwrap_or_default()
        );
    }
    if s.refused_writes > 0 {
        let _ = writeln!(
            out,
            "REFUSED     {} writes ({}) since the mount; their writers had the error (at the \
             write, fsync or close) and nothing of them is stored",
            s.refused_writes,
            human(s.refused_bytes)
        );
    }
    if s.corruptions > 0 {
        let _ = writeln!(
            out,
            "WARNING     {} corrupt records met on reads; run `presso scrub`",
            s.corruptions
        );
    }
    out
}
