//! ProviderActor: admits, queues or skips calls to one upstream (breaker,
//! concurrency limit, bounded queue, and with a shared store the account's
//! concurrency across the fleet, `fleet.rs`) and learns from their
//! classified outcomes. A `Permit` reports back exactly once: with an
//! outcome, or as abandoned on drop — also when it dies unreceived in a
//! timed-out waiter's channel, so a slot can never leak; its fleet lease goes
//! back with it.

use std::collections::VecDeque;
use std::sync::Arc;
use std::time::{Duration, Instant};

use actix::prelude::*;
use tokio::sync::oneshot;

use super::adaptive::{AdaptiveConfig, AdaptiveLimit};
use super::breaker::{Breaker, BreakerConfig, BreakerState, Transition};
use super::fleet::{FleetLease, FleetLimit, Leased};
use super::retry::{Next, RetryBudget, RetryPolicy};
use super::shared_breaker::SharedBreaker;
use super::slots::Slots;
use crate::clock::{SharedClock, elapsed_ms, monotonic};
use crate::config::Provider;
use crate::ids::ProviderName;
use crate::telemetry::metrics::{Metric, as_gauge, as_gauge_u64, counter_add, gauge_set};
use crate::tenant::SharedStore;

const MAILBOX_CAPACITY: usize = 4096;
/// How often a replica looks for breaker changes made by the others.
const SHARED_POLL_INTERVAL: Duration = Duration::from_millis(250);
/// How often the actor counts the successes of calls it did not hear of, and
/// publishes its gauges.
const TALLY_INTERVAL: Duration = Duration::from_millis(100);

/// Why a call was not admitted; the request moves to the next target.
#[derive(Debug, Clone, Copy, PartialEq, Eq, thiserror::Error)]
pub enum Skip {
    #[error("circuit breaker open")]
    BreakerOpen,
    #[error("at its concurrency limit with a full queue")]
    QueueFull,
    #[error("no slot within the queue timeout")]
    QueueTimeout,
    #[error("at its concurrency limit across the fleet")]
    FleetFull,
    #[error("provider actor stopped")]
    Stopped,
}

/// How a permitted call ended, for the breaker.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Verdict {
    /// The provider answered (2xx, or a 4xx about the request itself).
    Healthy,
    /// Timeout, connection error, 5xx, 429.
    Failed,
    /// No verdict: the call never left, or the caller went away.
    Abandoned,
}

/// A call's fleet lease ended: the actor gives it back to the shared store.
#[derive(Message)]
#[rtype(result = "()")]
pub struct LeaseEnded {
    pub id: String,
}

/// A slot was freed without a message while callers queue: hand it over.
#[derive(Message)]
#[rtype(result = "()")]
struct SlotFreed;

/// A slot now, or a place in the queue.
enum Slot {
    Now,
    Queued(oneshot::Receiver<Permit>),
}

#[derive(Message)]
#[rtype(result = "Result<Slot, Skip>")]
struct Admit;

#[derive(Message)]
#[rtype(result = "()")]
struct Done {
    verdict: Verdict,
    /// From the slot's grant to the verdict.
    latency_ms: u64,
}

pub struct ProviderActor {
    name: ProviderName,
    breaker: Breaker,
    /// In-flight calls and the limit, shared with the handles' fast path.
    slots: Arc<Slots>,
    /// When on, moves the slots' limit with the provider's latency.
    adaptive: Option<AdaptiveLimit>,
    queue: VecDeque<oneshot::Sender<Permit>>,
    max_queue: usize,
    clock: SharedClock,
    /// With Redis: breaker changes shared with the other replicas.
    shared: Option<SharedBreaker>,
    /// When the breaker last changed here or was taken from another replica.
    changed_at_ms: u64,
    polling: bool,
    /// With Redis and `fleet_max_concurrency`: the account's calls across the fleet.
    fleet: Option<Arc<FleetLimit>>,
    polling_fleet: bool,
}

impl ProviderActor {
    /// Publishes the fleet's leases in use, as the shared store counts them.
    fn poll_fleet(&mut self, ctx: &mut Context<Self>) {
        let Some(fleet) = self.fleet.clone() else {
            return;
        };
        if self.polling_fleet {
            return;
        }
        self.polling_fleet = true;
        let count = async move { fleet.in_use().await };
        ctx.spawn(count.into_actor(self).map(|in_use, act, _| {
            act.polling_fleet = false;
            if let Some(in_use) = in_use {
                let labels = [("provider", act.name.as_str())];
                gauge_set(Metric::FleetLeasesInUse, &labels, as_gauge_u64(in_use));
            }
        }));
    }

