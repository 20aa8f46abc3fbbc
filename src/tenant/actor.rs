//! TenantActor: the handler bodies call `QuotaBook` synchronously, with no
//! `.await` between reading and writing the book, so the in-memory store
//! serializes by construction. On start it loads the period's committed
//! spend from the ledger (after flushing it) before answering anything.

use std::collections::HashMap;
use std::sync::{Arc, Weak};
use std::time::Duration;

use actix::prelude::*;
use sea_orm::DatabaseConnection;

use super::alerts::{self, AlertBook, AlertNotice};
use super::book::{Granted, Limits, QuotaBook, Refusal};
use super::messages::{
    CheckRate, GetStatus, Release, ReservationMeta, Reserve, Settle, SettleReply, UpdateLimits,
};
use super::registry::RegistryInner;
use crate::clock::SharedClock;
use crate::config::AlertsConfig;
use crate::ids::{EventId, ReservationId, TenantId};
use crate::ledger::{AttemptStatus, LedgerHandle, UsageEvent, UsageKind, repo};
use crate::money::Nanos;
use crate::period;
use crate::pricing::Usage;
use crate::telemetry::metrics::{
    Metric, OTHER_TENANTS, as_gauge_u64, counter_add, gauge_set, ratio,
};

/// How often expired reservations are swept.
const SWEEP_INTERVAL: Duration = Duration::from_secs(1);
/// An actor with no reservations and no message for this long stops.
const IDLE_STOP_MS: u64 = 5 * 60 * 1000;
const MAILBOX_CAPACITY: usize = 4096;

/// What every tenant actor shares.
pub struct TenantDeps {
    pub clock: SharedClock,
    pub ledger: LedgerHandle,
    pub db: DatabaseConnection,
    pub price_version: String,
    pub alerts_config: Arc<AlertsConfig>,
}

pub struct TenantActor {
    tenant: TenantId,
    /// The tenant's metric label (bounded by `TenantLabels`).
    label: String,
    book: QuotaBook,
    meta: HashMap<ReservationId, ReservationMeta>,
    clock: SharedClock,
    ledger: LedgerHandle,
    db: DatabaseConnection,
    price_version: String,
    last_active_ms: u64,
    registry: Weak<RegistryInner>,
    alerts: AlertBook,
    alerts_config: Arc<AlertsConfig>,
}

impl TenantActor {
    pub(super) fn new(
        tenant: TenantId,
        label: String,
        limits: Limits,
        deps: TenantDeps,
        registry: Weak<RegistryInner>,
    ) -> TenantActor {
        let TenantDeps {
            clock,
            ledger,
            db,
            price_version,
            alerts_config,
        } = deps;
        let now = clock.now_ms();
        TenantActor {
            tenant,
            label,
            book: QuotaBook::new(limits, Nanos::ZERO, now),
            meta: HashMap::new(),
            clock,
            ledger,
            db,
            price_version,
            last_active_ms: now,
            registry,
            alerts: AlertBook::new(&alerts_config.thresholds_percent),
            alerts_config,
        }
    }

    /// Fires the budget thresholds committed spend has newly crossed.
    fn check_alerts(&mut self, now: u64) {
        let status = self.book.status(now);
        let Some(budget) = status.budget else { return };
        for threshold in self
            .alerts
            .crossed(&status.period, status.committed, Some(budget))
        {
            let notice = AlertNotice {
                tenant: self.tenant.to_string(),
                period: status.period.clone(),
                committed: status.committed,
                budget,
                threshold,
            };
            alerts::fire(&self.alerts_config, notice);
        }
    }

    /// Budget gauges after every change of committed or reserved money.
    fn publish(&mut self, now: u64) {
        // Tenants folded into `other` share one series: a per-tenant level there would flap.
        if self.label == OTHER_TENANTS {
            return;
        }
        let status = self.book.status(now);
        let labels = [("tenant", self.label.as_str())];
        gauge_set(
            Metric::ReservedNanos,
            &labels,
            as_gauge_u64(status.reserved.get()),
        );
        if let Some(budget) = status.budget {
            gauge_set(
                Metric::BudgetUtilizationRatio,
                &labels,
                ratio(status.committed.get(), budget.get()),
            );
        }
    }

    fn touch(&mut self) -> u64 {
        let now = self.clock.now_ms();
        self.last_active_ms = now;
        now
    }

    fn sweep(&mut self, ctx: &mut Context<Self>) {
        let now = self.clock.now_ms();
        let expired = self.book.expire(now);
        let any = !expired.is_empty();
        for (id, amount) in expired {
            let meta = self.meta.remove(&id);
            self.record_orphan(meta, amount, now);
        }
        if any {
            self.publish(now);
            self.check_alerts(now);
        }
        let idle = now.saturating_sub(self.last_active_ms) >= IDLE_STOP_MS;
        if idle && self.book.outstanding() == 0 {
            ctx.stop();
        }
    }

