//! Retries made visible. `object_store` retries a failed request until the operation's retry
//! timeout (two minutes by default) and tells of each retry only as a `tracing` event. With no
//! one listening, a store that refused or held requests left a command silent for all that time,
//! as if hung. [`show_retries`] installs, once per process, a subscriber that passes those events
//! on as lines on standard error (a command's terminal; a mount's log, where the daemon's
//! standard error goes), at most one per [`QUIET`], with a count of those held back.

use std::fmt::Write as _;
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tracing::field::{Field, Visit};
use tracing::level_filters::LevelFilter;
use tracing::span::{Attributes, Id, Record};
use tracing::subscriber::Interest;
use tracing::{Event, Level, Metadata, Subscriber};

/// The least time between two lines: a store that is down fails a request every few seconds
/// at most (the backoff grows to 5 s), and one line in a while says all there is.
pub const QUIET: Duration = Duration::from_secs(5);

/// Shows the object store client's retries on standard error from now on, as lines
/// `presso: object store: …` (see the module's documentation). Does nothing when the process
/// has a `tracing` subscriber already (this one, or another's). Whether this call installed it.
pub fn show_retries() -> bool {
    show_retries_to(|line| eprintln!("{line}"))
}

/// [`show_retries`] with each line handed to `sink` instead of standard error.
pub fn show_retries_to(sink: impl Fn(&str) + Send + Sync + 'static) -> bool {
    let lines = RetryLines {
        sink: Box::new(sink),
        throttle: Mutex::new(Throttle::default()),
    };
    tracing::subscriber::set_global_default(lines).is_ok()
}

/// The subscriber: events of `object_store` at INFO or above (its retries; it reports nothing
/// else at those levels), nothing of other crates, no spans.
struct RetryLines {
    sink: Box<dyn Fn(&str) + Send + Sync>,
    throttle: Mutex<Throttle>,
}

/// When a line was last passed on, and how many were held back since.
#[derive(Default)]
struct Throttle {
    last: Option<Instant>,
    held: u64,
}

fn wanted(metadata: &Metadata<'_>) -> bool {
    // Levels compare by verbosity: INFO and the less verbose WARN and ERROR.
    metadata.is_event()
        && *metadata.level() <= Level::INFO
        && (metadata.target() == "object_store" || metadata.target().starts_with("object_store::"))
}

impl Subscriber for RetryLines {
    fn register_callsite(&self, metadata: &'static Metadata<'static>) -> Interest {
        if wanted(metadata) {
            Interest::always()
        } else {
            Interest::never()
        }
    }

    fn enabled(&self, metadata: &Metadata<'_>) -> bool {
        wanted(metadata)
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
        let now = Instant::now();
        let held = {
            let mut throttle = self.throttle.lock().unwrap_or_else(|p| p.into_inner());
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
        let mut line = format!("presso: object store: {}", text.0.trim());
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
