//! `presso get` and `presso set`: properties per directory, inherited like ZFS datasets.

use std::path::PathBuf;

use anyhow::{bail, Result};
use clap::Args;
use presso_fs::control::Request;
use presso_fs::props;

use super::{request, target};

/// Show properties of a directory in a mounted pool (or of the pool).
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso get compression /mnt/data/logs
  presso get all /mnt/data
  presso get recordsize /srv/pool --json

SOURCE is `default`, `pool`, `local` (set on this directory) or `inherited from PATH-INODE`.")]
pub struct GetArgs {
    /// Property name, or `all`.
    pub property: String,
    /// A directory or file in a mounted pool, a mount point, or a pool directory.
    pub path: PathBuf,
    /// JSON Lines output.
    #[arg(long)]
    pub json: bool,
}

/// Change a property of a directory (inherited by everything created below it) or of the pool.
#[derive(Debug, Args)]
#[command(after_help = set_after_help())]
pub struct SetArgs {
    /// NAME=VALUE.
    pub assignment: String,
    /// A directory in a mounted pool, a mount point, or a pool directory.
    pub path: PathBuf,
}

/// Examples, then every property with its valid values, built from the property table.
fn set_after_help() -> String {
    format!(
        "Examples:
  presso set compression=zstd-3 /mnt/data/logs
  presso set recordsize=1M /mnt/data/genomes
  presso set offload=off /srv/pool           # pool-wide default

Changes affect new writes only; existing data stays readable whatever it was written with.
A file keeps the recordsize it was created with.

Properties:
{}",
        props::help_table()
    )
}

/// Runs `presso get`.
pub fn get(args: GetArgs) -> Result<()> {
    let t = target::resolve(&args.path)?;
    let names: Vec<&str> = if args.property == "all" {
        props::PROPS.iter().map(|p| p.name).collect()
    } else {
        props::info(&args.property).map_err(anyhow::Error::msg)?;
        vec![args.property.as_str()]
    };
    if !args.json {
        println!("{:<12} {:<10} SOURCE", "PROPERTY", "VALUE");
    }
    for name in names {
        let v = request::run(
            &t,
            Request::Get {
                ino: t.ino,
                name: name.to_string(),
            },
            None,
        )?;
        let value = v["value"].as_str().unwrap_or_default();
        let source = match v["source"].as_u64() {
            None => "default".to_string(),
            Some(0) => "pool".to_string(),
            Some(ino) if ino == t.ino => "local".to_string(),
            Some(ino) => format!("inherited from inode {ino}"),
        };
        if args.json {
            println!(
                "{}",
                serde_json::json!({"property": name, "value": value, "source": source})
            );
        } else {
            println!("{name:<12} {value:<10} {source}");
        }
    }
    Ok(())
}

/// Runs `presso set`.
pub fn set(args: SetArgs) -> Result<()> {
    let Some((name, value)) = args.assignment.split_once('=') else {
        bail!("expected NAME=VALUE, e.g. compression=zstd-3");
    };
    let t = target::resolve(&args.path)?;
    let v = request::run(
        &t,
        Request::Set {
            ino: t.ino,
            name: name.trim().to_string(),
            value: value.to_string(),
        },
        None,
    )?;
    println!(
        "{}={} on {}",
        name.trim(),
        v["value"].as_str().unwrap_or(value),
        args.path.display()
    );
    Ok(())
}
