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
