//! The model of one worker's subtree: its directories, its names and the files they name, and
//! for every file what a `kill -9` of the daemon must keep of it (docs/design.md, "What a crash
//! keeps"):
//! - every name operation that returned (the metadata commits each one before the reply), so
//!   the tree after the kill is the model's, or the model's with the one operation that was in
//!   flight applied;
//! - a file unchanged since its last fsync or fdatasync (or since the mount) byte for byte, size
//!   included (`synced`);
//! - of any other file: a size no larger than the file ever had since the mount, and at every
//!   position a byte that some write put there (or that the file held at the mount), or zero.

use std::collections::{BTreeMap, BTreeSet, HashMap};

/// A file of the model (not the kernel's inode number, which the test only compares).
pub type Ino = u64;

/// What a write puts at each position: always a function of the write and the position, so
/// that a byte found after the kill can be traced to a write.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fill {
    /// Incompressible bytes.
    Random,
    /// Compressible text.
    Text,
    /// Zeros: holes.
    Zeros,
}

/// One write of the workload.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Write {
    /// Unique within a run.
    pub id: u64,
    /// Where it starts in the file.
    pub offset: u64,
    /// Its length in bytes.
    pub len: u64,
    /// What it writes.
    pub fill: Fill,
}

impl Write {
    /// The byte this write puts at file position `pos`.
    pub fn byte_at(&self, pos: u64) -> u8 {
        match self.fill {
            Fill::Random => mix(self.id.wrapping_mul(0x1_0000_0001) ^ pos) as u8,
            Fill::Text => b"killed mid-write, kept when fsync'd. "[((pos + self.id) % 37) as usize],
            Fill::Zeros => 0,
        }
    }

    /// Its bytes.
    pub fn data(&self) -> Vec<u8> {
        (self.offset..self.offset + self.len)
            .map(|p| self.byte_at(p))
            .collect()
    }

    fn covers(&self, pos: u64) -> bool {
        (self.offset..self.offset + self.len).contains(&pos)
    }
}

/// SplitMix64's finaliser.
fn mix(mut z: u64) -> u64 {
    z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    z ^ (z >> 31)
}

/// One file of the model.
#[derive(Clone, Debug)]
pub struct File {
    /// Its contents as the workload sees them.
    pub bytes: Vec<u8>,
    /// Unchanged since its last fsync (or the mount): a kill must keep `bytes` exactly.
    pub synced: bool,
    /// Its contents when this mount began.
    pub baseline: Vec<u8>,
    /// Every write since, including one in flight.
    pub writes: Vec<Write>,
    /// The largest size it had since, including one in flight.
    pub max_size: u64,
}

impl File {
    /// A file read after a mount: all of it is in the pool.
    pub fn at_mount(bytes: Vec<u8>) -> File {
        File {
            synced: true,
            baseline: bytes.clone(),
            writes: Vec::new(),
            max_size: bytes.len() as u64,
            bytes,
        }
    }

    /// Whether `byte` may be at `pos` after a kill: zero, the byte the file had there at the
    /// mount, or the byte of a write covering `pos`.
    pub fn allows(&self, pos: u64, byte: u8) -> bool {
        byte == 0
            || self.baseline.get(pos as usize) == Some(&byte)
            || self
                .writes
                .iter()
                .any(|w| w.covers(pos) && w.byte_at(pos) == byte)
    }
}

/// One operation of the workload. Paths are relative to the worker's subtree.
#[derive(Clone, Debug)]
pub enum Op {
    /// mkdir(2).
    Mkdir(String),
    /// rmdir(2) of an empty directory.
    Rmdir(String),
    /// `open(O_CREAT | O_EXCL)`; the descriptor stays open.
    Create(String, Ino),
    /// pwrite(2).
    Write(Ino, Write),
    /// ftruncate(2), down or up.
    Truncate(Ino, u64),
    /// fsync, or fdatasync when `data_only`.
    Fsync { ino: Ino, data_only: bool },
    /// Closes the file's open descriptor.
    Close(Ino),
    /// fsync of a directory opened `O_RDONLY | O_DIRECTORY`.
    FsyncDir(String),
    /// unlink(2), also of a file that is open.
    Unlink(String),
    /// link(2) of a file to a new name.
    Link(String, String),
    /// rename(2): a file over a new name or a file (a hard link of itself included), a
    /// directory over a new name or an empty directory.
    Rename(String, String),
    /// renameat2(RENAME_EXCHANGE) of two existing names.
    Exchange(String, String),
}

impl Op {
    /// Whether it changes names (and so may be in the tree after a kill or not).
    pub fn is_namespace(&self) -> bool {
        matches!(
            self,
            Op::Mkdir(_)
                | Op::Rmdir(_)
                | Op::Create(..)
                | Op::Unlink(_)
                | Op::Link(..)
                | Op::Rename(..)
                | Op::Exchange(..)
        )
    }
}

/// `parent/name`, or `name` in the subtree's root (`""`).
pub fn join(parent: &str, name: &str) -> String {
    if parent.is_empty() {
        name.to_string()
    } else {
        format!("{parent}/{name}")
    }
}

/// Whether `path` is `dir` or lies below it.
pub fn within(path: &str, dir: &str) -> bool {
    path == dir
        || (path.len() > dir.len() && path.starts_with(dir) && path[dir.len()..].starts_with('/'))
}

/// One worker's subtree.
#[derive(Clone, Debug, Default)]
pub struct Model {
    /// Directories, the subtree's root (`""`) included.
    pub dirs: BTreeSet<String>,
    /// Names of files.
    pub names: BTreeMap<String, Ino>,
    /// Files, also those without names (open descriptors) or gone.
    pub files: HashMap<Ino, File>,
    next_ino: Ino,
    next_write: u64,
}

