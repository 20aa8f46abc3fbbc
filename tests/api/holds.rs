//! A property of the whole tenant decision, through the tenant's handle and
//! the ledger, on whichever store the suite runs (memory, or Redis with
//! `TOLLGATE_TEST_REDIS=1`): random sequences of reserve, settle with any
//! usage, unknown outcomes and a new hold, release, expiry and an actor
//! restart never let committed spend pass the budget by more than what a
//! provider reported beyond the holds, and the ledger always sums to it.

use std::sync::Arc;
use std::time::Duration;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tollgate::clock::{Clock, ManualClock};
use tollgate::ids::{KeyId, RequestId, TenantId};
use tollgate::ledger::UsageKind;
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::{
    BudgetStatus, ReservationGuard, ReservationMeta, ReserveRequest, TenantHandle,
};

use crate::support::{TestApp, TestSetup, now_ms, settled_row, spawn_app};

const SEQUENCES: u64 = 6;
const STEPS: usize = 40;
/// How long a hold lives before the sweep commits it as orphaned.
const HOLD_MS: u64 = 10_000;
/// Past the tenant actor's idle stop (5 minutes): the next use starts a new one.
const IDLE_MS: u64 = 5 * 60 * 1000 + 1000;

struct Run<'a> {
    app: &'a TestApp,
    clock: &'a ManualClock,
    tenant: TenantId,
    key: KeyId,
    budget: Nanos,
    /// What settles reported beyond their holds: the only spend past the budget allowed.
    overrun: Nanos,
    open: Vec<ReservationGuard>,
    requests: u64,
}

impl Run<'_> {
    fn handle(&self) -> TenantHandle {
        let record = self.app.gateway.directory.tenant(&self.tenant).unwrap();
        self.app.gateway.tenants.handle(&record).unwrap()
    }

    fn request(&self, rng: &mut StdRng) -> ReserveRequest {
        ReserveRequest {
            input_tokens: rng.random_range(0..5_000),
            input_price: PricePerMTok::parse_decimal("2").unwrap(),
            output_price: PricePerMTok::parse_decimal("8").unwrap(),
            max_tokens: rng.random_range(1..60_000),
            choices: rng.random_range(1..4),
            expires_at_ms: self.clock.now_ms() + HOLD_MS,
            key: self.key.clone(),
            key_budget: None,
            feature: "default".to_owned(),
            end_user: None,
            key_credits: false,
            fees: Nanos::ZERO,
            session: None,
            key_period: tollgate::calendar::Period::Month,
        }
    }

    fn meta(&mut self) -> ReservationMeta {
        self.requests += 1;
        ReservationMeta {
            request_id: RequestId::new(format!("{}-{}", self.tenant, self.requests)),
            key: self.key.clone(),
            feature: "default".to_owned(),
            end_user: None,
            session: None,
            api: tollgate::ledger::Api::Chat,
            route: "fast".to_owned(),
            client_request_id: None,
            trace_id: None,
            replica: self.app.gateway.replica_id.to_string(),
            plan: None,
            cost_nanos: None,
        }
    }

    async fn reserve(&mut self, rng: &mut StdRng) {
        let request = self.request(rng);
        let meta = self.meta();
        if let Ok(guard) = self.handle().reserve(request, meta).await {
            self.open.push(guard);
        }
    }

    /// Settles an open hold at `cost` through the ledger, which writes its row.
    async fn settle(&mut self, index: usize, cost: Nanos, kind: UsageKind) {
        let guard = self.open.swap_remove(index);
        let amount = guard.granted().amount;
        if cost > amount {
            self.overrun = self
                .overrun
                .saturating_add(Nanos::new(cost.get() - amount.get()));
        }
        let mut event = settled_row(
            self.tenant.as_str(),
            self.key.as_str(),
            amount,
            cost,
            self.clock.now_ms(),
        );
        event.request_id = RequestId::new(format!("{}-settle-{index}", self.tenant));
        event.usage_kind = kind;
        let _ = self.app.gateway.ledger.settle(event, guard, 0).await;
    }

    async fn status(&self) -> BudgetStatus {
        self.handle().status().await.unwrap()
    }

    async fn check(&self, seed: u64, step: &str) {
        let status = self.status().await;
        let ceiling = self.budget.saturating_add(self.overrun);
        assert!(
            status.committed.saturating_add(status.reserved) <= ceiling,
            "seed {seed}, after {step}: committed {} + reserved {} > budget {} + reported overrun {}",
            status.committed,
            status.reserved,
            self.budget,
            self.overrun
        );
    }

    /// Waits (bounded) until nothing is reserved: the sweep has committed expired holds.
    async fn until_nothing_reserved(&self) {
        crate::support::wait_until(
            Duration::from_secs(5),
            "the sweep of expired holds",
            async || {
                let reserved = self.status().await.reserved;
                crate::support::done_if(reserved == Nanos::ZERO, reserved)
            },
        )
        .await;
    }

    /// Stops the tenant's actor (idle, nothing held); the next call starts a fresh one.
    async fn restart(&mut self) {
        for guard in self.open.drain(..) {
            guard.release();
        }
        self.until_nothing_reserved().await;
        self.app.flush_ledger().await;
        self.clock.advance_ms(IDLE_MS);
        crate::support::wait_until(
            Duration::from_secs(5),
            "the idle tenant actor to stop",
            async || {
                let running = self.app.gateway.tenants.running_tenants();
                crate::support::done_if(!running.contains(&self.tenant), running)
            },
        )
        .await;
    }
}

