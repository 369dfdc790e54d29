//! Model test of the file layer: long seeded random sequences of namespace and data operations
//! driven straight into the VFS (no FUSE, no kernel), on a pool over the store's simulated
//! directory and the in-memory metadata engine, checked against a plain in-memory model after
//! every read and at every remount. Every codec and record size is covered.
//!
//! On a mismatch the test prints the configuration, the seed, the failing step and the
//! operation log shrunk to a minimal failing sequence, and how to replay it.
//!
//! - `PRESSO_MODEL_OPS=N`: operations per configuration (default 14,000: 210,000 per run).
//! - `PRESSO_MODEL_SEED=S`: run only seed `S` (default: a fixed seed per configuration, plus
//!   one more derived from the clock, printed so a failure can be replayed).

mod sim;

use std::collections::BTreeMap;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use sim::{one_test_per_config, Config, Fs, CONFIGS};

/// Names the operations pick from: few, so that names collide and get reused.
const NAMES: u8 = 6;

#[derive(Clone, Debug)]
enum Op {
    Create {
        name: u8,
    },
    Write {
        name: u8,
        offset: u64,
        len: u64,
        fill: u8,
    },
    Read {
        name: u8,
        offset: u64,
        len: u64,
    },
    Truncate {
        name: u8,
        size: u64,
    },
    /// `open(O_TRUNC)`: the handle is closed, the file truncated to zero and opened again.
    OpenTrunc {
        name: u8,
    },
    PunchHole {
        name: u8,
        offset: u64,
        len: u64,
    },
    /// fallocate mode 0, or ZERO_RANGE (`zero`), with or without KEEP_SIZE.
    Allocate {
        name: u8,
        offset: u64,
        len: u64,
        keep_size: bool,
        zero: bool,
    },
    CopyRange {
        from: u8,
        to: u8,
        src: u64,
        dst: u64,
        len: u64,
    },
    Fsync {
        name: u8,
    },
    /// close() and open() again.
    Reopen {
        name: u8,
    },
    Rename {
        from: u8,
        to: u8,
    },
    /// `renameat2(RENAME_EXCHANGE)`: two names swap their files.
    Exchange {
        a: u8,
        b: u8,
    },
    Link {
        from: u8,
        to: u8,
    },
    /// Removes a name; a file that loses its last name stays open as an orphan.
    Unlink {
        name: u8,
    },
    /// Writes to and reads back the orphan `slot` (files unlinked while open).
    OrphanWrite {
        slot: u8,
        offset: u64,
        len: u64,
        fill: u8,
    },
    /// The last close of an orphan: it is gone.
    CloseOrphan {
        slot: u8,
    },
    SyncAll,
    Gc,
    Remount,
}

/// The model: named files share contents through ids (hard links), orphans are open files
/// without names.
#[derive(Default, Clone)]
struct Model {
    names: BTreeMap<u8, u64>,
    files: BTreeMap<u64, Vec<u8>>,
    orphans: Vec<u64>,
    next_id: u64,
}

impl Model {
    fn links(&self, id: u64) -> usize {
        self.names.values().filter(|&&i| i == id).count()
    }
}

/// The test data of a write: `fill` picks a kind (zeros, text, random, one byte repeated) and the
/// bytes depend on the absolute offset too, so misplaced bytes are seen.
fn data(fill: u8, offset: u64, len: u64) -> Vec<u8> {
    let text = b"the quick brown fox jumps over the lazy dog; ";
    (offset..offset + len)
        .map(|pos| match fill % 4 {
            0 => 0,
            1 => text[(pos % text.len() as u64) as usize] ^ (fill >> 2),
            2 => {
                let mut x = pos.wrapping_mul(0x9E37_79B9_7F4A_7C15) ^ u64::from(fill);
                x ^= x >> 29;
                x = x.wrapping_mul(0xBF58_476D_1CE4_E5B9);
                (x >> 32) as u8
            }
            _ => fill | 1,
        })
        .collect()
}

