//! Finding what a path argument names: a pool directory, a mount point of a pool, or a path
//! inside a mounted pool (for per-directory properties).

use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use anyhow::{bail, Context, Result};

/// File a pool directory always holds.
const POOL_HEADER: &str = "presso.pool";

/// The inode number of a mount's root (FUSE's root id, which the pool's root directory has).
const ROOT_INO: u64 = 1;

/// A mounted Presso pool, from /proc/self/mountinfo.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Mount {
    /// The pool directory (the mount's source).
    pub pool: PathBuf,
    /// Where it is mounted.
    pub mountpoint: PathBuf,
}

/// What a path argument resolved to.
#[derive(Debug, Clone)]
pub struct Target {
    /// The pool directory.
    pub pool: PathBuf,
    /// Its mount, if mounted.
    pub mount: Option<Mount>,
    /// Inode the path names inside the pool (0 = the pool itself).
    pub ino: u64,
}

/// Every mounted Presso pool.
pub fn mounts() -> Vec<Mount> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines().filter_map(parse_mountinfo_line).collect()
}

/// Parses one mountinfo line, keeping only FUSE mounts whose source is a pool directory
/// (mounted by root the type reads `fuse`; through fusermount3 or mount(8), `fuse.presso`).
pub fn parse_mountinfo_line(line: &str) -> Option<Mount> {
    parse_fuse_line(line).filter(|m| is_pool(&m.pool))
}

/// The FUSE mounts whose source, an absolute path, no longer exists: pool directories deleted
/// while mounted, which [`mounts`] cannot recognise as pools any more.
pub fn orphaned_mounts() -> Vec<Mount> {
    let Ok(text) = std::fs::read_to_string("/proc/self/mountinfo") else {
        return Vec::new();
    };
    text.lines()
        .filter_map(parse_fuse_line)
        .filter(|m| m.pool.is_absolute() && std::fs::symlink_metadata(&m.pool).is_err())
        .collect()
}

/// Parses one mountinfo line, keeping `fuse` and `fuse.presso` mounts.
fn parse_fuse_line(line: &str) -> Option<Mount> {
    let (left, right) = line.split_once(" - ")?;
    let mountpoint = left.split(' ').nth(4)?;
    let mut right = right.split(' ');
    let fstype = right.next()?;
    let source = right.next()?;
    if fstype != "fuse.presso" && fstype != "fuse" {
        return None;
    }
    Some(Mount {
        pool: PathBuf::from(unescape(source)),
        mountpoint: PathBuf::from(unescape(mountpoint)),
    })
}

/// Undoes mountinfo's octal escapes (`\040` for a space).
fn unescape(s: &str) -> String {
    let bytes = s.as_bytes();
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] == b'\\' && i + 4 <= bytes.len() {
            if let Ok(v) = u8::from_str_radix(&s[i + 1..i + 4], 8) {
                out.push(v);
                i += 4;
                continue;
            }
        }
        out.push(bytes[i]);
        i += 1;
    }
    String::from_utf8_lossy(&out).into_owned()
}

/// Whether `dir` holds a pool.
pub fn is_pool(dir: &Path) -> bool {
    dir.join(POOL_HEADER).is_file() || dir.join(presso_fs::pool::CLIENT_FILE).is_file()
}

/// Resolves `path`: a pool directory (mounted or not), a mount point, or a path in a mount.
pub fn resolve(path: &Path) -> Result<Target> {
    let canonical =
        std::fs::canonicalize(path).with_context(|| format!("cannot find {}", path.display()))?;
    let all = mounts();
    // A mount point is answered from the mount table alone: looking inside a busy mount waits for
    // the daemon's queue of requests, and `presso status` is most wanted when the mount is busy.
    if let Some(mount) = all.iter().find(|m| m.mountpoint == canonical) {
        return Ok(Target {
            pool: mount.pool.clone(),
            mount: Some(mount.clone()),
            ino: ROOT_INO,
        });
    }
    if is_pool(&canonical) {
        let mount = all.into_iter().find(|m| m.pool == canonical);
        return Ok(Target {
            pool: canonical,
            mount,
            ino: 0,
        });
    }
    let mount = all
        .into_iter()
        .filter(|m| canonical.starts_with(&m.mountpoint))
        .max_by_key(|m| m.mountpoint.as_os_str().len());
    let Some(mount) = mount else {
        let orphans = orphaned_mounts();
        if let Some(orphan) = orphans
            .iter()
            .filter(|m| canonical.starts_with(&m.mountpoint))
            .max_by_key(|m| m.mountpoint.as_os_str().len())
        {
            bail!(
                "{} is mounted from the pool {}, which no longer exists (deleted while \
                 mounted?); unmount it with `presso unmount {}`",
                orphan.mountpoint.display(),
                orphan.pool.display(),
                orphan.mountpoint.display()
            );
        }
        bail!(
            "{} is neither a Presso pool directory nor inside a mounted pool (create one with `presso create`, mount it with `presso mount`)",
            path.display()
        );
    };
    let ino = std::fs::metadata(&canonical)
        .with_context(|| format!("cannot stat {}", canonical.display()))?
        .ino();
    Ok(Target {
        pool: mount.pool.clone(),
        mount: Some(mount),
        ino,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_presso_mounts_and_ignores_others() {
        let line = "120 29 0:55 / /mnt/my\\040data rw,nosuid,nodev,relatime shared:1 - fuse.presso /srv/pool rw,user_id=0,group_id=0,default_permissions";
        assert_eq!(
            parse_fuse_line(line),
            Some(Mount {
                pool: PathBuf::from("/srv/pool"),
                mountpoint: PathBuf::from("/mnt/my data"),
            })
        );
        let other = "22 1 8:1 / / rw,relatime shared:1 - ext4 /dev/sda1 rw";
        assert_eq!(parse_fuse_line(other), None);
        assert_eq!(parse_fuse_line("garbage"), None);
        // A FUSE mount of something that is not a pool is not ours.
        assert_eq!(parse_mountinfo_line(line), None);
    }
}
