//! The two-client model test: random steps on two clients of one pool against a model of the
//! namespace, shrinking to a minimal failing case.

use super::*;

/// One step of the two-client model test.
#[derive(Debug, Clone)]
enum Step {
    /// Replaces file `file`'s contents on client `on` (creating it), then closes it.
    Write {
        on: usize,
        file: u8,
        len: u32,
        seed: u64,
    },
    /// Appends to it, then closes it.
    Append {
        on: usize,
        file: u8,
        len: u32,
        seed: u64,
    },
    /// Reads it whole on client `on`: must be the model's bytes, or missing as in the model.
    Read {
        on: usize,
        file: u8,
    },
    /// Renames it over another name.
    Rename {
        on: usize,
        file: u8,
        to: u8,
    },
    Unlink {
        on: usize,
        file: u8,
    },
    /// Garbage collection by client `on`: its own segments, and those of clients that are
    /// gone when it holds the maintenance lease.
    Collect {
        on: usize,
    },
    /// Client `on` unmounts and a new client mounts in its place: the old one's segments are
    /// a gone client's from then on.
    Remount {
        on: usize,
    },
}

fn step() -> impl proptest::strategy::Strategy<Value = Step> {
    use proptest::prelude::*;
    let on = 0..2usize;
    let file = 0..5u8;
    prop_oneof![
        3 => (on.clone(), file.clone(), 0..300_000u32, any::<u64>())
            .prop_map(|(on, file, len, seed)| Step::Write { on, file, len, seed }),
        2 => (on.clone(), file.clone(), 1..100_000u32, any::<u64>())
            .prop_map(|(on, file, len, seed)| Step::Append { on, file, len, seed }),
        4 => (on.clone(), file.clone()).prop_map(|(on, file)| Step::Read { on, file }),
        1 => (on.clone(), file.clone(), file.clone())
            .prop_map(|(on, file, to)| Step::Rename { on, file, to }),
        1 => (on.clone(), file).prop_map(|(on, file)| Step::Unlink { on, file }),
        1 => on.clone().prop_map(|on| Step::Collect { on }),
        1 => on.prop_map(|on| Step::Remount { on }),
    ]
}

fn name(file: u8) -> Vec<u8> {
    format!("m{file}").into_bytes()
}

/// Runs `steps` on two clients of a new shared pool against a model of the namespace: with
/// every change closed before the next step, both clients must agree with the model at every
/// read (close-to-open, atomic renames and unlinks, collection of a client's own and of gone
/// clients' segments under the other's reads, clients leaving and new ones coming).
fn run_model(steps: &[Step]) -> Result<(), String> {
    let (url, place) = new_pool("model", &[("compression", "lz4"), ("recordsize", "64K")]);
    let mut clients = [client(&url, &place), client(&url, &place)];
    let mut model: std::collections::BTreeMap<u8, Vec<u8>> = Default::default();
    let check = |what: &str, r: Result<(), FsError>| r.map_err(|e| format!("{what}: {e}"));
    for (i, s) in steps.iter().enumerate() {
        let at = |what: &str| format!("step {i} {s:?}: {what}");
        match *s {
            Step::Write {
                on,
                file,
                len,
                seed,
            }
            | Step::Append {
                on,
                file,
                len,
                seed,
            } => {
                let vfs = &clients[on];
                let data = text(len as usize, seed);
                let append = matches!(s, Step::Append { .. });
                let ino = match vfs.lookup(ROOT_INO, &name(file)) {
                    Ok(a) => a.ino,
                    Err(_) => {
                        vfs.make_node(ROOT_INO, &name(file), &NewNode::file(0o644, 0, 0))
                            .map_err(|e| at(&e.to_string()))?
                            .ino
                    }
                };
                let fh = vfs.open(ino).map_err(|e| at(&e.to_string()))?;
                let old = model.get(&file).cloned().unwrap_or_default();
                let offset = if append { old.len() as u64 } else { 0 };
                if !append {
                    let set = presso_meta::SetAttr {
                        size: Some(0),
                        ..Default::default()
                    };
                    vfs.setattr(ino, set).map_err(|e| at(&e.to_string()))?;
                }
                vfs.write(ino, offset, &data)
                    .map_err(|e| at(&e.to_string()))?;
                check(&at("close"), vfs.flush(ino))?;
                check(&at("release"), vfs.release(ino, fh))?;
                let mut new = if append { old } else { Vec::new() };
                new.extend_from_slice(&data);
                model.insert(file, new);
            }
            Step::Read { on, file } => {
                let vfs = &clients[on];
                match (model.get(&file), vfs.lookup(ROOT_INO, &name(file))) {
                    (None, Err(_)) => {}
                    (None, Ok(_)) => return Err(at("a name the model does not have")),
                    (Some(_), Err(e)) => return Err(at(&format!("missing: {e}"))),
                    (Some(want), Ok(_)) => {
                        let got = read_file(vfs, ROOT_INO, &format!("m{file}"));
                        if &got != want {
                            return Err(at(&format!(
                                "{} bytes read, {} in the model, first difference at {:?}",
                                got.len(),
                                want.len(),
                                got.iter().zip(want).position(|(a, b)| a != b)
                            )));
                        }
                    }
                }
            }
            Step::Rename { on, file, to } => {
                let r = clients[on].rename(ROOT_INO, &name(file), ROOT_INO, &name(to));
                match (model.remove(&file), r) {
                    (Some(data), Ok(())) => {
                        model.insert(to, data);
                    }
                    (None, Err(_)) => {}
                    (had, r) => {
                        return Err(at(&format!(
                            "model had it: {}, rename: {r:?}",
                            had.is_some()
                        )))
                    }
                }
            }
            Step::Unlink { on, file } => {
                let r = clients[on].unlink(ROOT_INO, &name(file));
                if model.remove(&file).is_some() != r.is_ok() {
                    return Err(at(&format!("unlink: {r:?}")));
                }
            }
            Step::Collect { on } => {
                presso_fs::maintenance::gc(clients[on].pool(), 1.0, &mut |_| {})
                    .map_err(|e| at(&e.to_string()))?;
            }
            Step::Remount { on } => {
                clients[on]
                    .shutdown()
                    .map_err(|e| at(&format!("unmount: {e}")))?;
                clients[on] = client(&url, &place);
            }
        }
    }
    for vfs in clients {
        vfs.shutdown().map_err(|e| format!("shutdown: {e}"))?;
    }
    Ok(())
}

/// Random steps on two clients against the model, shrinking to a minimal failing sequence.
/// `PRESSO_SHARED_MODEL_CASES` sequences (default 6) of up to 40 steps.
#[test]
fn two_clients_agree_with_a_model() {
    use proptest::prelude::*;
    let cases = std::env::var("PRESSO_SHARED_MODEL_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(6);
    let config = ProptestConfig {
        cases,
        max_shrink_iters: 200,
        ..ProptestConfig::default()
    };
    proptest!(config, |(steps in proptest::collection::vec(step(), 1..40))| {
        if let Err(e) = run_model(&steps) {
            return Err(TestCaseError::fail(e));
        }
    });
}
