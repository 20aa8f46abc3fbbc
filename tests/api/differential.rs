//! One rule, two stores: the in-memory book (`tenant/book.rs`) and the
//! Redis script (`tenant/shared/scripts.rs`), on one Redis and on a Redis
//! Cluster, are fed the same random sequences of holds, settles with any
//! usage (under, at and over the hold), releases, holds left to lapse by the
//! store's own expiry sweep and settled late, grants of the tenant's and a
//! key's prepaid balance (paid or promotional, with priorities, later starts
//! and expiries that pass within the sequence), drained restarts on the same database and Redis,
//! end users and clock steps across local day, week and month boundaries in
//! a non-UTC zone, and must give the same answer and the same balances at
//! every step. On every store and at every step, no budget or balance is
//! passed by more than what settles charged beyond their holds. A sequence is
//! a seed: a failure names the seed and the first step where the stores
//! part, so it replays exactly.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tollgate::calendar::{Calendar, Period};
use tollgate::clock::{Clock, ManualClock};
use tollgate::config::EndUserLimits;
use tollgate::ids::{KeyId, TenantId};
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::book::BalanceStatus;
use tollgate::tenant::end_users::{EndUserHold, EndUserStatus};
use tollgate::tenant::grants::GrantState;
use tollgate::tenant::{BudgetStatus, QuotaError, ReservationGuard, ReserveRequest, TenantHandle};

use crate::support::cluster::RedisCluster;
use crate::support::redis::RedisServer;
use crate::support::{TestApp, TestSetup, settled_row, spawn_app, spawn_replica};
use crate::tenant_actor::meta;

/// Sequences per run, and steps per sequence.
const SEEDS: u64 = 24;
const STEPS: usize = 60;
/// 2026-01-31 23:50 in Asia/Shanghai (UTC+8): a day, a month and, on the
/// way, weeks end within the sequences' clock steps.
const START_MS: u64 = 1_769_874_600_000;
const MINUTE_MS: u64 = 60_000;
const HOUR_MS: u64 = 60 * MINUTE_MS;
/// How long a hold lasts. A call never outlives a day, so a hold spans one
/// boundary at the most.
const HOLD_MS: [u64; 3] = [10 * MINUTE_MS, 2 * HOUR_MS, 20 * HOUR_MS];
/// Key 0 spends 0.6 a month, key 1 0.3 a day; key 2 has no budget and
/// spends its own prepaid balance.
const KEY_BUDGETS: [(&str, Period); 2] = [("0.6", Period::Month), ("0.3", Period::Day)];
/// Every end user's budget, a day.
const USER_BUDGET: &str = "0.25";
/// What the tenant and key 2 are topped up with before a sequence.
const FIRST_TOP_UPS: [&str; 2] = ["1", "0.3"];
/// How long the expiry sweep (once a second) may take to commit what lapsed.
const SWEEP_WAIT: Duration = Duration::from_secs(5);

#[derive(Debug, Clone)]
enum Op {
    /// A hold of `tokens` output tokens at 1 unit per thousand, for a key
    /// (2: the one on credits), a feature and maybe an end user, lasting
    /// `hold_ms`. When the clock would carry a hold past its expiry, its
    /// call's deadline releases it first, unless the call was `abandoned`
    /// (its process died): then it lapses, and the store's sweep commits it.
    Reserve {
        tokens: u32,
        key: usize,
        feature: usize,
        end_user: Option<usize>,
        hold_ms: u64,
        abandoned: bool,
    },
    /// Settles an open hold at `percent` of what it holds (any usage: a
    /// provider may report more than was held), with that many tokens.
    Settle {
        which: usize,
        percent: u64,
    },
    /// Settles a hold that lapsed: its call came back after the sweep
    /// committed it, and the settle must change nothing.
    LateSettle {
        which: usize,
        percent: u64,
    },
    Release {
        which: usize,
    },
    /// Adds prepaid credit to the tenant's balance or key 2's, through the
    /// admin API; `again` sends the last top-up of that balance once more
    /// (same idempotency key), which must add nothing.
    TopUp {
        key: bool,
        amount: &'static str,
        again: bool,
        terms: Option<Terms>,
    },
    /// Moves the clock on by this much.
    Advance {
        ms: u64,
    },
    /// Moves the clock to a second before the next local midnight.
    ToMidnight,
    /// Stops taking calls, settles every open hold at what it holds
    /// (`settle`) or releases it, and starts a new gateway on the same
    /// database and Redis: the book starts again from the ledger, Redis
    /// keeps its state.
    Restart {
        settle: bool,
    },
}

