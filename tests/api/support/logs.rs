//! Captures the log lines emitted on the test's own thread, written as the
//! gateway writes them.

use std::io::Write;
use std::sync::{Arc, Mutex};

use tollgate::telemetry::logging::json_subscriber;
use tracing::subscriber::DefaultGuard;
use tracing_subscriber::EnvFilter;
use tracing_subscriber::fmt::MakeWriter;

#[derive(Clone, Default)]
pub struct LogCapture {
    buffer: Arc<Mutex<Vec<u8>>>,
}

pub struct CaptureWriter(Arc<Mutex<Vec<u8>>>);

impl Write for CaptureWriter {
    fn write(&mut self, bytes: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(bytes);
        Ok(bytes.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LogCapture {
    type Writer = CaptureWriter;

    fn make_writer(&'a self) -> Self::Writer {
        CaptureWriter(self.buffer.clone())
    }
}

impl LogCapture {
    /// Routes this thread's logs into the capture until the guard drops.
    pub fn install(&self) -> DefaultGuard {
        let subscriber = json_subscriber(self.clone(), EnvFilter::new("debug"));
        tracing::subscriber::set_default(subscriber)
    }

    pub fn text(&self) -> String {
        String::from_utf8_lossy(&self.buffer.lock().unwrap()).into_owned()
    }
}

/// Every thread's logs from the first call on, the gateway's workers' too:
/// one capture for the whole test process, so a test reads it for what only
/// it could have written (its own tenant, request ids, markers).
pub fn process_logs() -> &'static LogCapture {
    static LOGS: std::sync::OnceLock<LogCapture> = std::sync::OnceLock::new();
    LOGS.get_or_init(|| {
        let logs = LogCapture::default();
        let subscriber = json_subscriber(logs.clone(), EnvFilter::new("debug"));
        // No other test sets the process's subscriber.
        tracing::subscriber::set_global_default(subscriber).unwrap();
        logs
    })
}
