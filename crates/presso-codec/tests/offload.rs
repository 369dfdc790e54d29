//! Routing, busy and failure fallbacks, marking the accelerator unavailable and re-probing it,
//! driven by the fault-injecting wrapper around the real ISA-L backend. Every test proves that no
//! record is lost and that the counters tell the truth.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{engine_with, isal_everything, random, text};
use presso_codec::accel::faulty::FaultyAccelerator;
use presso_codec::accel::Accelerator;
use presso_codec::{
    BackendKind, BusyPolicy, CodecSpec, Encoded, Engine, EngineConfig, Offload, Record, Verdict,
};

fn gzip() -> CodecSpec {
    "gzip-6".parse().unwrap()
}

fn records(count: usize) -> Vec<Vec<u8>> {
    (0..count).map(|i| text(16 << 10, i as u64)).collect()
}

/// An engine of `workers` CPU threads and no accelerator.
fn cpu_engine(workers: usize) -> Engine {
    let config = EngineConfig {
        workers,
        offload: Offload::Off,
        ..EngineConfig::default()
    };
    Engine::with_accelerator(config, None)
}

fn run_all(engine: &Engine, data: &[Vec<u8>]) -> Vec<Encoded> {
    let mut batch = engine.batch();
    for d in data {
        batch.submit(Record::from(d.clone()), gzip());
    }
    let out = batch.wait();
    for (encoded, original) in out.iter().zip(data) {
        assert_eq!(
            &engine.decode(&encoded.frame.contiguous()).unwrap(),
            original,
            "a record was lost or damaged"
        );
        assert_eq!(encoded.verdict, Verdict::Compressed);
    }
    out
}

#[test]
fn healthy_accelerator_takes_records_in_its_window_only() {
    let engine = Engine::new(EngineConfig {
        workers: 2,
        offload: Offload::On,
        ..EngineConfig::default()
    })
    .expect("ISA-L starts");
    assert_eq!(engine.accelerator(), Some("isal"));
    let small = text(2 << 10, 1); // below the 4 KiB window
    let inside = text(128 << 10, 2);
    let large = text(2 << 20, 3); // above the 1 MiB window
    let lz4_inside = text(128 << 10, 4);
    let a = engine.compress(Record::from(small), gzip());
    let b = engine.compress(Record::from(inside), gzip());
    let c = engine.compress(Record::from(large), gzip());
    let d = engine.compress(Record::from(lz4_inside), "lz4".parse().unwrap());
    assert_eq!(a.backend, BackendKind::Software);
    assert_eq!(b.backend, BackendKind::Accelerator);
    assert_eq!(c.backend, BackendKind::Software);
    assert_eq!(d.backend, BackendKind::Software, "ISA-L runs deflate only");
    let stats = engine.stats();
    assert_eq!(stats.backend(BackendKind::Accelerator).records, 1);
    assert_eq!(stats.backend(BackendKind::Software).records, 3);
    assert_eq!(
        stats.fallbacks.busy + stats.fallbacks.failure + stats.fallbacks.unavailable,
        0
    );
}

#[test]
fn every_nth_failure_is_redone_in_software() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_everything(2, 8));
    plan.fail_every(3);
    let engine = engine_with(Arc::new(faulty), |c| c.failure_limit = 1000);
    let data = records(300);
    run_all(&engine, &data);
    let stats = engine.stats();
    let accel = stats.backend(BackendKind::Accelerator).records;
    let cpu = stats.backend(BackendKind::Software).records;
    assert_eq!(accel + cpu, 300, "each record finished exactly once");
    assert_eq!(stats.fallbacks.failure, stats.accelerator.failures);
    assert_eq!(stats.fallbacks.failure, cpu - stats.fallbacks.busy);
    // Every third job the device ran failed.
    let ran = accel + stats.accelerator.failures;
    assert_eq!(stats.accelerator.failures, ran / 3);
    assert!(stats.accelerator.failures > 0);
    assert_eq!(stats.accelerator.marked_unavailable, 0);
}