/// A grant's terms, its start and expiry from the clock when it is added.
#[derive(Debug, Clone)]
struct Terms {
    promotional: bool,
    priority: i32,
    starts_in_ms: Option<u64>,
    expires_in_ms: Option<u64>,
}

impl Terms {
    fn body(&self, now_ms: u64) -> serde_json::Value {
        let mut body = json!({
            "kind": if self.promotional { "promotional" } else { "paid" },
            "priority": self.priority,
        });
        let starts = self.starts_in_ms.map(|ms| now_ms + ms);
        if let Some(at) = starts {
            body["starts_at_ms"] = json!(at);
        }
        if let Some(ms) = self.expires_in_ms {
            body["expires_at_ms"] = json!(starts.unwrap_or(now_ms) + ms);
        }
        body
    }
}

fn terms(rng: &mut StdRng) -> Option<Terms> {
    rng.random_bool(0.7).then(|| Terms {
        promotional: rng.random_bool(0.5),
        priority: [-1, 0, 0, 1][rng.random_range(0..4)],
        starts_in_ms: rng
            .random_bool(0.3)
            .then(|| [MINUTE_MS, HOUR_MS][rng.random_range(0..2)]),
        expires_in_ms: rng
            .random_bool(0.6)
            .then(|| [10 * MINUTE_MS, HOUR_MS, 6 * HOUR_MS][rng.random_range(0..3)]),
    })
}

/// A seed's tenant (on prepaid credits, or with a monthly budget of 1) and
/// what happens to it.
struct Sequence {
    on_credits: bool,
    ops: Vec<Op>,
}

fn sequence(seed: u64) -> Sequence {
    let mut rng = StdRng::seed_from_u64(seed);
    let on_credits = rng.random_bool(0.5);
    let ops = (0..STEPS).map(|_| op(&mut rng)).collect();
    Sequence { on_credits, ops }
}

fn op(rng: &mut StdRng) -> Op {
    match rng.random_range(0..100) {
        0..40 => Op::Reserve {
            tokens: rng.random_range(1..=300),
            key: rng.random_range(0..3),
            feature: rng.random_range(0..2),
            end_user: rng.random_bool(0.7).then(|| rng.random_range(0..3)),
            hold_ms: HOLD_MS[rng.random_range(0..HOLD_MS.len())],
            abandoned: rng.random_bool(0.35),
        },
        40..62 => Op::Settle {
            which: rng.random_range(0..8),
            percent: [0, 10, 50, 100, 100, 150][rng.random_range(0..6)],
        },
        62..70 => Op::Release {
            which: rng.random_range(0..8),
        },
        70..74 => Op::LateSettle {
            which: rng.random_range(0..8),
            percent: [50, 100, 150][rng.random_range(0..3)],
        },
        74..79 => Op::TopUp {
            key: rng.random_bool(0.5),
            amount: ["0.05", "0.2", "0.5"][rng.random_range(0..3)],
            again: rng.random_bool(0.25),
            terms: terms(rng),
        },
        79..89 => Op::Advance {
            ms: [1_000, MINUTE_MS, HOUR_MS, 5 * HOUR_MS][rng.random_range(0..4)],
        },
        89..98 => Op::ToMidnight,
        _ => Op::Restart {
            settle: rng.random_bool(0.5),
        },
    }
}

/// Which store decides.
enum Store {
    Book,
    Redis(RedisServer),
    Cluster(RedisCluster),
}

impl Store {
    fn name(&self) -> &'static str {
        match self {
            Store::Book => "book",
            Store::Redis(_) => "redis",
            Store::Cluster(_) => "cluster",
        }
    }
}

