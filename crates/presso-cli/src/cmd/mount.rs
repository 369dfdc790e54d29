//! `presso mount`: serves a pool at a mount point, in the background unless `-f`. The same code
//! runs as the mount helper (`mount -t fuse.presso POOL DIR`, /etc/fstab).

use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};
use clap::Args;
use presso_fs::daemon::{self, MountConfig, PoolSource};
use presso_fs::pool::ClientPlace;

/// Mount a pool.
#[derive(Debug, Args)]
#[command(after_help = "Examples:
  presso mount /srv/pool /mnt/data
  presso mount /srv/pool /mnt/data -o allow_other
  presso mount /srv/pool /mnt/data -o sync_interval=30   # durable within 30 s instead of 5 s
  presso mount /srv/pool /mnt/data -o dirty_limit=64M,cache_size=16M   # a smaller daemon
  presso mount -f /srv/pool /mnt/data      # stay in the foreground (logs to stderr)
  presso mount 'postgres://presso@db/pools?schema=lab' /mnt/lab   # a client of a shared pool
  mount -t fuse.presso /srv/pool /mnt/data # with the mount helper installed:
                                           #   ln -s $(command -v presso) /sbin/mount.fuse.presso
  fstab: /srv/pool /mnt/data fuse.presso defaults,allow_other 0 0

Mount options (-o, comma-separated): allow_other (other users may enter, permissions still apply),
ro, rw, noexec, exec, nonempty (mount over a directory that holds files, hiding them while
mounted; refused otherwise), sync_interval=SECONDS (default 5; see below), flush_after=SECONDS
(how long the end of a file, a record only partly written, waits untouched for more bytes before
it is compressed and stored anyway; default 2, 0.1 to 3600; sync_interval still bounds how long
it may stay not durable), cache_timeout=SECONDS
(how long the kernel keeps names and attributes without asking the daemon; default 3600: every
change passes through the kernel, which updates what it keeps, so a long timeout is safe and saves
a request per stat), dirty_limit=SIZE (most bytes of written records waiting for compression
before writers wait; default 256M) and cache_size=SIZE (decompressed records kept for reads;
default 64M): with the engine's queue, these bound the daemon's memory whatever the data size;
channels=N (threads reading requests from the kernel, each on its own clone of the FUSE device;
default 2); uring (take requests from one io_uring queue per CPU where the kernel offers FUSE
over io_uring, as Linux 6.14 on does with the fuse module's enable_uring parameter set: each
request is served on the CPU that made it, which speeds up work that keeps every CPU busy, such
as extracting an archive, slows down a single program's run of small requests and does not
speed up large writes; see docs/benchmarks.md) or nouring (the default: every request through the FUSE
device); for a shared pool also cache_dir=DIR (where this machine's clients keep their own
files; default /var/cache/presso for root, else ~/.cache/presso) and client_timeout=SECONDS
(how long a client may go without a heartbeat before the others take it for stopped and remove
its locks and the files it kept open after unlinking them; default 60; give every client of a
pool the same) and
server_timeout=SECONDS (how long operations wait for PostgreSQL or the object store to come
back, retrying, before they fail with EIO; default 120).
The mount is private to its owner otherwise. PRESSO_MOUNT_OPTIONS in the environment holds options
every mount takes first (its -o options win), e.g. PRESSO_MOUNT_OPTIONS=uring.

Shared pools (made with `presso create --meta … --data …`): every mount is a new client, on
this machine or another. The object store's credentials come from AWS_ACCESS_KEY_ID and
AWS_SECRET_ACCESS_KEY. A file written and closed on one client reads whole on the next open
anywhere; names and attributes others change show within cache_timeout (default 1 s there).
See docs/scale-out.md for the consistency model.