fn write_at(buf: &mut Vec<u8>, offset: u64, bytes: &[u8]) {
    let end = offset as usize + bytes.len();
    if buf.len() < end {
        buf.resize(end, 0);
    }
    buf[offset as usize..end].copy_from_slice(bytes);
}

fn zero(buf: &mut [u8], offset: u64, len: u64) {
    let end = (offset + len).min(buf.len() as u64) as usize;
    if (offset as usize) < end {
        buf[offset as usize..end].fill(0);
    }
}

/// Random operations, each valid or harmless in any state (so a shrunk log still runs).
fn generate(rng: &mut StdRng, config: &Config, count: usize) -> Vec<Op> {
    let rs = config.recordsize;
    let span = config.span();
    let name = |rng: &mut StdRng| rng.gen_range(0..NAMES);
    let offset = |rng: &mut StdRng| -> u64 {
        match rng.gen_range(0..4) {
            // At or near record boundaries, where truncation and record assembly meet.
            0 => (rng.gen_range(0..span / rs + 1) * rs).saturating_sub(rng.gen_range(0..2)),
            _ => rng.gen_range(0..span),
        }
    };
    let len = |rng: &mut StdRng| -> u64 {
        match rng.gen_range(0..8) {
            0 => rng.gen_range(1..=rs + rs / 2),
            1 => rs,
            _ => rng.gen_range(1..=4096.min(rs)),
        }
    };
    (0..count)
        .map(|_| match rng.gen_range(0..100) {
            0..=7 => Op::Create { name: name(rng) },
            8..=37 => Op::Write {
                name: name(rng),
                offset: offset(rng),
                len: len(rng),
                fill: rng.gen(),
            },
            38..=55 => Op::Read {
                name: name(rng),
                offset: offset(rng),
                len: len(rng),
            },
            56..=61 => Op::Truncate {
                name: name(rng),
                size: offset(rng),
            },
            62..=63 => Op::OpenTrunc { name: name(rng) },
            64 => Op::PunchHole {
                name: name(rng),
                offset: offset(rng),
                len: len(rng),
            },
            65..=66 => Op::Allocate {
                name: name(rng),
                offset: offset(rng),
                len: len(rng),
                keep_size: rng.gen(),
                zero: rng.gen(),
            },
            67..=68 => Op::CopyRange {
                from: name(rng),
                to: name(rng),
                src: offset(rng),
                dst: offset(rng),
                len: len(rng),
            },
            69..=73 => Op::Fsync { name: name(rng) },
            74..=77 => Op::Reopen { name: name(rng) },
            78..=80 => Op::Rename {
                from: name(rng),
                to: name(rng),
            },
            81 if rng.gen() => Op::Exchange {
                a: name(rng),
                b: name(rng),
            },
            81 => Op::Link {
                from: name(rng),
                to: name(rng),
            },
            82..=85 => Op::Unlink { name: name(rng) },
            86..=88 => Op::OrphanWrite {
                slot: rng.gen_range(0..3),
                offset: offset(rng),
                len: len(rng),
                fill: rng.gen(),
            },
            89 => Op::CloseOrphan {
                slot: rng.gen_range(0..3),
            },
            90..=92 => Op::SyncAll,
            93 => Op::Gc,
            _ => Op::Remount,
        })
        .collect()
}

/// Where a run keeps its metadata and its segments.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Engine {
    /// The in-memory metadata engine and the simulated directory.
    Memory,
    /// A new pool on the test process's PostgreSQL server per run.
    Postgres,
    /// Segments in the test process's S3 server (metadata in memory).
    Objects,
    /// Both: the scale-out stack.
    PostgresAndObjects,
    /// Memory and the simulated directory, with record buffers that hold two records: writers
    /// find them full all the time and make room by storing records still being written.
    MemoryTightBuffers,
}

