//! Structured logs: JSON lines by default, fields first, then the message.
//! Keys, secrets and prompt text are never put in a log field.

use std::io::IsTerminal as _;

use tracing::Subscriber;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;
use tracing_subscriber::util::SubscriberInitExt;

use super::log_writer::{self, LogGuard};

/// Installs the global subscriber; a second call is a no-op (tests build many apps).
/// Lines are written to stderr by a writer thread (`log_writer`), so a request
/// never waits on a `write(2)` to a pipe or terminal; keep the guard until
/// exit, dropping it writes what is buffered. `None` if that thread cannot
/// start: each logger then writes its lines to stderr itself.
pub fn init(json: bool) -> Option<LogGuard> {
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,actix_server=warn"));
    let (writer, guard) = match log_writer::spawn(std::io::stderr()) {
        Ok((writer, guard)) => (BoxMakeWriter::new(writer), Some(guard)),
        Err(_) => (BoxMakeWriter::new(std::io::stderr), None),
    };
    if json {
        let _ = json_subscriber(writer, filter).try_init();
    } else {
        // Colours only on a terminal: a log file gets plain text.
        let _ = tracing_subscriber::fmt()
            .with_env_filter(filter)
            .with_writer(writer)
            .with_ansi(std::io::stderr().is_terminal())
            .try_init();
    }
    guard
}

/// The gateway's JSON lines (`json_lines`), written to `writer`. Tests capture
/// logs through it too, so what they read is what the gateway writes.
pub fn json_subscriber<W>(writer: W, filter: EnvFilter) -> impl Subscriber + Send + Sync + 'static
where
    W: for<'w> MakeWriter<'w> + Send + Sync + 'static,
{
    tracing_subscriber::fmt()
        .json()
        .flatten_event(true)
        .event_format(super::json_lines::JsonLines)
        .with_env_filter(filter)
        .with_writer(writer)
        .finish()
}
