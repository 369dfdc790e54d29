//! After a kill and a remount: what one subtree holds, checked against its model (the rules are
//! in [`crate::model`]), and the model of the next cut made from it.

use std::collections::hash_map::Entry;
use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::os::unix::fs::MetadataExt;
use std::path::Path;

use crate::model::{join, File, Ino, Model, Op};

/// A subtree as found on the mount.
pub struct Found {
    dirs: BTreeSet<String>,
    /// Name → kernel inode number.
    names: BTreeMap<String, u64>,
    /// Kernel inode number → contents.
    contents: HashMap<u64, Vec<u8>>,
}

/// Reads the whole subtree at `root`; `Err` for anything unreadable or neither a file nor a
/// directory.
pub fn scan(root: &Path) -> Result<Found, String> {
    let mut found = Found {
        dirs: BTreeSet::from([String::new()]),
        names: BTreeMap::new(),
        contents: HashMap::new(),
    };
    let mut todo = vec![String::new()];
    while let Some(dir) = todo.pop() {
        let entries =
            std::fs::read_dir(root.join(&dir)).map_err(|e| format!("readdir of {dir:?}: {e}"))?;
        for entry in entries {
            let entry = entry.map_err(|e| format!("readdir of {dir:?}: {e}"))?;
            let name = join(&dir, &entry.file_name().to_string_lossy());
            let meta = std::fs::symlink_metadata(root.join(&name))
                .map_err(|e| format!("lstat of {name:?}: {e}"))?;
            if meta.is_dir() {
                found.dirs.insert(name.clone());
                todo.push(name);
            } else if meta.is_file() {
                if let Entry::Vacant(slot) = found.contents.entry(meta.ino()) {
                    let bytes = std::fs::read(root.join(&name))
                        .map_err(|e| format!("read of {name:?}: {e}"))?;
                    if bytes.len() as u64 != meta.len() {
                        return Err(format!(
                            "{name:?}: stat says {} bytes, read gave {}",
                            meta.len(),
                            bytes.len()
                        ));
                    }
                    slot.insert(bytes);
                }
                found.names.insert(name, meta.ino());
            } else {
                return Err(format!("{name:?} is neither a file nor a directory"));
            }
        }
    }
    Ok(found)
}

/// What a check covered.
#[derive(Default, Debug)]
pub struct Checked {
    /// Files compared byte for byte (unchanged since their fsync).
    pub exact: usize,
    /// Files checked for foreign bytes and size only.
    pub loose: usize,
    /// Names and directories compared.
    pub names: usize,
    /// Operations run.
    pub ops: usize,
    /// Operations in flight at a kill.
    pub in_flight: usize,
    /// Of those, the name operations that had happened.
    pub in_flight_applied: usize,
}

/// Checks `found` against the model and the operation that was in flight; returns the model
/// of what was found (all of it now in the pool).
pub fn check(
    model: &Model,
    in_flight: Option<&Op>,
    found: &Found,
    checked: &mut Checked,
) -> Result<Model, String> {
    let mut candidates = vec![model.clone()];
    if let Some(op) = in_flight.filter(|op| op.is_namespace()) {
        let mut applied = model.clone();
        applied.apply(op);
        candidates.push(applied);
    }
    let mut tree_errors = Vec::new();
    for (i, candidate) in candidates.iter().enumerate() {
        match same_tree(candidate, found) {
            Ok(inos) => {
                checked.in_flight_applied += i;
                checked.names += found.dirs.len() + found.names.len();
                return check_files(candidate, found, &inos, checked);
            }
            Err(e) => tree_errors.push(e),
        }
    }
    let mut message = String::from("the names differ from every tree the model allows:");
    for (i, e) in tree_errors.iter().enumerate() {
        let which = if i == 0 {
            "without the operation in flight"
        } else {
            "with it"
        };
        let _ = write!(message, "\n  {which}: {e}");
    }
    Err(message)
}

