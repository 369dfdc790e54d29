//! The pool header file `presso.pool`: parsed on its own and as the header of a pool directory
//! being opened. Nothing may panic; a header that parses is the one canonical encoding of what
//! it holds, and a pool whose header parses opens and takes appends.
//!
//! The first input byte picks what the rest is: the header's bytes themselves (0), or edits of a
//! valid header (1), or edits of a valid header whose CRC-32 is then made right again (2), so the
//! checks behind the CRC (version, reserved, nanoseconds, the properties block) meet damage too.
#![no_main]

#[path = "common/mod.rs"]
mod common;

use std::collections::BTreeMap;
use std::sync::Arc;

use libfuzzer_sys::fuzz_target;
use presso_store::header::{POOL_FILE, POOL_VERSION};
use presso_store::{Committed, PoolHeader, SimDir, Store, StoreConfig, StoreError};

fn valid_header() -> Vec<u8> {
    let properties: BTreeMap<String, String> = [("compression", "zstd-3"), ("recordsize", "128K")]
        .into_iter()
        .map(|(k, v)| (k.to_string(), v.to_string()))
        .collect();
    PoolHeader {
        version: POOL_VERSION,
        uuid: *b"0123456789abcdef",
        created_secs: 1_700_000_000,
        created_nanos: 123_456_789,
        properties,
    }
    .encode()
}

fuzz_target!(|data: &[u8]| {
    let Some((&mode, rest)) = data.split_first() else {
        return;
    };
    let bytes = match mode % 3 {
        0 => rest.to_vec(),
        kind => {
            let mut bytes = valid_header();
            common::mutate(&mut bytes, rest, 8);
            if kind == 2 && bytes.len() >= 4 {
                let n = bytes.len() - 4;
                let crc = crc32fast::hash(&bytes[..n]);
                bytes[n..].copy_from_slice(&crc.to_le_bytes());
            }
            bytes
        }
    };

    let decoded = PoolHeader::decode(&bytes, POOL_FILE);
    if let Ok(header) = &decoded {
        assert_eq!(
            header.encode(),
            bytes,
            "a header that parses is not its own encoding"
        );
    }

    let sim = SimDir::new();
    sim.set_contents(POOL_FILE, &bytes);
    let read = Store::read_header(&sim);
    assert_eq!(read.as_ref().ok(), decoded.as_ref().ok());
    let opened = Store::open(
        Arc::new(sim.clone()),
        StoreConfig {
            segment_size: 1 << 20,
            ..StoreConfig::default()
        },
        &Committed::default(),
    );
    match (&decoded, opened) {
        (Ok(header), Ok(store)) => {
            assert_eq!(store.header(), header);
            let loc = store.append(b"after the open").expect("append");
            store.sync().expect("sync");
            assert_eq!(store.read(loc).expect("read"), b"after the open");
        }
        (Err(_), Err(e)) => assert!(
            matches!(
                e,
                StoreError::NotAPool { .. }
                    | StoreError::NewerVersion { .. }
                    | StoreError::Corrupt { .. }
            ),
            "unexpected error for a damaged header: {e}"
        ),
        (Ok(_), Err(e)) => panic!("the header parses but the pool does not open: {e}"),
        (Err(e), Ok(_)) => panic!("the header does not parse ({e}) but the pool opens"),
    }
    // A refused open leaves the header file as it was.
    if decoded.is_err() {
        assert_eq!(sim.contents(POOL_FILE).as_deref(), Some(&bytes[..]));
    }
});
