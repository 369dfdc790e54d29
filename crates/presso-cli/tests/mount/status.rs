//! `presso status` on a busy mount: the figures move while the work happens.

use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{fastq_like, Fixture};

/// How long a status may take to show a writer that keeps writing.
const WITHIN: Duration = Duration::from_secs(30);

#[test]
fn recent_write_throughput_moves_while_a_writer_writes() {
    // The slowest codec on the CPU: the engine, not the writer, sets the pace, and writers wait
    // for it (backpressure) the way they do on a busy machine.
    let mut f = Fixture::unmounted("throughput", &["compression=gzip-9", "offload=off"]);
    f.mount(&[]);
    let source = f.scratch("reads.fastq");
    std::fs::write(&source, fastq_like(501, 16 << 20)).unwrap();
    // Another process, as a user's would be: a process that holds a file of the mount open
    // flushes it whenever it starts a program (closing the inherited descriptor at exec).
    let mut writer = Command::new("sh")
        .arg("-c")
        .arg(r#"while cat "$1"; do :; done > "$2""#)
        .arg("sh")
        .arg(&source)
        .arg(f.p("stream"))
        .stderr(Stdio::null())
        .spawn()
        .unwrap();
    let started = Instant::now();
    let mut seen = Vec::new();
    while started.elapsed() < WITHIN {
        let status = f.status();
        let rate = status["throughput"]["write_bytes_per_sec"]
            .as_f64()
            .unwrap();
        let since_mount = status["throughput"]["written_bytes"].as_u64().unwrap();
        seen.push((rate, since_mount));
        let moving = seen.windows(2).any(|w| w[1].1 > w[0].1 && w[1].0 > 0.0);
        if moving {
            break;
        }
    }
    writer.kill().unwrap();
    writer.wait().unwrap();
    assert!(
        seen.windows(2).any(|w| w[1].1 > w[0].1 && w[1].0 > 0.0),
        "while a writer wrote for {:?}, `presso status` never showed a write rate with the bytes \
         written since mount growing: (rate, written) = {seen:?}",
        started.elapsed()
    );
}

#[test]
fn lifetime_counters_outlive_the_mount_and_add_up_over_mounts() {
    let mut f = Fixture::unmounted("lifetime", &["compression=gzip-6", "offload=off"]);
    f.mount(&[]);
    let data = fastq_like(502, 4 << 20);
    std::fs::write(f.p("first.fq"), &data).unwrap();
    f.remount(&[]);
    assert_eq!(std::fs::read(f.p("first.fq")).unwrap(), data);
    f.unmount();

    // Unmounted: the pool's metadata alone answers, with both mounts' work.
    let offline = f.status();
    let life = &offline["lifetime"];
    let n = |v: &serde_json::Value, field: &str| v[field].as_u64().unwrap();
    assert!(n(life, "written_bytes") >= data.len() as u64, "{life}");
    assert!(n(life, "read_bytes") >= data.len() as u64, "{life}");
    assert!(n(life, "compressed_bytes") >= data.len() as u64, "{life}");
    assert!(n(life, "records_compressed") >= 32, "{life}");
    assert!(
        n(life, "frame_bytes") < n(life, "compressed_bytes"),
        "{life}"
    );
    assert!(
        n(life, "compress_cpu_ns") > 0,
        "software gzip takes CPU time: {life}"
    );
    assert!(n(life, "decoded_bytes") >= data.len() as u64, "{life}");
    assert!(n(life, "decode_cpu_ns") > 0, "{life}");
    let cost = &offline["lifetime_cost"];
    assert!(
        cost["compress_cpu_s_per_gb"].as_f64().unwrap() > 0.0,
        "{cost}"
    );
    assert!(cost["saved_mb_per_cpu_s"].as_f64().unwrap() > 0.0, "{cost}");

    // A third mount counts from zero and the lifetime goes on from where it was.
    f.mount(&[]);
    std::fs::write(f.p("second.fq"), &data).unwrap();
    let mounted = f.status();
    let (mount, total) = (&mounted["work"], &mounted["lifetime"]);
    assert!(n(mount, "written_bytes") >= data.len() as u64, "{mount}");
    assert!(
        n(mount, "written_bytes") < n(total, "written_bytes"),
        "{mounted}"
    );
    assert_eq!(
        n(total, "written_bytes"),
        n(life, "written_bytes") + n(mount, "written_bytes"),
        "lifetime = earlier mounts + this one: {mounted}"
    );
    f.unmount();
    let after = f.status();
    assert_eq!(
        n(&after["lifetime"], "written_bytes"),
        n(total, "written_bytes"),
        "what the mount showed is what the pool kept: {after}"
    );
}

#[test]
fn bytes_written_just_now_show_in_the_recent_rate_at_once() {
    let f = Fixture::new("rate-now");
    std::fs::write(f.p("file"), fastq_like(503, 8 << 20)).unwrap();
    // Asked at once, before any periodic sampling could have seen the bytes.
    let status = f.status();
    let t = &status["throughput"];
    assert!(t["written_bytes"].as_u64().unwrap() >= 8 << 20, "{t}");
    assert!(
        t["write_bytes_per_sec"].as_f64().unwrap() > 0.0,
        "8 MiB written in the last seconds but the recent write rate is 0: {t}"
    );
}
