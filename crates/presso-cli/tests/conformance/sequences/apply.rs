//! One side of a sequence: each operation made with real system calls under the sequence's
//! directory, and what it saw as one line of text, compared with the other side's.
//!
//! Where POSIX leaves a listing's order or the fate of entries changed during it open, the line
//! holds only what POSIX fixes (the check of the rule, the sorted names), so that ext4 and Presso
//! must agree on it.

use std::collections::{BTreeMap, HashMap};
use std::hash::{Hash, Hasher};
use std::os::unix::fs::MetadataExt;
use std::path::{Path, PathBuf};

use super::dir_stream::DirStream;
use super::ops::Op;
use crate::harness::{describe, errno_name, ok_or_errno};
use crate::modes::write_file_new;
use crate::sys::*;

/// The side of one sequence: its directory on one file system.
pub struct Side<'a> {
    /// The sequence's directory.
    pub root: PathBuf,
    /// The tree's paths ([`super::ops::paths`]).
    pub paths: &'a [String],
}

impl Side<'_> {
    fn at(&self, index: usize) -> PathBuf {
        self.root.join(&self.paths[index])
    }

    /// Makes `op` and tells what it saw; `remount` unmounts and mounts the file system again
    /// (or makes it durable, where it cannot).
    pub fn apply(&self, op: &Op, remount: &mut dyn FnMut()) -> String {
        match *op {
            Op::Mkdir { path, mode } => ok_or_errno(&mkdir(&self.at(path), mode)),
            Op::Create { path, len, fill } => {
                ok_or_errno(&write_file_new(&self.at(path), &vec![fill; len]))
            }
            Op::Append { path, len, fill } => ok_or_errno(&write_file(
                &self.at(path),
                libc::O_APPEND,
                &vec![fill; len],
            )),
            Op::Truncate { path, len } => ok_or_errno(&truncate(&self.at(path), len)),
            Op::Unlink { path } => ok_or_errno(&unlink(&self.at(path))),
            Op::Rmdir { path } => ok_or_errno(&rmdir(&self.at(path))),
            Op::RemoveTree { path } => match std::fs::remove_dir_all(self.at(path)) {
                Ok(()) => "ok".into(),
                Err(e) => io_errno(&e),
            },
            Op::Link { from, to } => ok_or_errno(&link(&self.at(from), &self.at(to))),
            Op::Symlink { target, path } => {
                ok_or_errno(&symlink(&self.paths[target], &self.at(path)))
            }
            Op::Rename { from, to, flags } => {
                ok_or_errno(&rename(&self.at(from), &self.at(to), flags))
            }
            Op::Chmod { path, mode } => ok_or_errno(&chmod(&self.at(path), mode)),
            Op::OpenUnlinked { path, len, fill } => open_unlinked(&self.at(path), len, fill),
            Op::Fsync { path } => {
                let fd = match open(&self.at(path), libc::O_RDONLY, 0) {
                    Ok(fd) => fd,
                    Err(e) => return errno_name(e),
                };
                // SAFETY: a descriptor `open` just returned.
                let synced = check(unsafe { libc::fsync(fd as i32) }.into());
                let _ = close(fd);
                ok_or_errno(&synced)
            }
            Op::Chown { path, uid, gid } => ok_or_errno(&lchown(&self.at(path), uid, gid)),
            Op::SetXattr {
                path,
                name,
                len,
                fill,
                flags,
            } => ok_or_errno(&setxattr(
                &self.at(path),
                &xattr_name(name),
                &vec![fill; len],
                flags,
            )),
            Op::RemoveXattr { path, name } => {
                ok_or_errno(&removexattr(&self.at(path), &xattr_name(name)))
            }
            Op::Xattrs { path } => xattrs(&self.at(path)),
            Op::Stat { path } => describe(&self.at(path)),
            Op::Read { path } => match std::fs::read(self.at(path)) {
                Ok(bytes) => format!("{} bytes, hash {:016x}", bytes.len(), hash(&bytes)),
                Err(e) => io_errno(&e),
            },
            Op::List { dir } => match sorted_entries(&self.at(dir)) {
                Ok(entries) => entries
                    .iter()
                    .map(|(name, kind)| format!("{name}:{kind}"))
                    .collect::<Vec<_>>()
                    .join(" "),
                Err(e) => e,
            },
            Op::Populate { dir, count, links } => self.populate(dir, count, links),
            Op::Clear { dir } => self.clear(dir),
            Op::ListWhileChanging {
                dir,
                after,
                victim,
                buffer,
            } => self.list_while_changing(dir, after, victim, buffer),
            Op::SeekBack { dir, after, buffer } => seek_back(&self.at(dir), after, buffer),
            Op::DropCaches => match std::fs::write("/proc/sys/vm/drop_caches", "3") {
                Ok(()) => "dropped".into(),
                Err(e) => panic!("writing /proc/sys/vm/drop_caches (needs root): {e}"),
            },
            Op::Remount => {
                remount();
                "remounted".into()
            }
            Op::Snapshot => snapshot(&self.root),
        }
    }

    fn populate(&self, dir: usize, count: usize, links: bool) -> String {
        let dir = self.at(dir);
        let made = if dir.exists() {
            "there".to_string()
        } else {
            ok_or_errno(&mkdir(&dir, 0o755))
        };
        let first = dir.join("n000");
        let mut outcomes = Outcomes::default();
        for i in 0..count {
            let name = dir.join(format!("n{i:03}"));
            outcomes.add(if links && i > 0 {
                link(&first, &name)
            } else {
                write_file_new(&name, &[i as u8])
            });
        }
        format!("dir {made}: {}", outcomes.shown())
    }

    fn clear(&self, dir: usize) -> String {
        let dir = self.at(dir);
        let entries = match sorted_entries(&dir) {
            Ok(entries) => entries,
            Err(e) => return e,
        };
        let mut outcomes = Outcomes::default();
        for (name, _) in entries {
            if name.starts_with('n') || name == "m" {
                outcomes.add(unlink(&dir.join(name)));
            }
        }
        outcomes.shown()
    }

    /// Removes an entry and creates `m` in the middle of a listing; POSIX leaves open whether
    /// those two are listed, and demands every other name exactly once.
    fn list_while_changing(
        &self,
        dir: usize,
        after: usize,
        victim: usize,
        buffer: usize,
    ) -> String {
        let dir = self.at(dir);
        let before: Vec<String> = match sorted_entries(&dir) {
            Ok(entries) => entries.into_iter().map(|(name, _)| name).collect(),
            Err(e) => return e,
        };
        let mut stream = match DirStream::open(&dir, buffer) {
            Ok(stream) => stream,
            Err(e) => return errno_name(e),
        };
        let mut seen = match stream.read(after) {
            Ok(names) => names,
            Err(e) => return format!("readdir: {}", errno_name(e)),
        };
        let victim = (!before.is_empty()).then(|| before[victim % before.len()].clone());
        let removed = match &victim {
            Some(name) => {
                let path = dir.join(name);
                let is_dir = std::fs::symlink_metadata(&path).is_ok_and(|m| m.is_dir());
                ok_or_errno(&if is_dir { rmdir(&path) } else { unlink(&path) })
            }
            None => "nothing to remove".into(),
        };
        let created = write_file_new(&dir.join("m"), b"m");
        match stream.read(usize::MAX) {
            Ok(rest) => seen.extend(rest),
            Err(e) => return format!("readdir after the changes: {}", errno_name(e)),
        }
        // How often each name may be listed: a name neither removed nor made, exactly once; the
        // removed one and `m` at most once each, unless `m` was removed and made again: two
        // files of one name, each of which may be listed (as btrfs or tmpfs may list them).
        let mut allowed: BTreeMap<&str, (usize, usize)> =
            before.iter().map(|name| (name.as_str(), (1, 1))).collect();
        let remade_m = victim.as_deref() == Some("m") && created.is_ok();
        if let Some(name) = &victim {
            allowed.insert(name.as_str(), (0, 1));
        }
        if created.is_ok() {
            allowed.insert("m", (0, if remade_m { 2 } else { 1 }));
        }
        let mut counts: BTreeMap<&str, usize> = allowed.keys().map(|name| (*name, 0)).collect();
        for name in &seen {
            *counts.entry(name.as_str()).or_default() += 1;
        }
        let wrong: Vec<String> = counts
            .iter()
            .filter(|(name, listed)| {
                allowed
                    .get(*name)
                    .is_none_or(|(least, most)| !(least..=most).contains(listed))
            })
            .map(|(name, listed)| format!("{name} listed {listed} times"))
            .collect();
        format!(
            "remove {:?}: {removed}; create m: {}; listing: {}",
            victim,
            ok_or_errno(&created),
            if wrong.is_empty() {
                "as POSIX allows".to_string()
            } else {
                wrong.join(", ")
            }
        )
    }
}