/// Runs `ops` on a fresh pool; `Err` names the failing step and what differed.
fn run(config: &Config, engine: Engine, ops: &[Op]) -> Result<(), (usize, String)> {
    let mut fs = match engine {
        Engine::Memory => Fs::new(config),
        Engine::Postgres => Fs::new_remote(config, true, false),
        Engine::Objects => Fs::new_remote(config, false, true),
        Engine::PostgresAndObjects => Fs::new_remote(config, true, true),
        Engine::MemoryTightBuffers => Fs::new_with_vfs(
            config,
            presso_fs::vfs::VfsConfig {
                dirty_limit: 2 * config.recordsize as usize,
                ..sim::vfs_config()
            },
        ),
    };
    let mut model = Model::default();
    for (step, op) in ops.iter().enumerate() {
        apply(&mut fs, &mut model, op).map_err(|e| (step, e))?;
    }
    fs.remount();
    check_all(&mut fs, &model).map_err(|e| (ops.len(), e))?;
    fs.close();
    Ok(())
}

fn apply(fs: &mut Fs, m: &mut Model, op: &Op) -> Result<(), String> {
    match *op {
        Op::Create { name } => {
            if m.names.contains_key(&name) {
                return fs.expect_create_exists(name);
            }
            let id = m.next_id;
            m.next_id += 1;
            fs.create(name, id)?;
            m.names.insert(name, id);
            m.files.insert(id, Vec::new());
        }
        Op::Write {
            name,
            offset,
            len,
            fill,
        } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            let bytes = data(fill, offset, len);
            fs.write(id, offset, &bytes)?;
            write_at(m.files.get_mut(&id).unwrap(), offset, &bytes);
        }
        Op::Read { name, offset, len } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            check_read(fs, m, id, offset, len)?;
        }
        Op::Truncate { name, size } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            fs.truncate(id, size)?;
            m.files.get_mut(&id).unwrap().resize(size as usize, 0);
        }
        Op::OpenTrunc { name } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            fs.open_trunc(id)?;
            m.files.get_mut(&id).unwrap().clear();
        }
        Op::PunchHole { name, offset, len } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            fs.fallocate(
                id,
                offset,
                len,
                libc::FALLOC_FL_PUNCH_HOLE | libc::FALLOC_FL_KEEP_SIZE,
            )?;
            zero(m.files.get_mut(&id).unwrap(), offset, len);
        }
        Op::Allocate {
            name,
            offset,
            len,
            keep_size,
            zero: zero_range,
        } => {
            let Some(&id) = m.names.get(&name) else {
                return Ok(());
            };
            let mut mode = if keep_size {
                libc::FALLOC_FL_KEEP_SIZE
            } else {
                0
            };
            if zero_range {
                mode |= libc::FALLOC_FL_ZERO_RANGE;
            }
            fs.fallocate(id, offset, len, mode)?;
            let buf = m.files.get_mut(&id).unwrap();
            if zero_range {
                zero(buf, offset, len);
            }
            if !keep_size && buf.len() < (offset + len) as usize {
                buf.resize((offset + len) as usize, 0);
            }
        }
        Op::CopyRange {
            from,
            to,
            src,
            dst,
            len,
        } => {
            let (Some(&a), Some(&b)) = (m.names.get(&from), m.names.get(&to)) else {
                return Ok(());
            };
            let source = m.files[&a].clone();
            let end = (src + len).min(source.len() as u64);
            if src >= end {
                return Ok(());
            }
            // Overlapping copies within one file are refused by copy_file_range(2).
            if a == b && src < dst + (end - src) && dst < end {
                return Ok(());
            }
            let n = fs.copy_range(a, b, src, dst, end - src)?;
            if n != end - src {
                return Err(format!(
                    "copy_range copied {n} bytes, expected {}",
                    end - src
                ));
            }
            let bytes = source[src as usize..end as usize].to_vec();
            write_at(m.files.get_mut(&b).unwrap(), dst, &bytes);
        }
        Op::Fsync { name } => {
            if let Some(&id) = m.names.get(&name) {
                fs.fsync(id)?;
            }
        }
        Op::Reopen { name } => {
            if let Some(&id) = m.names.get(&name) {
                fs.reopen(id)?;
            }
        }
        Op::Rename { from, to } => {
            let Some(&id) = m.names.get(&from) else {
                return fs.expect_rename_missing(from, to);
            };
            fs.rename(from, to)?;
            // Two names of one file: rename(2) succeeds and does nothing.
            if m.names.get(&to) != Some(&id) {
                let replaced = m.names.insert(to, id);
                m.names.remove(&from);
                if let Some(old) = replaced.filter(|&old| old != id) {
                    drop_name(m, old);
                }
            }
        }
        Op::Exchange { a, b } => {
            let (Some(&x), Some(&y)) = (m.names.get(&a), m.names.get(&b)) else {
                return Ok(());
            };
            fs.exchange(a, b)?;
            m.names.insert(a, y);
            m.names.insert(b, x);
        }
        Op::Link { from, to } => {
            let Some(&id) = m.names.get(&from) else {
                return Ok(());
            };
            if m.names.contains_key(&to) {
                return fs.expect_link_exists(id, to);
            }
            fs.link(id, to)?;
            m.names.insert(to, id);
        }
        Op::Unlink { name } => {
            let Some(id) = m.names.remove(&name) else {
                return fs.expect_unlink_missing(name);
            };
            fs.unlink(name)?;
            drop_name(m, id);
        }
        Op::OrphanWrite {
            slot,
            offset,
            len,
            fill,
        } => {
            let Some(&id) = m.orphans.get(slot as usize) else {
                return Ok(());
            };
            let bytes = data(fill, offset, len);
            fs.write(id, offset, &bytes)?;
            write_at(m.files.get_mut(&id).unwrap(), offset, &bytes);
            check_read(fs, m, id, offset.saturating_sub(100), len + 200)?;
        }
        Op::CloseOrphan { slot } => {
            if (slot as usize) < m.orphans.len() {
                let id = m.orphans.remove(slot as usize);
                fs.close_file(id)?;
                m.files.remove(&id);
            }
        }
        Op::SyncAll => fs.sync_all()?,
        Op::Gc => fs.gc()?,
        Op::Remount => {
            fs.remount();
            // Orphans die with the mount that had them open.
            for id in std::mem::take(&mut m.orphans) {
                m.files.remove(&id);
            }
            check_all(fs, m)?;
        }
    }
    Ok(())
}