struct Subject {
    name: &'static str,
    app: TestApp,
    /// Gateways a restart stopped: the first keeps the database file.
    stopped: Vec<TestApp>,
    setup: TestSetup,
    clock: Arc<ManualClock>,
}

async fn subject(store: &Store) -> Subject {
    let clock = Arc::new(ManualClock::new(START_MS));
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 100_000, 100)
        .set("billing.timezone", "Asia/Shanghai")
        .clock(clock.clone());
    let setup = match store {
        Store::Book => setup.set("storage.redis_url", ""),
        Store::Redis(redis) => setup.redis(&redis.url(), 1),
        Store::Cluster(cluster) => setup.redis(&cluster.url(), 1),
    };
    let app = spawn_app(setup.clone()).await;
    assert_eq!(
        app.gateway.quota_store.is_some(),
        !matches!(store, Store::Book),
        "{}: the store under test",
        store.name()
    );
    Subject {
        name: store.name(),
        app,
        stopped: Vec::new(),
        setup,
        clock,
    }
}

/// The tenant's actor, asked for from the test's own thread. With
/// `server.tenant_arbiters = 0` the actor then runs on this thread, so a
/// message sent right after a clock step is handled before the actor's
/// sweep sees the step (actix reads the mailbox before timers): no actor
/// stops idle over a step, which would leave the guards of its calls
/// addressing a stopped actor. Stops are the `Restart` op's.
fn tenant_handle(app: &TestApp, tenant: &str) -> TenantHandle {
    let record = app
        .gateway
        .directory
        .tenant(&TenantId::new(tenant))
        .unwrap();
    app.gateway.tenants.handle(&record).unwrap()
}

fn user_limits() -> EndUserLimits {
    EndUserLimits {
        budget: Some(units(USER_BUDGET)),
        period: Period::Day,
        rpm: None,
        daily_tokens: None,
        tpm: None,
    }
}

fn units(decimal: &str) -> Nanos {
    Nanos::parse_decimal(decimal).unwrap()
}

fn sum(holds: &[Held]) -> Nanos {
    holds.iter().fold(Nanos::ZERO, |sum, held| {
        sum.saturating_add(held.guard.granted().amount)
    })
}

/// An open hold, and whose it is.
struct Held {
    guard: ReservationGuard,
    key: usize,
    feature: usize,
    end_user: Option<usize>,
    expires_at_ms: u64,
    abandoned: bool,
}

/// A budgeted key's lifetime spend (what the stores show of it) when its
/// current window began, and after the last step: its spend in the window
/// is the difference. Every charge of a clock step falls after the step.
struct KeyWindow {
    window: String,
    at_start: Nanos,
    last: Nanos,
}

/// What a store shows after a step.
struct Seen {
    status: BudgetStatus,
    credits: BalanceStatus,
    keys: Vec<BalanceStatus>,
    users: Vec<EndUserStatus>,
    /// The tenant's and key 2's grants, in drawing order, with their draws.
    grants: String,
}

/// A budget or balance on one store, and what it may hold at the most.
struct Bound {
    scope: String,
    committed: Nanos,
    held: Nanos,
    limit: Nanos,
    /// Where the overrun allowed is counted (`Run::overrun`).
    window: String,
}

