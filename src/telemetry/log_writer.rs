//! The log lines' way out. A logger appends its whole line to a shared
//! buffer (a lock and a copy: no system call, no thread woken), and one
//! writer thread takes what has gathered every `FLUSH_INTERVAL`, or as soon
//! as `WAKE_BYTES` have, and writes it with one `write(2)`. A channel that
//! wakes its writer for every line cost a futex wake and a context switch per
//! line: at low load a request's log line cost more than its ledger row.
//!
//! A line is out at most `FLUSH_INTERVAL` after it was logged, and every line
//! is out once the guard is dropped. Past `max_bytes` waiting, loggers wait
//! for the writer rather than drop lines.

use std::io::{self, Write};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::Duration;

use tracing_subscriber::fmt::MakeWriter;

/// How long a line may wait for the writer.
const FLUSH_INTERVAL: Duration = Duration::from_millis(50);
/// Lines gathered past this wake the writer at once.
const WAKE_BYTES: usize = 64 * 1024;
/// Lines waiting past this make loggers wait.
const MAX_BYTES: usize = 4 * 1024 * 1024;

struct Shared {
    state: Mutex<State>,
    /// The writer waits on it: `WAKE_BYTES` gathered, or the guard dropped.
    gathered: Condvar,
    /// Loggers past `max_bytes` wait on it.
    drained: Condvar,
    max_bytes: usize,
}

#[derive(Default)]
struct State {
    lines: Vec<u8>,
    closed: bool,
}

/// What the subscriber writes its lines to.
#[derive(Clone)]
pub struct LineWriter {
    shared: Arc<Shared>,
}

/// Keep until exit: dropping it writes every line logged before.
pub struct LogGuard {
    shared: Arc<Shared>,
    thread: Option<JoinHandle<()>>,
}

/// Starts the writer thread, writing to `out`.
pub fn spawn(out: impl Write + Send + 'static) -> io::Result<(LineWriter, LogGuard)> {
    spawn_with(out, MAX_BYTES)
}

fn spawn_with(
    out: impl Write + Send + 'static,
    max_bytes: usize,
) -> io::Result<(LineWriter, LogGuard)> {
    let shared = Arc::new(Shared {
        state: Mutex::new(State::default()),
        gathered: Condvar::new(),
        drained: Condvar::new(),
        max_bytes,
    });
    let writer = Arc::clone(&shared);
    let thread = std::thread::Builder::new()
        .name("tollgate-log".to_owned())
        .spawn(move || writer.run(out))?;
    Ok((
        LineWriter {
            shared: Arc::clone(&shared),
        },
        LogGuard {
            shared,
            thread: Some(thread),
        },
    ))
}

impl Shared {
    fn lock(&self) -> MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    fn append(&self, line: &[u8]) {
        let mut state = self.lock();
        while state.lines.len() >= self.max_bytes && !state.closed {
            self.gathered.notify_one();
            state = self
                .drained
                .wait(state)
                .unwrap_or_else(PoisonError::into_inner);
        }
        if state.closed {
            // Logged while the process ends, after the writer's last write.
            drop(state);
            let _ = io::stderr().write_all(line);
            return;
        }
        let before = state.lines.len();
        state.lines.extend_from_slice(line);
        // Once per crossing: a notify is a system call even when nobody waits.
        if before < WAKE_BYTES && state.lines.len() >= WAKE_BYTES {
            self.gathered.notify_one();
        }
    }

    fn run(&self, mut out: impl Write) {
        let mut batch = Vec::new();
        loop {
            let closed = {
                let mut state = self.lock();
                if state.lines.len() < WAKE_BYTES.min(self.max_bytes) && !state.closed {
                    state = self
                        .gathered
                        .wait_timeout(state, FLUSH_INTERVAL)
                        .map_or_else(|poisoned| poisoned.into_inner().0, |(state, _)| state);
                }
                std::mem::swap(&mut state.lines, &mut batch);
                state.closed
            };
            self.drained.notify_all();
            if !batch.is_empty() {
                // Nowhere to report a failed write of the logs but the logs.
                let _ = out.write_all(&batch).and_then(|()| out.flush());
                batch.clear();
            }
            if closed {
                return;
            }
        }
    }
}

