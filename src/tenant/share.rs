//! A replica's share of a tenant's limits while the shared store is down:
//! what was left of each limit (by the ledger) when the store went away,
//! divided by `storage.replicas`, so the replicas together stay within it.
//! Spend the ledger had not seen yet (other replicas' unflushed batches and
//! reservations in flight at the outage) is the bound on what can go over.

use super::book::{Limits, Seed};
use super::tokens::TokenLimits;
use crate::money::Nanos;

pub fn local_share(limits: &Limits, seed: &Seed, replicas: u32) -> Limits {
    let n = replicas.max(1);
    if n == 1 {
        return limits.clone();
    }
    let divide = |v: u32| (v / n).max(1);
    let tokens = limits.tokens;
    Limits {
        rpm: divide(limits.rpm),
        burst: divide(limits.burst),
        budget: limits.budget.map(|b| {
            let committed = seed.spent_of(None, None).get(limits.period);
            share_budget(b, committed, n)
        }),
        feature_budgets: limits
            .feature_budgets
            .iter()
            .map(|(feature, budget)| {
                let spent = seed.spent_of(None, Some(feature));
                let committed = spent.get(limits.feature_period(feature));
                (feature.clone(), share_budget(*budget, committed, n))
            })
            .collect(),
        tokens: TokenLimits {
            tpm: tokens.tpm.map(|t| (t / u64::from(n)).max(1)),
            daily: tokens.daily.map(|d| share_count(d, seed.tokens_today, n)),
            monthly: tokens
                .monthly
                .map(|m| share_count(m, seed.tokens_this_month, n)),
        },
        ..limits.clone()
    }
}

/// `committed` plus this replica's part of what is left.
pub fn share_budget(budget: Nanos, committed: Nanos, replicas: u32) -> Nanos {
    let left = budget.saturating_sub(committed).get() / u64::from(replicas.max(1));
    committed.saturating_add(Nanos::new(left))
}

fn share_count(limit: u64, used: u64, replicas: u32) -> u64 {
    used.saturating_add(limit.saturating_sub(used) / u64::from(replicas.max(1)))
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;
    use crate::config::StoreErrorPolicy;
    use crate::directory::BudgetMode;

    #[test]
    fn each_replica_gets_a_share_of_what_is_left() {
        let limits = Limits {
            rpm: 30,
            burst: 10,
            budget: Some(Nanos::parse_decimal("10").unwrap()),
            mode: BudgetMode::Strict,
            clamp_floor_tokens: 10,
            feature_budgets: BTreeMap::from([("chat".to_owned(), Nanos::new(1000))]),
            tokens: TokenLimits {
                tpm: Some(3000),
                daily: Some(1000),
                monthly: None,
            },
            on_store_error: StoreErrorPolicy::Local,
            calendar: crate::calendar::Calendar::utc(),
            end_users_in_memory: 1_000,
            period: crate::calendar::Period::Month,
            feature_periods: std::collections::BTreeMap::new(),
            credits: false,
            rate_mode: crate::directory::RateMode::Enforce,
            alert_webhook_url: None,
            alert_thresholds_percent: vec![80, 100],
        };
        let seed = Seed {
            committed: Nanos::parse_decimal("4").unwrap(),
            features: [("chat".to_owned(), Nanos::new(400))].into(),
            tokens_today: 100,
            ..Seed::default()
        };
        let share = local_share(&limits, &seed, 3);
        assert_eq!((share.rpm, share.burst), (10, 3));
        // 4 committed + 6 left / 3
        assert_eq!(share.budget.unwrap().to_string(), "6");
        assert_eq!(share.feature_budgets["chat"], Nanos::new(600));
        assert_eq!(share.tokens.tpm, Some(1000));
        assert_eq!(share.tokens.daily, Some(400));
        assert_eq!(local_share(&limits, &seed, 1), limits);
    }
}
