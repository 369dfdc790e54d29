//! Counters of every verdict and every backend, cheap to update from many threads and serialisable
//! to JSON.

use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use crate::codec::{CodecId, CODECS};

/// What the engine did with a record.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Verdict {
    /// Compressed within the budget.
    Compressed,
    /// All zeros: a hole frame with no payload.
    Hole,
    /// The codec's output did not fit the budget: stored raw.
    StoredRaw,
    /// The pre-check judged it incompressible: stored raw without running the codec.
    Skipped,
    /// Stored raw because the codec is `off` or the record is empty.
    Uncompressed,
}

/// Where a record's compression ran.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum BackendKind {
    /// Nothing ran: holes, skips and `off` are decided before routing.
    None,
    /// The CPU software path.
    Software,
    /// The accelerator backend.
    Accelerator,
}

/// Why a record that could have been offloaded ran in software.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Fallback {
    /// The accelerator's queue was full.
    Busy,
    /// The accelerator failed the job; it was redone in software.
    Failure,
    /// The accelerator is marked unavailable.
    Unavailable,
}

const BUCKETS: usize = 28;

/// A log2 histogram of latencies in microseconds: bucket `i` counts `[2^i, 2^(i+1))` µs
/// (bucket 0 also holds sub-microsecond latencies).
#[derive(Default)]
struct Histogram([AtomicU64; BUCKETS]);

impl Histogram {
    fn record(&self, latency: Duration) {
        let micros = latency.as_micros().max(1) as u64;
        let bucket = (63 - micros.leading_zeros() as usize).min(BUCKETS - 1);
        self.0[bucket].fetch_add(1, Relaxed);
    }

    fn snapshot(&self) -> LatencySnapshot {
        let counts: Vec<u64> = self.0.iter().map(|c| c.load(Relaxed)).collect();
        let total: u64 = counts.iter().sum();
        let quantile = |q: f64| -> u64 {
            if total == 0 {
                return 0;
            }
            let rank = (q * total as f64).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, c) in counts.iter().enumerate() {
                seen += c;
                if seen >= rank {
                    return 2u64 << i;
                }
            }
            2u64 << (BUCKETS - 1)
        };
        LatencySnapshot {
            p50_us_le: quantile(0.50),
            p99_us_le: quantile(0.99),
            buckets: counts
                .iter()
                .enumerate()
                .filter(|(_, &c)| c > 0)
                .map(|(i, &c)| LatencyBucket {
                    lt_us: 2u64 << i,
                    count: c,
                })
                .collect(),
        }
    }
}

#[derive(Default)]
struct CodecCounters {
    records: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    compressed: AtomicU64,
    holes: AtomicU64,
    stored_raw: AtomicU64,
    precheck_skips: AtomicU64,
    uncompressed: AtomicU64,
    errors: AtomicU64,
}

#[derive(Default)]
struct BackendCounters {
    records: AtomicU64,
    bytes_in: AtomicU64,
    bytes_out: AtomicU64,
    cpu_ns: AtomicU64,
    latency: Histogram,
}

/// Live counters, shared by every thread of an engine.
#[derive(Default)]
pub struct Stats {
    codecs: [CodecCounters; CODECS.len()],
    backends: [BackendCounters; 3],
    fallback_busy: AtomicU64,
    fallback_failure: AtomicU64,
    fallback_unavailable: AtomicU64,
    accel_failures: AtomicU64,
    accel_marked_unavailable: AtomicU64,
    accel_reprobes: AtomicU64,
    accel_reprobe_failures: AtomicU64,
}

/// One finished record, as the stats see it.
pub(crate) struct RecordEvent {
    pub codec: CodecId,
    pub verdict: Verdict,
    pub backend: BackendKind,
    pub bytes_in: usize,
    pub bytes_out: usize,
    pub cpu: Duration,
    pub latency: Duration,
}

