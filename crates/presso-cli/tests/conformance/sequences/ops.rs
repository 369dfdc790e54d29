//! The operations of a random namespace sequence and how a seed generates them. Every path is an
//! index into [`paths`]: a small tree of names, so that operations meet each other's nodes often
//! (a rename onto a name just linked, an rmdir of a directory just filled).

use crate::common::Rng;

/// The names every level of the tree is made of.
const NAMES: [&str; 4] = ["a", "b", "c", "d"];
/// How deep the tree goes.
const DEPTH: usize = 2;

/// Every path of the tree under a sequence's directory, that directory first (as ""), then
/// `a` ... `d`, `a/a` ... `d/d`.
pub fn paths() -> Vec<String> {
    let mut all = vec![String::new()];
    let mut level = vec![String::new()];
    for _ in 0..DEPTH {
        let next: Vec<String> = level
            .iter()
            .flat_map(|parent| {
                NAMES.iter().map(move |n| {
                    if parent.is_empty() {
                        n.to_string()
                    } else {
                        format!("{parent}/{n}")
                    }
                })
            })
            .collect();
        all.extend(next.iter().cloned());
        level = next;
    }
    all
}

/// One step of a sequence. `path`, `from`, `to`, `target` index [`paths`] past the sequence's
/// own directory (never 0); `dir` indexes it whole (0 lists the sequence's directory).
#[derive(Clone, Debug)]
pub enum Op {
    /// `mkdir(path, mode)`.
    Mkdir { path: usize, mode: u32 },
    /// `open(path, O_CREAT | O_EXCL | O_WRONLY)`, `len` bytes of `fill`, close.
    Create { path: usize, len: usize, fill: u8 },
    /// `open(path, O_WRONLY | O_APPEND)`, `len` bytes of `fill`, close.
    Append { path: usize, len: usize, fill: u8 },
    /// `truncate(path, len)`.
    Truncate { path: usize, len: i64 },
    /// `unlink(path)`.
    Unlink { path: usize },
    /// `rmdir(path)`.
    Rmdir { path: usize },
    /// `rm -rf path`: also what renames moved deeper than the paths reach.
    RemoveTree { path: usize },
    /// `link(from, to)`.
    Link { from: usize, to: usize },
    /// `symlink(the relative path of target, path)`.
    Symlink { target: usize, path: usize },
    /// `renameat2(from, to, flags)`: 0, `RENAME_NOREPLACE` or `RENAME_EXCHANGE`.
    Rename { from: usize, to: usize, flags: u32 },
    /// `chmod(path, mode)`.
    Chmod { path: usize, mode: u32 },
    /// Opens `path` read-write, unlinks it, appends `len` bytes of `fill` through the
    /// descriptor, and tells its link count, size and bytes before closing it.
    OpenUnlinked { path: usize, len: usize, fill: u8 },
    /// Opens `path` (a file or a directory) and `fsync`s it.
    Fsync { path: usize },
    /// `lchown(path, uid, gid)`.
    Chown { path: usize, uid: u32, gid: u32 },
    /// `lsetxattr(path, user.NAME, len bytes of fill, flags)`: flags 0, `XATTR_CREATE` or
    /// `XATTR_REPLACE`.
    SetXattr {
        path: usize,
        name: u8,
        len: usize,
        fill: u8,
        flags: i32,
    },
    /// `lremovexattr(path, user.NAME)`.
    RemoveXattr { path: usize, name: u8 },
    /// The extended attributes of `path`: names, and each value's length and hash.
    Xattrs { path: usize },
    /// The stat fields of `path`, not following a symlink.
    Stat { path: usize },
    /// The bytes of `path` (following a symlink).
    Read { path: usize },
    /// The names and kinds in `dir`, sorted.
    List { dir: usize },
    /// Makes `dir` if it is missing, then `count` names `n000`... in it: new files, or with
    /// `links` one new file and hard links of it.
    Populate {
        dir: usize,
        count: usize,
        links: bool,
    },
    /// Unlinks every `n...` and `m` name in `dir`.
    Clear { dir: usize },
    /// Lists `dir` by `getdents64` into `buffer` bytes, and after `after` entries removes an
    /// entry (`victim`-th of the names before) and creates `m`: every other name must be listed
    /// exactly once.
    ListWhileChanging {
        dir: usize,
        after: usize,
        victim: usize,
        buffer: usize,
    },
    /// Lists `dir` by `getdents64` into `buffer` bytes, goes back with `seekdir` to where it was
    /// after `after` entries and lists the rest again, then from `rewinddir`: the same names each
    /// time, none twice.
    SeekBack {
        dir: usize,
        after: usize,
        buffer: usize,
    },
    /// `echo 3 > /proc/sys/vm/drop_caches`.
    DropCaches,
    /// Presso unmounted and mounted again (ext4: `syncfs`).
    Remount,
    /// Every node of the sequence's tree: path, stat fields, bytes or target.
    Snapshot,
}