    fn record_orphan(&self, meta: Option<ReservationMeta>, amount: Nanos, now: u64) {
        counter_add(Metric::ReservationsOrphanedTotal, &[], 1);
        let Some(meta) = meta else { return };
        tracing::warn!(tenant = %self.tenant, request_id = %meta.request_id, reserved = %amount, "Reservation expired unsettled; committed at its reserved amount.");
        self.ledger.record(UsageEvent {
            event_id: EventId::generate(),
            request_id: meta.request_id,
            client_request_id: meta.client_request_id,
            trace_id: meta.trace_id,
            tenant: self.tenant.clone(),
            key: meta.key,
            feature: meta.feature,
            route: meta.route,
            provider: String::new(),
            model: String::new(),
            attempt: 0,
            status: AttemptStatus::Orphaned,
            upstream_status: None,
            usage: Usage::default(),
            usage_kind: UsageKind::None,
            reserved: amount,
            charged: amount,
            price_version: self.price_version.clone(),
            latency_ms: 0,
            ttft_ms: None,
            error: Some("reservation expired unsettled".to_owned()),
            created_at_ms: now,
        });
    }
}

impl Actor for TenantActor {
    type Context = Context<Self>;

    fn started(&mut self, ctx: &mut Context<Self>) {
        ctx.set_mailbox_capacity(MAILBOX_CAPACITY);
        ctx.run_interval(SWEEP_INTERVAL, Self::sweep);
        // Spend still in the ledger's batch would be missed by the query: flush first.
        let ledger = self.ledger.clone();
        let db = self.db.clone();
        let tenant = self.tenant.clone();
        let period = period::month_key(self.clock.now_ms());
        let day = period::Date::from_unix_ms(self.clock.now_ms()).day_key();
        let load = async move {
            ledger.flush().await.map_err(|e| e.to_string())?;
            let committed = repo::committed_in_period(&db, &tenant, &period)
                .await
                .map_err(|e| e.to_string())?;
            let scopes = repo::committed_by_scope(&db, &tenant, &period)
                .await
                .map_err(|e| e.to_string())?;
            let tokens = repo::tokens_used(&db, &tenant, &day, &period)
                .await
                .map_err(|e| e.to_string())?;
            Ok::<_, String>((committed, scopes, tokens))
        };
        // `wait` holds every message until the committed spend is known.
        ctx.wait(load.into_actor(self).map(|result, act, ctx| match result {
            Ok((committed, (keys, features), (today, this_month))) => {
                let now = act.clock.now_ms();
                act.book = QuotaBook::new(act.book.limits(), committed, now);
                act.book.set_scope_committed(keys, features);
                act.book.set_token_usage(today, this_month, now);
                // Thresholds passed before this actor started were reported by an earlier one.
                let status = act.book.status(now);
                let _ = act.alerts.crossed(&status.period, status.committed, status.budget);
                act.publish(now);
            }
            Err(error) => {
                tracing::error!(tenant = %act.tenant, error = %error, "Cannot load the tenant's committed spend; refusing its requests.");
                ctx.stop();
            }
        }));
    }

    fn stopping(&mut self, ctx: &mut Context<Self>) -> Running {
        if let Some(registry) = self.registry.upgrade() {
            registry.remove(&self.tenant, &ctx.address());
        }
        Running::Stop
    }
}

impl Handler<CheckRate> for TenantActor {
    type Result = MessageResult<CheckRate>;

    fn handle(&mut self, _msg: CheckRate, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        MessageResult(self.book.check_rate(now))
    }
}

impl Handler<Reserve> for TenantActor {
    type Result = Result<Granted, Refusal>;

    fn handle(&mut self, msg: Reserve, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        let granted = self.book.reserve(msg.request, now)?;
        self.meta.insert(granted.id, msg.meta);
        self.publish(now);
        Ok(granted)
    }
}

impl Handler<Settle> for TenantActor {
    type Result = MessageResult<Settle>;

    fn handle(&mut self, msg: Settle, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.touch();
        self.meta.remove(&msg.id);
        let settled = self.book.settle(msg.id, msg.charged, msg.tokens, now);
        self.publish(now);
        self.check_alerts(now);
        MessageResult(SettleReply {
            settled,
            remaining: self.book.remaining(),
        })
    }
}

impl Handler<Release> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: Release, _ctx: &mut Context<Self>) {
        let now = self.touch();
        self.meta.remove(&msg.id);
        self.book.release(msg.id, now);
        self.publish(now);
    }
}

impl Handler<GetStatus> for TenantActor {
    type Result = MessageResult<GetStatus>;

    fn handle(&mut self, _msg: GetStatus, _ctx: &mut Context<Self>) -> Self::Result {
        let now = self.clock.now_ms();
        MessageResult::<GetStatus>(self.book.status(now))
    }
}

impl Handler<UpdateLimits> for TenantActor {
    type Result = ();

    fn handle(&mut self, msg: UpdateLimits, _ctx: &mut Context<Self>) {
        self.book.set_limits(msg.0);
        let now = self.clock.now_ms();
        self.publish(now);
    }
}