#[test]
fn random_failures_lose_nothing() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_everything(2, 8));
    plan.fail_with_probability(0.3, 42);
    let engine = engine_with(Arc::new(faulty), |c| c.failure_limit = u32::MAX);
    let data = records(300);
    run_all(&engine, &data);
    let stats = engine.stats();
    assert!(stats.accelerator.failures > 30, "{:?}", stats.accelerator);
    assert_eq!(stats.fallbacks.failure, stats.accelerator.failures);
    assert_eq!(
        stats.backend(BackendKind::Accelerator).records
            + stats.backend(BackendKind::Software).records,
        300
    );
}

#[test]
fn broken_device_is_marked_unavailable_and_left_alone() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_everything(1, 2));
    plan.set_broken(true);
    let engine = engine_with(Arc::new(faulty), |c| {
        c.failure_limit = 3;
        c.reprobe_backoff = Duration::from_secs(3600);
        c.workers = 1;
    });
    let data = records(40);
    // One at a time, so exactly `failure_limit` jobs reach the device before it is marked.
    for d in &data {
        let encoded = engine.compress(Record::from(d.clone()), gzip());
        assert_eq!(&engine.decode(&encoded.frame.contiguous()).unwrap(), d);
        assert_eq!(encoded.backend, BackendKind::Software);
    }
    let stats = engine.stats();
    assert!(!engine.accelerator_available());
    assert_eq!(stats.accelerator.marked_unavailable, 1);
    assert_eq!(stats.accelerator.failures, 3);
    assert_eq!(stats.fallbacks.failure, 3);
    assert_eq!(stats.fallbacks.unavailable, 37);
    assert_eq!(stats.accelerator.reprobes, 0, "the backoff has not passed");
}

#[test]
fn repaired_device_is_reprobed_and_used_again() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_everything(1, 2));
    plan.set_broken(true);
    let engine = engine_with(Arc::new(faulty), |c| {
        c.failure_limit = 2;
        c.reprobe_backoff = Duration::ZERO;
        c.workers = 1;
    });
    let data = records(20);
    for d in &data[..10] {
        engine.compress(Record::from(d.clone()), gzip());
    }
    let broken = engine.stats();
    assert_eq!(broken.accelerator.marked_unavailable, 1);
    assert!(
        broken.accelerator.reprobe_failures >= 1,
        "re-probes fail while broken"
    );
    assert_eq!(broken.backend(BackendKind::Accelerator).records, 0);

    plan.set_broken(false);
    for d in &data[10..] {
        let encoded = engine.compress(Record::from(d.clone()), gzip());
        assert_eq!(&engine.decode(&encoded.frame.contiguous()).unwrap(), d);
        assert_eq!(encoded.backend, BackendKind::Accelerator);
    }
    let healed = engine.stats();
    assert!(engine.accelerator_available());
    assert_eq!(
        healed.accelerator.reprobes,
        healed.accelerator.reprobe_failures + 1
    );
    assert_eq!(healed.backend(BackendKind::Accelerator).records, 10);
}

#[test]
fn stalled_device_overflows_to_the_cpu_as_busy() {
    let inner = isal_everything(1, 3);
    let depth = inner.queue_depth();
    let (faulty, plan) = FaultyAccelerator::wrap(inner);
    let faulty = Arc::new(faulty);
    plan.set_stalled(true);
    let engine = engine_with(faulty.clone(), |c| {
        c.workers = 1;
        c.busy = BusyPolicy::Software;
    });
    let total = depth + 25;
    let data = records(total);
    let (tx, rx) = crossbeam_channel::unbounded();
    for (i, d) in data.iter().enumerate() {
        let tx = tx.clone();
        engine.submit(Record::from(d.clone()), gzip(), move |e| {
            tx.send((i, e)).unwrap()
        });
    }
    // The device holds `depth` jobs; everything else must come back from the CPU meanwhile.
    let mut done = Vec::new();
    for _ in 0..total - depth {
        done.push(rx.recv().unwrap());
    }
    assert_eq!(faulty.held(), depth);
    assert!(done.iter().all(|(_, e)| e.backend == BackendKind::Software));
    assert_eq!(engine.stats().fallbacks.busy as usize, total - depth);

    faulty.release();
    for _ in 0..depth {
        done.push(rx.recv().unwrap());
    }
    engine.wait_idle();
    done.sort_by_key(|(i, _)| *i);
    for ((i, encoded), original) in done.iter().zip(&data) {
        assert_eq!(
            &engine.decode(&encoded.frame.contiguous()).unwrap(),
            original,
            "record {i}"
        );
    }
    let stats = engine.stats();
    // A released job the device's own queue cannot take yet comes back as a failure and is redone.
    assert_eq!(
        (stats.backend(BackendKind::Accelerator).records + stats.fallbacks.failure) as usize,
        depth
    );
}

