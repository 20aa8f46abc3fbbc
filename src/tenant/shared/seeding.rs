//! Starting Redis's counters from the ledger: the month, a window, an end
//! user, the balances; raising them where the ledger has more; taking in what
//! a replica settled alone while the store was away.

use super::{
    EndUserHold, EndUserSeed, KeyId, LIFETIME_IDLE_TTL_MS, MONTH_TTL_MS, Nanos, Period, Seed,
    SharedQuota, StoreFailure, end_user_ttl_ms, field, nanos,
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
        let mut args = vec![
            MONTH_TTL_MS.to_string(),
            seed.committed.get().to_string(),
            seed.tokens_this_month.to_string(),
            self.today(now_ms),
            seed.tokens_today.to_string(),
        ];
        push_scopes(&mut args, &seed.keys, &seed.features);
        args.extend(reached.iter().map(ToString::to_string));
        self.store
            .run(&self.store.scripts.seed, &[month_key], &args)
            .await?;
        Ok(())
    }

    /// Raises Redis's counters to the ledger's where they are lower; returns
    /// Redis's committed spend before (`None`: the month is not seeded).
    pub async fn raise(&self, seed: &Seed, now_ms: u64) -> Result<Option<Nanos>, StoreFailure> {
        let (month_key, _, _) = self.month_keys(now_ms);
        let mut args = vec![
            seed.committed.get().to_string(),
            seed.tokens_this_month.to_string(),
            self.today(now_ms),
            seed.tokens_today.to_string(),
        ];
        push_scopes(&mut args, &seed.keys, &seed.features);
        let reply = self
            .store
            .run(&self.store.scripts.raise, &[month_key], &args)
            .await?;
        if field(&reply, 0)? == "unseeded" {
            return Ok(None);
        }
        nanos(&reply, 1).map(Some)
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
        self.store
            .run(
                &self.store.scripts.absorb,
                &keys,
                &[
                    charged.get().to_string(),
                    key.to_owned(),
                    feature.to_owned(),
                    tokens.to_string(),
                    self.today(now_ms),
                ],
            )
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
        let args = [
            seed.committed.get().to_string(),
            end_user_ttl_ms(&window, now_ms).to_string(),
            self.local_day(now_ms),
            seed.tokens_today.to_string(),
        ];
        self.store
            .run(&self.store.scripts.seed_end_user, &[key], &args)
            .await?;
        Ok(())
    }

    /// Starts the tenant's balances from the ledger unless another replica did.
    pub async fn seed_credit(&self, seed: &Seed) -> Result<(), StoreFailure> {
        let mut args = vec![
            seed.lifetime.tenant.get().to_string(),
            seed.lifetime.keys.len().to_string(),
        ];
        for (key, spent) in &seed.lifetime.keys {
            args.push(key.to_string());
            args.push(spent.get().to_string());
        }
        for (row, key, amount) in &seed.credits.rows {
            args.push(row.to_string());
            args.push(key.as_ref().map(ToString::to_string).unwrap_or_default());
            args.push(amount.get().to_string());
        }
        self.store
            .run(
                &self.store.scripts.seed_credit,
                &[self.keys.credit(), self.keys.held()],
                &args,
            )
            .await?;
        Ok(())
    }

    /// Adds a top-up the ledger wrote (once by its row).
    pub async fn add_credit(
        &self,
        row: i64,
        key: Option<&KeyId>,
        amount: Nanos,
    ) -> Result<(), StoreFailure> {
        let args = [
            row.to_string(),
            key.map(ToString::to_string).unwrap_or_default(),
            amount.get().to_string(),
        ];
        self.store
            .run(&self.store.scripts.credit, &[self.keys.credit()], &args)
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
        let mut args = vec![ttl.to_string(), spend.tenant.get().to_string()];
        push_scopes(&mut args, &spend.keys, &spend.features);
        self.store
            .run(
                &self.store.scripts.seed_window,
                &[self.keys.window(&window.key)],
                &args,
            )
            .await?;
        Ok(())
    }
}

/// Keys' and features' spend as a script takes it: a count, then (name, amount) pairs, for each.
fn push_scopes(
    args: &mut Vec<String>,
    keys: &std::collections::HashMap<KeyId, Nanos>,
    features: &std::collections::HashMap<String, Nanos>,
) {
    args.push(keys.len().to_string());
    for (key, committed) in keys {
        args.push(key.to_string());
        args.push(committed.get().to_string());
    }
    args.push(features.len().to_string());
    for (feature, committed) in features {
        args.push(feature.clone());
        args.push(committed.get().to_string());
    }
}