    fn publish(&self) {
        let name = self.name.as_str();
        gauge_set(
            Metric::ProviderInFlight,
            &[("provider", name)],
            as_gauge(self.slots.in_flight() as usize),
        );
        gauge_set(
            Metric::ProviderQueued,
            &[("provider", name)],
            as_gauge(self.queue.len()),
        );
        let state = match self.breaker.state() {
            BreakerState::Closed => 0.0,
            BreakerState::HalfOpen { .. } => 1.0,
            BreakerState::Open { .. } => 2.0,
        };
        gauge_set(Metric::BreakerState, &[("provider", name)], state);
        gauge_set(
            Metric::ProviderConcurrencyLimit,
            &[("provider", name)],
            as_gauge(self.slots.limit() as usize),
        );
    }

    /// Whether calls may skip the actor: only a closed breaker with a fixed limit.
    fn sync_fast_path(&self) {
        let closed = matches!(self.breaker.state(), BreakerState::Closed);
        self.slots.set_fast(closed && self.adaptive.is_none());
    }

    /// Counts the successes of calls that did not message the actor.
    fn tally(&mut self, ctx: &mut Context<Self>) {
        let successes = self.slots.take_successes();
        let transition = self.breaker.on_successes(successes, self.clock.now_ms());
        self.on_transition(transition, ctx);
    }

    /// The freed slots go to the oldest waiters still waiting.
    fn hand_over(&mut self, ctx: &mut Context<Self>) {
        while !self.queue.is_empty() && self.slots.try_take() {
            let Some(waiter) = self.queue.pop_front() else {
                break;
            };
            let permit = Permit {
                addr: ctx.address(),
                slots: self.slots.clone(),
                granted: monotonic(),
                done: false,
                fleet: None,
            };
            if let Err(mut unclaimed) = waiter.send(permit) {
                // The waiter timed out: take the slot back without a second `Done`.
                unclaimed.done = true;
                self.slots.give_back();
            }
        }
        self.slots.set_queued(self.queue.len());
    }

    /// Every breaker state change passes here: the one place to publish it.
    fn on_transition(&mut self, transition: Option<Transition>, ctx: &mut Context<Self>) {
        let Some(Transition { from, to }) = transition else {
            return;
        };
        self.sync_fast_path();
        tracing::warn!(provider = %self.name, from = ?from, to = ?to, "Circuit breaker changed state.");
        let now = self.clock.now_ms();
        self.changed_at_ms = now;
        if let Some(shared) = self.shared.clone() {
            ctx.spawn(async move { shared.publish(to, now).await }.into_actor(self));
        }
    }

    /// Takes a newer breaker change another replica made.
    fn poll_shared(&mut self, ctx: &mut Context<Self>) {
        let Some(shared) = self.shared.clone() else {
            return;
        };
        if self.polling {
            return;
        }
        self.polling = true;
        let fetch = async move { shared.fetch().await };
        ctx.spawn(fetch.into_actor(self).map(|change, act, _| {
            act.polling = false;
            let Some(change) = change.filter(|c| c.at_ms > act.changed_at_ms) else {
                return;
            };
            act.changed_at_ms = change.at_ms;
            if let Some(Transition { from, to }) = act.breaker.adopt(change.state) {
                act.sync_fast_path();
                tracing::warn!(provider = %act.name, from = ?from, to = ?to, "Circuit breaker changed state on another replica; following it.");
                act.publish();
            }
        }));
    }
}

impl Actor for ProviderActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        if self.shared.is_some() {
            ctx.run_interval(SHARED_POLL_INTERVAL, Self::poll_shared);
        }
        if self.fleet.is_some() {
            ctx.run_interval(SHARED_POLL_INTERVAL, Self::poll_fleet);
        }
        ctx.run_interval(TALLY_INTERVAL, |act, ctx| {
            act.tally(ctx);
            // A slot freed just as a caller queued is not left idle.
            act.hand_over(ctx);
            act.publish();
        });
        self.sync_fast_path();
        self.publish();
        // Known from the configuration: the panel and its alert see 0, not nothing.
        counter_add(
            Metric::UnknownOutcomesTotal,
            &[("provider", self.name.as_str())],
            0,
        );
    }
}

impl Handler<Admit> for ProviderActor {
    type Result = Result<Slot, Skip>;

