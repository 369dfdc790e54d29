//! How a pool is mounted: the mount options, and what the daemon asks of the kernel at INIT.

use std::path::Path;

use fuser::{Config, InitFlags, KernelConfig, MountOption, SessionACL};

use super::ring::MAX_PAYLOAD;

/// How a pool is mounted: the file-system name is the pool path, permissions are checked by the
/// kernel, the mount is private to its owner unless `allow_other` is given, and `channels`
/// threads read requests, each from its own clone of the FUSE device.
pub fn mount_config(
    pool: &Path,
    allow_other: bool,
    read_only: bool,
    no_exec: bool,
    channels: usize,
) -> Config {
    let mut options = vec![
        MountOption::FSName(pool.display().to_string()),
        MountOption::Subtype("presso".into()),
        MountOption::DefaultPermissions,
        MountOption::NoAtime,
    ];
    if no_exec {
        options.push(MountOption::NoExec);
    }
    options.push(if read_only {
        MountOption::RO
    } else {
        MountOption::RW
    });
    let mut config = Config::default();
    config.mount_options = options;
    config.acl = if allow_other {
        SessionACL::All
    } else {
        SessionACL::Owner
    };
    config.n_threads = Some(channels.max(1));
    config.clone_fd = true;
    config
}

/// What the daemon asks of the kernel at INIT: large writes and read-ahead, the writeback cache
/// and cached symlink targets (unless `shared`; locks instead), parallel directory operations,
/// listings with attributes, suid/sgid handling in the daemon, and with `ring` requests through
/// io_uring queues (asked for only where the kernel offers them: the `fuse` module's
/// `enable_uring` parameter).
pub fn configure_kernel(config: &mut KernelConfig, shared: bool, ring: bool) {
    let _ = config.set_max_write(MAX_PAYLOAD as u32);
    let _ = config.set_max_readahead(MAX_PAYLOAD as u32);
    // The kernel caches writes and sends them in large batches; reads of cached pages never
    // reach the daemon. Not for a pool shared with other clients: with the writeback cache the
    // kernel trusts its own idea of a file's size over the daemon's, so it would never see a
    // file grow on another client.
    if !shared {
        let _ = config.add_capabilities(InitFlags::FUSE_WRITEBACK_CACHE);
        // A symlink's target never changes, so the kernel may keep it in the link's page
        // cache: reading the link again needs no READLINK.
        let _ = config.add_capabilities(InitFlags::FUSE_CACHE_SYMLINKS);
    } else {
        // Locks must hold across clients, so they go to the daemon, which keeps them in the
        // metadata; with one daemon the kernel keeps them itself.
        let _ = config.add_capabilities(InitFlags::FUSE_POSIX_LOCKS | InitFlags::FUSE_FLOCK_LOCKS);
    }
    let _ = config.add_capabilities(InitFlags::FUSE_PARALLEL_DIROPS);
    // Listings carry each entry's attributes when the kernel expects them to be used (the
    // first page of a directory, and after a lookup or stat of an entry since): `ls -l`,
    // `du` or `rsync` then need no LOOKUP per name.
    let _ = config.add_capabilities(InitFlags::FUSE_DO_READDIRPLUS);
    let _ = config.add_capabilities(InitFlags::FUSE_READDIRPLUS_AUTO);
    // Suid, sgid and file capabilities are dropped here rather than by the kernel, which
    // would otherwise ask for `security.capability` before every write(2): a round trip
    // that queues behind the writeback the daemon is busy with.
    let _ = config.add_capabilities(InitFlags::FUSE_HANDLE_KILLPRIV_V2);
    let _ = config.set_max_background(64);
    let _ = config.set_congestion_threshold(48);
    if ring {
        let _ = config.add_capabilities(InitFlags::FUSE_OVER_IO_URING);
    }
}