Durability: fsync, fdatasync, O_SYNC and O_DSYNC writes, fsync on a directory and unmount
(`presso unmount`, or SIGTERM to the daemon) make what they cover durable before they return.
Everything else the daemon has received is durable at most sync_interval seconds later (0.1 to
3600, decimals allowed). `sync` hands the kernel's cached writes to the daemon but is not a
durability point by itself: the kernel sends FUSE file systems no sync request.")]
pub struct MountArgs {
    /// The pool directory, or the `postgres://` URL of a shared pool's metadata.
    pub pool: PathBuf,
    /// Where to mount it (an existing, empty directory).
    pub mountpoint: PathBuf,
    /// Stay in the foreground instead of becoming a daemon.
    #[arg(short = 'f', long)]
    pub foreground: bool,
    /// Mount options, comma-separated.
    #[arg(short = 'o', value_name = "OPTIONS")]
    pub options: Vec<String>,
}

/// Generic options mount(8) passes that mean nothing to a FUSE pool.
const IGNORED: &[&str] = &[
    "defaults",
    "dev",
    "nodev",
    "suid",
    "nosuid",
    "auto",
    "noauto",
    "nofail",
    "_netdev",
    "user",
    "nouser",
    "users",
    "atime",
    "noatime",
    "relatime",
    "async",
    "default_permissions",
];

#[cfg(test)]
fn parse_options(options: &[String]) -> Result<MountConfig> {
    Ok(parse_all_options(options)?.0)
}

/// Mount options, and those only a shared pool's client takes.
fn parse_all_options(options: &[String]) -> Result<(MountConfig, SharedOptions)> {
    let mut config = MountConfig::default();
    let mut shared = SharedOptions::default();
    for part in options.iter().flat_map(|o| o.split(',')).map(str::trim) {
        match part {
            "" => {}
            "allow_other" => config.allow_other = true,
            "ro" => config.read_only = true,
            "rw" => config.read_only = false,
            "noexec" => config.no_exec = true,
            "nonempty" => config.nonempty = true,
            "exec" => config.no_exec = false,
            "uring" => config.io_uring = true,
            "nouring" => config.io_uring = false,
            p if p.starts_with("sync_interval=") => {
                config.vfs.sync_interval = seconds(
                    p,
                    0.1..=MAX_SYNC_INTERVAL_SECS,
                    "(e.g. sync_interval=5); for a durable write at once use fsync, O_SYNC or \
                     O_DSYNC",
                )?;
            }
            p if p.starts_with("flush_after=") => {
                config.vfs.flush_after =
                    seconds(p, 0.1..=MAX_SYNC_INTERVAL_SECS, "(e.g. flush_after=2)")?;
            }
            p if p.starts_with("dirty_limit=") => {
                config.vfs.dirty_limit = memory_size(p)?;
            }
            p if p.starts_with("cache_size=") => {
                config.vfs.cache_bytes = memory_size(p)?;
            }
            p if p.starts_with("cache_timeout=") => {
                // 0: the kernel asks every time.
                let timeout = seconds(p, 0.0..=MAX_CACHE_TIMEOUT_SECS, "(e.g. cache_timeout=1)")?;
                config.cache_timeout = Some(timeout);
            }
            p if p.starts_with("channels=") => {
                config.channels = Some(channels(p)?);
            }
            p if p.starts_with("client_timeout=") => {
                config.pool.client_timeout = seconds(p, 1.0..=86400.0, "(e.g. client_timeout=60)")?;
            }
            p if p.starts_with("cache_dir=") => {
                let dir = &p["cache_dir=".len()..];
                if !dir.starts_with('/') {
                    bail!("cache_dir={dir}: give an absolute path");
                }
                shared.cache_dir = Some(PathBuf::from(dir));
            }
            p if p.starts_with("server_timeout=") => {
                shared.server_timeout =
                    Some(seconds(p, 1.0..=86400.0, "(e.g. server_timeout=120)")?);
            }
            p if IGNORED.contains(&p) || p.starts_with("x-") => {}
            p => bail!(
                "unknown mount option '{p}'; valid: allow_other, ro, rw, noexec, exec, nonempty, \
                 sync_interval=SECONDS, flush_after=SECONDS, cache_timeout=SECONDS, \
                 dirty_limit=SIZE, cache_size=SIZE, \
                 channels=N, uring, nouring, cache_dir=DIR, client_timeout=SECONDS, \
                 server_timeout=SECONDS"
            ),
        }
    }
    Ok((config, shared))
}