/// The name of extended attribute `n` of the sequences: `user.x0` ...
fn xattr_name(n: u8) -> String {
    format!("user.x{n}")
}

/// The extended attributes of `path` (not following a symlink): each name with its value's
/// length and hash, sorted; or the errno.
fn xattrs(path: &Path) -> String {
    let names = match listxattr(path, 65_536) {
        Ok(names) => names,
        Err(e) => return format!("xattrs {}", errno_name(e)),
    };
    let shown: Vec<String> = names
        .iter()
        .map(|name| match getxattr(path, name, 65_536) {
            Ok(value) => format!("{name}={}:{:016x}", value.len(), hash(&value)),
            Err(e) => format!("{name}:{}", errno_name(e)),
        })
        .collect();
    format!("xattrs [{}]", shown.join(" "))
}

/// A file unlinked while open stays readable and writable through its descriptor until closed.
fn open_unlinked(path: &Path, len: usize, fill: u8) -> String {
    let fd = match open(path, libc::O_RDWR | libc::O_APPEND, 0) {
        Ok(fd) => fd,
        Err(e) => return errno_name(e),
    };
    let unlinked = ok_or_errno(&unlink(path));
    let written = ok_or_errno(&write(fd, &vec![fill; len]));
    // SAFETY: an all-zero stat is a valid value for fstat to fill, of a descriptor we hold.
    let mut st: libc::stat = unsafe { std::mem::zeroed() };
    let stat = check(unsafe { libc::fstat(fd as i32, &mut st) }.into());
    let bytes = match pread(fd, st.st_size as usize + 1, 0) {
        Ok(bytes) => format!("{} bytes, hash {:016x}", bytes.len(), hash(&bytes)),
        Err(e) => errno_name(e),
    };
    let closed = ok_or_errno(&close(fd));
    format!(
        "unlink {unlinked}; write {written}; fstat {}: nlink {} size {}; read {bytes}; \
         close {closed}",
        ok_or_errno(&stat),
        st.st_nlink,
        st.st_size
    )
}