#[test]
fn host_cpu_backend_waits_for_room_instead_of_overflowing() {
    let inner = isal_everything(1, 3);
    let (faulty, plan) = FaultyAccelerator::wrap(inner);
    let faulty = Arc::new(faulty);
    assert!(
        faulty.shares_host_cpu(),
        "ISA-L computes on the host's cores"
    );
    let depth = faulty.queue_depth();
    plan.set_stalled(true);
    let engine = engine_with(faulty.clone(), |c| c.workers = 1);
    let data = records(40);
    let (tx, rx) = crossbeam_channel::unbounded();
    std::thread::scope(|scope| {
        // Records are routed on the submitting thread, which waits for room while the device
        // holds a full queue: it submits apart from the thread that releases the device.
        scope.spawn(|| {
            for (i, d) in data.iter().enumerate() {
                let tx = tx.clone();
                engine.submit(Record::from(d.clone()), gzip(), move |e| {
                    tx.send((i, e)).unwrap()
                });
            }
        });
        let deadline = std::time::Instant::now() + Duration::from_secs(60);
        while faulty.held() < depth {
            assert!(
                std::time::Instant::now() < deadline,
                "the device never filled"
            );
            std::thread::yield_now();
        }
        assert_eq!(engine.stats().fallbacks.busy, 0, "nothing overflowed");
        faulty.release();
    });
    let mut done: Vec<(usize, Encoded)> = (0..data.len()).map(|_| rx.recv().unwrap()).collect();
    done.sort_by_key(|(i, _)| *i);
    for ((_, encoded), original) in done.iter().zip(&data) {
        assert_eq!(
            &engine.decode(&encoded.frame.contiguous()).unwrap(),
            original
        );
    }
    let stats = engine.stats();
    assert_eq!(
        stats.fallbacks.busy, 0,
        "a host-CPU backend is waited for, not overflowed"
    );
    assert_eq!(
        stats.backend(BackendKind::Accelerator).records + stats.fallbacks.failure,
        data.len() as u64
    );
}

#[test]
fn offload_on_without_accelerator_is_a_clear_error() {
    // Offload::Off ignores any accelerator given.
    let engine = Engine::with_accelerator(
        EngineConfig {
            offload: Offload::Off,
            ..EngineConfig::default()
        },
        Some(isal_everything(1, 1)),
    );
    assert_eq!(engine.accelerator(), None);
    let e = engine.compress(Record::from(text(64 << 10, 1)), gzip());
    assert_eq!(e.backend, BackendKind::Software);
    assert!("sometimes"
        .parse::<Offload>()
        .unwrap_err()
        .contains("auto, on, off"));
}

#[test]
fn threshold_decides_between_compressed_and_raw() {
    // About 15% saving: 80% random bytes followed by 20% text.
    let mut data = random(100_000, 7);
    data.extend_from_slice(&text(25_000, 7));
    let run = |threshold: &str| {
        let engine = Engine::with_accelerator(
            EngineConfig {
                workers: 1,
                precheck: false,
                offload: Offload::Off,
                threshold: threshold.parse().unwrap(),
                ..EngineConfig::default()
            },
            None,
        );
        let e = engine.compress(Record::from(data.clone()), gzip());
        assert_eq!(engine.decode(&e.frame.contiguous()).unwrap(), data);
        (e.verdict, engine.stats())
    };
    let (lenient, stats) = run("5%");
    assert_eq!(lenient, Verdict::Compressed);
    assert_eq!(stats.codecs[0].compressed, 1);
    let (strict, stats) = run("30%");
    assert_eq!(strict, Verdict::StoredRaw);
    assert_eq!(stats.codecs[0].stored_raw, 1);
}