impl Stats {
    pub(crate) fn record(&self, event: &RecordEvent) {
        let codec = &self.codecs[event.codec as usize];
        codec.records.fetch_add(1, Relaxed);
        codec.bytes_in.fetch_add(event.bytes_in as u64, Relaxed);
        codec.bytes_out.fetch_add(event.bytes_out as u64, Relaxed);
        match event.verdict {
            Verdict::Compressed => &codec.compressed,
            Verdict::Hole => &codec.holes,
            Verdict::StoredRaw => &codec.stored_raw,
            Verdict::Skipped => &codec.precheck_skips,
            Verdict::Uncompressed => &codec.uncompressed,
        }
        .fetch_add(1, Relaxed);
        let backend = &self.backends[event.backend as usize];
        backend.records.fetch_add(1, Relaxed);
        backend.bytes_in.fetch_add(event.bytes_in as u64, Relaxed);
        backend.bytes_out.fetch_add(event.bytes_out as u64, Relaxed);
        backend
            .cpu_ns
            .fetch_add(event.cpu.as_nanos() as u64, Relaxed);
        backend.latency.record(event.latency);
    }

    /// A record its codec failed on (an error, not a full budget); it is stored raw, and
    /// [`Stats::record`] counts it under `stored_raw` as well.
    pub(crate) fn codec_error(&self, codec: CodecId) {
        self.codecs[codec as usize].errors.fetch_add(1, Relaxed);
    }

    pub(crate) fn fallback(&self, why: Fallback) {
        match why {
            Fallback::Busy => &self.fallback_busy,
            Fallback::Failure => &self.fallback_failure,
            Fallback::Unavailable => &self.fallback_unavailable,
        }
        .fetch_add(1, Relaxed);
    }

    pub(crate) fn accel_failure(&self) {
        self.accel_failures.fetch_add(1, Relaxed);
    }

    pub(crate) fn accel_marked_unavailable(&self) {
        self.accel_marked_unavailable.fetch_add(1, Relaxed);
    }

    pub(crate) fn accel_reprobe(&self, ok: bool) {
        self.accel_reprobes.fetch_add(1, Relaxed);
        if !ok {
            self.accel_reprobe_failures.fetch_add(1, Relaxed);
        }
    }

    /// A consistent-enough copy of every counter (each counter is read atomically).
    pub fn snapshot(&self, accelerator: Option<&str>) -> StatsSnapshot {
        let codecs = CODECS
            .iter()
            .map(|info| {
                let c = &self.codecs[info.id as usize];
                CodecSnapshot {
                    codec: info.name.to_string(),
                    records: c.records.load(Relaxed),
                    bytes_in: c.bytes_in.load(Relaxed),
                    bytes_out: c.bytes_out.load(Relaxed),
                    compressed: c.compressed.load(Relaxed),
                    holes: c.holes.load(Relaxed),
                    stored_raw: c.stored_raw.load(Relaxed),
                    precheck_skips: c.precheck_skips.load(Relaxed),
                    uncompressed: c.uncompressed.load(Relaxed),
                    errors: c.errors.load(Relaxed),
                }
            })
            .filter(|c| c.records > 0)
            .collect();
        let names = ["none", "cpu", accelerator.unwrap_or("accelerator")];
        let backends = [
            BackendKind::None,
            BackendKind::Software,
            BackendKind::Accelerator,
        ]
        .iter()
        .map(|&kind| {
            let b = &self.backends[kind as usize];
            BackendSnapshot {
                backend: names[kind as usize].to_string(),
                kind,
                records: b.records.load(Relaxed),
                bytes_in: b.bytes_in.load(Relaxed),
                bytes_out: b.bytes_out.load(Relaxed),
                cpu_seconds: b.cpu_ns.load(Relaxed) as f64 / 1e9,
                latency: b.latency.snapshot(),
            }
        })
        .collect();
        StatsSnapshot {
            codecs,
            backends,
            fallbacks: FallbackSnapshot {
                busy: self.fallback_busy.load(Relaxed),
                failure: self.fallback_failure.load(Relaxed),
                unavailable: self.fallback_unavailable.load(Relaxed),
            },
            accelerator: AcceleratorSnapshot {
                name: accelerator.map(str::to_string),
                failures: self.accel_failures.load(Relaxed),
                marked_unavailable: self.accel_marked_unavailable.load(Relaxed),
                reprobes: self.accel_reprobes.load(Relaxed),
                reprobe_failures: self.accel_reprobe_failures.load(Relaxed),
            },
        }
    }
}

