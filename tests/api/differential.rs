//! One rule, two stores: the in-memory book (`tenant/book.rs`) and the
//! Redis script (`tenant/shared/scripts.rs`), on one Redis and on a Redis
//! Cluster, are fed the same random sequences of holds, settles with any
//! usage (under, at and over the hold), releases, end users and clock steps
//! across local day, week and month boundaries in a non-UTC zone, and must
//! give the same answer and the same balances at every step. A sequence is
//! a seed: a failure names the seed and the first step where the stores
//! part, so it replays exactly.

use std::sync::Arc;

use rand::rngs::StdRng;
use rand::{Rng, SeedableRng};
use serde_json::json;
use tollgate::calendar::Period;
use tollgate::clock::{Clock, ManualClock};
use tollgate::config::EndUserLimits;
use tollgate::ids::{KeyId, TenantId};
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::end_users::EndUserHold;
use tollgate::tenant::{QuotaError, ReservationGuard, ReserveRequest, TenantHandle};

use crate::support::cluster::RedisCluster;
use crate::support::redis::RedisServer;
use crate::support::{TestApp, TestSetup, settled_row, spawn_app};
use crate::tenant_actor::meta;

/// Sequences per run, and steps per sequence.
const SEEDS: u64 = 24;
const STEPS: usize = 60;
/// 2026-01-31 23:50 in Asia/Shanghai (UTC+8): a day, a month and, on the
/// way, weeks end within the sequences' clock steps.
const START_MS: u64 = 1_769_874_600_000;
const HOUR_MS: u64 = 3_600_000;
/// How long a hold lasts. A call never outlives a day, so a hold spans one
/// boundary at the most; a hold the clock would carry past its expiry is
/// released first, as its call's deadline would (expiry itself is a sweep on
/// the wall clock, covered by `tenant_actor`).
const HOLD_MS: u64 = 20 * HOUR_MS;

#[derive(Debug, Clone)]
enum Op {
    /// A hold of `tokens` output tokens at 1 unit per thousand, for a key,
    /// a feature and maybe an end user.
    Reserve {
        tokens: u32,
        key: usize,
        feature: usize,
        end_user: Option<usize>,
    },
    /// Settles an open hold at `percent` of what it holds (any usage: a
    /// provider may report more than was held), with that many tokens.
    Settle {
        which: usize,
        percent: u64,
    },
    Release {
        which: usize,
    },
    /// Moves the clock on by this much.
    Advance {
        ms: u64,
    },
    /// Moves the clock to a second before the next local midnight.
    ToMidnight,
}

fn sequence(seed: u64) -> Vec<Op> {
    let mut rng = StdRng::seed_from_u64(seed);
    (0..STEPS)
        .map(|_| match rng.random_range(0..100) {
            0..45 => Op::Reserve {
                tokens: rng.random_range(1..=300),
                key: rng.random_range(0..2),
                feature: rng.random_range(0..2),
                end_user: rng.random_bool(0.7).then(|| rng.random_range(0..3)),
            },
            45..70 => Op::Settle {
                which: rng.random_range(0..8),
                percent: [0, 10, 50, 100, 100, 150][rng.random_range(0..6)],
            },
            70..80 => Op::Release {
                which: rng.random_range(0..8),
            },
            80..92 => Op::Advance {
                ms: [1_000, 60_000, HOUR_MS, 5 * HOUR_MS][rng.random_range(0..4)],
            },
            _ => Op::ToMidnight,
        })
        .collect()
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
    app: TestApp,
    clock: Arc<ManualClock>,
}

async fn subject(store: &Store) -> Subject {
    let clock = Arc::new(ManualClock::new(START_MS));
    let setup = TestSetup::new()
        .route("fast", &["primary/ok"])
        .tier("free", &["fast"], 100_000, 100)
        .billing("timezone = \"Asia/Shanghai\"")
        .clock(clock.clone());
    let setup = match store {
        Store::Book => setup.storage("redis_url = \"\""),
        Store::Redis(redis) => setup.redis(&redis.url(), 1),
        Store::Cluster(cluster) => setup.redis(&cluster.url(), 1),
    };
    let app = spawn_app(setup).await;
    assert_eq!(
        app.gateway.quota_store.is_some(),
        !matches!(store, Store::Book),
        "{}: the store under test",
        store.name()
    );
    Subject { app, clock }
}

/// Each sequence's tenant: a monthly budget of 1 (1,000 tokens held at the
/// most); its keys and end users have budgets of their own (`request`).
async fn tenant(app: &TestApp, seed: u64) -> TenantHandle {
    let id = format!("diff-{seed}");
    let created = app
        .admin(
            "POST",
            "/tenants",
            Some(json!({"id": id, "name": id, "tier": "free", "monthly_budget": "1"})),
        )
        .await;
    assert_eq!(created.status, 201, "{}", created.raw);
    let record = app
        .gateway
        .directory
        .tenant(&TenantId::new(id.as_str()))
        .unwrap();
    app.gateway.tenants.handle(&record).unwrap()
}

fn request(op: &Op, now_ms: u64) -> ReserveRequest {
    let Op::Reserve {
        tokens,
        key,
        feature,
        end_user,
    } = op
    else {
        unreachable!()
    };
    ReserveRequest {
        input_tokens: 0,
        input_price: PricePerMTok::parse_decimal("0").unwrap(),
        output_price: PricePerMTok::parse_decimal("1000").unwrap(),
        max_tokens: *tokens,
        choices: 1,
        expires_at_ms: now_ms + HOLD_MS,
        key: KeyId::new(format!("key_{key}").as_str()),
        // Key 0 spends 0.6 a month, key 1 0.3 a day.
        key_budget: Some(Nanos::parse_decimal(["0.6", "0.3"][*key]).unwrap()),
        key_period: [Period::Month, Period::Day][*key],
        feature: format!("feature_{feature}"),
        end_user: end_user.map(|user| EndUserHold {
            id: format!("user_{user}"),
            limits: EndUserLimits {
                budget: Some(Nanos::parse_decimal("0.25").unwrap()),
                period: Period::Day,
                rpm: None,
                daily_tokens: None,
                tpm: None,
            },
        }),
        key_credits: false,
        fees: Nanos::ZERO,
    }
}

