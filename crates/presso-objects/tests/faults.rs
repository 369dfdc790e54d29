//! The object store client against a real S3 server behind a proxy that spoils answers: server
//! errors, slow answers, answers cut short, refusals. Retried faults must end in success, the
//! others in a typed error; nothing may ever be returned as data that is not the object's.

use std::time::{Duration, Instant};

use bytes::Bytes;
use presso_objects::fault_proxy::{Fault, FaultProxy};
use presso_objects::test_server::TestServer;
use presso_objects::{ObjectError, ObjectOptions, Objects};

fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[2] ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

/// A client through a new proxy, and one straight to the server, on the same objects.
fn behind_proxy(
    tag: &str,
    tune: impl FnOnce(&mut ObjectOptions),
) -> (FaultProxy, Objects, Objects) {
    let server = TestServer::shared();
    let url = TestServer::fresh_url(tag);
    let proxy = FaultProxy::start(&server.address()).unwrap();
    let mut opts = ObjectOptions {
        endpoint: Some(proxy.endpoint()),
        ..server.options()
    };
    tune(&mut opts);
    let spoiled = Objects::connect(&url, &opts).unwrap();
    let direct = Objects::connect(&url, &server.options()).unwrap();
    (proxy, spoiled, direct)
}

#[test]
fn server_errors_are_retried_until_the_request_succeeds() {
    let (proxy, o, direct) = behind_proxy("retry", |_| {});
    proxy.next([Fault::Status(503), Fault::Status(500), Fault::Status(503)]);
    o.put("a", pattern(50_000, 1)).unwrap();
    assert_eq!(proxy.faults(), 3);
    assert_eq!(direct.get("a").unwrap(), pattern(50_000, 1));
    proxy.next([Fault::Status(500), Fault::Status(503)]);
    assert_eq!(
        o.get_range("a", 100..200).unwrap(),
        pattern(50_000, 1).slice(100..200)
    );
    assert_eq!(proxy.faults(), 5);
}

#[test]
fn an_answer_cut_short_is_never_taken_as_data() {
    let (proxy, o, direct) = behind_proxy("truncate", |_| {});
    let data = pattern(200_000, 2);
    direct.put("b", data.clone()).unwrap();
    for read in 0..4 {
        proxy.next([Fault::Truncate]);
        let got = match read {
            0 => o.get("b"),
            1 => o.get_range("b", 1000..150_000),
            2 => o.get_range("b", 0..200_000),
            _ => o.get_range("b", 199_000..200_000),
        };
        let want = match read {
            0 | 2 => data.clone(),
            1 => data.slice(1000..150_000),
            _ => data.slice(199_000..200_000),
        };
        match got {
            Ok(bytes) => assert_eq!(bytes, want, "read {read}"),
            Err(e) => assert!(
                matches!(
                    e,
                    ObjectError::Truncated { .. } | ObjectError::Unavailable(_)
                ),
                "read {read}: {e:?}"
            ),
        }
    }
    assert_eq!(proxy.faults(), 4);
}

#[test]
fn a_slow_answer_times_out_and_is_asked_again() {
    let (proxy, o, direct) = behind_proxy("slow", |opts| {
        opts.request_timeout = Duration::from_millis(500);
    });
    direct.put("c", pattern(1000, 3)).unwrap();
    proxy.next([Fault::Delay(Duration::from_secs(3))]);
    let started = Instant::now();
    assert_eq!(o.get("c").unwrap(), pattern(1000, 3));
    assert!(
        started.elapsed() < Duration::from_secs(3),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(proxy.requests(), 2, "the slow request, then its retry");
}

#[test]
fn a_store_that_keeps_failing_is_unavailable_then_recovers() {
    let (proxy, o, direct) = behind_proxy("down", |opts| {
        opts.max_retries = 3;
        opts.retry_timeout = Duration::from_secs(5);
    });
    proxy.always(Some(Fault::Status(503)));
    let started = Instant::now();
    let err = o.put("d", pattern(10, 4)).unwrap_err();
    assert!(matches!(err, ObjectError::Unavailable(_)), "{err:?}");
    assert!(started.elapsed() < Duration::from_secs(30));
    assert_eq!(proxy.requests(), 4, "the request and its three retries");
    assert!(matches!(direct.get("d"), Err(ObjectError::NotFound(_))));
    proxy.always(None);
    o.put("d", pattern(10, 4)).unwrap();
    assert_eq!(direct.get("d").unwrap(), pattern(10, 4));
}

#[test]
fn a_refusal_is_reported_at_once_not_retried() {
    let (proxy, o, _) = behind_proxy("denied", |_| {});
    proxy.next([Fault::Status(403)]);
    let err = o.put("e", pattern(10, 5)).unwrap_err();
    assert!(matches!(err, ObjectError::Denied(_)), "{err:?}");
    assert_eq!(proxy.requests(), 1);
}

/// A restart of the server itself (not a proxy's fault): a write begun while it is down waits
/// and retries, then succeeds, and everything written before is still there.
#[test]
fn writes_ride_out_a_server_restart() {
    let server = TestServer::start().expect("start a server of this test's own");
    // A restarted SeaweedFS refuses connections, then answers 500 until its volume server has
    // registered again, for 10 to 50 s here: the defaults' patience (retries for up to two
    // minutes), not the other tests' short one.
    let defaults = ObjectOptions::default();
    let patient = ObjectOptions {
        max_retries: defaults.max_retries,
        retry_timeout: defaults.retry_timeout,
        ..server.options()
    };
    let objects = Objects::connect(&TestServer::fresh_url("restart"), &patient).unwrap();
    let started = Instant::now();
    objects.put("before", Bytes::from_static(b"kept")).unwrap();
    std::thread::scope(|s| {
        let restart = s.spawn(|| server.restart());
        // Writes go on throughout the restart.
        for i in 0..40 {
            objects
                .put(&format!("during-{i}"), Bytes::from(vec![i as u8; 1000]))
                .unwrap_or_else(|e| panic!("write {i} during the restart: {e}"));
        }
        restart.join().unwrap().expect("the server came back");
    });
    eprintln!("40 writes through a restart: {:?}", started.elapsed());
    objects.put("after", Bytes::from_static(b"new")).unwrap();
    assert_eq!(objects.get("before").unwrap(), Bytes::from_static(b"kept"));
    assert_eq!(objects.get("after").unwrap(), Bytes::from_static(b"new"));
    for i in 0..40 {
        assert_eq!(objects.get(&format!("during-{i}")).unwrap().len(), 1000);
    }
}