#[actix_web::test]
async fn no_sequence_of_holds_settles_and_faults_commits_past_the_budget() {
    let clock = Arc::new(ManualClock::new(now_ms()));
    let app = spawn_app(
        TestSetup::new()
            .route("fast", &["primary/ok"])
            .tier("free", &["fast"], 100_000, 100)
            .clock(clock.clone()),
    )
    .await;
    for seed in 0..SEQUENCES {
        let mut rng = StdRng::seed_from_u64(seed);
        let mode = if rng.random_bool(0.5) {
            "strict"
        } else {
            "clamp"
        };
        let budget = Nanos::new(rng.random_range(100_000_000..2_000_000_000));
        let (tenant, key) = app
            .tenant_with_key(
                "free",
                json!({"monthly_budget": budget.to_string(), "budget_mode": mode}),
            )
            .await;
        let key_id = KeyId::new(key.split('_').nth(1).unwrap());
        let mut run = Run {
            app: &app,
            clock: &clock,
            tenant: TenantId::new(tenant.as_str()),
            key: key_id,
            budget,
            overrun: Nanos::ZERO,
            open: Vec::new(),
            requests: 0,
        };
        let mut restarted = false;
        let mut expired = false;
        for _ in 0..STEPS {
            let roll = rng.random_range(0..100);
            let step = match roll {
                _ if run.open.is_empty() || roll < 40 => {
                    run.reserve(&mut rng).await;
                    "reserve"
                }
                40..70 => {
                    // Any usage, now and then past the hold (a provider ignoring its limit).
                    let i = rng.random_range(0..run.open.len());
                    let amount = run.open[i].granted().amount.get();
                    let cost = if rng.random_bool(0.1) {
                        amount + rng.random_range(0..=amount)
                    } else {
                        rng.random_range(0..=amount)
                    };
                    run.settle(i, Nanos::new(cost), UsageKind::Reported).await;
                    "settle"
                }
                70..82 => {
                    // An unknown outcome: charged its hold, and the retry needs a new one.
                    let i = rng.random_range(0..run.open.len());
                    let amount = run.open[i].granted().amount;
                    run.settle(i, amount, UsageKind::Unknown).await;
                    run.reserve(&mut rng).await;
                    "unknown outcome and a new hold"
                }
                82..92 => {
                    let i = rng.random_range(0..run.open.len());
                    run.open.swap_remove(i).release();
                    "release"
                }
                92..96 if !expired => {
                    // A request that died holding its reservation: the sweep commits it.
                    expired = true;
                    let i = rng.random_range(0..run.open.len());
                    std::mem::forget(run.open.swap_remove(i));
                    // Every hold still open expires too: their settles come late.
                    clock.advance_ms(HOLD_MS + 1);
                    run.until_nothing_reserved().await;
                    "expiry"
                }
                _ if !restarted => {
                    restarted = true;
                    run.restart().await;
                    "restart"
                }
                _ => {
                    run.reserve(&mut rng).await;
                    "reserve"
                }
            };
            run.check(seed, step).await;
        }
        for guard in run.open.drain(..) {
            guard.release();
        }
        run.until_nothing_reserved().await;
        // No charge without a row: the ledger sums to what the tenant committed.
        let rows = app.ledger_rows(&tenant).await;
        let ledger: i64 = rows.iter().map(|r| r.charged_nanos).sum();
        let status = run.status().await;
        assert_eq!(status.committed.to_db(), ledger, "seed {seed}: {rows:?}");
        assert!(
            status.committed <= budget.saturating_add(run.overrun),
            "seed {seed}"
        );
    }
}