impl Op {
    /// Whether the op takes far longer than the others (kept rare by [`generate`]).
    pub fn expensive(&self) -> bool {
        matches!(self, Op::DropCaches | Op::Remount)
    }
}

/// A whole-tree check every this many operations, and at the end.
const SNAPSHOT_EVERY: usize = 50;

/// `count` operations from `rng`, with a [`Op::Snapshot`] every 50 and at the end.
pub fn generate(rng: &mut Rng, count: usize) -> Vec<Op> {
    let n = paths().len();
    let mut ops = Vec::with_capacity(count + count / SNAPSHOT_EVERY + 1);
    for i in 1..=count {
        ops.push(one(rng, n));
        if i % SNAPSHOT_EVERY == 0 {
            ops.push(Op::Snapshot);
        }
    }
    ops.push(Op::Snapshot);
    ops
}

fn one(rng: &mut Rng, n: usize) -> Op {
    let mut node = || 1 + rng.below(n as u64 - 1) as usize;
    let (path, other) = (node(), node());
    let dir = rng.below(n as u64) as usize;
    let fill = rng.below(256) as u8;
    // Mostly short files; now and then one over several pages.
    let len = if rng.below(8) == 0 {
        rng.range(4_096, 70_000) as usize
    } else {
        rng.below(300) as usize
    };
    // From a few entries per call (a kernel reply each) to glibc's usual 32 KiB.
    let buffer = [64, 200, 1_000, 4_096, 32_768][rng.below(5) as usize];
    let mode = [0o755, 0o700, 0o644, 0o600, 0o1777, 0o2755][rng.below(6) as usize];
    match rng.below(1070) {
        0..=119 => Op::Mkdir { path, mode },
        120..=259 => Op::Create { path, len, fill },
        260..=309 => Op::Append { path, len, fill },
        310..=344 => Op::Truncate {
            path,
            len: rng.below(80_000) as i64,
        },
        345..=424 => Op::Unlink { path },
        425..=459 => Op::Rmdir { path },
        460..=474 => Op::RemoveTree { path },
        475..=554 => Op::Link {
            from: path,
            to: other,
        },
        555..=584 => Op::Symlink {
            target: path,
            path: other,
        },
        585..=704 => Op::Rename {
            from: path,
            to: other,
            flags: match rng.below(6) {
                0 => libc::RENAME_NOREPLACE,
                1 => libc::RENAME_EXCHANGE,
                _ => 0,
            },
        },
        705..=719 => Op::Chmod { path, mode },
        720..=739 => Op::OpenUnlinked { path, len, fill },
        740..=749 => Op::Fsync { path },
        750..=779 => Op::Stat { path },
        780..=819 => Op::Read { path },
        820..=869 => Op::List { dir },
        870..=894 => Op::Populate {
            dir,
            links: rng.below(2) == 0,
            count: if rng.below(3) == 0 {
                rng.range(100, 400) as usize
            } else {
                rng.range(1, 40) as usize
            },
        },
        895..=924 => Op::Clear { dir },
        925..=959 => Op::ListWhileChanging {
            dir,
            after: rng.below(300) as usize,
            victim: rng.below(1_000) as usize,
            buffer,
        },
        960..=991 => Op::SeekBack {
            dir,
            after: rng.below(300) as usize,
            buffer,
        },
        992..=996 => Op::DropCaches,
        997..=999 => Op::Remount,
        1000..=1009 => Op::Chown {
            path,
            uid: [0, 1001][rng.below(2) as usize],
            gid: [0, 1001][rng.below(2) as usize],
        },
        1010..=1039 => Op::SetXattr {
            path,
            name: rng.below(3) as u8,
            len: rng.below(200) as usize,
            fill,
            flags: [0, 0, libc::XATTR_CREATE, libc::XATTR_REPLACE][rng.below(4) as usize],
        },
        1040..=1049 => Op::RemoveXattr {
            path,
            name: rng.below(3) as u8,
        },
        _ => Op::Xattrs { path },
    }
}
