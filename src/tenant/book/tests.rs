use super::*;

const NOW: u64 = 1_796_040_000_000;

fn limits(budget: Option<&str>, mode: BudgetMode) -> Limits {
    Limits {
        rpm: 60,
        burst: 60,
        budget: budget.map(|b| Nanos::parse_decimal(b).unwrap()),
        mode,
        clamp_floor_tokens: 10,
        feature_budgets: BTreeMap::new(),
        tokens: TokenLimits::default(),
        on_store_error: StoreErrorPolicy::FailClosed,
        calendar: crate::calendar::Calendar::utc(),
        end_users_in_memory: 1_000,
        period: Period::Month,
        feature_periods: BTreeMap::new(),
        credits: false,
        rate_mode: crate::directory::RateMode::Enforce,
        alert_webhook_url: None,
        alert_thresholds_percent: vec![80, 100],
    }
}

fn budget_refusal(result: Result<Granted, Refusal>) -> Refused {
    match result {
        Err(Refusal::Budget(refused)) => refused,
        other => panic!("expected a budget refusal, got {other:?}"),
    }
}

fn request(max_tokens: u32) -> ReserveRequest {
    ReserveRequest {
        input_tokens: 1000,
        input_price: PricePerMTok::parse_decimal("2").unwrap(),
        output_price: PricePerMTok::parse_decimal("8").unwrap(),
        max_tokens,
        choices: 1,
        expires_at_ms: NOW + 1000,
        key: KeyId::new("k1"),
        key_budget: None,
        feature: "chat".to_owned(),
        end_user: None,
        key_credits: false,
        fees: Nanos::ZERO,
        session: None,
        key_period: Period::Month,
    }
}

#[test]
fn fees_are_held_once_and_clamping_leaves_room_for_them() {
    let searching = ReserveRequest {
        choices: 2,
        fees: Nanos::new(30_000_000),
        ..request(100)
    };
    let tokens = worst_case(
        &ReserveRequest {
            fees: Nanos::ZERO,
            ..searching.clone()
        },
        100,
    );
    assert_eq!(
        worst_case(&searching, 100),
        tokens.saturating_add(Nanos::new(30_000_000))
    );
    // Too little for the fees refuses; room for them and some output clamps.
    assert_eq!(
        clamped_max_tokens(&searching, Nanos::new(29_999_999), 1),
        None
    );
    let clamped = clamped_max_tokens(&searching, tokens.saturating_add(Nanos::new(30_000_000)), 1);
    assert_eq!(clamped, Some(100));
}

#[test]
fn n_choices_multiply_the_output_side_of_the_worst_case() {
    let mut book = QuotaBook::new(limits(Some("1"), BudgetMode::Strict), Nanos::ZERO, NOW);
    let four = ReserveRequest {
        choices: 4,
        ..request(10_000)
    };
    // 1000 × 2/M + 4 × 10,000 × 8/M = 0.002 + 0.32
    let granted = book.reserve(four.clone(), NOW).unwrap();
    assert_eq!(granted.amount.to_string(), "0.322");
    // Two more fit (0.966), a fourth does not: one choice would have fitted 12.
    book.reserve(four.clone(), NOW).unwrap();
    book.reserve(four.clone(), NOW).unwrap();
    let refused = budget_refusal(book.reserve(four, NOW));
    assert_eq!(refused.needed.to_string(), "0.322");
}

#[test]
fn clamp_divides_what_is_affordable_among_the_choices() {
    let mut book = QuotaBook::new(limits(Some("0.01"), BudgetMode::Clamp), Nanos::ZERO, NOW);
    let four = ReserveRequest {
        choices: 4,
        ..request(10_000)
    };
    // (0.01 − 0.002) / (4 × 8/M) = 250 per choice, 1,000 in all.
    let granted = book.reserve(four, NOW).unwrap();
    assert_eq!(granted.max_tokens, 250);
    assert_eq!(granted.amount.to_string(), "0.01");
}