impl Drop for LogGuard {
    fn drop(&mut self) {
        self.shared.lock().closed = true;
        self.shared.gathered.notify_one();
        self.shared.drained.notify_all();
        if let Some(thread) = self.thread.take() {
            let _ = thread.join();
        }
    }
}

/// One line being written: the formatter writes each line whole, at once.
pub struct Line<'a>(&'a Shared);

impl Write for Line<'_> {
    fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
        self.0.append(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> io::Result<()> {
        Ok(())
    }
}

impl<'a> MakeWriter<'a> for LineWriter {
    type Writer = Line<'a>;

    fn make_writer(&'a self) -> Line<'a> {
        Line(&self.shared)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A sink the test reads; each write may be slowed down.
    #[derive(Clone, Default)]
    struct Sink {
        bytes: Arc<Mutex<Vec<u8>>>,
        writes: Arc<Mutex<usize>>,
        delay: Duration,
    }

    impl Write for Sink {
        fn write(&mut self, buf: &[u8]) -> io::Result<usize> {
            std::thread::sleep(self.delay);
            self.bytes.lock().unwrap().extend_from_slice(buf);
            *self.writes.lock().unwrap() += 1;
            Ok(buf.len())
        }

        fn flush(&mut self) -> io::Result<()> {
            Ok(())
        }
    }

    fn log(writer: &LineWriter, line: &str) {
        writer.make_writer().write_all(line.as_bytes()).unwrap();
    }

    #[test]
    fn every_line_of_every_thread_is_out_whole_and_in_order_once_the_guard_drops() {
        let sink = Sink::default();
        let (writer, guard) = spawn(sink.clone()).unwrap();
        let threads: Vec<_> = (0..4)
            .map(|t| {
                let writer = writer.clone();
                std::thread::spawn(move || {
                    for i in 0..2_000 {
                        log(&writer, &format!("thread {t} line {i}\n"));
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().unwrap();
        }
        drop(guard);
        let text = String::from_utf8(sink.bytes.lock().unwrap().clone()).unwrap();
        for t in 0..4 {
            let mine: Vec<&str> = text
                .lines()
                .filter(|l| l.starts_with(&format!("thread {t} ")))
                .collect();
            let expected: Vec<String> =
                (0..2_000).map(|i| format!("thread {t} line {i}")).collect();
            assert_eq!(mine, expected);
        }
        assert_eq!(text.lines().count(), 8_000);
        // Lines that gathered went out together, not one write(2) each.
        assert!(*sink.writes.lock().unwrap() < 8_000);
    }

    #[test]
    fn a_quiet_loggers_line_is_not_held_back() {
        let sink = Sink::default();
        let (writer, _guard) = spawn(sink.clone()).unwrap();
        log(&writer, "alone\n");
        // Well past the flush interval, and far below any timeout that matters.
        for _ in 0..200 {
            if !sink.bytes.lock().unwrap().is_empty() {
                break;
            }
            std::thread::sleep(Duration::from_millis(10));
        }
        assert_eq!(sink.bytes.lock().unwrap().as_slice(), b"alone\n");
    }

    #[test]
    fn loggers_past_the_bound_wait_for_a_slow_writer_and_lose_nothing() {
        let sink = Sink {
            delay: Duration::from_millis(2),
            ..Sink::default()
        };
        // A 1 KiB bound: most of these lines find it full.
        let (writer, guard) = spawn_with(sink.clone(), 1024).unwrap();
        let line = format!("{}\n", "x".repeat(99));
        for _ in 0..1_000 {
            log(&writer, &line);
        }
        drop(guard);
        assert_eq!(sink.bytes.lock().unwrap().len(), 100_000);
    }
}