/// Counters of one codec (the codec requested, whatever the verdict).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct CodecSnapshot {
    /// Codec name.
    pub codec: String,
    /// Records submitted with this codec.
    pub records: u64,
    /// Logical bytes in.
    pub bytes_in: u64,
    /// Frame bytes out (headers included).
    pub bytes_out: u64,
    /// Records stored compressed.
    pub compressed: u64,
    /// All-zero records stored as holes.
    pub holes: u64,
    /// Records over the budget, stored raw.
    pub stored_raw: u64,
    /// Records the pre-check skipped, stored raw.
    pub precheck_skips: u64,
    /// Records stored raw because the codec is off or they were empty.
    pub uncompressed: u64,
    /// Records the codec failed on with an error rather than a full budget, stored raw (and
    /// counted in `stored_raw` too). Anything but zero is a defect or a codec this build lacks.
    #[serde(default)]
    pub errors: u64,
}

/// Latency quantiles (upper bucket bounds) and the non-empty buckets.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencySnapshot {
    /// Median latency is below this many microseconds.
    pub p50_us_le: u64,
    /// 99th-percentile latency is below this many microseconds.
    pub p99_us_le: u64,
    /// Non-empty log2 buckets.
    pub buckets: Vec<LatencyBucket>,
}

/// One histogram bucket: `count` records took less than `lt_us` µs (and at least half that).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct LatencyBucket {
    /// Exclusive upper bound in microseconds.
    pub lt_us: u64,
    /// Records in the bucket.
    pub count: u64,
}

/// Counters of one backend.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BackendSnapshot {
    /// Backend name (`none`, `cpu`, or the accelerator's name).
    pub backend: String,
    /// Which kind of backend.
    pub kind: BackendKind,
    /// Records finished here.
    pub records: u64,
    /// Logical bytes in.
    pub bytes_in: u64,
    /// Frame bytes out.
    pub bytes_out: u64,
    /// CPU time spent compressing (thread CPU time; zero for real hardware).
    pub cpu_seconds: f64,
    /// Submission-to-completion latency.
    pub latency: LatencySnapshot,
}

/// Records that could have been offloaded but ran in software, by reason.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct FallbackSnapshot {
    /// The accelerator queue was full.
    pub busy: u64,
    /// The accelerator failed the job and the CPU redid it.
    pub failure: u64,
    /// The accelerator was marked unavailable.
    pub unavailable: u64,
}

/// The accelerator's health history.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct AcceleratorSnapshot {
    /// Its name, if the engine has one.
    pub name: Option<String>,
    /// Jobs it failed.
    pub failures: u64,
    /// Times it was marked unavailable after consecutive failures.
    pub marked_unavailable: u64,
    /// Re-initialisation attempts after a backoff.
    pub reprobes: u64,
    /// Re-initialisation attempts that failed.
    pub reprobe_failures: u64,
}

/// Every counter of an engine at one moment.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct StatsSnapshot {
    /// Per requested codec (codecs with no records are left out).
    pub codecs: Vec<CodecSnapshot>,
    /// Per backend.
    pub backends: Vec<BackendSnapshot>,
    /// Software fallbacks by reason.
    pub fallbacks: FallbackSnapshot,
    /// Accelerator health.
    pub accelerator: AcceleratorSnapshot,
}

impl StatsSnapshot {
    /// The counters of one backend kind.
    pub fn backend(&self, kind: BackendKind) -> &BackendSnapshot {
        &self.backends[kind as usize]
    }