/// A file lost a name: if it was its last one, the file lives on as an orphan (its handle stays
/// open).
fn drop_name(m: &mut Model, id: u64) {
    if m.links(id) == 0 {
        m.orphans.push(id);
    }
}

fn check_read(fs: &mut Fs, m: &Model, id: u64, offset: u64, len: u64) -> Result<(), String> {
    let want = &m.files[&id];
    let size = fs.size(id)?;
    if size != want.len() as u64 {
        return Err(format!(
            "size of file {id} is {size}, expected {}",
            want.len()
        ));
    }
    let got = fs.read(id, offset, len)?;
    let end = (offset + len).min(want.len() as u64);
    let expected = if offset < end {
        &want[offset as usize..end as usize]
    } else {
        &[][..]
    };
    if got.as_slice() != expected {
        let first = got
            .iter()
            .zip(expected)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(expected.len()));
        return Err(format!(
            "read of file {id} at {offset}+{len}: {} bytes, expected {}; first difference at \
             offset {} (got {:?}, expected {:?})",
            got.len(),
            expected.len(),
            offset + first as u64,
            got.get(first),
            expected.get(first)
        ));
    }
    Ok(())
}

/// Every name, size and byte, and a clean scrub.
fn check_all(fs: &mut Fs, m: &Model) -> Result<(), String> {
    let names: Vec<u8> = m.names.keys().copied().collect();
    let listed = fs.list_names()?;
    if listed != names {
        return Err(format!("directory lists {listed:?}, expected {names:?}"));
    }
    for (&name, &id) in &m.names {
        fs.check_name(name, id)?;
        check_read(fs, m, id, 0, m.files[&id].len() as u64 + 1)?;
    }
    fs.scrub()
}

