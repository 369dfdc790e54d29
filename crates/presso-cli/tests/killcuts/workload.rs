//! One worker of a cut: seeded random operations on its own subtree of the mount, made with real
//! system calls, kept in its model until the daemon dies under it.
//!
//! An operation that fails after the kill was ordered is the one in flight (it may or may not
//! have happened); one that fails before is a defect, reported with the worker's log.

use std::collections::HashMap;
use std::os::fd::OwnedFd;
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};

use crate::calls;
use crate::common::Rng;
use crate::model::{join, within, Fill, Ino, Model, Op, Write};
use crate::sys::{self, Sys};

/// At most this many directories and names per subtree, so that operations meet each other.
const MAX_DIRS: usize = 8;
const MAX_NAMES: usize = 14;
/// At most this many open descriptors per worker.
const MAX_OPEN: usize = 5;

/// What a worker hands back: its model, the operation in flight when the daemon died (if any)
/// and its log.
pub struct Outcome {
    /// The subtree after every operation that returned.
    pub model: Model,
    /// The operation that failed once the kill was ordered.
    pub in_flight: Option<Op>,
    /// Every operation, with the error of the one in flight.
    pub log: Vec<String>,
}

/// Shared between the workers and the thread that kills the daemon.
pub struct Signals {
    /// Set just before the kill: from then on a failure is the operation in flight.
    pub killed: AtomicBool,
    /// Operations completed by all workers.
    pub done: AtomicUsize,
    /// Workers that stopped (finished, failed or cut off).
    pub stopped: AtomicUsize,
}

/// One worker on the subtree at `root`.
pub struct Worker<'a> {
    root: PathBuf,
    model: Model,
    rng: Rng,
    /// How far into a file writes and truncates reach.
    span: u64,
    fds: HashMap<Ino, OwnedFd>,
    log: Vec<String>,
    signals: &'a Signals,
}

impl<'a> Worker<'a> {
    /// A worker on `root`, whose contents `model` describes, drawing operations from `seed`.
    pub fn new(root: PathBuf, model: Model, seed: u64, span: u64, signals: &'a Signals) -> Self {
        Worker {
            root,
            model,
            rng: Rng::new(seed),
            span,
            fds: HashMap::new(),
            log: Vec::new(),
            signals,
        }
    }

    /// Runs `ops` operations, or fewer if the daemon dies first. `Err` is a failure before the
    /// kill, with the log.
    pub fn run(mut self, ops: usize) -> Result<Outcome, (String, Vec<String>)> {
        let mut in_flight = None;
        for _ in 0..ops {
            let op = self.choose();
            self.model.prepare(&op);
            self.log.push(format!("{op:?}"));
            match self.perform(&op) {
                Ok(()) => {
                    self.model.apply(&op);
                    self.signals.done.fetch_add(1, Ordering::SeqCst);
                }
                Err(e) if self.signals.killed.load(Ordering::SeqCst) => {
                    self.log
                        .push(format!("  -> {} (in flight at the kill)", describe(e)));
                    in_flight = Some(op);
                    break;
                }
                Err(e) => {
                    let message = format!("{op:?} failed before the kill: {}", describe(e));
                    return Err((message, self.log));
                }
            }
        }
        // Descriptors of a dead mount close with errors that mean nothing.
        self.fds.clear();
        Ok(Outcome {
            model: self.model,
            in_flight,
            log: self.log,
        })
    }

    fn path(&self, rel: &str) -> PathBuf {
        self.root.join(rel)
    }

    /// A random operation valid on the model.
    fn choose(&mut self) -> Op {
        loop {
            if let Some(op) = self.try_choose() {
                return op;
            }
        }
    }

