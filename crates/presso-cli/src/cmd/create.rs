//! `presso create`: makes a new pool directory.

use std::path::PathBuf;

use anyhow::{Context, Result};
use clap::Args;
use presso_fs::pool::{without_password, ClientPlace, Pool};
use presso_fs::props;
use presso_fs::FsError;

/// Create a pool: a directory on any local file system holding compressed segments and the
/// metadata database; or, with --meta and --data, a pool many machines mount at once.
#[derive(Debug, Args)]
#[command(after_help = after_help())]
// The fields' docs are the command's help, where brackets are URL syntax, not links.
#[allow(rustdoc::broken_intra_doc_links)]
pub struct CreateArgs {
    /// Directory of the new pool (created if missing; must be empty).
    #[arg(required_unless_present = "meta", conflicts_with_all = ["meta", "data"])]
    pub pool: Option<PathBuf>,
    /// A shared pool's metadata: a PostgreSQL URL naming a new schema,
    /// postgres://USER[:PASSWORD]@HOST[:PORT]/DB?schema=NAME.
    #[arg(long, value_name = "URL", requires = "data")]
    pub meta: Option<String>,
    /// A shared pool's records: s3://BUCKET/PREFIX[?endpoint=http://HOST:PORT][&region=NAME],
    /// with credentials in AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY.
    #[arg(long, value_name = "URL", requires = "meta")]
    pub data: Option<String>,
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
  presso create --meta 'postgres://presso@db.lab/pools?schema=lab' \
                --data 's3://lab-pools/lab?endpoint=http://rgw.lab:8080' -o compression=gzip-6
                                        # shared by many machines: `presso mount URL DIR` on each

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
    let created = match (&args.pool, &args.meta, &args.data) {
        (_, Some(meta), Some(data)) => {
            Pool::create_shared(meta, data, &ClientPlace::default_for_user(), &properties)
                .with_context(|| {
                    format!(
                        "cannot create a shared pool in {} and {data}",
                        without_password(meta)
                    )
                })?;
            format!("shared pool {} (records in {data})", without_password(meta))
        }
        (Some(pool), _, _) => {
            let created = if args.force {
                Pool::create_beside_files(pool, &properties)
            } else {
                Pool::create(pool, &properties)
            };
            created
                .map_err(|e| match e {
                    FsError::NotEmpty(why) => {
                        anyhow::anyhow!("{why} (use --force to create it beside the files there)")
                    }
                    e => e.into(),
                })
                .with_context(|| format!("cannot create a pool in {}", pool.display()))?;
            format!("pool {}", pool.display())
        }
        _ => anyhow::bail!("give a pool directory, or --meta and --data for a shared pool"),
    };
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
    println!("created {created} ({})", shown.join(", "));
    Ok(())
}
