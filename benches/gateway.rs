//! Micro-benchmarks of the hot path's pure parts (criterion). The load harness
//! against the fake upstream lives in `benches/load`.

use std::hint::black_box;

use criterion::{Criterion, criterion_group, criterion_main};
use serde_json::{Map, Value, json};

use tollgate::auth;
use tollgate::config::{Secret, TokenizerConfig};
use tollgate::directory::BudgetMode;
use tollgate::money::{Nanos, PricePerMTok};
use tollgate::tenant::book::{Limits, QuotaBook, ReserveRequest};
use tollgate::tokenize::Estimator;

fn body(text: &str) -> Map<String, Value> {
    match json!({"model": "fast", "messages": [
        {"role": "system", "content": "You are a helpful assistant."},
        {"role": "user", "content": text}
    ]}) {
        Value::Object(map) => map,
        _ => Map::new(),
    }
}

fn tokenize(c: &mut Criterion) {
    let estimator = Estimator::new(
        TokenizerConfig {
            encoding: "o200k_base".into(),
            safety_percent: 110,
        }
        .counting(),
    );
    estimator.warm_up([]);
    let english = "The quick brown fox jumps over the lazy dog. ".repeat(24);
    let cjk = "敏捷的棕色狐狸跳过了懒狗。".repeat(28);
    for (name, text) in [
        ("1kb", english.clone()),
        ("8kb", english.repeat(8)),
        ("cjk_1kb", cjk),
    ] {
        let request = body(&text);
        c.bench_function(&format!("estimate_chat_input/{name}"), |b| {
            b.iter(|| estimator.estimate_chat_input(black_box(&request)));
        });
    }
}

fn reserve(c: &mut Criterion) {
    let limits = Limits {
        rpm: 1_000_000,
        burst: 1_000_000,
        budget: Some(Nanos::parse_decimal("1000000").unwrap_or_default()),
        mode: BudgetMode::Strict,
        clamp_floor_tokens: 64,
        feature_budgets: std::collections::BTreeMap::new(),
        tokens: tollgate::tenant::TokenLimits::default(),
        on_store_error: tollgate::config::StoreErrorPolicy::FailClosed,
        calendar: tollgate::calendar::Calendar::utc(),
        end_users_in_memory: 1_000,
        period: tollgate::calendar::Period::Month,
        feature_periods: std::collections::BTreeMap::new(),
        credits: false,
        rate_mode: tollgate::directory::RateMode::Enforce,
        alert_webhook_url: None,
        alert_thresholds_percent: vec![80, 100],
    };
    let mut book = QuotaBook::new(limits, Nanos::ZERO, 1_796_040_000_000);
    let request = ReserveRequest {
        input_tokens: 1200,
        input_price: PricePerMTok::parse_decimal("2").unwrap_or_default(),
        output_price: PricePerMTok::parse_decimal("8").unwrap_or_default(),
        max_tokens: 1024,
        choices: 1,
        expires_at_ms: 1_796_040_200_000,
        key: tollgate::ids::KeyId::new("bench"),
        key_budget: None,
        feature: "bench".to_owned(),
        end_user: None,
        key_credits: false,
        fees: Nanos::ZERO,
        session: None,
        key_period: tollgate::calendar::Period::Month,
    };
    c.bench_function("quota_book/rate+reserve+settle", |b| {
        b.iter(|| {
            let now = 1_796_040_000_000;
            let _ = book.check_rate(now);
            if let Ok(granted) = book.reserve(black_box(request.clone()), now) {
                book.settle(granted.id, Nanos::new(1000), 1200, now);
            }
        });
    });
}

fn keys(c: &mut Criterion) {
    let pepper = Secret::new("bench-pepper");
    let issued = auth::issue_key(&pepper);
    let token = issued.token.expose().to_owned();
    c.bench_function("auth/verify_key", |b| {
        b.iter(|| {
            let presented = auth::PresentedKey::parse(black_box(&token));
            presented.is_some_and(|p| auth::secret_matches(&pepper, p.secret, &issued.secret_hash))
        });
    });
}