/// Removes chunks of the log while it still fails: a minimal failing sequence (or the shortest
/// found within two minutes).
fn shrink(config: &Config, engine: Engine, mut ops: Vec<Op>) -> (Vec<Op>, (usize, String)) {
    let mut failure = match run(config, engine, &ops) {
        Err(f) => f,
        // A failure that depends on the timing of the background threads may not come again.
        Ok(()) => return (ops, (usize::MAX, "did not fail again when replayed".into())),
    };
    ops.truncate(failure.0 + 1);
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(120);
    let mut chunk = ops.len() / 2;
    while chunk >= 1 {
        let mut start = 0;
        while start < ops.len() && std::time::Instant::now() < deadline {
            let mut candidate = ops.clone();
            candidate.drain(start..(start + chunk).min(ops.len()));
            match run(config, engine, &candidate) {
                Err(f) => {
                    candidate.truncate(f.0 + 1);
                    ops = candidate;
                    failure = f;
                }
                Ok(()) => start += chunk,
            }
        }
        chunk /= 2;
    }
    (ops, failure)
}

fn seeds(config_index: usize) -> Vec<u64> {
    if let Ok(seed) = std::env::var("PRESSO_MODEL_SEED") {
        return vec![seed.parse().expect("PRESSO_MODEL_SEED is a number")];
    }
    let clock = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    vec![0x5EED_0000 + config_index as u64, clock]
}

fn ops_per_config() -> usize {
    std::env::var("PRESSO_MODEL_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(14_000)
}

fn run_config(index: usize) {
    run_config_on(index, Engine::Memory, ops_per_config());
}

fn run_config_on(index: usize, engine: Engine, ops: usize) {
    let config = &CONFIGS[index];
    let seeds = seeds(index);
    let per_seed = ops / seeds.len();
    for seed in seeds {
        let mut rng = StdRng::seed_from_u64(seed);
        let ops = generate(&mut rng, config, per_seed);
        let Err((step, message)) = run(config, engine, &ops) else {
            continue;
        };
        eprintln!(
            "model mismatch on {config} ({engine:?} metadata), seed {seed}, step {step}: \
             {message}; shrinking the log"
        );
        let (shrunk, (step, message)) = match shrink(config, engine, ops.clone()) {
            (_, (usize::MAX, _)) => (
                ops,
                (step, format!("{message} (did not fail when replayed)")),
            ),
            shrunk => shrunk,
        };
        let log: Vec<String> = shrunk
            .iter()
            .enumerate()
            .map(|(i, op)| format!("  {i:4}: {op:?}"))
            .collect();
        let ops_var = match engine {
            Engine::Memory | Engine::MemoryTightBuffers => "PRESSO_MODEL_OPS",
            _ => "PRESSO_MODEL_REMOTE_OPS",
        };
        panic!(
            "model mismatch on {config} ({engine:?} metadata), seed {seed} (replay: \
             PRESSO_MODEL_SEED={seed} {ops_var}={per_seed}): step {step}: {message}\n\
             shrunk log ({} ops):\n{}",
            shrunk.len(),
            log.join("\n")
        );
    }
}

one_test_per_config!();

/// Operations of the runs on real servers (`PRESSO_MODEL_REMOTE_OPS`, default 6,000): fewer than
/// the memory runs, since a metadata transaction is a few round trips to PostgreSQL and a sync
/// an upload to the object store.
fn remote_ops() -> usize {
    std::env::var("PRESSO_MODEL_REMOTE_OPS")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6_000)
}