/// Mount options only a shared pool's client takes.
#[derive(Debug, Default)]
struct SharedOptions {
    cache_dir: Option<PathBuf>,
    server_timeout: Option<std::time::Duration>,
}

/// The longest `sync_interval` accepted: an hour of data at risk is already more than anyone
/// should choose.
const MAX_SYNC_INTERVAL_SECS: f64 = 3600.0;

/// Parses `NAME=SECONDS` (decimals allowed) within `range`; the error gives the range and
/// then `advice`.
fn seconds(
    option: &str,
    range: std::ops::RangeInclusive<f64>,
    advice: &str,
) -> Result<std::time::Duration> {
    let (name, value) = option.split_once('=').unwrap_or((option, ""));
    match value.parse::<f64>() {
        Ok(secs) if range.contains(&secs) => Ok(std::time::Duration::from_secs_f64(secs)),
        _ => bail!(
            "{name}={value}: give seconds from {} to {} {advice}",
            range.start(),
            range.end()
        ),
    }
}

/// Bounds of `dirty_limit=` and `cache_size=`: room for a few of the largest records, and no
/// more than a machine could hold.
const MIN_MEMORY_SIZE: u64 = 4 << 20;
const MAX_MEMORY_SIZE: u64 = 1 << 40;

/// Parses `NAME=SIZE` for one of the daemon's memory bounds (bytes, or K, M, G).
fn memory_size(option: &str) -> Result<usize> {
    let (name, value) = option.split_once('=').unwrap_or((option, ""));
    match presso_fs::units::parse_size(value) {
        Ok(bytes) if (MIN_MEMORY_SIZE..=MAX_MEMORY_SIZE).contains(&bytes) => Ok(bytes as usize),
        Ok(_) => bail!("{name}={value}: give a size from 4M to 1024G (e.g. {name}=256M)"),
        Err(e) => bail!("{name}={value}: {e}"),
    }
}

/// Most request channels accepted: more threads than this only wait on each other.
const MAX_CHANNELS: usize = 64;

/// Parses `channels=N`.
fn channels(option: &str) -> Result<usize> {
    let value = option.split_once('=').map_or("", |(_, v)| v);
    match value.parse::<usize>() {
        Ok(n) if (1..=MAX_CHANNELS).contains(&n) => Ok(n),
        _ => bail!("channels={value}: give a number of threads from 1 to {MAX_CHANNELS}"),
    }
}

/// The longest `cache_timeout` accepted: a day.
const MAX_CACHE_TIMEOUT_SECS: f64 = 86400.0;

/// Whether `pool` names a shared pool's metadata rather than a directory.
fn is_shared_url(pool: &Path) -> bool {
    pool.to_str()
        .is_some_and(|s| s.starts_with("postgres://") || s.starts_with("postgresql://"))
}

/// The pool to serve and where its messages go.
fn source(pool: &Path, shared: SharedOptions) -> Result<PoolSource> {
    if is_shared_url(pool) {
        let mut place = ClientPlace::default_for_user();
        if let Some(dir) = shared.cache_dir {
            place.cache = dir;
        }
        if let Some(timeout) = shared.server_timeout {
            place.server_timeout = timeout;
        }
        return Ok(PoolSource::Shared {
            meta_url: pool.to_string_lossy().into_owned(),
            place,
        });
    }
    if shared.cache_dir.is_some() || shared.server_timeout.is_some() {
        bail!(
            "cache_dir= and server_timeout= are for shared pools (postgres:// URLs); a pool \
             directory keeps everything in itself"
        );
    }
    if !pool.join("presso.pool").is_file() {
        bail!(
            "{} is not a Presso pool (create one with `presso create {}`)",
            pool.display(),
            pool.display()
        );
    }
    Ok(PoolSource::Dir(pool.to_path_buf()))
}

/// Options every mount takes before its own `-o` options (which win): `PRESSO_MOUNT_OPTIONS`.
const OPTIONS_FROM_ENV: &str = "PRESSO_MOUNT_OPTIONS";

