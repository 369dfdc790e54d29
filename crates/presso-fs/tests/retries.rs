//! The servers' retries shown as lines (`presso_fs::retries`): against loopback ports that
//! nothing listens on, every request to the object store and every connection to PostgreSQL is
//! refused and retried until the timeout. The lines say so while it lasts, one per `QUIET` at
//! most for each server, nothing else is shown, and the operation then fails with an error that
//! says what is unavailable.
//!
//! One test in a binary of its own: the subscriber is the process's.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use presso_fs::retries::{show_server_retries_to, QUIET};
use presso_meta::postgres::{PostgresOptions, PostgresTarget};
use presso_meta::MetaStore;
use presso_objects::{locate, ObjectError, Objects};

/// A loopback port that was free a moment ago: connections to it are refused.
fn closed_port() -> u16 {
    TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

/// The lines of `lines` that begin with `prefix`, checked to be few enough for `took` and to
/// say after the first how many were held back.
fn shown(lines: &[String], prefix: &str, took: Duration) -> Vec<String> {
    let shown: Vec<String> = lines
        .iter()
        .filter(|l| l.starts_with(prefix))
        .cloned()
        .collect();
    assert!(
        !shown.is_empty(),
        "no {prefix:?} line in {took:?}: {lines:?}"
    );
    let most = 1 + (took.as_secs_f64() / QUIET.as_secs_f64()) as usize;
    assert!(
        shown.len() <= most,
        "{} lines in {took:?}: {shown:?}",
        shown.len()
    );
    // Retries come every few milliseconds at first: a line after the first tells how many
    // were held back.
    for line in &shown[1..] {
        assert!(line.contains("more since the last such line"), "{line}");
    }
    shown
}

#[test]
fn retries_against_servers_that_refuse_show_as_lines_then_the_operations_fail() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    assert!(show_server_retries_to(move |line| sink
        .lock()
        .unwrap()
        .push(line.to_string())));
    assert!(
        !show_server_retries_to(|_| {}),
        "a second subscriber was installed"
    );

    // Events of other crates, and the servers' clients' below the levels shown, are not shown.
    tracing::info!(target: "elsewhere", "not about a server");
    tracing::warn!(target: "object_storey", "a crate whose name only begins alike");
    tracing::debug!(target: "object_store::client", "a detail");
    tracing::info!(target: "presso_meta::postgres", "a note");
    assert_eq!(*lines.lock().unwrap(), Vec::<String>::new());

    let (url, mut opts) = locate(&format!(
        "s3://retries/pool?endpoint=http://127.0.0.1:{}",
        closed_port()
    ))
    .unwrap();
    opts.credentials = Some(("id".into(), "secret".into()));
    opts.retry_timeout = Duration::from_secs(6);
    let objects = Objects::connect(&url, &opts).unwrap();
    let started = Instant::now();
    let error = objects.list().expect_err("a listing from a closed port");
    let took = started.elapsed();
    assert!(matches!(error, ObjectError::Unavailable(_)), "{error}");
    let store = shown(&lines.lock().unwrap(), "presso: object store: ", took);
    assert!(store.iter().all(|l| l.contains("retry")), "{store:?}");

    let target = PostgresTarget::from_url(&format!(
        "postgres://presso@127.0.0.1:{}/presso?schema=retries",
        closed_port()
    ))
    .unwrap();
    let opts = PostgresOptions {
        connect_timeout: Duration::from_secs(6),
        ..PostgresOptions::default()
    };
    let started = Instant::now();
    let error = MetaStore::open_postgres(&target, &opts).expect_err("a closed port");
    let took = started.elapsed();
    assert!(error.to_string().contains("cannot reach"), "{error}");
    let meta = shown(&lines.lock().unwrap(), "presso: metadata server: ", took);
    assert!(
        meta.iter()
            .all(|l| l.contains("cannot reach") && l.contains("trying again")),
        "{meta:?}"
    );
    let all = lines.lock().unwrap().len();
    assert_eq!(all, store.len() + meta.len(), "{:?}", lines.lock().unwrap());
}