/// Lists `dir` to its end, goes back to where it was after `after` entries and lists the rest
/// again, then from its start: each pass must give the same names, none twice.
fn seek_back(dir: &Path, after: usize, buffer: usize) -> String {
    let mut stream = match DirStream::open(dir, buffer) {
        Ok(stream) => stream,
        Err(e) => return errno_name(e),
    };
    let passes = (|| {
        let first = stream.read(after)?;
        let mark = stream.tell();
        let rest = stream.read(usize::MAX)?;
        stream.seek(mark);
        let again = stream.read(usize::MAX)?;
        stream.seek(0);
        let whole = stream.read(usize::MAX)?;
        Ok::<_, i32>((first, rest, again, whole))
    })();
    let (first, rest, again, whole) = match passes {
        Ok(passes) => passes,
        Err(e) => return format!("readdir: {}", errno_name(e)),
    };
    let mut problems = Vec::new();
    if rest != again {
        problems.push(format!(
            "after seekdir: {}, where the first pass gave {}",
            brief(&again),
            brief(&rest)
        ));
    }
    let mut both: Vec<&String> = first.iter().chain(&rest).collect();
    let mut from_start: Vec<&String> = whole.iter().collect();
    both.sort();
    from_start.sort();
    if both != from_start {
        problems.push(format!(
            "after rewinddir: {}, where the first pass gave {}",
            brief(&from_start),
            brief(&both)
        ));
    }
    if let Some(twice) = both.windows(2).find(|w| w[0] == w[1]) {
        problems.push(format!("{} listed twice", twice[0]));
    }
    if problems.is_empty() {
        format!("{} names, the same in every pass", whole.len())
    } else {
        problems.join("; ")
    }
}