/// The file layer with its metadata in PostgreSQL, on one configuration with a compressing
/// codec and small records.
#[test]
fn postgres_metadata_lz4_4k() {
    run_config_on(3, Engine::Postgres, remote_ops());
}

/// The file layer with its segments in an object store (GC deleting objects, scrub reading
/// them back, remounts listing them).
#[test]
fn object_segments_lz4_4k() {
    run_config_on(3, Engine::Objects, remote_ops());
}

/// Record buffers of two records, on a configuration with small records and ISA-L: writes
/// spread over several files keep making room by storing records still being written.
#[test]
fn tight_record_buffers_gzip_4k() {
    run_config_on(6, Engine::MemoryTightBuffers, ops_per_config() / 4);
}

/// The scale-out stack in process: metadata in PostgreSQL, segments in an object store, on a
/// gzip configuration with large records.
#[test]
fn postgres_and_object_segments_gzip_1m() {
    run_config_on(11, Engine::PostgresAndObjects, remote_ops());
}

/// A file opened as it is created (the FUSE CREATE path, which reads nothing back) follows its
/// directory's record size and fixes it at its first write, exactly like a file opened later:
/// changing the directory's property afterwards (also before the first write has committed),
/// remount included, does not change the file's records, and its bytes read back.
#[test]
fn a_created_file_takes_and_keeps_its_directorys_record_size() {
    use presso_meta::{NewNode, ROOT_INO};
    let mut fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs().clone();
    let dir = vfs
        .make_node(ROOT_INO, b"d", &NewNode::dir(0o755, 0, 0))
        .unwrap()
        .ino;
    vfs.set_prop(dir, "recordsize", "16K").unwrap();
    let attr = vfs
        .make_node(dir, b"f", &NewNode::file(0o644, 0, 0))
        .unwrap();
    let fh = vfs.open_created(dir, &attr).unwrap();
    assert_eq!(vfs.pool().own_prop(attr.ino, "recordsize").unwrap(), None);
    let bytes = data(7, 0, 40_000);
    assert_eq!(vfs.write(attr.ino, 0, &bytes).unwrap(), bytes.len());
    // Changed before the file's first records (and its fixed record size, which commits with
    // them) are committed.
    vfs.set_prop(dir, "recordsize", "64K").unwrap();
    vfs.fsync(attr.ino).unwrap();
    assert_eq!(
        vfs.pool().own_prop(attr.ino, "recordsize").unwrap(),
        Some("16K".to_string())
    );
    vfs.release(attr.ino, fh).unwrap();
    drop(vfs);
    fs.remount();
    let vfs = fs.vfs().clone();
    let fh = vfs.open(attr.ino).unwrap();
    let more = data(9, 40_000, 30_000);
    vfs.write(attr.ino, 40_000, &more).unwrap();
    vfs.fsync(attr.ino).unwrap();
    let indexes: Vec<u64> = vfs
        .pool()
        .records(attr.ino, ..)
        .unwrap()
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(indexes, vec![0, 1, 2, 3, 4], "70,000 bytes in 16K records");
    let read = vfs.read(attr.ino, 0, 70_000).unwrap();
    assert_eq!(&read[..40_000], &bytes[..]);
    assert_eq!(&read[40_000..], &more[..]);
    vfs.release(attr.ino, fh).unwrap();
}