    fn handle(&mut self, _msg: Admit, ctx: &mut Context<Self>) -> Self::Result {
        // The breaker decides first: an open one refuses at once, without queueing.
        self.tally(ctx);
        let (admitted, transition) = self.breaker.admit(self.clock.now_ms());
        self.on_transition(transition, ctx);
        if !admitted {
            self.publish();
            return Err(Skip::BreakerOpen);
        }
        if !self.queue.is_empty() || !self.slots.try_take() {
            if self.queue.len() >= self.max_queue {
                return Err(Skip::QueueFull);
            }
            let (sender, receiver) = oneshot::channel();
            self.queue.push_back(sender);
            // Published before the second look, so a slot given back on the fast
            // path meanwhile either is seen here or sends `SlotFreed`.
            self.slots.set_queued(self.queue.len());
            self.hand_over(ctx);
            self.publish();
            return Ok(Slot::Queued(receiver));
        }
        self.publish();
        Ok(Slot::Now)
    }
}

impl Handler<LeaseEnded> for ProviderActor {
    type Result = ();

    fn handle(&mut self, msg: LeaseEnded, ctx: &mut Context<Self>) {
        if let Some(fleet) = self.fleet.clone() {
            ctx.spawn(async move { fleet.give_back(&msg.id).await }.into_actor(self));
        }
    }
}

impl Handler<SlotFreed> for ProviderActor {
    type Result = ();

    fn handle(&mut self, _msg: SlotFreed, ctx: &mut Context<Self>) {
        self.hand_over(ctx);
    }
}

impl Handler<Done> for ProviderActor {
    type Result = ();

    fn handle(&mut self, msg: Done, ctx: &mut Context<Self>) {
        self.slots.give_back();
        // Successes that came before this verdict, so a failure streak is one.
        self.tally(ctx);
        let now = self.clock.now_ms();
        // Only answered calls say how fast the provider is; failures may be instant or timeouts.
        if let (Some(adaptive), Verdict::Healthy) = (&mut self.adaptive, msg.verdict)
            && let Some(limit) = adaptive.observe(msg.latency_ms, now)
        {
            let from = self.slots.limit();
            if limit != from {
                tracing::info!(provider = %self.name, from, to = limit, "Adaptive concurrency limit changed.");
            }
            self.slots.set_limit(limit);
        }
        self.hand_over(ctx);
        let transition = match msg.verdict {
            Verdict::Healthy => self.breaker.on_success(now),
            Verdict::Failed => self.breaker.on_failure(now),
            Verdict::Abandoned => None,
        };
        self.on_transition(transition, ctx);
        self.publish();
    }
}

/// The typed front of one ProviderActor.
#[derive(Clone)]
pub struct ProviderHandle {
    addr: Addr<ProviderActor>,
    slots: Arc<Slots>,
    queue_timeout: Duration,
    retry_policy: RetryPolicy,
    retry_budget: Arc<RetryBudget>,
    fleet: Option<Arc<FleetLimit>>,
}

impl ProviderHandle {
    pub fn start(
        provider: &Provider,
        clock: SharedClock,
        shared: Option<&SharedStore>,
        replicas: u32,
    ) -> ProviderHandle {
        // Without a shared store the fleet's cap bounds this replica's own slots.
        let max_concurrency = match (shared, provider.fleet_max_concurrency) {
            (None, Some(cap)) => provider.max_concurrency.min(cap),
            _ => provider.max_concurrency,
        };
        let adaptive = provider.adaptive_concurrency.then(|| {
            AdaptiveLimit::new(
                AdaptiveConfig {
                    target: max_concurrency,
                    min: provider.adaptive_min_concurrency.min(max_concurrency),
                    max: max_concurrency,
                    window_ms: provider.adaptive_window_ms,
                },
                clock.now_ms(),
            )
        });
        let fleet = shared
            .zip(provider.fleet_max_concurrency)
            .map(|(store, cap)| {
                let caps = (cap, replicas);
                let limit = FleetLimit::new(store.clone(), &provider.name, caps, clock.clone());
                Arc::new(limit)
            });
        let slots = Arc::new(Slots::new(max_concurrency));
        let actor = ProviderActor {
            name: provider.name.clone(),
            breaker: Breaker::new(BreakerConfig {
                consecutive_failures: provider.breaker_failures,
                error_rate_percent: provider.breaker_error_rate_percent,
                window_ms: provider.breaker_window_ms,
                min_requests: provider.breaker_min_requests,
                cooldown_ms: provider.breaker_cooldown_ms,
                ramp_window_ms: provider.breaker_ramp_window_ms,
            }),
            slots: slots.clone(),
            adaptive,
            queue: VecDeque::new(),
            max_queue: provider.max_queue,
            shared: shared.map(|store| SharedBreaker::new(store.clone(), &provider.name)),
            changed_at_ms: clock.now_ms(),
            polling: false,
            fleet: fleet.clone(),
            polling_fleet: false,
            clock,
        };
        ProviderHandle {
            addr: actor.start(),
            slots,
            queue_timeout: Duration::from_millis(provider.queue_timeout_ms),
            retry_policy: RetryPolicy {
                max_attempts: provider.max_attempts.max(1),
                base_delay_ms: provider.retry_base_delay_ms,
                max_delay_ms: provider.retry_max_delay_ms,
            },
            retry_budget: Arc::new(RetryBudget::new(
                provider.retry_budget_percent,
                provider.retry_burst,
            )),
            fleet,
        }
    }