/// One attempt's journal records (a reserve, then its settle) by one writer:
/// the floor a request pays in each fsync mode on this disk.
fn journal(c: &mut Criterion) {
    use tollgate::config::FsyncMode;
    use tollgate::ids::{EventId, KeyId, RequestId, TenantId};
    use tollgate::journal::{Journal, JournalOptions};
    use tollgate::ledger::{AttemptStatus, UsageEvent, UsageKind};

    let Ok(runtime) = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    else {
        return;
    };
    let event = UsageEvent {
        event_id: EventId::generate(),
        request_id: RequestId::new("bench"),
        client_request_id: None,
        trace_id: None,
        tenant: TenantId::new("bench"),
        key: KeyId::new("bench"),
        end_user: None,
        session: None,
        feature: "bench".to_owned(),
        api: tollgate::ledger::Api::Chat,
        route: "fast".to_owned(),
        provider: "primary".to_owned(),
        model: "model".to_owned(),
        attempt: 1,
        status: AttemptStatus::Orphaned,
        upstream_status: None,
        usage: tollgate::pricing::Usage::default(),
        usage_kind: UsageKind::None,
        reserved: Nanos::new(800_000),
        charged: Nanos::new(800_000),
        cost: None,
        plan: None,
        price_version: "bench".to_owned(),
        latency_ms: 0,
        ttft_ms: None,
        error: None,
        cache: None,
        created_at_ms: 1_796_040_000_000,
    };
    let mut group = c.benchmark_group("journal");
    group.sample_size(20);
    for (name, fsync, group_commit_ms) in [
        ("off", FsyncMode::Off, 0),
        ("batch_0ms", FsyncMode::Batch, 0),
        ("batch_2ms", FsyncMode::Batch, 2),
    ] {
        let Ok(dir) = tempfile::tempdir() else { return };
        let options = JournalOptions {
            dir: dir.path().join("journal"),
            fsync,
            group_commit_ms,
            fsync_interval_ms: 100,
            segment_bytes: 64 * 1024 * 1024,
        };
        let Ok((journal, _)) = Journal::open(&options) else {
            return;
        };
        group.bench_function(format!("reserve+settle/{name}"), |b| {
            b.iter(|| {
                runtime.block_on(async {
                    let attempt = UsageEvent {
                        event_id: EventId::generate(),
                        ..event.clone()
                    };
                    journal.append_reserve(&attempt, 0).await;
                    let seq = journal.append_settle(attempt, |_, _| {});
                    journal.wait_durable(seq).await;
                });
            });
        });
    }
    group.finish();
}

/// A deterministic pseudo-random embedding (an LCG): far from every other one.
#[expect(
    clippy::cast_precision_loss,
    clippy::float_arithmetic,
    reason = "benchmark input: arbitrary floats in [-1, 1]"
)]
fn embedding(seed: u64, dims: usize) -> Vec<f32> {
    let mut state = seed.wrapping_mul(6_364_136_223_846_793_005).wrapping_add(1);
    (0..dims)
        .map(|_| {
            state = state
                .wrapping_mul(6_364_136_223_846_793_005)
                .wrapping_add(1_442_695_040_888_963_407);
            ((state >> 40) as f32 / (1u64 << 23) as f32) - 1.0
        })
        .collect()
}

/// The in-process semantic index at its worst: every entry in the
/// question's own bucket (one tenant, route and context), and a miss, which
/// compares every one exactly, or (approximate, the default past 256
/// entries) ranks every one by sign bits and compares 64 exactly. 1,536
/// dimensions, as text-embedding-3-small returns.
fn semantic(c: &mut Criterion) {
    use tollgate::cache::semantic::vector::Quantized;
    use tollgate::cache::semantic::{Answer, Probe, SemanticCache, SemanticCacheConfig};
    const DIMS: usize = 1536;
    let Ok(runtime) = tokio::runtime::Builder::new_current_thread().build() else {
        return;
    };
    let probe = |seed: u64| {
        let raw = embedding(seed, DIMS);
        Some(Probe {
            tenant: "t".into(),
            route: "r".into(),
            context: [7; 32],
            vector: Quantized::from_f32(&raw)?,
            raw,
        })
    };
    let mut group = c.benchmark_group("semantic_lookup");
    group.sample_size(20);
    let searches = [("exact", usize::MAX), ("approximate", 256)];
    for (entries, (search, exact_max)) in [10_000usize, 100_000]
        .into_iter()
        .flat_map(|n| searches.into_iter().map(move |s| (n, s)))
    {
        let Ok(cache) = SemanticCache::new(
            &SemanticCacheConfig {
                max_entries_per_tenant: entries,
                max_bytes_per_tenant: usize::MAX,
                exact_search_max_entries: exact_max,
                ..SemanticCacheConfig::default()
            },
            "",
        ) else {
            return;
        };
        for i in 0..entries as u64 {
            let answer = Answer {
                body: bytes::Bytes::from_static(b"{}"),
                provider: "p".into(),
                model: "m".into(),
                usage: tollgate::pricing::Usage::default(),
                native: false,
                source: i.to_string(),
                cost: Nanos::ZERO,
            };
            if let Some(entry) = probe(i) {
                let _ = cache.put_local(&entry, answer, u64::MAX / 2, 0);
            }
        }
        let Some(question) = probe(u64::MAX) else {
            return;
        };
        let name = format!("{}k_entries_miss_{search}", entries / 1000);
        group.bench_function(name, |b| {
            b.iter(|| runtime.block_on(cache.lookup(black_box(&question), 920_000, 1)));
        });
    }
    group.finish();
}

criterion_group!(benches, tokenize, reserve, keys, journal, semantic);
criterion_main!(benches);
