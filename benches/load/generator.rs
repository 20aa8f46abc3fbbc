//! The load generator: open-loop at a constant arrival rate (no coordinated omission) and
//! closed-loop over a fixed number of keep-alive connections. It runs on the harness's single
//! runtime thread (plus one pacing thread), so it takes at most about one of the machine's two
//! cores away from the system under test.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::io;
use std::net::SocketAddr;
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tokio::sync::Semaphore;
use tokio::sync::mpsc::{UnboundedSender, unbounded_channel};
use tokio::task::{JoinHandle, LocalSet, spawn_local};

use crate::clock::{micros_between, now};
use crate::http::{Conn, Response, Template};

const TIMER_SLACK: Duration = Duration::from_micros(50);

/// Request numbers, unique over the whole harness run (patched into every prompt).
static NEXT_ID: AtomicU64 = AtomicU64::new(1);

pub fn next_id() -> u64 {
    NEXT_ID.fetch_add(1, Ordering::Relaxed)
}

/// Where and what to send.
#[derive(Debug, Clone)]
pub struct Target {
    pub addr: SocketAddr,
    pub template: Template,
}

/// What one run measured. Latencies are of successful (200) responses only.
#[derive(Debug, Default)]
pub struct Outcome {
    /// Measured window: open-loop from the intended start, closed-loop from the actual send.
    pub latencies_us: Vec<u64>,
    /// Open-loop only: how late the generator actually started each measured request.
    pub lags_us: Vec<u64>,
    /// Streaming templates only: time to the first SSE event, counted like `latencies_us`.
    pub first_data_us: Vec<u64>,
    /// Successful responses in the measured window.
    pub ok: u64,
    /// Successful responses including the warm-up (for CPU time per request).
    pub ok_total: u64,
    /// Failed requests (any status but 200, or an I/O error), warm-up included.
    pub errors: u64,
    pub statuses: BTreeMap<u16, u64>,
    pub first_error: Option<String>,
    /// Requests still unanswered when the run's grace period ended (open-loop), or cancelled.
    pub unfinished: u64,
    /// Measured successes whose head carried the template's mark, and their latencies
    /// (also in `latencies_us`).
    pub marked: u64,
    pub marked_latencies_us: Vec<u64>,
    pub window: Duration,
}

impl Outcome {
    /// `from`: where this request's latency counts from.
    pub fn record(
        &mut self,
        conn: &Conn,
        result: &io::Result<Response>,
        measured: bool,
        (from, done): (Instant, Instant),
        lag_us: Option<u64>,
    ) {
        match result {
            Ok(response) if response.status == 200 => {
                self.ok_total += 1;
                if measured {
                    self.ok += 1;
                    self.latencies_us.push(micros_between(from, done));
                    if conn.marked(response) {
                        self.marked += 1;
                        self.marked_latencies_us.push(micros_between(from, done));
                    }
                    if let Some(lag) = lag_us {
                        self.lags_us.push(lag);
                    }
                    if let Some(first) = response.first_data {
                        self.first_data_us.push(micros_between(from, first));
                    }
                }
            }
            Ok(response) => {
                self.errors += 1;
                *self.statuses.entry(response.status).or_default() += 1;
                if self.first_error.is_none() {
                    let body = conn.body(response);
                    let text = String::from_utf8_lossy(&body);
                    let snippet: String = text.chars().take(300).collect();
                    self.first_error = Some(format!("HTTP {}: {snippet}", response.status));
                }
            }
            Err(error) => {
                self.errors += 1;
                self.first_error.get_or_insert_with(|| error.to_string());
            }
        }
    }

    /// Successful requests per second over the measured window.
    pub fn rps(&self) -> u64 {
        let window_us = u64::try_from(self.window.as_micros()).unwrap_or(u64::MAX);
        (self.ok * 1_000_000).checked_div(window_us).unwrap_or(0)
    }
}

