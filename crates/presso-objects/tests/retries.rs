//! The client's retries shown as lines (`presso_objects::retries`): against a loopback port that
//! nothing listens on, every request is refused and retried until the retry timeout. The lines
//! say so while it lasts, one per `QUIET` at most, nothing else is shown, and the operation then
//! fails with an error that says the store is unavailable.
//!
//! One test in a binary of its own: the subscriber is the process's.

use std::net::TcpListener;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use presso_objects::retries::{show_retries_to, QUIET};
use presso_objects::{locate, ObjectError, Objects};

#[test]
fn retries_against_a_store_that_refuses_show_as_lines_then_the_operation_fails() {
    let lines = Arc::new(Mutex::new(Vec::<String>::new()));
    let sink = lines.clone();
    assert!(show_retries_to(move |line| sink
        .lock()
        .unwrap()
        .push(line.to_string())));
    assert!(
        !show_retries_to(|_| {}),
        "a second subscriber was installed"
    );

    // Events of other crates, and the client's own below INFO, are not shown.
    tracing::info!(target: "elsewhere", "not about the object store");
    tracing::warn!(target: "object_storey", "a crate whose name only begins alike");
    tracing::debug!(target: "object_store::client", "a detail");
    assert_eq!(*lines.lock().unwrap(), Vec::<String>::new());

    // A port that was free a moment ago: connections to it are refused.
    let port = TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port();
    let (url, mut opts) = locate(&format!(
        "s3://retries/pool?endpoint=http://127.0.0.1:{port}"
    ))
    .unwrap();
    opts.credentials = Some(("id".into(), "secret".into()));
    opts.retry_timeout = Duration::from_secs(6);
    let objects = Objects::connect(&url, &opts).unwrap();
    let started = Instant::now();
    let error = objects.list().expect_err("a listing from a closed port");
    let took = started.elapsed();
    assert!(matches!(error, ObjectError::Unavailable(_)), "{error}");

    let lines = lines.lock().unwrap().clone();
    assert!(!lines.is_empty(), "no retry was shown in {took:?}");
    for line in &lines {
        assert!(
            line.starts_with("presso: object store: ") && line.contains("retry"),
            "{line}"
        );
    }
    let most = 1 + (took.as_secs_f64() / QUIET.as_secs_f64()) as usize;
    assert!(
        lines.len() <= most,
        "{} lines in {took:?}: {lines:?}",
        lines.len()
    );
    // Retries come every few milliseconds at first: the lines after the first tell how many
    // were held back.
    for line in &lines[1..] {
        assert!(line.contains("more since the last such line"), "{line}");
    }
}
