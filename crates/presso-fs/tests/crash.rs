//! Power cuts at random points of the commit protocol, in-process: the file layer runs on the
//! store's simulated directory and the in-memory metadata engine with its power-cut simulation,
//! random operations run while the engine and the commit thread work in the background, and the
//! power is cut at a random moment (unsynced segment writes lost or torn; the metadata back at
//! its last durable commit, or with every commit kept). Then the pool is opened again and
//! checked:
//!
//! - it opens, and a scrub is clean: the metadata never points at a frame that is not durable;
//! - the names are those of some moment between the last durability point and the cut
//!   (namespace changes are atomic and ordered);
//! - every file that was fsync'd (or synced with everything) and not changed since holds
//!   exactly its bytes.
//!
//! `PRESSO_CRASH_CUTS=N` sets the number of cuts (default 1,000); `PRESSO_CRASH_SEED=S` replays
//! one cut.

mod sim;

use std::collections::{BTreeMap, HashMap};

use presso_meta::memory::MemoryEngine;
use presso_meta::ROOT_INO;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sim::{Config, Fs, CONFIGS};

/// What the test knows of the files.
#[derive(Default)]
struct Model {
    names: BTreeMap<u8, u64>,
    files: HashMap<u64, Vec<u8>>,
    /// Files whose every byte is durable: fsync'd (or synced) and not changed since.
    stable: HashMap<u64, bool>,
    /// The name maps since the last durability point, oldest first.
    history: Vec<BTreeMap<u8, u64>>,
    next_id: u64,
    /// What ran, for the failure message.
    log: Vec<String>,
}

impl Model {
    /// A durability point: everything before it in the namespace is durable.
    fn durable_point(&mut self) {
        self.history = vec![self.names.clone()];
    }

    fn names_changed(&mut self) {
        self.history.push(self.names.clone());
    }
}

fn fill(rng: &mut StdRng, len: usize) -> Vec<u8> {
    let kind = rng.gen_range(0..3);
    let seed: u8 = rng.gen();
    (0..len)
        .map(|i| match kind {
            0 => 0,
            1 => b"crash consistency "[i % 18] ^ seed,
            _ => rng.gen(),
        })
        .collect()
}

/// Random operations until the cut; returns the model as of the cut.
fn run_until_cut(fs: &mut Fs, rng: &mut StdRng, config: &Config, steps: usize) -> Model {
    let mut m = Model::default();
    m.durable_point();
    let span = config.span();
    for _ in 0..steps {
        let name = rng.gen_range(0..5u8);
        match rng.gen_range(0..100) {
            0..=14 => {
                if !m.names.contains_key(&name) {
                    let id = m.next_id;
                    m.next_id += 1;
                    m.log.push(format!("create f{name} (file {id})"));
                    fs.create(name, id).expect("create");
                    m.names.insert(name, id);
                    m.files.insert(id, Vec::new());
                    m.stable.insert(id, false);
                    m.names_changed();
                }
            }
            15..=54 => {
                if let Some(&id) = m.names.get(&name) {
                    let offset = rng.gen_range(0..span);
                    let len = rng.gen_range(1..=config.recordsize + 100) as usize;
                    let data = fill(rng, len);
                    m.log
                        .push(format!("write f{name} (file {id}) {offset}+{len}"));
                    fs.write(id, offset, &data).expect("write");
                    let buf = m.files.get_mut(&id).unwrap();
                    if buf.len() < offset as usize + len {
                        buf.resize(offset as usize + len, 0);
                    }
                    buf[offset as usize..offset as usize + len].copy_from_slice(&data);
                    m.stable.insert(id, false);
                }
            }
            55..=64 => {
                if let Some(&id) = m.names.get(&name) {
                    let size = rng.gen_range(0..span);
                    m.log
                        .push(format!("truncate f{name} (file {id}) to {size}"));
                    fs.truncate(id, size).expect("truncate");
                    m.files.get_mut(&id).unwrap().resize(size as usize, 0);
                    m.stable.insert(id, false);
                }
            }
            65..=79 => {
                if let Some(&id) = m.names.get(&name) {
                    m.log.push(format!("fsync f{name} (file {id})"));
                    fs.fsync(id).expect("fsync");
                    m.stable.insert(id, true);
                    m.durable_point();
                }
            }
            80..=84 => {
                m.log.push("sync".into());
                fs.sync_all().expect("sync");
                for stable in m.stable.values_mut() {
                    *stable = true;
                }
                m.durable_point();
            }
            85..=91 => {
                let to = rng.gen_range(0..5u8);
                if let Some(&id) = m.names.get(&name) {
                    m.log.push(format!("rename f{name} f{to}"));
                    fs.rename(name, to).expect("rename");
                    if name != to {
                        m.names.remove(&name);
                        m.names.insert(to, id);
                        m.names_changed();
                    }
                }
            }
            _ => {
                if m.names.remove(&name).is_some() {
                    m.log.push(format!("unlink f{name}"));
                    fs.unlink(name).expect("unlink");
                    m.names_changed();
                }
            }
        }
    }
    m
}

