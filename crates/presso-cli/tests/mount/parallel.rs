//! Namespace operations from several threads at once on a mount served by several request
//! channels, checked against a model of each thread's names.
//!
//! Each thread owns its directory and the names it makes (all start with its own prefix),
//! also inside one directory every thread shares: creates, appends, unlinks, renames within and
//! across directories, hard links, mkdir and rmdir. Its own names have no other writer, so its
//! model is exact whatever the interleaving. The threads also contend for one name: each
//! renames files of its own onto `shared/hot`, and the file left there must come from a rename
//! that no other rename followed entirely (the rule of a linearizable register). At the end
//! every directory must list exactly the model's names, once each, and every file must have the
//! model's bytes and link count: at once, after dropping the kernel's caches, after a remount.

use std::collections::{BTreeMap, BTreeSet};
use std::fs::{self, OpenOptions};
use std::io::Write;
use std::os::unix::fs::MetadataExt;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};

use crate::common::*;

const THREADS: u64 = 4;
const OPS: usize = 600;

#[test]
fn parallel_namespace_operations_match_the_model() {
    let seed = std::env::var("PRESSO_PARALLEL_SEED")
        .ok()
        .and_then(|s| u64::from_str_radix(s.trim_start_matches("0x"), 16).ok())
        .unwrap_or_else(|| {
            std::time::SystemTime::now()
                .duration_since(std::time::UNIX_EPOCH)
                .unwrap()
                .as_nanos() as u64
        });
    eprintln!("parallel: seed {seed:#x} (PRESSO_PARALLEL_SEED={seed:x} repeats its operations)");
    let mut f = Fixture::unmounted("parallel", &[]);
    f.mount(&["channels=4"]);
    fs::create_dir(f.p("shared")).unwrap();
    for t in 0..THREADS {
        fs::create_dir(f.p(&format!("d{t}"))).unwrap();
    }
    let clock = Arc::new(AtomicU64::new(0));
    let hot_renames = Arc::new(Mutex::new(Vec::new()));
    let threads: Vec<_> = (0..THREADS)
        .map(|t| {
            let (mnt, clock, hot) = (f.p(""), clock.clone(), hot_renames.clone());
            std::thread::spawn(move || {
                let mut actor = Actor::new(t, seed, &mnt);
                for _ in 0..OPS {
                    actor.step(&clock, &hot);
                }
                actor.model
            })
        })
        .collect();
    let mut model = Model::default();
    for thread in threads {
        model.absorb(thread.join().expect("a thread of operations panicked"));
    }

    // The file left at `shared/hot` came from a rename no other rename followed entirely.
    let renames = hot_renames.lock().unwrap().clone();
    let last_start = renames.iter().map(|r: &HotRename| r.start).max();
    let hot = fs::read(f.p("shared/hot")).ok();
    match (&hot, last_start) {
        (None, None) => {}
        (Some(bytes), Some(last_start)) => {
            let admissible: Vec<_> = renames.iter().filter(|r| r.end > last_start).collect();
            assert!(
                admissible.iter().any(|r| &r.bytes == bytes),
                "shared/hot holds {} bytes that none of the {} renames not followed by another \
                 put there (seed {seed:#x})",
                bytes.len(),
                admissible.len()
            );
            model.expect_other("shared/hot", bytes.clone());
        }
        (hot, _) => panic!(
            "shared/hot is {:?} after {} renames onto it (seed {seed:#x})",
            hot.as_ref().map(|b| b.len()),
            renames.len()
        ),
    }

    eprintln!(
        "parallel: {} names of {} files in {} directories made by the threads, {} renames onto \
         shared/hot",
        model.names.len(),
        model.files.len(),
        model.dirs.len(),
        renames.len()
    );
    model.check(&f.p(""), seed, "at once");
    fs::write("/proc/sys/vm/drop_caches", "3").expect("dropping caches needs root");
    model.check(&f.p(""), seed, "after dropping caches");
    f.remount(&[]);
    model.check(&f.p(""), seed, "after a remount");
}

/// One rename onto the contended name, with the ticks before and after it.
#[derive(Clone)]
struct HotRename {
    start: u64,
    end: u64,
    bytes: Vec<u8>,
}

/// Names (paths relative to the mount) and what they hold.
#[derive(Default)]
struct Model {
    /// Each name of a file, and the file (the thread in the high half, the low half its own).
    names: BTreeMap<String, u64>,
    /// Each file's bytes.
    files: BTreeMap<u64, Vec<u8>>,
    /// Directories made by the threads (besides `shared` and the `d*`).
    dirs: BTreeSet<String>,
}

impl Model {
    fn absorb(&mut self, other: Model) {
        self.names.extend(other.names);
        self.files.extend(other.files);
        self.dirs.extend(other.dirs);
    }

    /// A file no thread's model owns (the contended name), with its bytes.
    fn expect_other(&mut self, name: &str, bytes: Vec<u8>) {
        let id = u64::MAX;
        self.names.insert(name.to_string(), id);
        self.files.insert(id, bytes);
    }

    fn links(&self, id: u64) -> usize {
        self.names.values().filter(|&&i| i == id).count()
    }

