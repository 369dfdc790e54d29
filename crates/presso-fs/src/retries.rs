//! A shared pool's servers, retried in sight. While the object store or PostgreSQL fails,
//! requests are retried until the server timeout (two minutes by default), and each retry is
//! told only as a `tracing` event: by `object_store` (target `object_store`, at INFO) and by
//! the metadata's PostgreSQL client (target `presso_meta`, at WARN). With no one listening, a
//! server that refused or held requests left a command silent for all that time, as if hung.
//! [`show_server_retries`] installs, once per process, a subscriber that passes those events on
//! as lines on standard error (a command's terminal; a mount's log, where the daemon's standard
//! error goes): `presso: object store: …` and `presso: metadata server: …`, at most one of each
//! per [`QUIET`], with a count of those held back.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The least time between two lines about one server: a server that is down fails a request
/// every few seconds at most (the pauses between retries grow to 5 s), and one line in a while
/// says all there is.
pub const QUIET: Duration = Duration::from_secs(5);

/// Where retry events come from, and how their lines begin.
const SOURCES: [Source; 2] = [
    Source {
        target: "object_store",
        least: Level::INFO,
        label: "object store",
    },
    Source {
        target: "presso_meta",
        least: Level::WARN,
        label: "metadata server",
    },
];

struct Source {
    /// The crate whose events these are (its modules' targets begin with it and `::`).
    target: &'static str,
    /// The most verbose level shown.
    least: Level,
    /// What the lines name.
    label: &'static str,
}

/// The source an event with `metadata` comes from, if it is one shown.
fn source_of(metadata: &Metadata<'_>) -> Option<usize> {
    if !metadata.is_event() {
        return None;
    }
    SOURCES.iter().position(|s| {
        let target = metadata.target();
        // Levels compare by verbosity: `least` and those less verbose (WARN, ERROR).
        *metadata.level() <= s.least
            && target
                .strip_prefix(s.target)
                .is_some_and(|rest| rest.is_empty() || rest.starts_with("::"))
    })
}

/// Shows the servers' retries on standard error from now on (see the module's documentation).
/// Does nothing when the process has a `tracing` subscriber already (this one, or another's).
/// Whether this call installed it.
pub fn show_server_retries() -> bool {
    show_server_retries_to(|line| eprintln!("{line}"))
}

/// [`show_server_retries`] with each line handed to `sink` instead of standard error.
pub fn show_server_retries_to(sink: impl Fn(&str) + Send + Sync + 'static) -> bool {
    let lines = RetryLines {
        sink: Box::new(sink),
        throttles: Mutex::new(Default::default()),
    };
    tracing::subscriber::set_global_default(lines).is_ok()
}

/// The subscriber: the events of [`SOURCES`], nothing else, no spans.
struct RetryLines {
    sink: Box<dyn Fn(&str) + Send + Sync>,
    /// One per source.
    throttles: Mutex<[Throttle; SOURCES.len()]>,
}

/// When a line was last passed on, and how many were held back since.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

impl Subscriber for RetryLines {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        match source_of(metadata) {
            Some(_) => Interest::always(),
            None => Interest::never(),
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        source_of(metadata).is_some()
    }

    fn max_level_hint(&self) -> Option<LevelFilter> {
        Some(LevelFilter::INFO)
    }

    fn new_span(&self, _: &Attributes<'_>) -> Id {
        // Never called: no span is enabled. Ids must not be 0.
        Id::from_u64(1)
    }

    fn record(&self, _: &Id, _: &Record<'_>) {}

    fn record_follows_from(&self, _: &Id, _: &Id) {}

    fn event(&self, event: &Event<'_>) {
        let Some(source) = source_of(event.metadata()) else {
            return;
        };
        let now = Instant::now();
        let held = {
            let mut throttles = self.throttles.lock().unwrap_or_else(|p| p.into_inner());
            let throttle = &mut throttles[source];
            if throttle
                .last
                .is_some_and(|last| now.duration_since(last) < QUIET)
            {
                throttle.held += 1;
                return;
            }
            throttle.last = Some(now);
            std::mem::take(&mut throttle.held)
        };
        let mut text = Text::default();
        event.record(&mut text);
        let mut line = format!("presso: {}: {}", SOURCES[source].label, text.0.trim());
        if held > 0 {
            let _ = write!(line, " ({held} more since the last such line)");
        }
        (self.sink)(&line);
    }

    fn enter(&self, _: &Id) {}

    fn exit(&self, _: &Id) {}
}

/// An event's message, then its other fields as `name=value`.
#[derive(Default)]
struct Text(String);

impl Visit for Text {
    fn record_debug(&mut self, field: &Field, value: &dyn std::fmt::Debug) {
        if field.name() == "message" {
            let _ = write!(self.0, "{value:?} ");
        } else {
            let _ = write!(self.0, "{}={value:?} ", field.name());
        }
    }
}