/// Constant arrival rate: request `i` is due at `start + i / rate`, whether or not earlier
/// requests have been answered, and its latency counts from that due time.
#[derive(Debug, Clone, Copy)]
pub struct OpenLoop {
    pub rate: u64,
    pub warmup: Duration,
    pub measure: Duration,
    /// Connections at most; a request that finds none free waits (and that wait is counted).
    pub max_conns: usize,
    /// How long to wait for the last answers after the last request was due.
    pub grace: Duration,
}

struct Shared {
    addr: SocketAddr,
    template: Template,
    idle: RefCell<Vec<Conn>>,
    slots: Semaphore,
    outcome: RefCell<Outcome>,
}

impl Shared {
    fn new(target: &Target, slots: usize) -> Rc<Self> {
        Rc::new(Self {
            addr: target.addr,
            template: target.template.clone(),
            idle: RefCell::new(Vec::new()),
            slots: Semaphore::new(slots),
            outcome: RefCell::new(Outcome::default()),
        })
    }

    fn take_outcome(&self) -> Outcome {
        std::mem::take(&mut *self.outcome.borrow_mut())
    }
}

pub async fn open_loop(target: &Target, plan: OpenLoop) -> io::Result<Outcome> {
    // Tasks left over when the run ends are cancelled with their `LocalSet`.
    LocalSet::new()
        .run_until(open_loop_inner(target, plan))
        .await
}

async fn open_loop_inner(target: &Target, plan: OpenLoop) -> io::Result<Outcome> {
    let rate = plan.rate.max(1);
    let total_ms = u64::try_from((plan.warmup + plan.measure).as_millis()).unwrap_or(u64::MAX);
    let total = rate.saturating_mul(total_ms) / 1000;
    let period = Duration::from_nanos(1_000_000_000 / rate);
    let shared = Shared::new(target, plan.max_conns.max(1));
    let start = now() + Duration::from_millis(20);
    let measure_from = start + plan.warmup;
    let measure_until = measure_from + plan.measure;

    let (tx, mut rx) = unbounded_channel();
    let pacer = std::thread::Builder::new()
        .name("load-pacer".to_owned())
        .spawn(move || pace(start, period, total, &tx))?;
    let mut handles: Vec<JoinHandle<()>> = Vec::with_capacity(usize::try_from(total).unwrap_or(0));
    while let Some(index) = rx.recv().await {
        let due = start + period * u32::try_from(index).unwrap_or(u32::MAX);
        let measured = due >= measure_from && due < measure_until;
        handles.push(spawn_local(open_request(Rc::clone(&shared), due, measured)));
    }
    if pacer.join().is_err() {
        return Err(io::Error::other("the pacing thread panicked"));
    }
    let _ = tokio::time::timeout(plan.grace, async {
        for handle in handles {
            let _ = handle.await;
        }
    })
    .await;
    let mut outcome = shared.take_outcome();
    outcome.unfinished = total.saturating_sub(outcome.ok_total + outcome.errors);
    outcome.window = plan.measure;
    Ok(outcome)
}

/// Runs on its own thread: `std::thread::sleep` wakes within tens of microseconds, where the
/// runtime's timer wheel has millisecond granularity. Linux lets a sleep overrun by the
/// thread's timer slack (50 µs by default), so the pacer aims that much early; a request sent
/// before its due time is measured from its actual start.
fn pace(start: Instant, period: Duration, total: u64, tx: &UnboundedSender<u64>) {
    for index in 0..total {
        let due = start + period * u32::try_from(index).unwrap_or(u32::MAX);
        let wake = due.checked_sub(TIMER_SLACK).unwrap_or(due);
        let current = now();
        if wake > current {
            std::thread::sleep(wake - current);
        }
        if tx.send(index).is_err() {
            return;
        }
    }
}

async fn open_request(shared: Rc<Shared>, due: Instant, measured: bool) {
    let Ok(_slot) = shared.slots.acquire().await else {
        return;
    };
    let pooled = shared.idle.borrow_mut().pop();
    let mut conn = pooled.unwrap_or_else(|| Conn::new(shared.addr, &shared.template));
    let began = now();
    let result = conn.exchange(next_id()).await;
    let done = now();
    // Latency counts from the due time, or from the actual send when that came earlier.
    shared.outcome.borrow_mut().record(
        &conn,
        &result,
        measured,
        (due.min(began), done),
        Some(micros_between(due, began)),
    );
    shared.idle.borrow_mut().push(conn);
}

