//! Structured logs: JSON lines by default, fields first, then the message.
//! Keys, secrets and prompt text are never put in a log field.

use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::writer::BoxMakeWriter;

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
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let _ = if json {
        builder
            .json()
            .flatten_event(true)
            .event_format(super::json_lines::JsonLines)
            .try_init()
    } else {
        builder.try_init()
    };
    guard
}