#[test]
fn verdicts_are_counted_per_codec() {
    let engine = cpu_engine(2);
    let mut batch = engine.batch();
    batch.submit(Record::from(vec![0u8; 8192]), gzip());
    batch.submit(Record::from(random(8192, 1)), gzip());
    batch.submit(Record::from(text(8192, 1)), gzip());
    batch.submit(Record::from(text(8192, 2)), "off".parse().unwrap());
    let verdicts: Vec<Verdict> = batch.wait().iter().map(|e| e.verdict).collect();
    assert_eq!(
        verdicts,
        [
            Verdict::Hole,
            Verdict::Skipped,
            Verdict::Compressed,
            Verdict::Uncompressed
        ]
    );
    let stats = engine.stats();
    let gzip_stats = stats.codec(presso_codec::CodecId::Gzip).unwrap();
    assert_eq!(
        (
            gzip_stats.records,
            gzip_stats.holes,
            gzip_stats.precheck_skips,
            gzip_stats.compressed
        ),
        (3, 1, 1, 1)
    );
    assert_eq!(
        stats
            .codec(presso_codec::CodecId::Off)
            .unwrap()
            .uncompressed,
        1
    );
    let json = serde_json::to_string(&stats).unwrap();
    assert!(json.contains("\"precheck_skips\":1"), "{json}");
}

#[test]
fn tiny_queue_applies_backpressure_without_losing_records() {
    let engine = Engine::with_accelerator(
        EngineConfig {
            workers: 2,
            queue_depth: 1,
            ..EngineConfig::default()
        },
        Some(isal_everything(1, 1)),
    );
    let data = records(100);
    let out = run_all(&engine, &data);
    assert_eq!(out.len(), 100);
}

/// A directory's `offload=off` and `threshold=` reach single records: the same engine sends one
/// record to the accelerator and keeps the next on the CPU, and a stricter threshold stores raw
/// what the default compresses.
#[test]
fn per_record_options_override_the_engine_defaults() {
    use presso_codec::{JobOptions, Threshold};
    use std::sync::mpsc;

    let engine = Engine::new(EngineConfig {
        workers: 2,
        offload: Offload::On,
        ..EngineConfig::default()
    })
    .expect("ISA-L starts");
    let run = |data: Vec<u8>, options: JobOptions| {
        let (tx, rx) = mpsc::channel();
        engine.submit_with(Record::from(data.clone()), gzip(), options, move |e| {
            tx.send(e).unwrap()
        });
        let encoded = rx.recv().unwrap();
        assert_eq!(engine.decode(&encoded.frame.contiguous()).unwrap(), data);
        encoded
    };
    let defaults = engine.default_options();
    let data = text(64 << 10, 7);
    assert_eq!(
        run(data.clone(), defaults).backend,
        BackendKind::Accelerator
    );
    let cpu_only = JobOptions {
        offload: false,
        ..defaults
    };
    assert_eq!(run(data.clone(), cpu_only).backend, BackendKind::Software);

    // Half random, half text: saves well under 50% but more than 12.5%.
    let mut mixed = random(32 << 10, 3);
    mixed.extend_from_slice(&text(32 << 10, 4));
    assert_eq!(run(mixed.clone(), cpu_only).verdict, Verdict::Compressed);
    let strict = JobOptions {
        threshold: Threshold::from_fraction(0.5).unwrap(),
        offload: false,
    };
    // The probe or the codec's budget may reject it; either way it is kept uncompressed.
    let verdict = run(mixed, strict).verdict;
    assert!(
        matches!(verdict, Verdict::StoredRaw | Verdict::Skipped),
        "{verdict:?}"
    );
}