    /// A request is about to try this provider: it earns its share of a retry.
    pub fn start_request(&self) {
        self.retry_budget.deposit();
    }

    /// What to do after `tries` failed attempts here: the provider's retry
    /// policy, its retry budget shared by every worker, the upstream's
    /// `Retry-After`, and the request's time left decide.
    pub fn after_failure(
        &self,
        tries: u32,
        retry_after_s: Option<u64>,
        time_left: Duration,
    ) -> Next {
        self.retry_policy.next(
            tries,
            retry_after_s,
            time_left,
            RetryPolicy::random_jitter(),
            &self.retry_budget,
        )
    }

    /// A slot now, after waiting in the queue (at most the queue timeout),
    /// then one of the fleet's, where it has a cap; or a skip. A fleet lease
    /// outlives the call's `time_left` only by a margin.
    pub async fn admit(&self, time_left: Duration) -> Result<Permit, Skip> {
        let mut permit = self.slot().await?;
        let Some(fleet) = &self.fleet else {
            return Ok(permit);
        };
        match fleet.lease(time_left).await {
            Leased::Taken(id) => {
                let addr = self.addr.clone();
                permit.fleet = Some(FleetLease::Leased { addr, id });
                Ok(permit)
            }
            Leased::OnShare => {
                permit.fleet = Some(FleetLease::OnShare(fleet.clone()));
                Ok(permit)
            }
            Leased::Full => {
                permit.finish(Verdict::Abandoned);
                Err(Skip::FleetFull)
            }
        }
    }

    /// This replica's slot: now, or after waiting in the queue.
    async fn slot(&self) -> Result<Permit, Skip> {
        let permit = || Permit {
            addr: self.addr.clone(),
            slots: self.slots.clone(),
            granted: monotonic(),
            done: false,
            fleet: None,
        };
        if self.slots.try_take_fast() {
            return Ok(permit());
        }
        match self.addr.send(Admit).await.map_err(|_| Skip::Stopped)?? {
            Slot::Now => Ok(permit()),
            // A permit sent just as the timeout fires is dropped with the receiver, freeing its slot.
            Slot::Queued(receiver) => {
                match actix_rt::time::timeout(self.queue_timeout, receiver).await {
                    Ok(Ok(permit)) => Ok(permit),
                    Ok(Err(_)) => Err(Skip::Stopped),
                    Err(_) => Err(Skip::QueueTimeout),
                }
            }
        }
    }
}

/// One admitted call. Report its verdict with `finish`; dropping it unreported
/// frees the slot without a verdict.
#[must_use = "a permit must be finished with the call's verdict"]
pub struct Permit {
    addr: Addr<ProviderActor>,
    slots: Arc<Slots>,
    granted: Instant,
    done: bool,
    /// The call's lease among the fleet's, given back when the permit drops.
    fleet: Option<FleetLease>,
}

impl Permit {
    pub fn finish(mut self, verdict: Verdict) {
        self.done = true;
        if verdict == Verdict::Healthy
            && let Some(queued) = self.slots.finish_fast()
        {
            if queued {
                self.addr.do_send(SlotFreed);
            }
            return;
        }
        self.addr.do_send(Done {
            verdict,
            latency_ms: elapsed_ms(self.granted),
        });
    }
}

impl Drop for Permit {
    fn drop(&mut self) {
        if !self.done {
            self.addr.do_send(Done {
                verdict: Verdict::Abandoned,
                latency_ms: elapsed_ms(self.granted),
            });
        }
    }
}
