//! Structured logs: JSON lines by default, fields first, then the message.
//! Keys, secrets and prompt text are never put in a log field.

use tracing_appender::non_blocking::{NonBlockingBuilder, WorkerGuard};
use tracing_subscriber::EnvFilter;

/// Lines waiting for the writer thread; past this, loggers wait rather than drop lines.
const BUFFERED_LINES: usize = 16_384;
/// The writer thread's buffer: lines that queued up while it wrote go out in
/// one `write(2)`, and it flushes whenever the queue is empty, so a quiet
/// gateway's lines are not held back.
const WRITE_BUFFER_BYTES: usize = 64 * 1024;

/// Installs the global subscriber; a second call is a no-op (tests build many apps).
/// Lines are written to stderr by a writer thread, so a request never waits on
/// a `write(2)` to a pipe or terminal; keep the guard until exit, dropping it
/// flushes what is buffered.
pub fn init(json: bool) -> WorkerGuard {
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,actix_server=warn"));
    let (writer, guard) = NonBlockingBuilder::default()
        .buffered_lines_limit(BUFFERED_LINES)
        .lossy(false)
        .thread_name("tollgate-log")
        .finish(std::io::BufWriter::with_capacity(
            WRITE_BUFFER_BYTES,
            std::io::stderr(),
        ));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(writer);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
    guard
}
