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
    let estimator = Estimator::new(&TokenizerConfig {
        encoding: "o200k_base".into(),
        safety_percent: 110,
    });
    estimator.warm_up();
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
    };
    let mut book = QuotaBook::new(limits, Nanos::ZERO, 1_796_040_000_000);
    let request = ReserveRequest {
        input_tokens: 1200,
        input_price: PricePerMTok::parse_decimal("2").unwrap_or_default(),
        output_price: PricePerMTok::parse_decimal("8").unwrap_or_default(),
        max_tokens: 1024,
        expires_at_ms: 1_796_040_200_000,
        key: tollgate::ids::KeyId::new("bench"),
        key_budget: None,
        feature: "bench".to_owned(),
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

criterion_group!(benches, tokenize, reserve, keys);
criterion_main!(benches);