fn check_after_cut(fs: &mut Fs, m: &Model) -> Result<(), String> {
    fs.scrub()?;
    // Which moment of the namespace survived?
    let listed = fs.list_names()?;
    let vfs = fs.vfs().clone();
    let mut inos = BTreeMap::new();
    for &name in &listed {
        let attr = vfs
            .lookup(ROOT_INO, format!("f{name}").as_bytes())
            .map_err(|e| format!("lookup f{name}: {e}"))?;
        inos.insert(name, attr.ino);
    }
    let matches = |names: &BTreeMap<u8, u64>| {
        names.len() == inos.len()
            && names
                .iter()
                .all(|(n, id)| inos.get(n).copied() == fs.ino_of(*id))
    };
    if !m.history.iter().any(matches) {
        return Err(format!(
            "names after the cut {inos:?} match no moment since the last durability point: {:?}",
            m.history
        ));
    }
    for (&name, &ino) in &inos {
        let id = fs
            .id_of(ino)
            .ok_or(format!("f{name}: unknown inode {ino}"))?;
        let data = fs.read(id, 0, u64::MAX >> 1)?;
        let want = &m.files[&id];
        if m.stable.get(&id) == Some(&true) && data != *want {
            let first = data.iter().zip(want).position(|(a, b)| a != b);
            return Err(format!(
                "f{name} (file {id}, fsync'd, unchanged since) holds {} bytes, expected {}; \
                 first difference at {first:?}\noperations:\n  {}",
                data.len(),
                want.len(),
                m.log.join("\n  ")
            ));
        }
    }
    Ok(())
}

fn cut(seed: u64) -> Result<(), String> {
    let mut rng = StdRng::seed_from_u64(seed);
    // Small records and large ones, stored raw and compressed.
    let config = &CONFIGS[[0, 7, 10, 12][rng.gen_range(0..4)]];
    let mut fs = Fs::new_with(config, MemoryEngine::simulated());
    let steps = rng.gen_range(1..120);
    let model = run_until_cut(&mut fs, &mut rng, config, steps);
    // Let the background work run on for a moment, then cut the power wherever it is.
    std::thread::sleep(std::time::Duration::from_micros(rng.gen_range(0..3000)));
    if rng.gen() {
        fs.dir.crash_torn(&mut rng);
    } else {
        fs.dir.crash();
    }
    let keep_latest = rng.gen_bool(0.3);
    fs.meta.crash(keep_latest);
    fs.halt();
    fs.mount().map_err(|e| format!("open after the cut: {e}"))?;
    fs.reopen_named();
    let result = check_after_cut(&mut fs, &model)
        .map_err(|e| format!("{config}, metadata keeps latest: {keep_latest}: {e}"));
    fs.close();
    result
}