    /// The counters of one codec, if it saw records.
    pub fn codec(&self, codec: CodecId) -> Option<&CodecSnapshot> {
        self.codecs.iter().find(|c| c.codec == codec.name())
    }
}

/// CPU time consumed by the calling thread so far.
pub fn thread_cpu_time() -> Duration {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: clock_gettime writes one timespec into the valid pointer given.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut ts) };
    if rc != 0 {
        return Duration::ZERO;
    }
    Duration::new(ts.tv_sec as u64, ts.tv_nsec as u32)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn histogram_quantiles_bound_the_samples() {
        let h = Histogram::default();
        for micros in [1u64, 3, 3, 3, 100, 100, 100, 100, 100, 5000] {
            h.record(Duration::from_micros(micros));
        }
        let snap = h.snapshot();
        assert_eq!(snap.p50_us_le, 128, "median 100 µs falls in [64,128)");
        assert_eq!(snap.p99_us_le, 8192, "5000 µs falls in [4096,8192)");
        assert_eq!(snap.buckets.iter().map(|b| b.count).sum::<u64>(), 10);
    }

    #[test]
    fn snapshot_serialises_to_json() {
        let stats = Stats::default();
        stats.record(&RecordEvent {
            codec: CodecId::Gzip,
            verdict: Verdict::Compressed,
            backend: BackendKind::Accelerator,
            bytes_in: 100,
            bytes_out: 40,
            cpu: Duration::from_millis(1),
            latency: Duration::from_micros(10),
        });
        stats.fallback(Fallback::Busy);
        let json = serde_json::to_value(stats.snapshot(Some("isal"))).unwrap();
        assert_eq!(json["codecs"][0]["codec"], "gzip");
        assert_eq!(json["codecs"][0]["compressed"], 1);
        assert_eq!(json["backends"][2]["backend"], "isal");
        assert_eq!(json["backends"][2]["bytes_out"], 40);
        assert_eq!(json["fallbacks"]["busy"], 1);
        assert_eq!(json["codecs"][0]["errors"], 0);
    }

    #[test]
    fn codec_errors_are_counted_and_older_snapshots_still_read() {
        let stats = Stats::default();
        stats.codec_error(CodecId::Zstd);
        stats.record(&RecordEvent {
            codec: CodecId::Zstd,
            verdict: Verdict::StoredRaw,
            backend: BackendKind::Software,
            bytes_in: 100,
            bytes_out: 132,
            cpu: Duration::ZERO,
            latency: Duration::ZERO,
        });
        let snap = stats.snapshot(None);
        let zstd = snap.codec(CodecId::Zstd).unwrap();
        assert_eq!((zstd.errors, zstd.stored_raw), (1, 1));
        // A snapshot written before the field existed (persisted, or from an older daemon).
        let mut json = serde_json::to_value(&snap).unwrap();
        json["codecs"][0].as_object_mut().unwrap().remove("errors");
        let read: StatsSnapshot = serde_json::from_value(json).unwrap();
        assert_eq!(read.codecs[0].errors, 0);
    }

    /// A build without libzstd fails every zstd record: each is stored raw, and counted as a
    /// codec error rather than as a record that did not shrink. (Runs in the
    /// `--no-default-features` pass of the test script.)
    #[cfg(not(feature = "zstd"))]
    #[test]
    fn a_codec_error_is_stored_raw_and_counted() {
        use crate::{CodecSpec, Engine, EngineConfig, Record};
        let engine = Engine::with_accelerator(
            EngineConfig {
                workers: 1,
                precheck: false,
                ..EngineConfig::default()
            },
            None,
        );
        let spec: CodecSpec = "zstd-3".parse().unwrap();
        let encoded = engine.compress(Record::from(vec![b'a'; 4096]), spec);
        assert_eq!(encoded.verdict, Verdict::StoredRaw);
        let snap = engine.stats();
        let zstd = snap.codec(CodecId::Zstd).unwrap();
        assert_eq!((zstd.errors, zstd.stored_raw), (1, 1));
    }
}
