//! Pool properties changed while files are being written: a compression change half way
//! through a file.

use std::fs::{File, OpenOptions};
use std::io::Write;
use std::os::unix::fs::FileExt;

use crate::common::*;

#[test]
fn compression_change_half_way_through_a_file() {
    let mut f = Fixture::new("props");
    let dir = f.p("logs");
    std::fs::create_dir(&dir).unwrap();
    exec(presso().args(["set", "compression=gzip-6"]).arg(&dir)).ok();
    let data = text_like(81, 8 << 20);
    let half = (4 << 20) + 1234;
    let path = dir.join("big.log");
    let mut file = File::create(&path).unwrap();
    file.write_all(&data[..half]).unwrap();
    file.sync_all().unwrap();
    let codec_records = |f: &Fixture, name: &str| -> u64 {
        let s = f.status();
        s["codecs"]
            .as_array()
            .unwrap()
            .iter()
            .filter(|c| c["codec"] == name)
            .map(|c| c["records"].as_u64().unwrap())
            .sum()
    };
    assert!(codec_records(&f, "gzip") >= 32);
    assert_eq!(codec_records(&f, "zstd"), 0);

    let out = exec(presso().args(["set", "compression=zstd-3"]).arg(&dir)).ok();
    assert!(out.contains("zstd-3"), "{out}");
    let got = exec(presso().args(["get", "compression", "--json"]).arg(&dir)).ok();
    assert!(got.contains("\"zstd-3\"") && got.contains("local"), "{got}");
    file.write_all(&data[half..]).unwrap();
    file.sync_all().unwrap();
    drop(file);
    let second = fastq_like(82, (3 << 20) + 5);
    std::fs::write(dir.join("second.fastq"), &second).unwrap();
    File::open(dir.join("second.fastq"))
        .unwrap()
        .sync_all()
        .unwrap();

    assert!(codec_records(&f, "zstd") >= 32 + 24);
    let s = f.status();
    assert!(s["ratio"].as_f64().unwrap() > 1.0, "{s}");
    assert_file_eq(&path, &data);
    assert_file_eq(&dir.join("second.fastq"), &second);

    // Other record sizes and codecs below it; a file keeps the record size it was created with.
    let small = dir.join("small");
    let large = dir.join("large");
    std::fs::create_dir(&small).unwrap();
    std::fs::create_dir(&large).unwrap();
    exec(presso().args(["set", "recordsize=4K"]).arg(&small)).ok();
    exec(presso().args(["set", "compression=lz4"]).arg(&small)).ok();
    exec(presso().args(["set", "recordsize=16M"]).arg(&large)).ok();
    exec(presso().args(["set", "compression=off"]).arg(&large)).ok();
    let small_data = text_like(83, 300_001);
    let large_data = fastq_like(84, (20 << 20) + 9);
    std::fs::write(small.join("f"), &small_data).unwrap();
    std::fs::write(large.join("f"), &large_data).unwrap();
    exec(presso().args(["set", "recordsize=64K"]).arg(&small)).ok();
    let mut patched = small_data.clone();
    patched[5000..5010].copy_from_slice(b"0123456789");
    let file = OpenOptions::new()
        .write(true)
        .open(small.join("f"))
        .unwrap();
    file.write_all_at(b"0123456789", 5000).unwrap();
    file.sync_all().unwrap();
    drop(file);
    File::open(large.join("f")).unwrap().sync_all().unwrap();
    assert!(codec_records(&f, "lz4") >= 300_001 / 4096);
    assert_file_eq(&small.join("f"), &patched);
    assert_file_eq(&large.join("f"), &large_data);

    f.remount(&[]);
    assert_file_eq(&path, &data);
    assert_file_eq(&dir.join("second.fastq"), &second);
    assert_file_eq(&small.join("f"), &patched);
    assert_file_eq(&large.join("f"), &large_data);
    let got = exec(presso().args(["get", "compression"]).arg(&dir)).ok();
    assert!(got.contains("zstd-3"), "{got}");
    let got = exec(presso().args(["get", "recordsize"]).arg(small.join("f"))).ok();
    assert!(got.contains("4K"), "the file's record size changed: {got}");
}