#[test]
fn power_cuts_anywhere_lose_nothing_that_was_fsynced() {
    if let Ok(seed) = std::env::var("PRESSO_CRASH_SEED") {
        let seed: u64 = seed.parse().expect("PRESSO_CRASH_SEED is a number");
        if let Err(e) = cut(seed) {
            panic!("cut with seed {seed}: {e}");
        }
        return;
    }
    let cuts: u64 = std::env::var("PRESSO_CRASH_CUTS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(1000);
    for i in 0..cuts {
        let seed = 0x00C0_FFEE_0000 + i;
        if let Err(e) = cut(seed) {
            panic!("cut {i} of {cuts} failed (replay: PRESSO_CRASH_SEED={seed}): {e}");
        }
    }
}

/// A pool whose flusher ticks (which queue sizes and compress idle partial records) once a
/// second at most, so that a test decides what commits before a kill.
fn slow_ticking(config: &Config) -> Fs {
    let mut fs = Fs::new(config);
    fs.close();
    fs.mount_with(presso_fs::vfs::VfsConfig {
        flush_after: std::time::Duration::from_secs(3600),
        ..sim::vfs_config()
    })
    .expect("mount");
    fs
}

/// Polls `condition` for up to 5 s.
fn within_5s(mut condition: impl FnMut() -> bool) -> bool {
    (0..500).any(|_| {
        let met = condition();
        if !met {
            std::thread::sleep(std::time::Duration::from_millis(10));
        }
        met
    })
}

/// Kills `fs`, mounts it again, extends each of `files` to `to` and checks bytes `from..to`:
/// those the size covered after the kill are `data`'s (which starts at `from`), the rest zeros.
fn extend_after_kill(fs: &mut Fs, files: u64, from: u64, to: u64, data: &[u8]) {
    fs.halt();
    fs.mount().expect("mount after the kill");
    fs.reopen_named();
    for id in 0..files {
        let size = fs.size(id).unwrap();
        fs.truncate(id, to).unwrap();
        let got = fs.read(id, from, to - from).unwrap();
        let want: Vec<u8> = (from..to)
            .map(|p| {
                if p < size {
                    data[(p - from) as usize]
                } else {
                    0
                }
            })
            .collect();
        if let Some(first) = got.iter().zip(&want).position(|(a, b)| a != b) {
            panic!(
                "file {id}: size {size} after the kill; extended to {to}, byte {} reads {}, \
                 expected {}",
                from + first as u64,
                got[first],
                want[first]
            );
        }
    }
    fs.close();
}

/// A whole record written past the end commits as soon as it is compressed, while the size that
/// covers it waits for the flusher's next tick; a kill between the two leaves a committed record
/// past the committed size, and growing the file (a truncate up, fallocate, a write further on)
/// must show zeros there, not its bytes. The exerciser on real mounts found it.
#[test]
fn growing_a_file_after_a_kill_shows_no_record_past_its_size() {
    let config = &CONFIGS[4];
    let rs = config.recordsize;
    let mut fs = slow_ticking(config);
    let files = 3u64;
    let data: Vec<u8> = (0..rs).map(|i| b"extend me "[(i % 10) as usize]).collect();
    for id in 0..files {
        fs.create(id as u8, id).unwrap();
        fs.fsync(id).unwrap();
        // A whole record past the end: compressed and committed at once.
        fs.write(id, 3 * rs, &data).unwrap();
    }
    for id in 0..files {
        let ino = fs.ino_of(id).expect("named file");
        let pool = fs.vfs().pool().clone();
        let committed = within_5s(|| !pool.records(ino, 3..).unwrap().is_empty());
        assert!(
            committed,
            "the record of file {id} did not commit within 5 s"
        );
    }
    extend_after_kill(&mut fs, files, 3 * rs, 4 * rs, &data);
}

/// The size of a truncate into the middle of a record commits before the record it cut (that
/// one is compressed later), so after a kill the committed record still holds bytes past the
/// committed size; growing the file must show zeros there, not those bytes. The exerciser on
/// real mounts found it (a truncate, a kill, then fallocate or a truncate up).
#[test]
fn growing_a_file_after_a_kill_shows_no_bytes_its_truncate_cut() {
    let config = &CONFIGS[4];
    let rs = config.recordsize;
    let mut fs = slow_ticking(config);
    let files = 3u64;
    let data: Vec<u8> = (0..rs).map(|i| b"cut me off "[(i % 11) as usize]).collect();
    for id in 0..files {
        fs.create(id as u8, id).unwrap();
        fs.write(id, 0, &data).unwrap();
        fs.fsync(id).unwrap();
        fs.truncate(id, rs / 3).unwrap();
    }
    for id in 0..files {
        let ino = fs.ino_of(id).expect("named file");
        let pool = fs.vfs().pool().clone();
        let committed = within_5s(|| pool.getattr(ino).unwrap().size == rs / 3);
        assert!(
            committed,
            "the truncate of file {id} did not commit within 5 s"
        );
    }
    extend_after_kill(&mut fs, files, 0, rs, &data);
}

/// fsync of a directory (`Vfs::fsync_dir`, which the FUSE adapter calls for fsyncdir) makes
/// the names made before it survive a power cut that takes the metadata back to its last
/// durable commit; a name made after it is lost with the cut.
#[test]
fn names_made_before_an_fsync_of_their_directory_survive_a_power_cut() {
    let mut fs = Fs::new_with(&CONFIGS[4], MemoryEngine::simulated());
    fs.create(1, 1).unwrap();
    fs.rename(1, 2).unwrap();
    fs.vfs().fsync_dir().unwrap();
    fs.create(3, 3).unwrap();
    fs.dir.crash();
    fs.meta.crash(false);
    fs.halt();
    fs.mount().expect("open after the cut");
    assert_eq!(fs.list_names().unwrap(), vec![2], "names after the cut");
    fs.close();
}

/// After a kill that left a committed record holding bytes past the committed size (the
/// record a truncate cut was not compressed yet), the first growth cuts those bytes in the
/// overlay and queues the grown size at once; the cut record is compressed only later. A
/// second kill between the two leaves the grown size committed over the old record, and the
/// bytes the truncate removed are back. The kill-cut test on real mounts found it (a byte of a
/// write truncated away two kills earlier, after a truncate up).
#[test]
fn a_second_kill_after_growing_shows_no_bytes_a_truncate_cut() {
    let config = &CONFIGS[4];
    let rs = config.recordsize;
    let never_idle = presso_fs::vfs::VfsConfig {
        flush_after: std::time::Duration::from_secs(3600),
        ..sim::vfs_config()
    };
    let mut fs = slow_ticking(config);
    let data: Vec<u8> = (0..rs).map(|i| b"cut me off "[(i % 11) as usize]).collect();
    fs.create(0, 0).unwrap();
    fs.write(0, 0, &data).unwrap();
    fs.fsync(0).unwrap();
    fs.truncate(0, rs / 3).unwrap();
    let size_committed = |fs: &Fs, size: u64| {
        let ino = fs.ino_of(0).expect("named file");
        let pool = fs.vfs().pool().clone();
        within_5s(|| pool.getattr(ino).unwrap().size == size)
    };
    assert!(size_committed(&fs, rs / 3), "the truncate did not commit");
    fs.halt();
    fs.mount_with(never_idle.clone())
        .expect("mount after the first kill");
    fs.reopen_named();
    fs.truncate(0, rs).unwrap();
    assert!(size_committed(&fs, rs), "the truncate up did not commit");
    fs.halt();
    fs.mount().expect("mount after the second kill");
    fs.reopen_named();
    let size = fs.size(0).unwrap();
    let got = fs.read(0, 0, size).unwrap();
    let stale = (rs / 3..size).find(|&p| got[p as usize] != 0);
    assert_eq!(
        stale,
        None,
        "size {size} after the second kill: bytes past {} that the truncate cut are back",
        rs / 3
    );
    fs.close();
}