    fn check(&self, mnt: &Path, seed: u64, when: &str) {
        let mut dirs: BTreeSet<String> = self.dirs.clone();
        dirs.insert("shared".into());
        dirs.extend((0..THREADS).map(|t| format!("d{t}")));
        for dir in &dirs {
            let mut listed: Vec<String> = fs::read_dir(mnt.join(dir))
                .unwrap()
                .map(|e| e.unwrap().file_name().into_string().unwrap())
                .collect();
            listed.sort();
            let expected: Vec<String> = self
                .names
                .keys()
                .chain(self.dirs.iter())
                .filter_map(|p| p.strip_prefix(&format!("{dir}/")))
                .filter(|rest| !rest.contains('/'))
                .map(str::to_string)
                .collect::<BTreeSet<_>>()
                .into_iter()
                .collect();
            assert_eq!(
                listed, expected,
                "{when}: the listing of {dir} differs from the model (seed {seed:#x})"
            );
        }
        for (name, id) in &self.names {
            let path = mnt.join(name);
            let bytes = fs::read(&path).unwrap();
            assert!(
                bytes == self.files[id],
                "{when}: {name} holds {} bytes, the model {} (seed {seed:#x})",
                bytes.len(),
                self.files[id].len()
            );
            let nlink = fs::metadata(&path).unwrap().nlink();
            assert_eq!(
                nlink as usize,
                self.links(*id),
                "{when}: link count of {name} (seed {seed:#x})"
            );
        }
    }
}

/// One thread's operations on its own names.
struct Actor {
    thread: u64,
    rng: Rng,
    mnt: std::path::PathBuf,
    model: Model,
    serial: u64,
}

impl Actor {
    fn new(thread: u64, seed: u64, mnt: &Path) -> Actor {
        Actor {
            thread,
            rng: Rng::new(seed ^ (thread + 1).wrapping_mul(0x9e37_79b9)),
            mnt: mnt.to_path_buf(),
            model: Model::default(),
            serial: 0,
        }
    }

    /// A fresh name of this thread's in one of the directories it may use.
    fn fresh_name(&mut self) -> String {
        self.serial += 1;
        let mut places = vec![format!("d{}", self.thread), "shared".to_string()];
        places.extend(self.model.dirs.iter().cloned());
        let place = &places[self.rng.below(places.len() as u64) as usize];
        format!("{place}/t{}-{}", self.thread, self.serial)
    }

    fn bytes(&mut self) -> Vec<u8> {
        let len = self.rng.below(20_000) as usize;
        let (thread, serial) = (self.thread, self.serial);
        (0..len)
            .map(|i| (i as u64 ^ thread.wrapping_mul(31) ^ serial.wrapping_mul(7)) as u8)
            .collect()
    }

    fn some_name(&mut self) -> Option<String> {
        let n = self.model.names.len() as u64;
        (n > 0).then(|| {
            let i = self.rng.below(n) as usize;
            self.model.names.keys().nth(i).unwrap().clone()
        })
    }

    fn step(&mut self, clock: &AtomicU64, hot: &Mutex<Vec<HotRename>>) {
        let mnt = self.mnt.clone();
        let p = |rel: &str| mnt.join(rel);
        match self.rng.below(9) {
            0 | 1 => {
                let name = self.fresh_name();
                let bytes = self.bytes();
                fs::write(p(&name), &bytes).unwrap();
                let id = self.thread << 32 | self.serial;
                self.model.names.insert(name, id);
                self.model.files.insert(id, bytes);
            }
            2 => {
                if let Some(name) = self.some_name() {
                    let more = self.bytes();
                    let mut file = OpenOptions::new().append(true).open(p(&name)).unwrap();
                    file.write_all(&more).unwrap();
                    let id = self.model.names[&name];
                    self.model.files.get_mut(&id).unwrap().extend(more);
                }
            }
            3 => {
                if let Some(name) = self.some_name() {
                    fs::remove_file(p(&name)).unwrap();
                    let id = self.model.names.remove(&name).unwrap();
                    if self.model.links(id) == 0 {
                        self.model.files.remove(&id);
                    }
                }
            }
            4 => {
                if let Some(name) = self.some_name() {
                    let to = self.fresh_name();
                    fs::rename(p(&name), p(&to)).unwrap();
                    let id = self.model.names.remove(&name).unwrap();
                    self.model.names.insert(to, id);
                }
            }
            5 => {
                if let Some(name) = self.some_name() {
                    let to = self.fresh_name();
                    fs::hard_link(p(&name), p(&to)).unwrap();
                    let id = self.model.names[&name];
                    self.model.names.insert(to, id);
                }
            }
            6 => {
                let empty: Vec<String> = self
                    .model
                    .dirs
                    .iter()
                    .filter(|d| {
                        !self
                            .model
                            .names
                            .keys()
                            .any(|n| n.starts_with(&format!("{d}/")))
                    })
                    .cloned()
                    .collect();
                if self.rng.below(2) == 0 && !empty.is_empty() {
                    let dir = &empty[self.rng.below(empty.len() as u64) as usize];
                    fs::remove_dir(p(dir)).unwrap();
                    self.model.dirs.remove(dir);
                } else if self.model.dirs.len() < 4 {
                    self.serial += 1;
                    let dir = format!("d{}/s{}", self.thread, self.serial);
                    fs::create_dir(p(&dir)).unwrap();
                    self.model.dirs.insert(dir);
                }
            }
            7 => {
                self.serial += 1;
                let name = format!("shared/t{}-h{}", self.thread, self.serial);
                let mut bytes = self.bytes();
                bytes.extend_from_slice(name.as_bytes());
                fs::write(p(&name), &bytes).unwrap();
                let start = clock.fetch_add(1, Ordering::SeqCst);
                fs::rename(p(&name), p("shared/hot")).unwrap();
                let end = clock.fetch_add(1, Ordering::SeqCst);
                hot.lock().unwrap().push(HotRename { start, end, bytes });
            }
            _ => {
                if let Some(name) = self.some_name() {
                    let meta = fs::metadata(p(&name)).unwrap();
                    let id = self.model.names[&name];
                    assert_eq!(
                        meta.len(),
                        self.model.files[&id].len() as u64,
                        "size of {name}"
                    );
                    assert_eq!(
                        meta.nlink() as usize,
                        self.model.links(id),
                        "links of {name}"
                    );
                }
            }
        }
    }
}
