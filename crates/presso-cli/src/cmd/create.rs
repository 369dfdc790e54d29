//! `presso create`: makes a new pool directory.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use presso_fs::pool::Pool;
use presso_fs::props;
use presso_fs::FsError;

/// Create a pool: a directory on any local file system holding compressed segments and the
/// metadata database.
#[derive(Debug, Args)]
#[command(after_help = after_help())]
pub struct CreateArgs {
    /// Directory of the new pool (created if missing; must be empty).
    pub pool: PathBuf,
    /// Create the pool in a directory that holds other files (never over a pool).
    #[arg(long)]
    pub force: bool,
    /// A property, as NAME=VALUE; repeatable.
    #[arg(short = 'o', value_name = "NAME=VALUE")]
    pub options: Vec<String>,
}

/// Examples, then every property with its valid values, built from the property table (which
/// takes the codec list from the codec table).
fn after_help() -> String {
    format!(
        "Examples:
  presso create /srv/pool
  presso create /srv/pool -o compression=zstd-3 -o recordsize=1M
  presso create /srv/pool -o compression=gzip-6 -o offload=off -o threshold=20%
  presso create --force /data/shared    # a directory that already holds other files

Properties (set here for the whole pool; `presso set` changes them per directory later):
{}",
        props::help_table()
    )
}

/// Runs `presso create`.
pub fn run(args: CreateArgs) -> Result<()> {
    let mut properties = Vec::new();
    for option in &args.options {
        for part in option.split(',') {
            properties.push(props::parse_assignment(part).map_err(anyhow::Error::msg)?);
        }
    }
    let created = if args.force {
        Pool::create_beside_files(&args.pool, &properties)
    } else {
        Pool::create(&args.pool, &properties)
    };
    created
        .map_err(|e| match e {
            FsError::NotEmpty(why) => {
                anyhow::anyhow!("{why} (use --force to create it beside the files there)")
            }
            e => e.into(),
        })
        .with_context(|| format!("cannot create a pool in {}", args.pool.display()))?;
    let shown: Vec<String> = props::PROPS
        .iter()
        .map(|p| {
            let value = properties
                .iter()
                .find(|(n, _)| n == p.name)
                .map_or(p.default, |(_, v)| v.as_str());
            format!("{}={value}", p.name)
        })
        .collect();
    println!(
        "created pool {} ({})",
        args.pool.display(),
        shown.join(", ")
    );
    Ok(())
}
