//! Structured logs: JSON lines by default, fields first, then the message.
//! Keys, secrets and prompt text are never put in a log field.

use tracing_subscriber::EnvFilter;

/// Installs the global subscriber; a second call is a no-op (tests build many apps).
pub fn init(json: bool) {
    let filter = EnvFilter::try_from_env("TOLLGATE_LOG")
        .unwrap_or_else(|_| EnvFilter::new("info,sqlx=warn,sea_orm=warn,actix_server=warn"));
    let builder = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr);
    let _ = if json {
        builder.json().flatten_event(true).try_init()
    } else {
        builder.try_init()
    };
}