/// One store's run of one sequence.
struct Run<'a> {
    subject: &'a mut Subject,
    seed: u64,
    tenant: String,
    on_credits: bool,
    handle: TenantHandle,
    /// Key 2: issued by the admin API (its id is random, shown as `key_2`).
    credit_key: KeyId,
    calendar: Calendar,
    open: Vec<Held>,
    lapsed: Vec<Held>,
    /// Holds the sweep committed: each leaves one `orphaned` row.
    orphans: usize,
    /// What settles charged beyond their holds, by scope and window: the
    /// only spend past a budget or balance allowed.
    overrun: HashMap<String, Nanos>,
    key_windows: Vec<KeyWindow>,
    /// The last grant of the tenant's balance and of key 2's: idempotency
    /// key, amount and terms (absolute times: a repeat sends the same).
    top_ups: [(String, &'static str, serde_json::Value); 2],
}

impl<'a> Run<'a> {
    async fn start(subject: &'a mut Subject, seed: u64, on_credits: bool) -> Run<'a> {
        let tenant = format!("diff-{seed}");
        let body = if on_credits {
            json!({"id": tenant, "name": tenant, "tier": "free", "credits": true})
        } else {
            json!({"id": tenant, "name": tenant, "tier": "free", "monthly_budget": "1"})
        };
        let created = subject.app.admin("POST", "/tenants", Some(body)).await;
        assert_eq!(created.status, 201, "{}", created.raw);
        let handle = tenant_handle(&subject.app, &tenant);
        let issued = subject
            .app
            .admin(
                "POST",
                &format!("/tenants/{tenant}/keys"),
                Some(json!({"credits": true})),
            )
            .await;
        assert_eq!(issued.status, 201, "{}", issued.raw);
        let credit_key = KeyId::new(issued.body["id"].as_str().unwrap());
        let now = subject.clock.now_ms();
        let calendar = Calendar::named("Asia/Shanghai").unwrap();
        let key_windows = KEY_BUDGETS
            .iter()
            .map(|(_, period)| KeyWindow {
                window: calendar.window(*period, now).key,
                at_start: Nanos::ZERO,
                last: Nanos::ZERO,
            })
            .collect();
        let run = Run {
            subject,
            seed,
            tenant,
            on_credits,
            handle,
            credit_key,
            calendar,
            open: Vec::new(),
            lapsed: Vec::new(),
            orphans: 0,
            overrun: HashMap::new(),
            key_windows,
            top_ups: [
                ("first-tenant".to_owned(), FIRST_TOP_UPS[0], json!({})),
                ("first-key".to_owned(), FIRST_TOP_UPS[1], json!({})),
            ],
        };
        for key in [false, true] {
            let said = run.send_top_up(key).await;
            assert!(said.ends_with(": 201"), "{said}");
        }
        run
    }

    fn name(&self) -> &'static str {
        self.subject.name
    }

    fn now(&self) -> u64 {
        self.subject.clock.now_ms()
    }

    fn key_id(&self, key: usize) -> KeyId {
        match key {
            0 | 1 => KeyId::new(format!("key_{key}").as_str()),
            _ => self.credit_key.clone(),
        }
    }

    /// The store's words, with key 2's random id as `key_2`.
    fn answer(&self, error: &QuotaError) -> String {
        let said = match error {
            QuotaError::Refused(refused) => format!(
                "refused {:?} remaining {} needed {}",
                refused.scope, refused.remaining, refused.needed
            ),
            other => format!("{other:?}"),
        };
        said.replace(self.credit_key.as_str(), "key_2")
    }

    /// Where an overrun of `scope` counts: its window of `period` now.
    fn window(&self, scope: &str, period: Period, now_ms: u64) -> String {
        format!("{scope} {}", self.calendar.window(period, now_ms).key)
    }

    async fn step(&mut self, op: &Op, step: usize) -> String {
        match op {
            Op::Reserve { .. } => self.reserve(op).await,
            Op::Settle { which, percent } if !self.open.is_empty() => {
                let held = self.open.remove(which % self.open.len());
                let (charged, recorded) = self.settle(held, *percent).await;
                format!("settled {charged}, recorded {recorded}")
            }
            Op::Release { which } if !self.open.is_empty() => {
                self.open.remove(which % self.open.len()).guard.release();
                "released".to_owned()
            }
            Op::Settle { .. } | Op::Release { .. } => "nothing open".to_owned(),
            Op::LateSettle { which, percent } => self.late_settle(*which, *percent).await,
            Op::TopUp {
                key,
                amount,
                again,
                terms,
            } => {
                if !again {
                    // A grant starts when it is written: a row of the same
                    // millisecond written before it would be its in a
                    // replay of the ledger (`ledger/draws.rs`), not live.
                    self.subject.clock.advance_ms(1);
                    let body = terms
                        .as_ref()
                        .map_or_else(|| json!({}), |t| t.body(self.now()));
                    let idempotency_key = format!("{}-{step}", self.tenant);
                    self.top_ups[usize::from(*key)] = (idempotency_key, *amount, body);
                }
                self.send_top_up(*key).await
            }
            Op::Advance { ms } => {
                let (released, lapsed) = self.move_clock(self.now() + ms, step).await;
                format!("+{ms} ms, {released} released at their deadline, {lapsed} lapsed")
            }
            Op::ToMidnight => {
                let now = self.now();
                let day = 24 * HOUR_MS;
                let local = now + 8 * HOUR_MS;
                let next = ((local / day + 1) * day - 8 * HOUR_MS - 1_000).max(now);
                let (released, lapsed) = self.move_clock(next, step).await;
                format!(
                    "to a second before midnight, {released} released at their deadline, {lapsed} lapsed"
                )
            }
            Op::Restart { settle } => self.restart(*settle).await,
        }
    }

    async fn reserve(&mut self, op: &Op) -> String {
        let Op::Reserve {
            tokens,
            key,
            feature,
            end_user,
            hold_ms,
            abandoned,
        } = *op
        else {
            unreachable!()
        };
        let now = self.now();
        let request = ReserveRequest {
            input_tokens: 0,
            input_price: PricePerMTok::parse_decimal("0").unwrap(),
            output_price: PricePerMTok::parse_decimal("1000").unwrap(),
            max_tokens: tokens,
            choices: 1,
            expires_at_ms: now + hold_ms,
            key: self.key_id(key),
            key_budget: KEY_BUDGETS.get(key).map(|(budget, _)| units(budget)),
            key_period: KEY_BUDGETS
                .get(key)
                .map_or(Period::Month, |(_, period)| *period),
            feature: format!("feature_{feature}"),
            end_user: end_user.map(|user| EndUserHold {
                id: format!("user_{user}"),
                limits: user_limits(),
            }),
            key_credits: key == 2,
            fees: Nanos::ZERO,
            session: None,
        };
        // The hold's own scopes, so the row of a hold that lapses is charged to them.
        let mut meta = meta();
        meta.key = request.key.clone();
        meta.feature.clone_from(&request.feature);
        meta.end_user = end_user.map(|user| format!("user_{user}"));
        match self.handle.reserve(request, meta).await {
            Ok(guard) => {
                let line = format!("held {}", guard.granted().amount);
                self.open.push(Held {
                    guard,
                    key,
                    feature,
                    end_user,
                    expires_at_ms: now + hold_ms,
                    abandoned,
                });
                line
            }
            Err(error) => self.answer(&error),
        }
    }

    /// Settles a hold at `percent` of it through the ledger, as a call does:
    /// its row is journaled and written (a window started later reads it),
    /// then the store commits the charge. What it charged, and what its row
    /// (as the ledger returned it) records.
    async fn settle(&mut self, held: Held, percent: u64) -> (Nanos, Nanos) {
        let amount = held.guard.granted().amount;
        let charged = Nanos::from_db(amount.to_db() * i64::try_from(percent).unwrap() / 100);
        let now = self.now();
        if charged > amount {
            self.count_overrun(&held, charged.saturating_sub(amount), now);
        }
        let event = self.row(&held, charged);
        let tokens = u64::from(held.guard.granted().max_tokens) * percent / 100;
        let ledger = &self.subject.app.gateway.ledger;
        let (_remaining, recorded) = ledger.settle(event, held.guard, tokens).await;
        self.subject.app.flush_ledger().await;
        (charged, recorded.charged)
    }

    /// The row of a call that ended charged `charged` on `held`.
    fn row(&self, held: &Held, charged: Nanos) -> tollgate::ledger::UsageEvent {
        let mut event = settled_row(
            &self.tenant,
            self.key_id(held.key).as_str(),
            held.guard.granted().amount,
            charged,
            self.now(),
        );
        event.feature = format!("feature_{}", held.feature);
        event.end_user = held.end_user.map(|user| format!("user_{user}"));
        event
    }

    /// The overrun of a settle counts in every scope of its hold, in the
    /// windows it is charged to (the settle's), and against the balances.
    fn count_overrun(&mut self, held: &Held, extra: Nanos, now: u64) {
        let mut windows = vec![
            self.window("tenant", Period::Month, now),
            "tenant credits".to_owned(),
        ];
        windows.push(match KEY_BUDGETS.get(held.key) {
            Some((_, period)) => self.window(&format!("key_{}", held.key), *period, now),
            None => "key_2 credits".to_owned(),
        });
        if let Some(user) = held.end_user {
            windows.push(self.window(&format!("user_{user}"), Period::Day, now));
        }
        for window in windows {
            let overrun = self.overrun.entry(window).or_default();
            *overrun = overrun.saturating_add(extra);
        }
    }

    /// A lapsed hold's call settles after all: its row records no charge,
    /// since the sweep's `orphaned` row holds it, and no store commits it again.
    async fn late_settle(&mut self, which: usize, percent: u64) -> String {
        if self.lapsed.is_empty() {
            return "nothing lapsed".to_owned();
        }
        let held = self.lapsed.remove(which % self.lapsed.len());
        let amount = held.guard.granted().amount;
        let charged = Nanos::from_db(amount.to_db() * i64::try_from(percent).unwrap() / 100);
        let event = self.row(&held, charged);
        let event_id = event.event_id.to_string();
        let tokens = u64::from(held.guard.granted().max_tokens) * percent / 100;
        let ledger = &self.subject.app.gateway.ledger;
        let _ = ledger.settle(event, held.guard, tokens).await;
        let rows = self.subject.app.ledger_rows(&self.tenant).await;
        let row = rows.iter().find(|row| row.event_id == event_id).unwrap();
        format!(
            "late settle of {charged}: its row charges {}",
            Nanos::from_db(row.charged_nanos)
        )
    }

    /// Sends the last top-up of the tenant's balance (`key` false) or key 2's.
    async fn send_top_up(&self, key: bool) -> String {
        let (idempotency_key, amount, terms) = &self.top_ups[usize::from(key)];
        let (path, whose) = if key {
            (format!("/keys/{}/credits", self.credit_key), "key_2")
        } else {
            (format!("/tenants/{}/credits", self.tenant), "the tenant")
        };
        let mut body = json!({
            "amount": amount,
            "idempotency_key": idempotency_key,
            "reason": "differential",
        });
        for (field, value) in terms.as_object().into_iter().flatten() {
            body[field] = value.clone();
        }
        let added = self.subject.app.admin("POST", &path, Some(body)).await;
        format!(
            "top-up {amount} of {whose} ({idempotency_key}): {}",
            added.status
        )
        .replace(&self.tenant, "the sequence")
    }

    /// Moves the clock to `to_ms`. Calls whose deadline passes on the way are
    /// released first; abandoned holds past their expiry lapse, and the
    /// store's sweep commits them at the new time. How many of each.
    async fn move_clock(&mut self, to_ms: u64, step: usize) -> (usize, usize) {
        let (due, open): (Vec<Held>, Vec<Held>) = std::mem::take(&mut self.open)
            .into_iter()
            .partition(|held| !held.abandoned && held.expires_at_ms <= to_ms);
        let released = due.len();
        for held in due {
            held.guard.release();
        }
        let (lapsing, open): (Vec<Held>, Vec<Held>) = open
            .into_iter()
            .partition(|held| held.expires_at_ms <= to_ms);
        self.open = open;
        self.subject.clock.set_ms(to_ms);
        // The first message after the step: see `tenant_handle`.
        self.handle.balance(None).await.unwrap();
        let lapsed = lapsing.len();
        if lapsed > 0 {
            self.orphans += lapsed;
            self.lapsed.extend(lapsing);
            self.until_swept(step).await;
        }
        (released, lapsed)
    }

    /// Waits (bounded) until the store holds only the open holds and the
    /// ledger has a row for every hold the sweep committed.
    async fn until_swept(&self, step: usize) {
        let held = sum(&self.open);
        let what = format!(
            "seed {}, step {step} on {}: the sweep of the holds that lapsed ({held:?} still held, {} orphans)",
            self.seed,
            self.name(),
            self.orphans
        );
        crate::support::wait_until(SWEEP_WAIT, &what, async || {
            let reserved = self.handle.status().await.unwrap().reserved;
            let rows = self.subject.app.ledger_rows(&self.tenant).await;
            let orphaned = rows.iter().filter(|r| r.status == "orphaned").count();
            crate::support::done_if(
                reserved == held && orphaned == self.orphans,
                (reserved, orphaned),
            )
        })
        .await;
    }

    /// A drained restart: nothing is held when the gateway stops, and every
    /// row is written.
    async fn restart(&mut self, settle: bool) -> String {
        let open = std::mem::take(&mut self.open);
        let drained = open.len();
        for held in open {
            if settle {
                self.settle(held, 100).await;
            } else {
                held.guard.release();
            }
        }
        // Closing a lapsed hold changes nothing; their guards go with the gateway.
        self.lapsed.clear();
        // The actor handles its messages in order: its answer comes after the releases.
        self.handle.status().await.unwrap();
        self.subject.app.flush_ledger().await;
        self.subject.app.stop().await;
        let next = spawn_replica(&self.subject.app, &self.subject.setup).await;
        let stopped = std::mem::replace(&mut self.subject.app, next);
        self.subject.stopped.push(stopped);
        self.handle = tenant_handle(&self.subject.app, &self.tenant);
        self.handle.balance(None).await.unwrap();
        let how = if settle { "settled" } else { "released" };
        format!("restarted after {drained} holds {how}")
    }

    async fn seen(&self) -> Seen {
        let status = self.handle.status().await.unwrap();
        let tenant = self.handle.balance(None).await.unwrap();
        let mut keys = Vec::new();
        let mut grants = vec![draws(&tenant.grants)];
        for key in 0..3 {
            let balance = self.handle.balance(Some(self.key_id(key))).await.unwrap();
            if key == 2 {
                grants.push(draws(&balance.grants));
            }
            keys.push(balance.status);
        }
        let mut users = Vec::new();
        for user in 0..3 {
            let hold = EndUserHold {
                id: format!("user_{user}"),
                limits: user_limits(),
            };
            users.push(self.handle.end_user(hold).await.unwrap());
        }
        Seen {
            status,
            credits: tenant.status,
            keys,
            users,
            grants: grants.join(" / "),
        }
    }

    /// Starts a budgeted key's window where the clock crossed into a new one.
    fn follow_key_windows(&mut self, seen: &Seen) {
        let now = self.now();
        for (key, (_, period)) in KEY_BUDGETS.iter().enumerate() {
            let window = self.calendar.window(*period, now).key;
            let followed = &mut self.key_windows[key];
            if followed.window != window {
                followed.window = window;
                followed.at_start = followed.last;
            }
            followed.last = seen.keys[key].spent;
        }
    }

    fn bounds(&self, seen: &Seen) -> Vec<Bound> {
        let now = self.now();
        let mut bounds = Vec::new();
        if let Some(budget) = seen.status.budget {
            bounds.push(Bound {
                scope: "the tenant".to_owned(),
                committed: seen.status.committed,
                held: seen.status.reserved,
                limit: budget,
                window: self.window("tenant", Period::Month, now),
            });
        }
        let mut balances = vec![("key_2's balance", &seen.keys[2], "key_2 credits")];
        if self.on_credits {
            balances.push(("the tenant's balance", &seen.credits, "tenant credits"));
        }
        for (scope, balance, window) in balances {
            bounds.push(Bound {
                scope: scope.to_owned(),
                committed: balance.spent,
                held: balance.reserved,
                limit: balance.added,
                window: window.to_owned(),
            });
        }
        for (key, (budget, period)) in KEY_BUDGETS.iter().enumerate() {
            let spent = seen.keys[key].spent;
            bounds.push(Bound {
                scope: format!("key_{key}"),
                committed: spent.saturating_sub(self.key_windows[key].at_start),
                held: seen.keys[key].reserved,
                limit: units(budget),
                window: self.window(&format!("key_{key}"), *period, now),
            });
        }
        for (user, status) in seen.users.iter().enumerate() {
            bounds.push(Bound {
                scope: format!("user_{user}"),
                committed: status.committed,
                held: status.reserved,
                limit: units(USER_BUDGET),
                window: self.window(&format!("user_{user}"), Period::Day, now),
            });
        }
        bounds
    }

    /// No budget or balance is passed by more than what settles charged
    /// beyond their holds in its window; what calls hold counts as spent.
    fn check(&self, step: usize, op: &Op, seen: &Seen) {
        for bound in self.bounds(seen) {
            let overrun = self.overrun.get(&bound.window).copied().unwrap_or_default();
            assert!(
                bound.committed.saturating_add(bound.held) <= bound.limit.saturating_add(overrun),
                "seed {}, step {step} ({op:?}) on {}: {} has {} committed and {} held, past its {} by more than the {} settles charged beyond their holds ({})",
                self.seed,
                self.name(),
                bound.scope,
                bound.committed,
                bound.held,
                bound.limit,
                overrun,
                bound.window
            );
        }
    }
}

/// Grants as a store draws them: kind, priority, amount and what each drew.
fn draws(grants: &[GrantState]) -> String {
    let each: Vec<String> = grants
        .iter()
        .map(|g| {
            let kind = &g.grant.kind.as_str()[..2];
            format!("{kind}{} {}:{}", g.grant.priority, g.grant.amount, g.drawn)
        })
        .collect();
    each.join(" ")
}

fn balance(balance: &BalanceStatus) -> String {
    format!(
        "{}+{} of {}",
        balance.spent, balance.reserved, balance.added
    )
}

/// The line of a step: the store's answer, then the tenant's budget and
/// balance, every key's balance and every end user's day.
fn line(said: &str, seen: &Seen) -> String {
    let keys: Vec<String> = seen.keys.iter().map(balance).collect();
    let users: Vec<String> = seen
        .users
        .iter()
        .map(|user| format!("{}+{}", user.committed, user.reserved))
        .collect();
    format!(
        "{said} | tenant {}+{} of {:?} ({}) | credits {} | keys {} | users {} | grants {}",
        seen.status.committed,
        seen.status.reserved,
        seen.status.budget,
        seen.status.period,
        balance(&seen.credits),
        keys.join(", "),
        users.join(" "),
        seen.grants
    )
}

/// The answers of one store to a sequence, a line per step; the budgets are
/// checked on the way.
async fn transcript(subject: &mut Subject, seed: u64, sequence: &Sequence) -> Vec<String> {
    let mut run = Run::start(subject, seed, sequence.on_credits).await;
    let mut lines = Vec::with_capacity(sequence.ops.len());
    for (step, op) in sequence.ops.iter().enumerate() {
        let said = run.step(op, step).await;
        let shown = run.seen().await;
        run.follow_key_windows(&shown);
        run.check(step, op, &shown);
        lines.push(line(&said, &shown));
    }
    for held in run.open.drain(..) {
        held.guard.release();
    }
    lines
}

#[actix_web::test]
async fn the_book_redis_and_a_cluster_answer_every_step_alike() {
    let stores = [
        Store::Book,
        Store::Redis(RedisServer::start().await),
        Store::Cluster(RedisCluster::start().await),
    ];
    let mut subjects = Vec::new();
    for store in &stores {
        subjects.push(subject(store).await);
    }
    for seed in 0..SEEDS {
        let sequence = sequence(seed);
        let ops = &sequence.ops;
        // Every store starts the sequence at the same instant.
        let start = subjects.iter().map(|s| s.clock.now_ms()).max().unwrap();
        for subject in &subjects {
            subject.clock.set_ms(start);
        }
        // Each store has its own gateway and clock: they run side by side.
        let transcripts = join_all(
            subjects
                .iter_mut()
                .map(|subject| transcript(subject, seed, &sequence)),
        )
        .await;
        let (book, others) = transcripts.split_first().unwrap();
        for (store, other) in stores.iter().skip(1).zip(others) {
            if let Some(step) = (0..ops.len()).find(|&i| book[i] != other[i]) {
                let before = step.saturating_sub(5);
                panic!(
                    "seed {seed}: the book and {} part at step {step} ({:?})\n\
                     book:  {}\n{}: {}\nthe steps before:\n{}",
                    store.name(),
                    ops[step],
                    book[step],
                    store.name(),
                    other[step],
                    (before..step)
                        .map(|i| format!("  {i} {:?}: {}", ops[i], book[i]))
                        .collect::<Vec<_>>()
                        .join("\n")
                );
            }
        }
    }
    for subject in &subjects {
        subject.app.stop().await;
    }
}
