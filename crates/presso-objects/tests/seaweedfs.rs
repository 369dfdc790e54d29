//! The object store client against a real S3 server (SeaweedFS on loopback).

use std::time::{Duration, Instant};

use bytes::Bytes;
use presso_objects::test_server::TestServer;
use presso_objects::{ObjectError, ObjectOptions, ObjectUrl, Objects};

fn client(tag: &str) -> Objects {
    let server = TestServer::shared();
    Objects::connect(&TestServer::fresh_url(tag), &server.options()).unwrap()
}

/// Bytes that differ at every position, so a misplaced range shows.
fn pattern(len: usize, seed: u8) -> Bytes {
    (0..len)
        .map(|i| (i as u32).wrapping_mul(2_654_435_761).to_le_bytes()[1] ^ seed)
        .collect::<Vec<u8>>()
        .into()
}

#[test]
fn objects_round_trip_whole_and_by_range() {
    let o = client("roundtrip");
    let data = pattern(300_000, 1);
    o.put("seg-1.dat", data.clone()).unwrap();
    assert_eq!(o.size("seg-1.dat").unwrap(), data.len() as u64);
    assert_eq!(o.get("seg-1.dat").unwrap(), data);
    for range in [
        0..1,
        0..4096,
        1234..99_999,
        299_999..300_000,
        150_000..300_000,
    ] {
        let got = o.get_range("seg-1.dat", range.clone()).unwrap();
        assert_eq!(got, data.slice(range.start as usize..range.end as usize));
    }
    // Replacing an object replaces it whole.
    o.put("seg-1.dat", pattern(10, 2)).unwrap();
    assert_eq!(o.get("seg-1.dat").unwrap(), pattern(10, 2));
}

#[test]
fn large_objects_go_up_in_parts() {
    let server = TestServer::shared();
    let opts = ObjectOptions {
        part_size: 5 << 20,
        ..server.options()
    };
    let o = Objects::connect(&TestServer::fresh_url("multipart"), &opts).unwrap();
    let data = pattern((5 << 20) * 2 + 12_345, 3);
    o.put("big", data.clone()).unwrap();
    assert_eq!(o.size("big").unwrap(), data.len() as u64);
    let r = (5 << 20) - 10..(5 << 20) + 10;
    assert_eq!(
        o.get_range("big", r.clone()).unwrap(),
        data.slice(r.start as usize..r.end as usize)
    );
    assert_eq!(o.get("big").unwrap(), data);
    assert_eq!(
        o.list().unwrap(),
        vec![("big".to_string(), data.len() as u64)]
    );
}

#[test]
fn listing_sees_only_the_prefix_and_deletes_are_idempotent() {
    let server = TestServer::shared();
    let a = client("list-a");
    let url_b = ObjectUrl {
        prefix: format!("{}-sibling", a.url().prefix),
        ..a.url().clone()
    };
    let b = Objects::connect(&url_b, &server.options()).unwrap();
    a.put("seg-2.dat", pattern(7, 0)).unwrap();
    a.put("seg-10.dat", pattern(9, 0)).unwrap();
    b.put("seg-3.dat", pattern(5, 0)).unwrap();
    assert_eq!(
        a.list().unwrap(),
        vec![("seg-10.dat".to_string(), 9), ("seg-2.dat".to_string(), 7)]
    );
    a.delete("seg-2.dat").unwrap();
    a.delete("seg-2.dat").unwrap();
    a.delete("never-was").unwrap();
    assert_eq!(a.list().unwrap(), vec![("seg-10.dat".to_string(), 9)]);
    assert_eq!(b.list().unwrap(), vec![("seg-3.dat".to_string(), 5)]);
}

#[test]
fn missing_objects_are_not_found() {
    let o = client("missing");
    o.put("present", pattern(3, 0)).unwrap();
    for err in [
        o.get("absent").unwrap_err(),
        o.get_range("absent", 0..1).unwrap_err(),
        o.size("absent").unwrap_err(),
    ] {
        assert_eq!(err, ObjectError::NotFound("absent".into()));
    }
}

#[test]
fn a_range_past_the_end_is_an_error_not_short_data() {
    let o = client("pastend");
    o.put("short", pattern(100, 0)).unwrap();
    let err = o.get_range("short", 50..150).unwrap_err();
    assert!(
        matches!(
            err,
            ObjectError::Truncated {
                expected: 100,
                got: 50,
                ..
            } | ObjectError::Unavailable(_)
        ),
        "{err:?}"
    );
}

#[test]
fn an_unreachable_store_is_a_clear_error_within_the_retry_timeout() {
    // A port that was free a moment ago: nothing listens there.
    let port = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let opts = ObjectOptions {
        endpoint: Some(format!("http://127.0.0.1:{port}")),
        max_retries: 2,
        retry_timeout: Duration::from_secs(5),
        connect_timeout: Duration::from_secs(1),
        ..ObjectOptions::default()
    };
    let o = Objects::connect(&ObjectUrl::parse("s3://nowhere/p").unwrap(), &opts).unwrap();
    let started = Instant::now();
    let err = o.put("x", pattern(10, 0)).unwrap_err();
    assert!(
        started.elapsed() < Duration::from_secs(30),
        "{:?}",
        started.elapsed()
    );
    match err {
        ObjectError::Unavailable(msg) => assert!(msg.contains('x'), "{msg}"),
        other => panic!("{other:?}"),
    }
}

#[test]
fn a_missing_bucket_is_a_configuration_error_that_says_so() {
    let server = TestServer::shared();
    let url = ObjectUrl::parse("s3://no-such-bucket-here/p").unwrap();
    let o = Objects::connect(&url, &server.options()).unwrap();
    match o.list().unwrap_err() {
        ObjectError::Config(msg) => assert!(msg.contains("does not exist"), "{msg}"),
        other => panic!("{other:?}"),
    }
}