/// Names as a failure message shows them: all of a short list, else the first ten and how many.
fn brief<S: AsRef<str>>(names: &[S]) -> String {
    let shown: Vec<&str> = names.iter().take(10).map(AsRef::as_ref).collect();
    if names.len() <= 10 {
        format!("{shown:?}")
    } else {
        format!("{shown:?} and {} more", names.len() - 10)
    }
}

/// Every node under `root`, sorted by path: its stat fields, and a file's length and hash or a
/// symlink's target.
fn snapshot(root: &Path) -> String {
    let mut lines = Vec::new();
    // Hard links share their bytes: each inode is read once.
    let mut hashes: HashMap<u64, String> = HashMap::new();
    let mut pending = vec![PathBuf::new()];
    while let Some(rel) = pending.pop() {
        let dir = root.join(&rel);
        let entries = match sorted_entries(&dir) {
            Ok(entries) => entries,
            Err(e) => {
                lines.push(format!("{}: {e}", rel.display()));
                continue;
            }
        };
        for (name, kind) in entries {
            let rel = rel.join(&name);
            let path = root.join(&rel);
            let mut line = format!("{}: {} {}", rel.display(), describe(&path), xattrs(&path));
            match kind {
                "dir" => pending.push(rel),
                "file" => {
                    let ino = std::fs::symlink_metadata(&path).map_or(0, |m| m.ino());
                    let read = || match std::fs::read(&path) {
                        Ok(bytes) => format!("hash {:016x}", hash(&bytes)),
                        Err(e) => format!("read {}", io_errno(&e)),
                    };
                    let shown = match ino {
                        0 => read(),
                        ino => hashes.entry(ino).or_insert_with(read).clone(),
                    };
                    line += &format!(" {shown}");
                }
                "symlink" => line += &format!(" -> {:?}", std::fs::read_link(&path).ok()),
                _ => {}
            }
            lines.push(line);
        }
    }
    lines.sort();
    lines.join("\n")
}

/// The names in `dir` with their kinds, sorted; or the errno of the listing.
fn sorted_entries(dir: &Path) -> Result<Vec<(String, &'static str)>, String> {
    let read = std::fs::read_dir(dir).map_err(|e| io_errno(&e))?;
    let mut entries = Vec::new();
    for entry in read {
        let entry = entry.map_err(|e| io_errno(&e))?;
        let kind = match entry.file_type() {
            Ok(t) if t.is_dir() => "dir",
            Ok(t) if t.is_file() => "file",
            Ok(t) if t.is_symlink() => "symlink",
            Ok(_) => "other",
            Err(e) => return Err(io_errno(&e)),
        };
        entries.push((entry.file_name().to_string_lossy().into_owned(), kind));
    }
    entries.sort();
    Ok(entries)
}

/// How many calls of a batch ended each way.
#[derive(Default)]
struct Outcomes(BTreeMap<String, usize>);

impl Outcomes {
    fn add(&mut self, r: Res) {
        *self.0.entry(ok_or_errno(&r)).or_default() += 1;
    }

    fn shown(&self) -> String {
        let parts: Vec<String> = self.0.iter().map(|(k, n)| format!("{k} {n}")).collect();
        parts.join(", ")
    }
}

fn io_errno(e: &std::io::Error) -> String {
    errno_name(e.raw_os_error().unwrap_or(0))
}

fn hash(bytes: &[u8]) -> u64 {
    let mut h = std::hash::DefaultHasher::new();
    bytes.hash(&mut h);
    h.finish()
}
