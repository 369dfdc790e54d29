//! The ISA-L backend run on the submitting thread (`on_submitter`): records are compressed
//! before `submit` returns, on the caller's thread, and failures, marking the device unavailable
//! and re-probing it work as with threads of its own. Every test proves that no record is lost.

mod common;

use std::sync::Arc;
use std::time::Duration;

use common::{engine_with, isal_on_submitter, text};
use presso_codec::accel::faulty::FaultyAccelerator;
use presso_codec::{
    BackendKind, CodecSpec, Encoded, Engine, EngineConfig, Offload, Record, Verdict,
};

fn gzip() -> CodecSpec {
    "gzip-6".parse().unwrap()
}

/// Submits `data` and returns the thread the frame was delivered on, if before `submit`
/// returned, with the frame.
fn submit_here(engine: &Engine, data: &[u8]) -> (Option<std::thread::ThreadId>, Encoded) {
    let (tx, rx) = std::sync::mpsc::channel();
    engine.submit(Record::from(data.to_vec()), gzip(), move |e: Encoded| {
        let _ = tx.send((std::thread::current().id(), e));
    });
    match rx.try_recv() {
        Ok((thread, e)) => (Some(thread), e),
        Err(_) => (None, rx.recv_timeout(Duration::from_secs(60)).unwrap().1),
    }
}

#[test]
fn records_are_compressed_on_the_calling_thread_before_submit_returns() {
    let engine = Engine::new(EngineConfig {
        workers: 2,
        offload: Offload::On,
        offload_on_submitter: true,
        ..EngineConfig::default()
    })
    .expect("ISA-L starts");
    assert_eq!(engine.accelerator(), Some("isal"));
    let caller = std::thread::current().id();
    for (i, len) in [4 << 10, 64 << 10, 128 << 10, 1 << 20]
        .into_iter()
        .enumerate()
    {
        let data = text(len, i as u64);
        let (thread, e) = submit_here(&engine, &data);
        assert_eq!(thread, Some(caller), "{len} bytes compressed on the caller");
        assert_eq!(
            (e.verdict, e.backend),
            (Verdict::Compressed, BackendKind::Accelerator)
        );
        assert_eq!(engine.decode(&e.frame.contiguous()).unwrap(), data);
    }
    assert_eq!(engine.stats().backend(BackendKind::Accelerator).records, 4);
}

#[test]
fn failures_on_several_submitting_threads_are_redone_in_software() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_on_submitter());
    plan.fail_every(3);
    let engine = engine_with(Arc::new(faulty), |c| c.failure_limit = 1000);
    std::thread::scope(|scope| {
        for t in 0..4u64 {
            let engine = &engine;
            scope.spawn(move || {
                let mut batch = engine.batch();
                let data: Vec<Vec<u8>> = (0..75).map(|i| text(16 << 10, t * 100 + i)).collect();
                for d in &data {
                    batch.submit(Record::from(d.clone()), gzip());
                }
                for (encoded, original) in batch.wait().iter().zip(&data) {
                    assert_eq!(
                        &engine.decode(&encoded.frame.contiguous()).unwrap(),
                        original
                    );
                    assert_eq!(encoded.verdict, Verdict::Compressed);
                }
            });
        }
    });
    let stats = engine.stats();
    let accel = stats.backend(BackendKind::Accelerator).records;
    let cpu = stats.backend(BackendKind::Software).records;
    assert_eq!(accel + cpu, 300, "each record finished exactly once");
    assert_eq!(
        stats.fallbacks.busy, 0,
        "a job on the caller is never refused"
    );
    assert_eq!(stats.fallbacks.failure, stats.accelerator.failures);
    assert_eq!(stats.accelerator.failures, cpu);
    assert_eq!(stats.accelerator.failures, (accel + cpu) / 3);
}

#[test]
fn a_broken_device_is_marked_unavailable_then_reprobed_and_used_again_on_the_caller() {
    let (faulty, plan) = FaultyAccelerator::wrap(isal_on_submitter());
    plan.set_broken(true);
    let engine = engine_with(Arc::new(faulty), |c| {
        c.failure_limit = 2;
        c.reprobe_backoff = Duration::ZERO;
        c.workers = 1;
    });
    let data: Vec<Vec<u8>> = (0..20).map(|i| text(16 << 10, i)).collect();
    for d in &data[..10] {
        let encoded = engine.compress(Record::from(d.clone()), gzip());
        assert_eq!(&engine.decode(&encoded.frame.contiguous()).unwrap(), d);
        assert_eq!(encoded.backend, BackendKind::Software);
    }
    let broken = engine.stats();
    assert_eq!(broken.accelerator.marked_unavailable, 1);
    assert!(broken.accelerator.reprobe_failures >= 1);

    plan.set_broken(false);
    let caller = std::thread::current().id();
    for d in &data[10..] {
        let (thread, encoded) = submit_here(&engine, d);
        assert_eq!(&engine.decode(&encoded.frame.contiguous()).unwrap(), d);
        assert_eq!(encoded.backend, BackendKind::Accelerator);
        assert_eq!(
            thread,
            Some(caller),
            "re-initialised, it still runs on the caller"
        );
    }
    assert!(engine.accelerator_available());
    assert_eq!(engine.stats().backend(BackendKind::Accelerator).records, 10);
}