impl Model {
    /// An empty subtree; `first_ino` and `first_write` keep ids of workers apart.
    pub fn new(first_ino: Ino, first_write: u64) -> Model {
        Model {
            dirs: BTreeSet::from([String::new()]),
            next_ino: first_ino,
            next_write: first_write,
            ..Model::default()
        }
    }

    /// The same subtree as found after a mount: everything in it is in the pool.
    pub fn remounted(
        &self,
        dirs: BTreeSet<String>,
        names: BTreeMap<String, Ino>,
        files: HashMap<Ino, File>,
    ) -> Model {
        Model {
            dirs,
            names,
            files,
            next_ino: self.next_ino,
            next_write: self.next_write,
        }
    }

    /// A new file id.
    pub fn new_ino(&mut self) -> Ino {
        self.next_ino += 1;
        self.next_ino
    }

    /// A new write id.
    pub fn new_write(&mut self) -> u64 {
        self.next_write += 1;
        self.next_write
    }

    /// Some name of `ino`.
    pub fn name_of(&self, ino: Ino) -> Option<&str> {
        self.names
            .iter()
            .find(|(_, &i)| i == ino)
            .map(|(n, _)| n.as_str())
    }

    /// Whether `path` names anything.
    pub fn exists(&self, path: &str) -> bool {
        self.dirs.contains(path) || self.names.contains_key(path)
    }

    /// Whether directory `dir` is empty.
    pub fn is_empty_dir(&self, dir: &str) -> bool {
        let below = |p: &String| p != dir && within(p, dir);
        !self.dirs.iter().any(below) && !self.names.keys().any(below)
    }

    /// Before `op` runs: what it may leave behind even if it never returns (its bytes and its
    /// size are allowed, its file is no longer synced).
    pub fn prepare(&mut self, op: &Op) {
        match op {
            Op::Write(ino, w) => {
                let f = self.files.get_mut(ino).expect("a file of the model");
                f.synced = false;
                f.writes.push(*w);
                f.max_size = f.max_size.max(w.offset + w.len);
            }
            Op::Truncate(ino, size) => {
                let f = self.files.get_mut(ino).expect("a file of the model");
                f.synced = false;
                f.max_size = f.max_size.max(*size);
            }
            _ => {}
        }
    }

    /// After `op` returned successfully (or, for a candidate tree, as if it had).
    pub fn apply(&mut self, op: &Op) {
        match op {
            Op::Mkdir(d) => {
                self.dirs.insert(d.clone());
            }
            Op::Rmdir(d) => {
                self.dirs.remove(d);
            }
            Op::Create(name, ino) => {
                self.names.insert(name.clone(), *ino);
                self.files.insert(*ino, File::at_mount(Vec::new()));
            }
            Op::Write(ino, w) => {
                let bytes = &mut self.files.get_mut(ino).expect("a file").bytes;
                let end = (w.offset + w.len) as usize;
                if bytes.len() < end {
                    bytes.resize(end, 0);
                }
                bytes[w.offset as usize..end].copy_from_slice(&w.data());
            }
            Op::Truncate(ino, size) => {
                let f = self.files.get_mut(ino).expect("a file");
                f.bytes.resize(*size as usize, 0);
            }
            Op::Fsync { ino, .. } => {
                self.files.get_mut(ino).expect("a file").synced = true;
            }
            Op::Close(_) | Op::FsyncDir(_) => {}
            Op::Unlink(name) => {
                self.names.remove(name);
            }
            Op::Link(from, to) => {
                let ino = self.names[from];
                self.names.insert(to.clone(), ino);
            }
            Op::Rename(from, to) => {
                if let Some(&ino) = self.names.get(from) {
                    // Two names of one file: rename does nothing.
                    if self.names.get(to) != Some(&ino) {
                        self.names.remove(from);
                        self.names.insert(to.clone(), ino);
                    }
                } else {
                    self.dirs.remove(to);
                    self.relocate(&[(from, to)]);
                }
            }
            Op::Exchange(a, b) => self.relocate(&[(a, b), (b, a)]),
        }
    }

    /// Moves every path at or below each `from` to the same place below its `to`, all at once.
    fn relocate(&mut self, moves: &[(&String, &String)]) {
        let target = |p: &str| {
            moves.iter().find(|(from, _)| within(p, from)).map_or_else(
                || p.to_string(),
                |(from, to)| format!("{to}{}", &p[from.len()..]),
            )
        };
        self.dirs = self.dirs.iter().map(|d| target(d)).collect();
        self.names = self.names.iter().map(|(n, &i)| (target(n), i)).collect();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn exchange_swaps_subtrees_and_rename_over_a_link_of_itself_does_nothing() {
        let mut m = Model::new(0, 0);
        m.apply(&Op::Mkdir("a".into()));
        m.apply(&Op::Mkdir("ab".into()));
        m.apply(&Op::Create("a/f".into(), 1));
        m.apply(&Op::Create("ab/g".into(), 2));
        m.apply(&Op::Exchange("a".into(), "ab".into()));
        assert_eq!(m.names.get("ab/f"), Some(&1));
        assert_eq!(m.names.get("a/g"), Some(&2));
        m.apply(&Op::Link("a/g".into(), "h".into()));
        m.apply(&Op::Rename("h".into(), "a/g".into()));
        assert_eq!(m.names.len(), 3, "{:?}", m.names);
        m.apply(&Op::Rename("a/g".into(), "ab/f".into()));
        assert_eq!(m.names.get("ab/f"), Some(&2));
        assert!(m.is_empty_dir("a"));
        assert!(!within("ab/f", "a"));
    }
}