#[test]
fn a_feature_budget_refuses_its_feature_while_others_pass() {
    let mut limits = limits(Some("100"), BudgetMode::Strict);
    limits
        .feature_budgets
        .insert("search".into(), Nanos::parse_decimal("0.5").unwrap());
    let mut book = QuotaBook::new(limits, Nanos::ZERO, NOW);
    let search = ReserveRequest {
        feature: "search".into(),
        ..request(100_000)
    };
    // 0.002 + 0.8 > 0.5
    let refused = budget_refusal(book.reserve(search.clone(), NOW));
    assert_eq!(refused.scope, Scope::Feature("search".into()));
    assert_eq!(refused.remaining.to_string(), "0.5");
    assert!(
        refused
            .to_string()
            .starts_with("budget exceeded (feature `search`)")
    );
    assert!(
        book.reserve(request(100_000), NOW).is_ok(),
        "other features still pass"
    );
    // All or nothing: the refusal reserved nothing anywhere.
    assert_eq!(book.status(NOW).reserved.to_string(), "0.802");
}

#[test]
fn a_key_budget_is_charged_across_reservations_and_settles() {
    let mut book = QuotaBook::new(limits(Some("100"), BudgetMode::Strict), Nanos::ZERO, NOW);
    let keyed = ReserveRequest {
        key_budget: Some(Nanos::parse_decimal("1").unwrap()),
        ..request(100_000)
    };
    let first = book.reserve(keyed.clone(), NOW).unwrap();
    // 0.802 held; a second worst case of 0.802 does not fit in the key's 1.
    let refused = budget_refusal(book.reserve(keyed.clone(), NOW));
    assert_eq!(refused.scope, Scope::Key(KeyId::new("k1")));
    book.settle(first.id, Nanos::parse_decimal("0.1").unwrap(), 0, NOW);
    assert!(
        book.reserve(keyed.clone(), NOW).is_ok(),
        "0.1 committed leaves room"
    );
    let other_key = ReserveRequest {
        key: KeyId::new("k2"),
        ..keyed
    };
    assert!(
        book.reserve(other_key, NOW).is_ok(),
        "another key has its own budget"
    );
}

#[test]
fn scope_committed_loaded_from_the_ledger_counts_and_rolls_over() {
    let mut limits = limits(None, BudgetMode::Strict);
    limits
        .feature_budgets
        .insert("chat".into(), Nanos::parse_decimal("1").unwrap());
    let mut book = QuotaBook::new(limits, Nanos::ZERO, NOW);
    let seed = Seed {
        features: HashMap::from([("chat".to_owned(), Nanos::parse_decimal("0.9").unwrap())]),
        ..Seed::default()
    };
    book.reseed(&seed, NOW);
    assert_eq!(
        budget_refusal(book.reserve(request(100_000), NOW)).scope,
        Scope::Feature("chat".into())
    );
    let december = crate::period::Date::parse("2026-12-01")
        .unwrap()
        .start_unix_ms();
    let mut next_month = request(100_000);
    next_month.expires_at_ms = december + 1000;
    assert!(book.reserve(next_month, december).is_ok());
}

#[test]
fn budget_of_5_with_calls_costing_4_allows_one_then_refuses() {
    let mut book = QuotaBook::new(limits(Some("5"), BudgetMode::Strict), Nanos::ZERO, NOW);
    // 1000 input at 2/M + 200000 output at 8/M = 0.002 + 1.6
    let first = book.reserve(request(200_000), NOW).unwrap();
    assert_eq!(first.amount.to_string(), "1.602");
    book.settle(first.id, Nanos::parse_decimal("4").unwrap(), 0, NOW);
    let refused = budget_refusal(book.reserve(request(200_000), NOW));
    assert_eq!(refused.remaining.to_string(), "1");
    assert_eq!(refused.needed.to_string(), "1.602");
    assert_eq!(book.status(NOW).committed.to_string(), "4");
}

#[test]
fn settling_twice_changes_nothing() {
    let mut book = QuotaBook::new(limits(Some("5"), BudgetMode::Strict), Nanos::ZERO, NOW);
    let granted = book.reserve(request(100), NOW).unwrap();
    let charged = Nanos::new(500);
    assert!(matches!(
        book.settle(granted.id, charged, 0, NOW),
        Settled::Committed { .. }
    ));
    assert_eq!(
        book.settle(granted.id, charged, 0, NOW),
        Settled::AlreadyClosed
    );
    assert!(!book.release(granted.id, NOW));
    let status = book.status(NOW);
    assert_eq!((status.committed, status.reserved), (charged, Nanos::ZERO));
}

