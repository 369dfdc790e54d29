//! `presso recover`: rebuilds the metadata of a pool whose `meta.db` is lost or damaged.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use presso_fs::maintenance::Progress;
use presso_fs::recover::{recover, RecoverOptions, RecoverReport};

use super::request::progress_bar;

/// Rebuild the metadata of a pool whose meta.db is missing, empty or damaged: from the pool's
/// own copy (meta.db.copy) and every record written after it, which the segments name by file
/// and position. Files the copy does not know go to /lost+found, named by inode number. The old
/// meta.db is renamed aside (meta.db.damaged-TIME), never deleted; the copy is not changed. The
/// pool must not be mounted.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso recover /srv/pool            # after `presso mount` refused a damaged meta.db
  presso recover /srv/pool --json     # the report as JSON
  presso recover /srv/pool --force    # rebuild even an intact meta.db (forgets renames,
                                      # removals and truncations made since the copy)

Then mount the pool, look into /lost+found, and run `presso scrub` on the mount.")]
pub struct RecoverArgs {
    /// The pool directory (not a mount point: the pool must not be mounted).
    pub pool: PathBuf,
    /// Rebuild even when meta.db opens and passes every check (it is moved aside too).
    #[arg(long)]
    pub force: bool,
    /// Print the report as JSON.
    #[arg(long)]
    pub json: bool,
}

/// Runs `presso recover`.
pub fn run(args: RecoverArgs) -> Result<()> {
    let bar = progress_bar("scanning segments");
    let report = recover(
        &args.pool,
        RecoverOptions { force: args.force },
        &mut |p: Progress| {
            bar.set_length(p.total);
            bar.set_position(p.done);
        },
    );
    bar.finish_and_clear();
    let report = report.with_context(|| format!("cannot recover {}", args.pool.display()))?;
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    Ok(())
}

fn print_report(r: &RecoverReport) {
    println!("recover: {}", r.pool);
    match &r.copy_unusable {
        None => println!(
            "  started from {} (transaction group {})",
            r.started_from, r.copy_txg
        ),
        Some(why) => println!("  started from {} ({why})", r.started_from),
    }
    for name in &r.moved_aside {
        println!("  moved aside: {name}");
    }
    println!(
        "  scanned {} segments: {} entries, {} bytes; {} damaged stretches skipped",
        r.segments, r.entries, r.bytes_scanned, r.damaged_stretches
    );
    println!(
        "  records applied: {} ({} bytes); records found again where garbage collection moved them: {}",
        r.records_applied, r.bytes_applied, r.records_relocated
    );
    println!("  files restored under their names: {}", r.files_restored);
    println!("  files in /lost+found: {}", r.lost_found.len());
    for f in &r.lost_found {
        println!("    /lost+found/{} ({} bytes)", f.ino, f.size);
    }
    if r.records_missing > 0 {
        println!(
            "  records whose frames no segment holds: {} (they read as I/O errors; `presso scrub` names them)",
            r.records_missing
        );
    }
    println!(
        "  metadata rebuilt up to transaction group {}; mount the pool and run `presso scrub`",
        r.last_txg
    );
}
