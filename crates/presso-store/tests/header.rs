mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use common::{config, TempDir};
use presso_store::header::{POOL_FILE, POOL_VERSION};
use presso_store::{Committed, PoolHeader, SimDir, Store, StoreError};

fn props() -> BTreeMap<String, String> {
    [("compression", "gzip-6"), ("note", "a=b c")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect()
}

#[test]
fn header_round_trip() {
    let h = PoolHeader::new(props()).unwrap();
    let bytes = h.encode();
    assert_eq!(&bytes[..8], b"PRESSOPL");
    assert_eq!(PoolHeader::decode(&bytes, POOL_FILE).unwrap(), h);
    let other = PoolHeader::new(props()).unwrap();
    assert_ne!(h.uuid, other.uuid);
}

#[test]
fn empty_dir_and_foreign_file_are_not_pools() {
    let tmp = TempDir::new("notpool");
    let err = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotAPool { .. }), "{err}");
    std::fs::write(tmp.path().join(POOL_FILE), b"#!/bin/sh\necho hi\n").unwrap();
    let err = Store::open(tmp.dir(), config(1 << 20), &Committed::default()).unwrap_err();
    assert!(matches!(err, StoreError::NotAPool { .. }), "{err}");
    assert!(err.to_string().contains(POOL_FILE));
}

#[test]
fn newer_version_is_refused() {
    let sim = SimDir::new();
    drop(Store::create(Arc::new(sim.clone()), props(), config(1 << 20)).unwrap());
    let mut bytes = sim.contents(POOL_FILE).unwrap();
    bytes[8..10].copy_from_slice(&(POOL_VERSION + 1).to_le_bytes());
    let n = bytes.len();
    let crc = crc32fast::hash(&bytes[..n - 4]);
    bytes[n - 4..].copy_from_slice(&crc.to_le_bytes());
    sim.set_contents(POOL_FILE, &bytes);
    let err = Store::open(Arc::new(sim), config(1 << 20), &Committed::default()).unwrap_err();
    match &err {
        StoreError::NewerVersion {
            found, supported, ..
        } => {
            assert_eq!((*found, *supported), (POOL_VERSION + 1, POOL_VERSION))
        }
        other => panic!("{other}"),
    }
    assert!(err.to_string().contains("upgrade Presso"));
}

#[test]
fn every_damaged_header_byte_is_refused() {
    let sim = SimDir::new();
    drop(Store::create(Arc::new(sim.clone()), props(), config(1 << 20)).unwrap());
    let good = sim.contents(POOL_FILE).unwrap();
    for i in 0..good.len() {
        for bit in [0x01u8, 0x80] {
            let mut bytes = good.clone();
            bytes[i] ^= bit;
            sim.set_contents(POOL_FILE, &bytes);
            let err = Store::open(
                Arc::new(sim.clone()),
                config(1 << 20),
                &Committed::default(),
            )
            .unwrap_err();
            match err {
                StoreError::NotAPool { .. } => assert!(i < 8, "byte {i}"),
                StoreError::NewerVersion { .. } => assert!((8..10).contains(&i), "byte {i}"),
                StoreError::Corrupt { ref file, .. } => assert_eq!(file, POOL_FILE),
                other => panic!("byte {i}: {other}"),
            }
        }
    }
    // Truncated or extended.
    for len in [0, 5, 9, 20, good.len() - 1] {
        sim.set_contents(POOL_FILE, &good[..len]);
        assert!(
            Store::open(
                Arc::new(sim.clone()),
                config(1 << 20),
                &Committed::default()
            )
            .is_err(),
            "len {len}"
        );
    }
    let mut longer = good.clone();
    longer.push(0);
    sim.set_contents(POOL_FILE, &longer);
    assert!(Store::open(
        Arc::new(sim.clone()),
        config(1 << 20),
        &Committed::default()
    )
    .is_err());
    sim.set_contents(POOL_FILE, &good);
    assert!(Store::open(Arc::new(sim), config(1 << 20), &Committed::default()).is_ok());
}

#[test]
fn create_refuses_existing_pool_and_bad_properties() {
    let sim = SimDir::new();
    drop(Store::create(Arc::new(sim.clone()), props(), config(1 << 20)).unwrap());
    let err = Store::create(Arc::new(sim.clone()), props(), config(1 << 20)).unwrap_err();
    assert!(matches!(err, StoreError::AlreadyExists { .. }), "{err}");

    for (k, v) in [("", "x"), ("a=b", "x"), ("a\nb", "x"), ("k", "line\nbreak")] {
        let mut p = BTreeMap::new();
        p.insert(k.to_string(), v.to_string());
        let err = Store::create(Arc::new(SimDir::new()), p, config(1 << 20)).unwrap_err();
        assert!(matches!(err, StoreError::BadProperty { .. }), "{err}");
    }
}

#[test]
fn segment_of_another_pool_is_refused() {
    let a = SimDir::new();
    let b = SimDir::new();
    let sa = Store::create(Arc::new(a.clone()), props(), config(1 << 20)).unwrap();
    sa.append(b"x").unwrap();
    sa.sync().unwrap();
    drop(sa);
    drop(Store::create(Arc::new(b.clone()), props(), config(1 << 20)).unwrap());
    let seg = presso_store::segment::segment_file_name(1);
    b.set_contents(&seg, &a.contents(&seg).unwrap());
    let err = Store::open(Arc::new(b), config(1 << 20), &Committed::default()).unwrap_err();
    assert!(matches!(err, StoreError::Corrupt { .. }), "{err}");
}