#[test]
fn expired_reservations_are_committed_at_the_reserved_amount() {
    let mut book = QuotaBook::new(limits(Some("5"), BudgetMode::Strict), Nanos::ZERO, NOW);
    let granted = book.reserve(request(100), NOW).unwrap();
    assert!(book.expire(NOW + 999).is_empty());
    let lapsed: Vec<_> = book
        .expire(NOW + 1000)
        .into_iter()
        .map(|l| (l.id, l.amount, l.meta.is_some()))
        .collect();
    assert_eq!(lapsed, vec![(granted.id, granted.amount, false)]);
    let status = book.status(NOW + 1000);
    assert_eq!(
        (status.committed, status.reserved),
        (granted.amount, Nanos::ZERO)
    );
    assert_eq!(
        book.settle(granted.id, Nanos::new(1), 0, NOW),
        Settled::AlreadyClosed
    );
}

#[test]
fn clamp_lowers_max_tokens_to_what_the_budget_affords() {
    let mut book = QuotaBook::new(limits(Some("0.01"), BudgetMode::Clamp), Nanos::ZERO, NOW);
    // 0.01 - 0.002 input leaves 0.008, i.e. 1000 output tokens at 8/M.
    let granted = book.reserve(request(5000), NOW).unwrap();
    assert!(granted.clamped);
    assert_eq!(granted.max_tokens, 1000);
    assert_eq!(granted.amount.to_string(), "0.01");
    // Nothing left: below the floor, refused.
    assert!(book.reserve(request(5000), NOW).is_err());
}

#[test]
fn alert_mode_lets_it_pass() {
    let mut book = QuotaBook::new(limits(Some("0.001"), BudgetMode::Alert), Nanos::ZERO, NOW);
    let granted = book.reserve(request(5000), NOW).unwrap();
    assert!(granted.over_budget);
    assert_eq!(granted.remaining, Some(Nanos::ZERO));
}

#[test]
fn committed_spend_resets_at_the_start_of_the_utc_month() {
    let mut book = QuotaBook::new(limits(Some("5"), BudgetMode::Strict), Nanos::new(7), NOW);
    let december = crate::period::Date::parse("2026-12-01")
        .unwrap()
        .start_unix_ms();
    assert_eq!(book.status(december - 1).committed, Nanos::new(7));
    let status = book.status(december);
    assert_eq!(
        (status.committed, status.period.as_str()),
        (Nanos::ZERO, "2026-12")
    );
}

#[test]
fn token_bucket_allows_burst_then_refills_at_rpm() {
    let mut book = QuotaBook::new(
        Limits {
            rpm: 60,
            burst: 5,
            ..limits(None, BudgetMode::Strict)
        },
        Nanos::ZERO,
        NOW,
    );
    for i in 0..5 {
        let decision = book.check_rate(NOW);
        assert!(decision.allowed, "request {i}");
        assert_eq!(decision.remaining, 4 - i);
    }
    let refused = book.check_rate(NOW);
    assert!(!refused.allowed);
    // 60 rpm = one request per second.
    assert_eq!(refused.retry_after_ms, 1000);
    assert!(!book.check_rate(NOW + 999).allowed);
    assert!(book.check_rate(NOW + 1000).allowed);
    assert!(!book.check_rate(NOW + 1000).allowed);
    // After a long idle the bucket holds the burst, not more.
    for _ in 0..5 {
        assert!(book.check_rate(NOW + 3_600_000).allowed);
    }
    assert!(!book.check_rate(NOW + 3_600_000).allowed);
}

mod model {
    //! The in-memory book against a plain model: random interleavings of
    //! reserve / settle / release / expire never let committed + reserved
    //! pass the budget, and never lose or double-count money.

    use proptest::prelude::*;

    use super::*;

    #[derive(Debug, Clone)]
    enum Op {
        Reserve {
            input_tokens: u64,
            max_tokens: u32,
            ttl_ms: u64,
        },
        /// Settle the n-th outstanding reservation at `permille` of its amount.
        Settle {
            pick: usize,
            permille: u64,
        },
        Release {
            pick: usize,
        },
        SettleAgain {
            pick: usize,
        },
        Advance {
            ms: u64,
        },
    }