    fn try_choose(&mut self) -> Option<Op> {
        let m = &self.model;
        let dirs: Vec<String> = m.dirs.iter().cloned().collect();
        let names: Vec<String> = m.names.keys().cloned().collect();
        let open: Vec<Ino> = {
            let mut v: Vec<Ino> = self.fds.keys().copied().collect();
            v.sort_unstable();
            v
        };
        let rng = &mut self.rng;
        let dir = dirs[rng.below(dirs.len() as u64) as usize].clone();
        let any_name = |rng: &mut Rng| -> Option<String> {
            (!names.is_empty()).then(|| names[rng.below(names.len() as u64) as usize].clone())
        };
        // A file to work on: one open, or one with a name.
        let file = |rng: &mut Rng, m: &Model| -> Option<Ino> {
            if !open.is_empty() && rng.below(2) == 0 {
                return Some(open[rng.below(open.len() as u64) as usize]);
            }
            any_name(rng).map(|n| m.names[&n])
        };
        let fresh = |rng: &mut Rng, prefix: &str| format!("{prefix}{}", rng.below(40));
        let op = match rng.below(100) {
            0..=24 => {
                let ino = file(rng, m)?;
                let size = m.files[&ino].bytes.len() as u64;
                let offset = match rng.below(4) {
                    0 if size < self.span => size,
                    1 if size < self.span => rng.below(size + 1),
                    _ => rng.below(self.span),
                };
                let len = match rng.below(8) {
                    0 => rng.range(1, 16),
                    1..=5 => rng.range(1, 16 << 10),
                    _ => rng.range(1, 160 << 10),
                }
                .min(self.span - offset);
                let fill = match rng.below(8) {
                    0 => Fill::Zeros,
                    1..=3 => Fill::Text,
                    _ => Fill::Random,
                };
                let id = self.model.new_write();
                Op::Write(
                    ino,
                    Write {
                        id,
                        offset,
                        len,
                        fill,
                    },
                )
            }
            25..=31 => {
                let ino = file(rng, m)?;
                let size = m.files[&ino].bytes.len() as u64;
                let to = match rng.below(3) {
                    0 => 0,
                    1 => rng.below(size + 1),
                    _ => rng.below(self.span),
                };
                Op::Truncate(ino, to)
            }
            32..=41 => Op::Fsync {
                ino: file(rng, m)?,
                data_only: rng.below(3) == 0,
            },
            42..=45 => Op::Close(
                open.get(rng.below(open.len().max(1) as u64) as usize)
                    .copied()?,
            ),
            46..=50 => Op::FsyncDir(dir),
            51..=60 if m.names.len() < MAX_NAMES => {
                let name = join(&dir, &fresh(rng, "f"));
                if m.exists(&name) {
                    return None;
                }
                let ino = self.model.new_ino();
                Op::Create(name, ino)
            }
            61..=64 if m.dirs.len() < MAX_DIRS && dir.matches('/').count() < 2 => {
                let name = join(&dir, &fresh(rng, "d"));
                if m.exists(&name) {
                    return None;
                }
                Op::Mkdir(name)
            }
            65..=67 => {
                if dir.is_empty() || !m.is_empty_dir(&dir) {
                    return None;
                }
                Op::Rmdir(dir)
            }
            68..=73 => Op::Unlink(any_name(rng)?),
            74..=78 if m.names.len() < MAX_NAMES => {
                let to = join(&dir, &fresh(rng, "l"));
                if m.exists(&to) {
                    return None;
                }
                Op::Link(any_name(rng)?, to)
            }
            79..=90 => {
                let from = any_name(rng)?;
                let to = match rng.below(2) {
                    0 => any_name(rng)?,
                    _ => join(&dir, &fresh(rng, "r")),
                };
                if m.dirs.contains(&to) || from == to {
                    return None;
                }
                Op::Rename(from, to)
            }
            91..=94 => {
                // A directory: to a new name, or over an empty directory.
                let from = dirs[rng.below(dirs.len() as u64) as usize].clone();
                let to = match rng.below(2) {
                    0 => dirs[rng.below(dirs.len() as u64) as usize].clone(),
                    _ => join(&dir, &fresh(rng, "e")),
                };
                let fits = !from.is_empty()
                    && !to.is_empty()
                    && from != to
                    && !within(&to, &from)
                    && !m.names.contains_key(&to)
                    && (!m.dirs.contains(&to) || m.is_empty_dir(&to))
                    && to.matches('/').count() < 3;
                if !fits {
                    return None;
                }
                Op::Rename(from, to)
            }
            _ => {
                let pick = |rng: &mut Rng| -> String {
                    if rng.below(2) == 0 || names.is_empty() {
                        dirs[rng.below(dirs.len() as u64) as usize].clone()
                    } else {
                        names[rng.below(names.len() as u64) as usize].clone()
                    }
                };
                let (a, b) = (pick(rng), pick(rng));
                if a.is_empty() || b.is_empty() || within(&a, &b) || within(&b, &a) {
                    return None;
                }
                if (a.matches('/').count().max(b.matches('/').count())) >= 3 {
                    return None;
                }
                Op::Exchange(a, b)
            }
        };
        if let Op::Close(ino) = op {
            if !self.fds.contains_key(&ino) {
                return None;
            }
        }
        if self.fds.len() >= MAX_OPEN {
            if let Op::Create(..) = op {
                return None;
            }
        }
        Some(op)
    }

    /// The open descriptor of `ino`, opened by one of its names if need be.
    fn fd(&mut self, ino: Ino) -> Sys<&OwnedFd> {
        if !self.fds.contains_key(&ino) {
            let name = self.model.name_of(ino).expect("a closed file has a name");
            let fd = sys::open(&self.path(name), 0)?;
            if self.fds.len() >= MAX_OPEN {
                // Keep the number of descriptors bounded; a file without a name stays open.
                let spare = self
                    .fds
                    .keys()
                    .copied()
                    .filter(|&i| self.model.name_of(i).is_some())
                    .min();
                if let Some(spare) = spare {
                    sys::close(self.fds.remove(&spare).expect("open"))?;
                }
            }
            self.fds.insert(ino, fd);
        }
        Ok(&self.fds[&ino])
    }

    fn perform(&mut self, op: &Op) -> Sys<()> {
        match op {
            Op::Mkdir(d) => calls::mkdir(&self.path(d)),
            Op::Rmdir(d) => calls::rmdir(&self.path(d)),
            Op::Create(name, ino) => {
                let fd = sys::open(&self.path(name), libc::O_CREAT | libc::O_EXCL)?;
                self.fds.insert(*ino, fd);
                Ok(())
            }
            Op::Write(ino, w) => {
                let data = w.data();
                sys::write(self.fd(*ino)?, w.offset, &data)
            }
            Op::Truncate(ino, size) => sys::truncate(self.fd(*ino)?, *size),
            Op::Fsync { ino, data_only } => sys::sync(self.fd(*ino)?, *data_only),
            Op::Close(ino) => sys::close(self.fds.remove(ino).expect("chosen open")),
            Op::FsyncDir(d) => {
                let fd = calls::open_dir(&self.path(d))?;
                sys::sync(&fd, false)?;
                sys::close(fd)
            }
            Op::Unlink(name) => calls::unlink(&self.path(name)),
            Op::Link(from, to) => calls::link(&self.path(from), &self.path(to)),
            Op::Rename(from, to) => calls::rename(&self.path(from), &self.path(to), 0),
            Op::Exchange(a, b) => {
                calls::rename(&self.path(a), &self.path(b), libc::RENAME_EXCHANGE)
            }
        }
    }
}

fn describe(e: i32) -> String {
    std::io::Error::from_raw_os_error(e).to_string()
}