/// The model's file of every kernel inode number, if the names and hard links match.
fn same_tree(model: &Model, found: &Found) -> Result<HashMap<u64, Ino>, String> {
    let mut diff = Vec::new();
    let listed = |set: Vec<&String>| format!("{set:?}");
    let missing_dirs: Vec<_> = model.dirs.difference(&found.dirs).collect();
    let extra_dirs: Vec<_> = found.dirs.difference(&model.dirs).collect();
    if !missing_dirs.is_empty() {
        diff.push(format!("directories missing {}", listed(missing_dirs)));
    }
    if !extra_dirs.is_empty() {
        diff.push(format!(
            "directories not in the model {}",
            listed(extra_dirs)
        ));
    }
    let missing: Vec<_> = model
        .names
        .keys()
        .filter(|n| !found.names.contains_key(*n))
        .collect();
    let extra: Vec<_> = found
        .names
        .keys()
        .filter(|n| !model.names.contains_key(*n))
        .collect();
    if !missing.is_empty() {
        diff.push(format!("files missing {}", listed(missing)));
    }
    if !extra.is_empty() {
        diff.push(format!("files not in the model {}", listed(extra)));
    }
    let mut by_kernel: HashMap<u64, Ino> = HashMap::new();
    let mut by_model: HashMap<Ino, u64> = HashMap::new();
    for (name, &ino) in &model.names {
        let Some(&kernel) = found.names.get(name) else {
            continue;
        };
        let a = *by_kernel.entry(kernel).or_insert(ino);
        let b = *by_model.entry(ino).or_insert(kernel);
        if a != ino || b != kernel {
            diff.push(format!(
                "{name:?} is a hard link of another file than in the model"
            ));
        }
    }
    if diff.is_empty() {
        Ok(by_kernel)
    } else {
        Err(diff.join("; "))
    }
}

/// Every file's bytes against the model; the model of what was found.
fn check_files(
    model: &Model,
    found: &Found,
    inos: &HashMap<u64, Ino>,
    checked: &mut Checked,
) -> Result<Model, String> {
    let mut files = HashMap::new();
    let mut names = BTreeMap::new();
    for (name, kernel) in &found.names {
        let ino = inos[kernel];
        names.insert(name.clone(), ino);
        if files.contains_key(&ino) {
            continue;
        }
        let got = &found.contents[kernel];
        if model.files[&ino].synced {
            checked.exact += 1;
        } else {
            checked.loose += 1;
        }
        check_file(&model.files[&ino], got).map_err(|e| format!("{name:?}: {e}"))?;
        files.insert(ino, File::at_mount(got.clone()));
    }
    Ok(model.remounted(found.dirs.clone(), names, files))
}

fn check_file(file: &File, got: &[u8]) -> Result<(), String> {
    if file.synced {
        if got == file.bytes {
            return Ok(());
        }
        let at = got
            .iter()
            .zip(&file.bytes)
            .position(|(a, b)| a != b)
            .unwrap_or(got.len().min(file.bytes.len()));
        return Err(format!(
            "unchanged since its fsync, but {} bytes where {} were fsync'd, first difference \
             at {at}: {:?} where {:?} were fsync'd",
            got.len(),
            file.bytes.len(),
            window(got, at),
            window(&file.bytes, at)
        ));
    }
    if got.len() as u64 > file.max_size {
        return Err(format!(
            "{} bytes, but it never had more than {} since the mount",
            got.len(),
            file.max_size
        ));
    }
    if let Some(at) = (0..got.len()).find(|&p| !file.allows(p as u64, got[p])) {
        return Err(format!(
            "byte {at} is {:#04x}, which no write put there (and it is not zero); around it: \
             {:?}; the file's own bytes there: {:?}; {} bytes now, {} at the mount, {} in the \
             model, never more than {}; writes since the mount: {:?}",
            got[at],
            window(got, at),
            window(&file.bytes, at),
            got.len(),
            file.baseline.len(),
            file.bytes.len(),
            file.max_size,
            file.writes
        ));
    }
    Ok(())
}

/// A few bytes from `at` on.
fn window(bytes: &[u8], at: usize) -> &[u8] {
    &bytes[at.min(bytes.len())..(at + 16).min(bytes.len())]
}