    fn op() -> impl Strategy<Value = Op> {
        prop_oneof![
            (0u64..20_000, 1u32..50_000, 1u64..5_000).prop_map(
                |(input_tokens, max_tokens, ttl_ms)| Op::Reserve {
                    input_tokens,
                    max_tokens,
                    ttl_ms
                }
            ),
            (0usize..8, 0u64..=1000).prop_map(|(pick, permille)| Op::Settle { pick, permille }),
            (0usize..8).prop_map(|pick| Op::Release { pick }),
            (0usize..8).prop_map(|pick| Op::SettleAgain { pick }),
            (0u64..3_000).prop_map(|ms| Op::Advance { ms }),
        ]
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

        #[test]
        fn strict_budgets_hold_and_money_is_conserved(
            budget_micro in 1u64..2_000_000,
            ops in proptest::collection::vec(op(), 1..80),
        ) {
            let budget = Nanos::new(budget_micro * 1000);
            let mut book = QuotaBook::new(limits(None, BudgetMode::Strict), Nanos::ZERO, NOW);
            book.set_limits(Limits { budget: Some(budget), ..limits(None, BudgetMode::Strict) });
            let mut now = NOW;
            // The model: outstanding reservations and the money committed.
            let mut outstanding: Vec<(ReservationId, Nanos, u64)> = Vec::new();
            let mut closed: Vec<ReservationId> = Vec::new();
            let mut committed = Nanos::ZERO;
            for op in ops {
                match op {
                    Op::Reserve { input_tokens, max_tokens, ttl_ms } => {
                        let mut request = request(max_tokens);
                        request.input_tokens = input_tokens;
                        request.expires_at_ms = now + ttl_ms;
                        if let Ok(granted) = book.reserve(request, now) {
                            outstanding.push((granted.id, granted.amount, now + ttl_ms));
                        }
                    }
                    Op::Settle { pick, permille } if !outstanding.is_empty() => {
                        let (id, amount, _) = outstanding.remove(pick % outstanding.len());
                        let charged = Nanos::new(amount.get() / 1000 * permille);
                        let settled = book.settle(id, charged, 0, now);
                        prop_assert_eq!(settled, Settled::Committed { reserved: amount });
                        committed = committed.saturating_add(charged);
                        closed.push(id);
                    }
                    Op::Release { pick } if !outstanding.is_empty() => {
                        let (id, _, _) = outstanding.remove(pick % outstanding.len());
                        prop_assert!(book.release(id, now));
                        closed.push(id);
                    }
                    Op::SettleAgain { pick } if !closed.is_empty() => {
                        let id = closed[pick % closed.len()];
                        prop_assert_eq!(book.settle(id, Nanos::new(1), 0, now), Settled::AlreadyClosed);
                        prop_assert!(!book.release(id, now));
                    }
                    Op::Advance { ms } => {
                        now += ms;
                        for Lapsed { id, amount, .. } in book.expire(now) {
                            let position = outstanding.iter().position(|(o, _, _)| *o == id);
                            prop_assert!(position.is_some(), "expired an unknown reservation");
                            let (_, held, expires) = outstanding.remove(position.unwrap_or(0));
                            prop_assert_eq!(held, amount);
                            prop_assert!(expires <= now);
                            committed = committed.saturating_add(amount);
                            closed.push(id);
                        }
                        prop_assert!(outstanding.iter().all(|(_, _, expires)| *expires > now));
                    }
                    _ => {}
                }
                let status = book.status(now);
                let reserved = outstanding.iter().fold(Nanos::ZERO, |sum, (_, a, _)| sum.saturating_add(*a));
                prop_assert_eq!(status.committed, committed, "committed money drifted");
                prop_assert_eq!(status.reserved, reserved, "reserved money drifted");
                prop_assert!(
                    status.committed.saturating_add(status.reserved) <= budget,
                    "committed {} + reserved {} passed the budget {}",
                    status.committed, status.reserved, budget
                );
            }
        }
    }
}