/// A fixed number of connections, each sending its next request as soon as the previous one
/// is answered: the maximum throughput the system under test sustains.
#[derive(Debug, Clone, Copy)]
pub struct ClosedLoop {
    pub conns: usize,
    pub warmup: Duration,
    pub measure: Duration,
    pub grace: Duration,
}

pub async fn closed_loop(target: &Target, plan: ClosedLoop) -> Outcome {
    LocalSet::new()
        .run_until(closed_loop_inner(target, plan))
        .await
}

async fn closed_loop_inner(target: &Target, plan: ClosedLoop) -> Outcome {
    let shared = Shared::new(target, plan.conns);
    let start = now();
    let from = start + plan.warmup;
    let until = from + plan.measure;
    let handles: Vec<JoinHandle<()>> = (0..plan.conns)
        .map(|_| spawn_local(closed_worker(Rc::clone(&shared), from, until)))
        .collect();
    let finished = tokio::time::timeout(plan.warmup + plan.measure + plan.grace, async {
        for handle in handles {
            let _ = handle.await;
        }
    })
    .await;
    let mut outcome = shared.take_outcome();
    if finished.is_err() {
        outcome.unfinished = u64::try_from(plan.conns).unwrap_or(u64::MAX);
    }
    outcome.window = plan.measure;
    outcome
}

async fn closed_worker(shared: Rc<Shared>, from: Instant, until: Instant) {
    let mut conn = Conn::new(shared.addr, &shared.template);
    if let Err(error) = conn.connect().await {
        let mut outcome = shared.outcome.borrow_mut();
        outcome.errors += 1;
        outcome.first_error.get_or_insert_with(|| error.to_string());
        return;
    }
    loop {
        let began = now();
        if began >= until {
            return;
        }
        let result = conn.exchange(next_id()).await;
        let done = now();
        let measured = began >= from && done < until;
        let failed = result.is_err();
        shared
            .outcome
            .borrow_mut()
            .record(&conn, &result, measured, (began, done), None);
        if failed {
            // A refusing server must not turn this loop into a busy spin.
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}

/// Exactly `count` requests over `conns` keep-alive connections, each sending its next one as
/// soon as the previous one is answered, numbered consecutively: through a template cycling
/// over `count` values, each value is sent once. It sets up state for the cells that follow
/// (its figures say how fast, nothing more); `limit` bounds it against a stuck server.
pub async fn fill(target: &Target, conns: usize, count: u64, limit: Duration) -> Outcome {
    LocalSet::new()
        .run_until(fill_inner(target, conns, count, limit))
        .await
}

async fn fill_inner(target: &Target, conns: usize, count: u64, limit: Duration) -> Outcome {
    let shared = Shared::new(target, conns);
    let left = Rc::new(Cell::new(count));
    let start = now();
    let handles: Vec<JoinHandle<()>> = (0..conns.max(1))
        .map(|_| spawn_local(fill_worker(Rc::clone(&shared), Rc::clone(&left))))
        .collect();
    let _ = tokio::time::timeout(limit, async {
        for handle in handles {
            let _ = handle.await;
        }
    })
    .await;
    let mut outcome = shared.take_outcome();
    outcome.window = now().saturating_duration_since(start);
    outcome.unfinished = count.saturating_sub(outcome.ok_total + outcome.errors);
    outcome
}

async fn fill_worker(shared: Rc<Shared>, left: Rc<Cell<u64>>) {
    let mut conn = Conn::new(shared.addr, &shared.template);
    // Taken before the await, so the workers together send exactly the count.
    while let Some(remaining) = left.get().checked_sub(1) {
        left.set(remaining);
        let began = now();
        let result = conn.exchange(next_id()).await;
        let done = now();
        let failed = result.is_err();
        shared
            .outcome
            .borrow_mut()
            .record(&conn, &result, true, (began, done), None);
        if failed {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    }
}