/// Runs `presso mount`.
pub fn run(args: MountArgs) -> Result<()> {
    let mut options: Vec<String> = std::env::var(OPTIONS_FROM_ENV).into_iter().collect();
    options.extend(args.options);
    let (config, shared) = parse_all_options(&options)
        .with_context(|| format!("mount options (with {OPTIONS_FROM_ENV} first, if set)"))?;
    let source = source(&args.pool, shared)?;
    if args.foreground {
        daemon::serve(&source, &args.mountpoint, config, |r| {
            if let Err(e) = r {
                presso_fs::log!("presso: cannot mount: {e}");
            }
        })
        .context("the mount failed")?;
        return Ok(());
    }
    super::background::mount(&source, &args.mountpoint, config)
}

/// The mount helper's command line: `POOL MOUNTPOINT [-o OPTIONS] [-n] [-s] [-f] [-v]`.
pub fn run_helper(argv: &[String]) -> Result<()> {
    let mut positional = Vec::new();
    let mut options = Vec::new();
    let mut it = argv.iter();
    while let Some(a) = it.next() {
        match a.as_str() {
            "-o" => options.push(it.next().context("-o needs a value")?.clone()),
            "-n" | "-s" | "-f" | "-v" => {}
            s if s.starts_with("-o") => options.push(s[2..].to_string()),
            s => positional.push(s.to_string()),
        }
    }
    let [pool, mountpoint] = positional.as_slice() else {
        bail!("usage: mount.fuse.presso POOL MOUNTPOINT [-o OPTIONS]");
    };
    run(MountArgs {
        pool: pool.into(),
        mountpoint: mountpoint.into(),
        foreground: false,
        options,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mount_options_are_checked() {
        let c = parse_options(&["allow_other,ro".into()]).unwrap();
        assert!(c.allow_other && c.read_only);
        let c = parse_options(&["defaults,rw,nofail".into()]).unwrap();
        assert!(!c.allow_other && !c.read_only && !c.no_exec);
        assert!(parse_options(&["nosuid,noexec".into()]).unwrap().no_exec);
        let e = parse_options(&["compression=lz4".into()]).unwrap_err();
        assert!(e.to_string().contains("allow_other"), "{e}");
    }

    #[test]
    fn sync_interval_is_seconds_within_limits() {
        use std::time::Duration;
        let default = parse_options(&[]).unwrap().vfs.sync_interval;
        assert_eq!(default, presso_fs::vfs::DEFAULT_SYNC_INTERVAL);
        let c = parse_options(&["ro,sync_interval=30".into()]).unwrap();
        assert_eq!(c.vfs.sync_interval, Duration::from_secs(30));
        let c = parse_options(&["sync_interval=0.5".into()]).unwrap();
        assert_eq!(c.vfs.sync_interval, Duration::from_millis(500));
        for bad in ["0", "0.05", "3601", "-1", "5s", "", "nan", "inf"] {
            let e = parse_options(&[format!("sync_interval={bad}")]).unwrap_err();
            assert!(
                e.to_string().contains("from 0.1 to 3600"),
                "sync_interval={bad}: {e}"
            );
        }
    }

    #[test]
    fn flush_after_is_seconds_within_limits() {
        use std::time::Duration;
        let default = parse_options(&[]).unwrap().vfs.flush_after;
        assert_eq!(default, presso_fs::vfs::VfsConfig::default().flush_after);
        let c = parse_options(&["flush_after=3600".into()]).unwrap();
        assert_eq!(c.vfs.flush_after, Duration::from_secs(3600));
        for bad in ["0", "3601", "2s", ""] {
            let e = parse_options(&[format!("flush_after={bad}")]).unwrap_err();
            assert!(
                e.to_string().contains("from 0.1 to 3600"),
                "flush_after={bad}: {e}"
            );
        }
    }

    #[test]
    fn cache_timeout_is_seconds_within_limits() {
        use std::time::Duration;
        assert_eq!(parse_options(&[]).unwrap().cache_timeout, None);
        let c = parse_options(&["cache_timeout=0".into()]).unwrap();
        assert_eq!(c.cache_timeout, Some(Duration::ZERO));
        let c = parse_options(&["rw,cache_timeout=1.5".into()]).unwrap();
        assert_eq!(c.cache_timeout, Some(Duration::from_millis(1500)));
        for bad in ["-1", "86401", "1h", "", "nan", "inf"] {
            let e = parse_options(&[format!("cache_timeout={bad}")]).unwrap_err();
            assert!(
                e.to_string().contains("from 0 to 86400"),
                "cache_timeout={bad}: {e}"
            );
        }
    }

    #[test]
    fn memory_bounds_are_sizes_within_limits() {
        let c = parse_options(&["dirty_limit=64M,cache_size=1G".into()]).unwrap();
        assert_eq!(c.vfs.dirty_limit, 64 << 20);
        assert_eq!(c.vfs.cache_bytes, 1 << 30);
        let default = presso_fs::vfs::VfsConfig::default();
        let c = parse_options(&[]).unwrap();
        assert_eq!(
            (c.vfs.dirty_limit, c.vfs.cache_bytes),
            (default.dirty_limit, default.cache_bytes)
        );
        for bad in ["dirty_limit=1M", "cache_size=0", "cache_size=2048G"] {
            let e = parse_options(&[bad.into()]).unwrap_err();
            assert!(e.to_string().contains("from 4M to 1024G"), "{bad}: {e}");
        }
        for bad in ["dirty_limit=lots", "cache_size=", "cache_size=5T"] {
            let e = parse_options(&[bad.into()]).unwrap_err();
            assert!(e.to_string().contains("invalid size"), "{bad}: {e}");
        }
    }

    #[test]
    fn shared_pool_options_are_checked_and_only_for_shared_pools() {
        use std::time::Duration;
        let (c, shared) =
            parse_all_options(
                &["cache_dir=/var/cache/x,client_timeout=5,server_timeout=30".into()],
            )
            .unwrap();
        assert_eq!(c.pool.client_timeout, Duration::from_secs(5));
        assert_eq!(shared.cache_dir, Some(PathBuf::from("/var/cache/x")));
        assert_eq!(shared.server_timeout, Some(Duration::from_secs(30)));
        let e = parse_all_options(&["cache_dir=relative".into()]).unwrap_err();
        assert!(e.to_string().contains("absolute"), "{e}");
        for bad in [
            "client_timeout=0",
            "server_timeout=86401",
            "server_timeout=soon",
        ] {
            let e = parse_all_options(&[bad.into()]).unwrap_err();
            assert!(e.to_string().contains("from 1 to 86400"), "{bad}: {e}");
        }
        let dir = std::env::temp_dir();
        let e = source(&dir, shared).unwrap_err();
        assert!(e.to_string().contains("for shared pools"), "{e}");
        let url = Path::new("postgres://u@h/db?schema=s");
        assert!(matches!(
            source(url, SharedOptions::default()).unwrap(),
            PoolSource::Shared { .. }
        ));
    }

    #[test]
    fn io_uring_is_asked_for_by_option_and_the_last_word_wins() {
        assert!(!parse_options(&[]).unwrap().io_uring);
        assert!(parse_options(&["uring".into()]).unwrap().io_uring);
        assert!(!parse_options(&["uring,nouring".into()]).unwrap().io_uring);
        assert!(
            parse_options(&["nouring".into(), "uring".into()])
                .unwrap()
                .io_uring
        );
    }

    #[test]
    fn channels_are_a_count_within_limits() {
        assert_eq!(parse_options(&[]).unwrap().channels, None);
        assert_eq!(
            parse_options(&["channels=1".into()]).unwrap().channels,
            Some(1)
        );
        assert_eq!(
            parse_options(&["channels=64".into()]).unwrap().channels,
            Some(64)
        );
        for bad in ["0", "65", "", "two", "-1"] {
            let e = parse_options(&[format!("channels={bad}")]).unwrap_err();
            assert!(
                e.to_string().contains("from 1 to 64"),
                "channels={bad}: {e}"
            );
        }
    }
}
