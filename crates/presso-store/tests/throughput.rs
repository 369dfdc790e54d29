//! Quick append-throughput measurement on real files (not a benchmark; run with
//! `cargo test -p presso-store --release --test throughput -- --ignored --nocapture`).

mod common;

use std::time::Instant;

use common::{config, payload, TempDir};
use presso_store::Store;

#[test]
#[ignore]
fn append_throughput_128k() {
    let tmp = TempDir::new("tput");
    let store = Store::create(tmp.dir(), Default::default(), config(256 << 20)).unwrap();
    let entry = payload(1, 128 << 10);
    let count = 4096u64; // 512 MiB
    let start = Instant::now();
    for _ in 0..count {
        store.append(&entry).unwrap();
    }
    let appended = start.elapsed();
    store.sync().unwrap();
    let synced = start.elapsed();
    let mb = (count * entry.len() as u64) as f64 / 1e6;
    eprintln!(
        "append 128 KiB x {count}: {:.0} MB/s appending (page cache), {:.0} MB/s including the final sync",
        mb / appended.as_secs_f64(),
        mb / synced.as_secs_f64()
    );
}
