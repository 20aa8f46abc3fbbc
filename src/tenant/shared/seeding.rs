//! Starting Redis's counters from the ledger: the month, a window, an end
//! user, the balances; raising them where the ledger has more; taking in what
//! a replica settled alone while the store was away.

use std::collections::{BTreeMap, HashMap};

use super::args::{
    AbsorbArgs, RaiseArgs, RaiseReply, ScopeSpend, SeedArgs, SeedCreditArgs, SeedEndUserArgs,
    SeedWindowArgs, TopUp,
};
use crate::tenant::grants::{Grant, GrantKind, GrantState};

use super::{
    EndUserHold, EndUserSeed, KeyId, LIFETIME_IDLE_TTL_MS, MONTH_TTL_MS, Nanos, Period, Seed,
    SharedQuota, StoreFailure, amount, end_user_ttl_ms,
};

impl SharedQuota {
    /// Starts the month from the ledger unless another replica already did.
    pub async fn seed(
        &self,
        seed: &Seed,
        reached: &[u32],
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let args = SeedArgs {
            ttl: MONTH_TTL_MS.to_string(),
            committed: scope_spend(seed.committed, &seed.keys, &seed.features),
            tokens_month: seed.tokens_this_month.to_string(),
            day: self.today(now_ms),
            tokens_today: seed.tokens_today.to_string(),
            reached: reached.iter().map(ToString::to_string).collect(),
        };
        self.store
            .run_args(&self.store.scripts.seed, &[month_key], &args)
            .await?;
        Ok(())
    }

    /// Raises Redis's counters to the ledger's where they are lower; returns
    /// Redis's committed spend before (`None`: the month is not seeded).
    pub async fn raise(&self, seed: &Seed, now_ms: u64) -> Result<Option<Nanos>, StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let args = RaiseArgs {
            committed: scope_spend(seed.committed, &seed.keys, &seed.features),
            tokens_month: seed.tokens_this_month.to_string(),
            day: self.today(now_ms),
            tokens_today: seed.tokens_today.to_string(),
        };
        match self
            .store
            .run_for(&self.store.scripts.raise, &[month_key], &args)
            .await?
        {
            RaiseReply::Unseeded => Ok(None),
            RaiseReply::Ok { before } => amount(&before).map(Some),
        }
    }

    /// Adds spend settled locally after the store came back.
    pub async fn absorb(
        &self,
        charged: Nanos,
        key: &str,
        feature: &str,
        tokens: u64,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let mut keys = vec![month_key];
        keys.extend(self.window_keys(now_ms));
        let args = AbsorbArgs {
            charged: charged.get().to_string(),
            key,
            feature,
            tokens: tokens.to_string(),
            day: self.today(now_ms),
        };
        self.store
            .run_args(&self.store.scripts.absorb, &keys, &args)
            .await?;
        Ok(())
    }

    /// Starts an end user's window in Redis from the ledger's spend in it.
    pub async fn seed_end_user(
        &self,
        hold: &EndUserHold,
        seed: EndUserSeed,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let window = self.store.calendar.window(hold.limits.period, now_ms);
        let key = self.keys.end_user(&hold.id, &window.key);
        let args = SeedEndUserArgs {
            committed: seed.committed.get().to_string(),
            ttl: end_user_ttl_ms(&window, now_ms).to_string(),
            day: self.local_day(now_ms),
            tokens_today: seed.tokens_today.to_string(),
        };
        self.store
            .run_args(&self.store.scripts.seed_end_user, &[key], &args)
            .await?;
        Ok(())
    }

    /// Starts the tenant's balances from the ledger unless another replica did.
    pub async fn seed_credit(&self, seed: &Seed) -> Result<(), StoreFailure> {
        let args = SeedCreditArgs {
            tenant_spent: seed.lifetime.tenant.get().to_string(),
            keys_spent: amounts(&seed.lifetime.keys),
            top_ups: seed
                .credits
                .grants
                .iter()
                .map(|(key, state)| top_up(key.as_ref(), state))
                .collect(),
        };
        self.store
            .run_args(
                &self.store.scripts.seed_credit,
                &[self.keys.credit(), self.keys.held()],
                &args,
            )
            .await?;
        Ok(())
    }

    /// Adds a grant the ledger wrote (once by its row).
    pub async fn add_credit(&self, key: Option<&KeyId>, grant: &Grant) -> Result<(), StoreFailure> {
        let state = GrantState {
            grant: grant.clone(),
            drawn: Nanos::ZERO,
            booked: false,
        };
        self.store
            .run_args(
                &self.store.scripts.credit,
                &[self.keys.credit()],
                &top_up(key, &state),
            )
            .await?;
        Ok(())
    }

    /// Starts a day, week or lifetime window from the ledger unless another replica did.
    pub async fn seed_window(
        &self,
        period: Period,
        seed: &Seed,
        now_ms: u64,
    ) -> Result<(), StoreFailure> {
        let window = self.store.calendar.window(period, now_ms);
        let ttl = if period == Period::Lifetime {
            LIFETIME_IDLE_TTL_MS
        } else {
            end_user_ttl_ms(&window, now_ms)
        };
        let spend = seed.spend(period);
        let args = SeedWindowArgs {
            ttl: ttl.to_string(),
            committed: scope_spend(spend.tenant, &spend.keys, &spend.features),
        };
        self.store
            .run_args(
                &self.store.scripts.seed_window,
                &[self.keys.window(&window.key)],
                &args,
            )
            .await?;
        Ok(())
    }
}