fn answer(error: &QuotaError) -> String {
    match error {
        QuotaError::Refused(refused) => format!(
            "refused {:?} remaining {} needed {}",
            refused.scope, refused.remaining, refused.needed
        ),
        other => format!("{other:?}"),
    }
}

/// The answers of one store to a sequence, a line per step: each decision,
/// then the tenant's balance and every end user's.
async fn transcript(subject: &Subject, seed: u64, ops: &[Op]) -> Vec<String> {
    let handle = tenant(&subject.app, seed).await;
    let mut open: Vec<Held> = Vec::new();
    let mut lines = Vec::with_capacity(ops.len());
    for op in ops {
        let now = subject.clock.now_ms();
        let said = match op {
            Op::Reserve { end_user, .. } => {
                let mut meta = meta();
                meta.end_user = end_user.map(|u| format!("user_{u}"));
                match handle.reserve(request(op, now), meta).await {
                    Ok(guard) => {
                        let line = format!("held {}", guard.granted().amount);
                        open.push(Held {
                            expires_at_ms: now + HOLD_MS,
                            guard,
                            key: format!("key_{}", op_key(op)),
                            end_user: end_user.map(|u| format!("user_{u}")),
                        });
                        line
                    }
                    Err(error) => answer(&error),
                }
            }
            Op::Settle { which, percent } if !open.is_empty() => {
                let held = open.remove(which % open.len());
                settle(subject, seed, held, *percent).await
            }
            Op::Release { which } if !open.is_empty() => {
                open.remove(which % open.len()).guard.release();
                "released".to_owned()
            }
            Op::Settle { .. } | Op::Release { .. } => "nothing open".to_owned(),
            Op::Advance { ms } => {
                let lapsed = lapse(&mut open, now + ms);
                subject.clock.advance_ms(*ms);
                format!("+{ms} ms, {lapsed} lapsed")
            }
            Op::ToMidnight => {
                let day = 24 * HOUR_MS;
                let local = now + 8 * HOUR_MS;
                let next = ((local / day + 1) * day - 8 * HOUR_MS - 1_000).max(now);
                let lapsed = lapse(&mut open, next);
                subject.clock.set_ms(next);
                format!("to a second before midnight, {lapsed} lapsed")
            }
        };
        let status = handle.status().await.unwrap();
        let mut users = Vec::new();
        for user in 0..3 {
            let hold = EndUserHold {
                id: format!("user_{user}"),
                limits: match request(
                    &Op::Reserve {
                        tokens: 1,
                        key: 0,
                        feature: 0,
                        end_user: Some(user),
                    },
                    now,
                )
                .end_user
                {
                    Some(hold) => hold.limits,
                    None => unreachable!(),
                },
            };
            let eu = handle.end_user(hold).await.unwrap();
            users.push(format!("{}+{}", eu.committed, eu.reserved));
        }
        lines.push(format!(
            "{said} | tenant {}+{} of {:?} ({}) | users {}",
            status.committed,
            status.reserved,
            status.budget,
            status.period,
            users.join(" ")
        ));
    }
    for held in open {
        held.guard.release();
    }
    lines
}

/// Releases the holds that would lapse by `at_ms`; how many.
fn lapse(open: &mut Vec<Held>, at_ms: u64) -> usize {
    let before = open.len();
    let (lapsing, kept): (Vec<Held>, Vec<Held>) =
        open.drain(..).partition(|held| held.expires_at_ms <= at_ms);
    *open = kept;
    for held in lapsing {
        held.guard.release();
    }
    before - open.len()
}

/// An open hold, and whose it is.
struct Held {
    expires_at_ms: u64,
    guard: ReservationGuard,
    key: String,
    end_user: Option<String>,
}

fn op_key(op: &Op) -> usize {
    match op {
        Op::Reserve { key, .. } => *key,
        _ => 0,
    }
}

/// Settles a hold at `percent` of it through the ledger, as a call does: its
/// row is journaled and written (a window started later reads it), then the
/// store commits the charge.
async fn settle(subject: &Subject, seed: u64, held: Held, percent: u64) -> String {
    let amount = held.guard.granted().amount;
    let charged = Nanos::from_db(amount.to_db() * i64::try_from(percent).unwrap() / 100);
    let tokens = u64::from(held.guard.granted().max_tokens) * percent / 100;
    let mut event = settled_row(
        &format!("diff-{seed}"),
        &held.key,
        amount,
        charged,
        subject.clock.now_ms(),
    );
    "feature_0".clone_into(&mut event.feature);
    event.end_user = held.end_user;
    let (_remaining, recorded) = subject
        .app
        .gateway
        .ledger
        .settle(event, held.guard, tokens)
        .await;
    subject.app.flush_ledger().await;
    format!("settled {charged}, recorded {}", recorded.charged)
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
        let ops = sequence(seed);
        // Every store starts the sequence at the same instant.
        let start = subjects.iter().map(|s| s.clock.now_ms()).max().unwrap();
        for subject in &subjects {
            subject.clock.set_ms(start);
        }
        let mut transcripts = Vec::new();
        for subject in &subjects {
            transcripts.push(transcript(subject, seed, &ops).await);
        }
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
}