/// A record with nothing to compress (codec off, or empty) is framed on the submitting thread and
/// delivered before `submit` returns; one that needs its codec goes to a worker. Either way the
/// engine counts it and `wait_idle` knows it is done.
#[test]
fn records_without_a_codec_are_framed_on_the_calling_thread() {
    let engine = cpu_engine(1);
    let caller = std::thread::current().id();
    let (tx, rx) = std::sync::mpsc::channel();
    let data = text(64 << 10, 31);
    for (record, spec) in [
        (data.clone(), CodecSpec::OFF),
        (Vec::new(), gzip()),
        (data.clone(), gzip()),
    ] {
        let tx = tx.clone();
        engine.submit(Record::from(record), spec, move |e: Encoded| {
            let _ = tx.send((std::thread::current().id(), e.verdict));
        });
    }
    let (thread, verdict) = rx.try_recv().expect("the off record was delivered at once");
    assert_eq!((thread, verdict), (caller, Verdict::Uncompressed));
    let (thread, verdict) = rx
        .try_recv()
        .expect("the empty record was delivered at once");
    assert_eq!((thread, verdict), (caller, Verdict::Uncompressed));
    let (thread, verdict) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_ne!(thread, caller, "gzip runs on a worker");
    assert_eq!(verdict, Verdict::Compressed);
    engine.wait_idle();
    let stats = engine.stats();
    assert_eq!(stats.backend(BackendKind::None).records, 2);
    assert_eq!(stats.backend(BackendKind::Software).records, 1);
}

#[test]
fn records_are_routed_on_the_calling_thread_and_small_ones_compressed_there() {
    let engine = cpu_engine(1);
    let limit = engine.config().inline_below;
    assert!(
        limit > 1024,
        "the default keeps small files off the workers"
    );
    let caller = std::thread::current().id();
    let (tx, rx) = std::sync::mpsc::channel();
    let submit = |engine: &Engine, record: Vec<u8>| {
        let tx = tx.clone();
        engine.submit(Record::from(record), gzip(), move |e: Encoded| {
            let _ = tx.send((std::thread::current().id(), e.verdict, e.backend));
        });
    };
    submit(&engine, text(1024, 5));
    assert_eq!(
        rx.try_recv().expect("compressed before submit returned"),
        (caller, Verdict::Compressed, BackendKind::Software)
    );
    submit(&engine, vec![0u8; 1024]);
    assert_eq!(
        rx.try_recv().expect("routed before submit returned"),
        (caller, Verdict::Hole, BackendKind::None)
    );
    submit(&engine, text(limit, 6));
    let (thread, verdict, _) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_ne!(thread, caller, "a record at the limit goes to a worker");
    assert_eq!(verdict, Verdict::Compressed);

    let every_record_to_workers = Engine::with_accelerator(
        EngineConfig {
            workers: 1,
            offload: Offload::Off,
            inline_below: 0,
            ..EngineConfig::default()
        },
        None,
    );
    submit(&every_record_to_workers, text(1024, 7));
    let (thread, verdict, _) = rx.recv_timeout(Duration::from_secs(60)).unwrap();
    assert_ne!(thread, caller, "inline_below 0 hands every record over");
    assert_eq!(verdict, Verdict::Compressed);

    // Routed here, a small record the accelerator's window takes still goes to the accelerator.
    let offloading = engine_with(isal_everything(1, 1), |c| c.workers = 1);
    let data = text(1024, 8);
    let e = offloading.compress(Record::from(data.clone()), gzip());
    assert_eq!(
        (e.verdict, e.backend),
        (Verdict::Compressed, BackendKind::Accelerator)
    );
    assert_eq!(offloading.decode(&e.frame.contiguous()).unwrap(), data);

    // A record for the accelerator is in its queue when submit returns: no worker routed it.
    let (faulty, plan) = FaultyAccelerator::wrap(isal_everything(1, 1));
    let faulty = Arc::new(faulty);
    plan.set_stalled(true);
    let routed_here = engine_with(faulty.clone(), |c| c.workers = 1);
    routed_here.submit(Record::from(text(64 << 10, 9)), gzip(), |_| {});
    let held = faulty.held();
    faulty.release();
    assert_eq!(held, 1, "submit returned before the record was routed");
    routed_here.wait_idle();
    assert_eq!(
        routed_here
            .stats()
            .backend(BackendKind::Accelerator)
            .records,
        1
    );
}