/// The tenant's, keys' and features' spend as a script takes it.
fn scope_spend(
    tenant: Nanos,
    keys: &HashMap<KeyId, Nanos>,
    features: &HashMap<String, Nanos>,
) -> ScopeSpend {
    ScopeSpend {
        tenant: tenant.get().to_string(),
        keys: amounts(keys),
        features: amounts(features),
    }
}

/// Amounts by name, as decimals.
fn amounts<K: ToString>(by: &HashMap<K, Nanos>) -> BTreeMap<String, String> {
    by.iter()
        .map(|(name, amount)| (name.to_string(), amount.get().to_string()))
        .collect()
}

fn top_up(key: Option<&KeyId>, state: &GrantState) -> TopUp {
    let g = &state.grant;
    let kind = match g.kind {
        GrantKind::Promotional => 0,
        GrantKind::Paid => 1,
    };
    let time = |at: Option<u64>| at.map_or_else(|| "-1".to_owned(), |at| at.to_string());
    let (expires, closes) = (time(g.expires_ms), time(g.closes_ms));
    TopUp {
        row: g.id.to_string(),
        key: key.map(ToString::to_string).unwrap_or_default(),
        amount: g.amount.get().to_string(),
        grant: format!(
            "{}|{}|{kind}|{}|{expires}|{closes}|{}",
            g.id,
            g.priority,
            g.starts_ms,
            g.amount.get()
        ),
        drawn: state.drawn.get().to_string(),
        booked: state.booked,
    }
}

/// A grant as `CREDIT_STATUS` lists it: `<grant>|<drawn>|<breakage booked>`.
pub(super) fn grant_state(text: &str) -> Option<GrantState> {
    let parts: Vec<&str> = text.split('|').collect();
    let [
        id,
        priority,
        kind,
        starts,
        expires,
        closes,
        amount,
        drawn,
        booked,
    ] = parts[..]
    else {
        return None;
    };
    Some(GrantState {
        grant: Grant {
            id: id.parse().ok()?,
            kind: if kind == "0" {
                GrantKind::Promotional
            } else {
                GrantKind::Paid
            },
            priority: priority.parse().ok()?,
            starts_ms: starts.parse().ok()?,
            expires_ms: expires.parse().ok(),
            closes_ms: closes.parse().ok(),
            amount: Nanos::new(amount.parse().ok()?),
        },
        drawn: Nanos::new(drawn.parse().ok()?),
        booked: booked == "1",
    })
}