/// Files created through the FUSE CREATE path take their codec from the directory they are made
/// in, also after a property changes and after their directory moved under another parent (the
/// settings of directories are kept between creates, so both must make them be looked up again).
#[test]
fn a_created_file_compresses_with_its_directorys_codec_after_changes_and_moves() {
    use presso_codec::CodecId;
    use presso_meta::{NewNode, ROOT_INO};
    let fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs().clone();
    let mkdir = |parent: u64, name: &[u8]| {
        vfs.make_node(parent, name, &NewNode::dir(0o755, 0, 0))
            .unwrap()
            .ino
    };
    let (lz4, zstd) = (mkdir(ROOT_INO, b"lz4"), mkdir(ROOT_INO, b"zstd"));
    vfs.set_prop(lz4, "compression", "lz4").unwrap();
    vfs.set_prop(zstd, "compression", "zstd-3").unwrap();
    let sub = mkdir(lz4, b"sub");
    let text = data(3, 0, 100_000);
    let codec_of_new_file = |dir: u64, name: &[u8]| {
        let attr = vfs
            .make_node(dir, name, &NewNode::file(0o644, 0, 0))
            .unwrap();
        let fh = vfs.open_created(dir, &attr).unwrap();
        vfs.write(attr.ino, 0, &text).unwrap();
        vfs.fsync(attr.ino).unwrap();
        vfs.release(attr.ino, fh).unwrap();
        assert_eq!(vfs.read(attr.ino, 0, 100_000).unwrap().as_ref(), &text[..]);
        let codecs: Vec<u8> = vfs
            .pool()
            .records(attr.ino, ..)
            .unwrap()
            .into_iter()
            .map(|(_, r)| r.codec)
            .collect();
        assert!(!codecs.is_empty());
        assert!(codecs.iter().all(|&c| c == codecs[0]), "{codecs:?}");
        codecs[0]
    };
    assert_eq!(codec_of_new_file(sub, b"a"), CodecId::Lz4 as u8);
    assert_eq!(codec_of_new_file(sub, b"b"), CodecId::Lz4 as u8);
    vfs.rename(lz4, b"sub", zstd, b"sub").unwrap();
    assert_eq!(codec_of_new_file(sub, b"c"), CodecId::Zstd as u8);
    vfs.set_prop(zstd, "compression", "lz4").unwrap();
    assert_eq!(codec_of_new_file(sub, b"d"), CodecId::Lz4 as u8);
    // The record size comes from the same settings kept per directory.
    vfs.set_prop(zstd, "recordsize", "32K").unwrap();
    assert_eq!(codec_of_new_file(sub, b"e"), CodecId::Lz4 as u8);
    let e = vfs.lookup(sub, b"e").unwrap().ino;
    let indexes: Vec<u64> = vfs
        .pool()
        .records(e, ..)
        .unwrap()
        .into_iter()
        .map(|(i, _)| i)
        .collect();
    assert_eq!(indexes, vec![0, 1, 2, 3], "100,000 bytes in 32K records");
    assert_eq!(
        vfs.pool().own_prop(e, "recordsize").unwrap(),
        Some("32K".to_string())
    );
}

/// `security.capability` is answered without a metadata read while no file has one; a file that
/// gets one, in this mount or an earlier one, shows it.
#[test]
fn file_capabilities_show_whether_set_now_or_before_the_mount() {
    use presso_meta::{NewNode, ROOT_INO};
    let cap = b"security.capability";
    let mut fs = Fs::new(&CONFIGS[1]);
    let vfs = fs.vfs().clone();
    let make = |name: &[u8]| {
        vfs.make_node(ROOT_INO, name, &NewNode::file(0o755, 0, 0))
            .unwrap()
            .ino
    };
    let (a, b) = (make(b"a"), make(b"b"));
    let missing = |vfs: &presso_fs::vfs::Vfs, ino: u64| {
        let e = vfs.getxattr(ino, cap).unwrap_err();
        assert_eq!(e.errno(), libc::ENODATA, "{e}");
    };
    missing(&vfs, a);
    vfs.setxattr(a, cap, b"caps-of-a", 0).unwrap();
    assert_eq!(vfs.getxattr(a, cap).unwrap(), b"caps-of-a");
    missing(&vfs, b);
    vfs.sync_all().unwrap();
    drop(vfs);
    fs.remount();
    let vfs = fs.vfs().clone();
    assert_eq!(vfs.getxattr(a, cap).unwrap(), b"caps-of-a");
    missing(&vfs, b);
    vfs.removexattr(a, cap).unwrap();
    missing(&vfs, a);
}
